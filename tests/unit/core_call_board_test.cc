// The call board (src/engine/call_board.h) without a runtime: two or three ranks' boards in this process, records
// posted in the orders ranks post them, and what check() finds.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "engine/call_board.h"
#include "engine/host_platform.h"
#include "nccl.h"
#include "transports/shm/shm.h"

namespace {

using chorus::CallBoard;
using chorus::CallPath;
using chorus::CallRecord;

// A communicator hash of this test process (boards of other test processes never collide with it).
uint64_t testHash(int salt) { return 0xb0a4d0000000000ull ^ (uint64_t(getpid()) << 8) ^ uint64_t(salt); }

CallRecord rec(uint64_t seq, uint64_t count, CallPath path, chorus::Coll coll = chorus::Coll::kAllReduce,
               int root = -1) {
  CallRecord r;
  r.seq = seq;
  r.count = count;
  r.desc = chorus::packDesc(coll, ncclFloat32, coll == chorus::Coll::kAllReduce ? ncclSum : 0);
  r.root = root;
  r.path = path;
  return r;
}

void openBoth(CallBoard& a, CallBoard& b) {
  std::string why;
  ASSERT_TRUE(a.open(&why)) << why;
  ASSERT_TRUE(b.open(&why)) << why;
}

TEST(CallBoard, MatchingCallsAreNoConflict) {
  const uint64_t h = testHash(1);
  CallBoard a(h, 0, {1}), b(h, 1, {0});
  ASSERT_NO_FATAL_FAILURE(openBoth(a, b));
  for (uint64_t s = 1; s <= 50; s++) {
    a.post(rec(s, 100 * s, CallPath::kFifos));
    if (s % 7 == 0) {
      EXPECT_EQ(a.check(), "");
    }
    b.post(rec(s, 100 * s, CallPath::kFifos));
    if (s % 5 == 0) {
      EXPECT_EQ(b.check(), "");
    }
  }
  EXPECT_EQ(a.check(), "");
  EXPECT_EQ(b.check(), "");
}

// Rank 1 goes through FIFOs where rank 0 went through inboxes: both find it, naming both calls, whichever posts first
// and however far ahead the other is.
TEST(CallBoard, AnotherPathIsAConflictBothWays) {
  const uint64_t h = testHash(2);
  CallBoard a(h, 0, {1}), b(h, 1, {0});
  ASSERT_NO_FATAL_FAILURE(openBoth(a, b));
  for (uint64_t s = 1; s <= 3; s++) a.post(rec(s, 8, CallPath::kOneShot));
  a.post(rec(4, 1000, CallPath::kOneShot));
  a.post(rec(5, 8, CallPath::kOneShot));  // queued behind the one that will never meet its match
  EXPECT_EQ(a.check(), "") << "rank 1 has posted nothing yet";
  for (uint64_t s = 1; s <= 3; s++) b.post(rec(s, 8, CallPath::kOneShot));
  EXPECT_EQ(a.check(), "");
  b.post(rec(4, 400000, CallPath::kFifos));
  const std::string fromA = a.check(), fromB = b.check();
  EXPECT_NE(fromA.find("rank 0: device operation #4 does not match rank 1's call"), std::string::npos) << fromA;
  EXPECT_NE(fromA.find("count 1000"), std::string::npos) << fromA;
  EXPECT_NE(fromA.find("count 400000"), std::string::npos) << fromA;
  EXPECT_NE(fromA.find("through FIFOs"), std::string::npos) << fromA;
  EXPECT_NE(fromA.find("through IPC inboxes (one-shot)"), std::string::npos) << fromA;
  EXPECT_NE(fromB.find("rank 1: device operation #4 does not match rank 0's call"), std::string::npos) << fromB;
  EXPECT_EQ(a.check(), fromA) << "the first conflict stays the answer";
}

TEST(CallBoard, WhatCountsAsAConflict) {
  using chorus::callsConflict;
  // Inboxes and windows: the kernels compare the calls (and the windows) themselves.
  EXPECT_FALSE(callsConflict(rec(3, 10, CallPath::kOneShot), rec(3, 20, CallPath::kTwoShot)));
  EXPECT_FALSE(callsConflict(rec(3, 10, CallPath::kWindows), rec(3, 10, CallPath::kTwoShot)));
  // Any other pair: every field.
  EXPECT_TRUE(callsConflict(rec(3, 10, CallPath::kFifos), rec(3, 20, CallPath::kFifos)));
  EXPECT_TRUE(callsConflict(rec(3, 10, CallPath::kFifos), rec(3, 10, CallPath::kOneShot)));
  EXPECT_TRUE(callsConflict(rec(3, 10, CallPath::kWindows), rec(3, 10, CallPath::kFifos)));
  EXPECT_TRUE(callsConflict(rec(3, 0, CallPath::kNothing), rec(3, 10, CallPath::kFifos)));
  EXPECT_TRUE(callsConflict(rec(3, 10, CallPath::kFifos, chorus::Coll::kBroadcast, 0),
                            rec(3, 10, CallPath::kFifos, chorus::Coll::kBroadcast, 1)));
  EXPECT_TRUE(callsConflict(rec(3, 10, CallPath::kFifos, chorus::Coll::kAllGather),
                            rec(3, 10, CallPath::kFifos, chorus::Coll::kReduceScatter)));
  EXPECT_FALSE(callsConflict(rec(3, 10, CallPath::kFifos), rec(3, 10, CallPath::kFifos)));
  EXPECT_FALSE(callsConflict(rec(3, 10, CallPath::kFifos), rec(4, 20, CallPath::kOneShot))) << "other collectives";
}

// Calls the kernels compare themselves are no conflict for check(), but a rank whose kernel saw only that the peer
// failed (the peer refused this rank's call and stopped before its own flag went out) asks for that collective:
// differs() names both calls where they differ, and says nothing where they match or a record is missing.
TEST(CallBoard, DiffersNamesCallsTheKernelsCompare) {
  const uint64_t h = testHash(6);
  CallBoard a(h, 0, {1}), b(h, 1, {0});
  ASSERT_NO_FATAL_FAILURE(openBoth(a, b));
  a.post(rec(1, 100, CallPath::kOneShot));
  b.post(rec(1, 100, CallPath::kOneShot));
  a.post(rec(2, 100, CallPath::kOneShot, chorus::Coll::kBroadcast, 0));
  EXPECT_EQ(a.differs(1, 2), "") << "rank 1 has not posted collective 2";
  b.post(rec(2, 100, CallPath::kOneShot, chorus::Coll::kBroadcast, 1));
  EXPECT_EQ(a.check(), "") << "the kernels compare these";
  EXPECT_EQ(a.differs(1, 1), "") << "the same call";
  const std::string text = a.differs(1, 2);
  EXPECT_NE(text.find("rank 0: device operation #2 does not match rank 1's call"), std::string::npos) << text;
  EXPECT_NE(text.find("root 0"), std::string::npos) << text;
  EXPECT_NE(text.find("root 1"), std::string::npos) << text;
  EXPECT_NE(b.differs(0, 2).find("rank 1: device operation #2 does not match rank 0's call"), std::string::npos);
  EXPECT_EQ(a.differs(2, 2), "") << "not a peer of this board";
}

// A peer that ran collectives on the host path posts nothing for them; one that never made a board (no device
// operation yet) is not compared; one that posted more than a ring holds since the last look loses the oldest.
TEST(CallBoard, GapsAreNotConflicts) {
  const uint64_t h = testHash(3);
  {
    CallBoard a(h, 0, {1, 2}), b(h, 1, {0, 2});
    ASSERT_NO_FATAL_FAILURE(openBoth(a, b));
    // Rank 1 ran collectives 2 and 3 with host buffers.
    for (uint64_t s : {1, 4, 5}) b.post(rec(s, 64, CallPath::kFifos));
    for (uint64_t s = 1; s <= 5; s++) a.post(rec(s, 64, CallPath::kFifos));
    EXPECT_EQ(a.check(), "");
    EXPECT_EQ(b.check(), "");
    // Rank 1 laps its ring: rank 0's records of the overwritten collectives are not compared (and the rest are).
    const uint64_t far = 5 + CallBoard::kSlots + 10;
    for (uint64_t s = 6; s <= far; s++) b.post(rec(s, 64, CallPath::kFifos));
    for (uint64_t s = 6; s <= far; s++) a.post(rec(s, 64, CallPath::kFifos));
    EXPECT_EQ(a.check(), "");
    // And a mismatch after that is still found.
    a.post(rec(far + 1, 64, CallPath::kFifos));
    b.post(rec(far + 1, 65, CallPath::kFifos));
    EXPECT_NE(a.check().find("count 65"), std::string::npos);
  }
  // Rank 2 never mapped them: their names stay for a rank 2 that comes late (the test removes them).
  for (int r : {0, 1}) EXPECT_EQ(shm_unlink(CallBoard::segmentName(h, r).c_str()), 0) << r;
}

// A board every peer has mapped is unlinked with its owner; one a peer has not mapped stays, so that the peer can
// still read the calls of an owner that failed and left.
TEST(CallBoard, NameStaysUntilEveryPeerMappedIt) {
  const uint64_t h = testHash(5);
  const std::string name0 = CallBoard::segmentName(h, 0), name1 = CallBoard::segmentName(h, 1);
  {
    CallBoard a(h, 0, {1}), b(h, 1, {0});
    ASSERT_NO_FATAL_FAILURE(openBoth(a, b));
    a.post(rec(1, 5, CallPath::kFifos));
    b.post(rec(1, 6, CallPath::kFifos));
    EXPECT_NE(b.check().find("count 5"), std::string::npos) << "b maps a's board (a never looks at b's)";
  }
  EXPECT_NE(access(("/dev/shm" + name0).c_str(), F_OK), 0) << "rank 1 had mapped it";
  EXPECT_EQ(access(("/dev/shm" + name1).c_str(), F_OK), 0) << "rank 0 never mapped it";
  {
    // A rank 0 that looks only now still reads rank 1's call.
    CallBoard late(h, 0, {1});
    std::string why;
    ASSERT_TRUE(late.open(&why)) << why;
    late.post(rec(1, 5, CallPath::kFifos));
    EXPECT_NE(late.check().find("rank 1 called ncclAllReduce #1 (count 6"), std::string::npos);
  }
  // Only an owner unlinks: what is left goes to the sweep once the owner's process has exited (the test removes it).
  EXPECT_EQ(shm_unlink(name1.c_str()), 0);
  EXPECT_EQ(shm_unlink(name0.c_str()), 0) << "rank 1 never mapped the late board";
}

// A board whose process and whose peers' processes exited is removed by the sweep; one whose owner lives, or whose
// owner exited but a peer that may still read it lives, is not.
TEST(CallBoard, SweepRemovesBoardsOfExitedProcesses) {
  const uint64_t h = testHash(4);
  pid_t peerGone = fork();
  if (peerGone == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(peerGone, &status, 0), peerGone);
  pid_t child = fork();
  if (child == 0) {
    // Rank 7's peer is a process that has exited; rank 9's is this test's process, which lives on.
    CallBoard gone(h, 7, {6}, {uint64_t(peerGone)}), read(h, 9, {6}, {uint64_t(getppid())});
    std::string why;
    if (!gone.open(&why) || !read.open(&why)) _exit(2);
    _exit(0);  // without the destructors: the names stay, as a killed rank leaves them
  }
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CallBoard live(h, 8, {});
  std::string why;
  ASSERT_TRUE(live.open(&why)) << why;
  const std::string goneName = CallBoard::segmentName(h, 7), liveName = CallBoard::segmentName(h, 8),
                    readName = CallBoard::segmentName(h, 9);
  ASSERT_EQ(access(("/dev/shm" + goneName).c_str(), F_OK), 0);
  EXPECT_GE(CallBoard::sweepStale(), 1);
  EXPECT_NE(access(("/dev/shm" + goneName).c_str(), F_OK), 0) << goneName << " was left";
  EXPECT_EQ(access(("/dev/shm" + liveName).c_str(), F_OK), 0) << liveName << " was removed while its owner lives";
  EXPECT_EQ(access(("/dev/shm" + readName).c_str(), F_OK), 0) << readName << " was removed while its peer lives";
  EXPECT_EQ(shm_unlink(readName.c_str()), 0);
}

}  // namespace
