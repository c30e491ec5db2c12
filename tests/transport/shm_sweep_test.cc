// Stale shared-memory FIFOs: a segment whose two end processes have both exited is removed by shmSweepStale();
// one with a live end, or whose ends are not recorded yet, stays.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "transports/shm/shm.h"

namespace chorus_test {
namespace {

bool exists(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

std::string testName(const char* tag) {
  // The FIFO naming scheme, with a hash no communicator uses and this process's pid to keep runs apart.
  return chorus::shmFifoName(0xfeed000000000000ull | static_cast<uint64_t>(getpid()), 0, 0, 1) + "-" + tag;
}

// Attaches `name` in a child process that then exits without closing (as a killed rank does), recording `peer`
// as the other end's process; the child is reaped before this returns.
void attachInExitedChild(const std::string& name, const chorus::FifoGeometry& geo, bool peerIsParent) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    chorus::ShmSegment seg;
    uint64_t peer = peerIsParent ? static_cast<uint64_t>(parent) : static_cast<uint64_t>(getpid());
    _exit(chorus::shmFifoOpen(name, geo, &seg, peer) == ncclSuccess ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ShmSweep, RemovesSegmentsWhoseEndsHaveBothExited) {
  chorus::FifoGeometry geo;
  geo.nSlots = 2;
  geo.slotBytes = 4096;
  geo.llLines = 64;
  std::string dead = testName("dead"), waiting = testName("waiting"), live = testName("live"),
              fresh = testName("fresh");
  attachInExitedChild(dead, geo, false);    // both ends were that process (thread ranks of a killed process)
  attachInExitedChild(waiting, geo, true);  // a sender that finished and left; its receiver (alive) opens later
  chorus::ShmSegment mine;
  ASSERT_EQ(chorus::shmFifoOpen(live, geo, &mine, static_cast<uint64_t>(getpid())), ncclSuccess);
  int err = 0;
  const char* call = "";
  void* p = chorus::shmMapNamed(fresh, geo.totalBytes(), true, &err, &call);  // created, no end recorded yet
  ASSERT_NE(p, nullptr) << call << ": " << strerror(err);

  ASSERT_TRUE(exists(dead));
  EXPECT_GE(chorus::shmSweepStale(), 1);
  EXPECT_FALSE(exists(dead)) << "a segment whose two end processes exited must be removed";
  EXPECT_TRUE(exists(waiting)) << "a segment whose receiver is alive must stay: it holds the sender's data";
  EXPECT_TRUE(exists(live)) << "a segment a live process holds must stay";
  EXPECT_TRUE(exists(fresh)) << "a segment no end has recorded itself in yet must stay";

  chorus::shmFifoClose(&mine, true);
  munmap(p, geo.totalBytes());
  shm_unlink(fresh.c_str());
  shm_unlink(waiting.c_str());
}

}  // namespace
}  // namespace chorus_test
