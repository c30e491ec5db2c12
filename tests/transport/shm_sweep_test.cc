// Stale shared-memory FIFOs: a segment whose two end processes have both exited is removed by shmSweepStale();
// one with a live end, or whose ends are not recorded yet, stays.
//
// Every communicator init on this host sweeps too, and ctest runs other tests beside this one: the verdicts are
// therefore checked on segments of a kind the sweep never touches (kind 'x'), through shmFifoStale(), and the sweep
// itself on one dead FIFO, which must be gone afterwards whichever process swept it.
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

std::string testName(const char* tag, char kind) {
  // The FIFO naming scheme, with a hash no communicator uses and this process's pid to keep runs apart.
  return chorus::shmFifoName(0xfeed000000000000ull | static_cast<uint64_t>(getpid()), 0, 0, 1, kind) + "-" + tag;
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
  // Kind 'x': out of every sweep's reach, so only this test decides what happens to them.
  std::string dead = testName("dead", 'x'), waiting = testName("waiting", 'x'), live = testName("live", 'x'),
              fresh = testName("fresh", 'x');
  attachInExitedChild(dead, geo, false);    // both ends were that process (thread ranks of a killed process)
  attachInExitedChild(waiting, geo, true);  // a sender that finished and left; its receiver (alive) opens later
  chorus::ShmSegment mine;
  ASSERT_EQ(chorus::shmFifoOpen(live, geo, &mine, static_cast<uint64_t>(getpid())), ncclSuccess);
  int err = 0;
  const char* call = "";
  void* p = chorus::shmMapNamed(fresh, geo.totalBytes(), true, &err, &call);  // created, no end recorded yet
  ASSERT_NE(p, nullptr) << call << ": " << strerror(err);

  EXPECT_TRUE(chorus::shmFifoStale(dead)) << "a segment whose two end processes exited is garbage";
  EXPECT_FALSE(chorus::shmFifoStale(waiting)) << "a segment whose receiver is alive holds the sender's data";
  EXPECT_FALSE(chorus::shmFifoStale(live)) << "a segment a live process holds is in use";
  EXPECT_FALSE(chorus::shmFifoStale(fresh)) << "a segment no end has recorded itself in yet may be in use";
  EXPECT_FALSE(chorus::shmFifoStale(testName("absent", 'x'))) << "a segment that does not exist is no garbage";

  // The sweep removes a dead host-path FIFO (kind 'c'): this call, or another process's init that came first.
  std::string deadFifo = testName("dead", 'c');
  attachInExitedChild(deadFifo, geo, false);
  chorus::shmSweepStale();
  EXPECT_FALSE(exists(deadFifo)) << "a FIFO whose two end processes exited must be removed by the sweep";
  EXPECT_TRUE(exists(waiting) && exists(live) && exists(fresh) && exists(dead))
      << "the sweep must leave segments of other kinds alone";

  chorus::shmFifoClose(&mine, true);
  munmap(p, geo.totalBytes());
  for (const std::string& n : {fresh, waiting, dead, deadFifo}) shm_unlink(n.c_str());
}

}  // namespace
}  // namespace chorus_test
