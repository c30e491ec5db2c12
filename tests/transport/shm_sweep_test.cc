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

#include "engine/device_connections.h"
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

// The sweeps tell the families of segments apart by name alone: the name shmFifoName makes for each kind, and a
// pinned device FIFO (a record's name with "-h"), come back as their kind; other names are left alone.
TEST(ShmSweep, KindsByName) {
  auto kindOf = [](const std::string& name) { return chorus::shmKind(name.c_str() + 1); };  // without the '/'
  const uint64_t hash = 0x0123456789abcdefull;
  EXPECT_EQ(kindOf(chorus::shmFifoName(hash, 3, 0, 1)), chorus::ShmKind::kHostFifo);
  EXPECT_EQ(kindOf(chorus::shmFifoName(hash, 16, 7, 2, 'd')), chorus::ShmKind::kDeviceRecord);
  EXPECT_EQ(kindOf(chorus::shmFifoName(hash, 16, 7, 2, 'd') + "-h"), chorus::ShmKind::kPinnedDeviceFifo);
  EXPECT_EQ(kindOf(chorus::shmFifoName(hash, 0, 5, 5, 'b')), chorus::ShmKind::kCallBoard);
  EXPECT_EQ(kindOf(chorus::shmFifoName(hash, 0, 0, 1, 'x')), chorus::ShmKind::kOther);
  EXPECT_EQ(chorus::shmKind("chorus-0123"), chorus::ShmKind::kOther);
  EXPECT_EQ(chorus::shmKind("other-0123456789abcdef-c0-0-1"), chorus::ShmKind::kOther);
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

// Writes a device-connection rendezvous record `name` whose head names these processes (0: not recorded), as the
// two ends write it when they map it; the record itself stays in /dev/shm.
void writeRecord(const std::string& name, uint64_t ownerPid, uint64_t otherPid) {
  int err = 0;
  const char* call = "";
  void* p = chorus::shmMapNamed(name, 4096, true, &err, &call);
  ASSERT_NE(p, nullptr) << call << ": " << strerror(err);
  auto* head = static_cast<chorus::RendezvousHead*>(p);
  head->pids[0] = ownerPid;
  head->pids[1] = otherPid;
  munmap(p, 4096);
}

// The pid of a child process that has exited and been reaped.
uint64_t exitedPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return static_cast<uint64_t>(pid);
}

// A rendezvous record of a device connection whose ends have exited is removed; one that names a live process, or
// none, stays (its other end may still open it).
TEST(ShmSweep, RemovesRendezvousRecordsWhoseEndsHaveExited) {
  const uint64_t gone = exitedPid(), me = static_cast<uint64_t>(getpid());
  // Kind 'y': out of every sweep's reach, for the verdicts alone.
  std::string bothGone = testName("both", 'y'), ownerOnly = testName("owner", 'y'), ownerLive = testName("live", 'y'),
              otherLive = testName("other", 'y'), unrecorded = testName("none", 'y');
  writeRecord(bothGone, gone, gone);
  writeRecord(ownerOnly, gone, 0);  // the owner published and was killed; the other end never came
  writeRecord(ownerLive, me, gone);
  writeRecord(otherLive, gone, me);  // the other end, alive, may still open it and read the owner's record
  writeRecord(unrecorded, 0, 0);     // just created: no end has written its process yet
  EXPECT_TRUE(chorus::rendezvousStale(bothGone));
  EXPECT_TRUE(chorus::rendezvousStale(ownerOnly));
  EXPECT_FALSE(chorus::rendezvousStale(ownerLive));
  EXPECT_FALSE(chorus::rendezvousStale(otherLive));
  EXPECT_FALSE(chorus::rendezvousStale(unrecorded));
  EXPECT_FALSE(chorus::rendezvousStale(testName("absent", 'y')));

  // The sweep removes a dead record of the real kind ('d'), and leaves a live one and a pinned FIFO ("-h") alone.
  std::string dead = testName("dead", 'd'), live = testName("live", 'd'), pinned = testName("x", 'd') + "-h";
  writeRecord(dead, gone, gone);
  writeRecord(live, gone, me);
  writeRecord(pinned, gone, gone);
  chorus::sweepStaleRendezvous();
  EXPECT_FALSE(exists(dead)) << "a record whose ends exited must be removed by the sweep";
  EXPECT_TRUE(exists(live)) << "a record a live process may still open must stay";
  EXPECT_TRUE(exists(pinned)) << "the rendezvous sweep must leave pinned FIFOs to the FIFO sweep";
  EXPECT_TRUE(exists(bothGone)) << "the sweep must leave segments of other kinds alone";
  for (const std::string& n : {bothGone, ownerOnly, ownerLive, otherLive, unrecorded, dead, live, pinned})
    shm_unlink(n.c_str());
}

// Both ends of a FIFO in one process (ranks as threads) share one mapping of its segment, which stays until the last
// end closes. A segment made again under a name whose first file was unlinked is another file, mapped apart.
TEST(ShmFifo, EndsInOneProcessShareOneMapping) {
  chorus::FifoGeometry geo;
  geo.nSlots = 2;
  geo.slotBytes = 4096;
  geo.llLines = 64;
  const std::string name = testName("shared", 'x'), other = testName("other", 'x');
  const uint64_t me = static_cast<uint64_t>(getpid());
  chorus::ShmSegment sender, receiver, third;
  ASSERT_EQ(chorus::shmFifoOpen(name, geo, &sender, me), ncclSuccess);
  ASSERT_EQ(chorus::shmFifoOpen(name, geo, &receiver, me), ncclSuccess);
  EXPECT_EQ(sender.base, receiver.base) << "the two ends of one FIFO in one process must share its mapping";
  EXPECT_FALSE(exists(name)) << "the second end to attach unlinks the name";
  ASSERT_EQ(chorus::shmFifoOpen(other, geo, &third, me), ncclSuccess);
  EXPECT_NE(third.base, sender.base) << "another FIFO is another segment";

  // The sender leaves first: the receiver's view stays mapped and keeps what was written.
  auto* bytes = static_cast<unsigned char*>(sender.base) + geo.totalBytes() - 1;
  *bytes = 0x5a;
  chorus::shmFifoClose(&sender, false);
  EXPECT_EQ(static_cast<unsigned char*>(receiver.base)[geo.totalBytes() - 1], 0x5a);

  // The name is free again: a new FIFO under it is a new, zero-filled segment, not the receiver's old one.
  chorus::ShmSegment again;
  ASSERT_EQ(chorus::shmFifoOpen(name, geo, &again, me), ncclSuccess);
  EXPECT_NE(again.base, receiver.base) << "a segment made again under an unlinked name is another file";
  EXPECT_EQ(static_cast<unsigned char*>(again.base)[geo.totalBytes() - 1], 0);
  chorus::shmFifoClose(&receiver, false);
  chorus::shmFifoClose(&again, true);
  chorus::shmFifoClose(&third, true);
}

}  // namespace
}  // namespace chorus_test
