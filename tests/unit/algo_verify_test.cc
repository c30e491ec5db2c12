// The verifier itself: point-to-point groups it must accept, and broken schedules it must reject with the rank, step
// and peer at fault. A verifier that cannot fail proves nothing, so every check has a schedule that trips it.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "algo/generators.h"
#include "algo/rank_set.h"
#include "algo/verify.h"

namespace chorus {
namespace {

using Pairs = std::vector<std::pair<int, int>>;

std::vector<Schedule> buildAll(Coll coll, Algo algo, int n, int channel = 0, int root = 0) {
  std::vector<Schedule> all(n);
  for (int r = 0; r < n; ++r) {
    std::string err;
    EXPECT_TRUE(buildSchedule(ScheduleRequest{coll, algo, n, r, channel, 2, root}, &all[r], &err)) << err;
  }
  return all;
}

std::string verify(const std::vector<Schedule>& all, bool inPlace = false, int tiles = 2) {
  VerifyOptions opt;
  opt.inPlace = inPlace;
  opt.tiles = tiles;
  return verifySchedules(all, opt);
}

// Builds every rank's group from (src, dst) pairs in call order and verifies it.
std::string verifyPairs(int n, const Pairs& pairs, int fifoDepth = 2) {
  std::vector<std::vector<int>> sendPeers(n), recvPeers(n);
  for (const auto& p : pairs) {
    sendPeers[p.first].push_back(p.second);
    recvPeers[p.second].push_back(p.first);
  }
  std::vector<Schedule> all;
  for (int r = 0; r < n; ++r) all.push_back(buildSendRecvSchedule(n, r, sendPeers[r], recvPeers[r]));
  VerifyOptions opt;
  opt.fifoDepth = fifoDepth;
  opt.sendRecvPairs = pairs;
  return verifySchedules(all, opt);
}

// Expects `verdict` to be an error containing every one of `parts`.
void expectError(const std::string& verdict, std::initializer_list<const char*> parts) {
  EXPECT_FALSE(verdict.empty()) << "the verifier accepted a broken schedule";
  for (const char* p : parts)
    EXPECT_NE(verdict.find(p), std::string::npos) << "missing \"" << p << "\" in: " << verdict;
}

Step makeStep(StepOp op, int sendPeer, int recvPeer, BufRef src, BufRef dst, bool final = false) {
  Step s;
  s.op = op;
  s.sendPeer = sendPeer;
  s.recvPeer = recvPeer;
  s.src = src;
  s.dst = dst;
  s.final = final;
  return s;
}

// ---- point-to-point groups --------------------------------------------------------------------------------------

TEST(VerifySendRecv, RingShifts) {
  for (int n : {1, 2, 3, 7, 16, 33}) {
    for (int shift : {1, 3, n - 1}) {
      Pairs pairs;
      for (int r = 0; r < n; ++r) pairs.emplace_back(r, (r + shift) % n);
      EXPECT_EQ(verifyPairs(n, pairs), "") << "n=" << n << " shift=" << shift;
    }
  }
}

TEST(VerifySendRecv, AllPairs) {
  for (int n : {2, 3, 8, 17}) {
    Pairs pairs, withSelf;
    for (int s = 0; s < n; ++s) {
      for (int d = 0; d < n; ++d) {
        if (s != d) pairs.emplace_back(s, d);
        withSelf.emplace_back(s, d);
      }
    }
    EXPECT_EQ(verifyPairs(n, pairs), "") << "n=" << n;
    EXPECT_EQ(verifyPairs(n, withSelf), "") << "n=" << n << " with self pairs";
  }
}

// Random groups in random call order, at most fifoDepth operations per ordered pair (the builder's documented
// limit), self pairs included.
TEST(VerifySendRecv, RandomPairs) {
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 200; ++iter) {
    const int n = 1 + static_cast<int>(rng() % 12);
    const int depth = 2 + static_cast<int>(rng() % 2);
    std::vector<int> used(n * n, 0);
    Pairs pairs;
    const int count = static_cast<int>(rng() % (3 * n + 1));
    for (int k = 0; k < count; ++k) {
      const int s = static_cast<int>(rng() % n), d = static_cast<int>(rng() % n);
      if (used[s * n + d] == depth) continue;
      ++used[s * n + d];
      pairs.emplace_back(s, d);
    }
    ASSERT_EQ(verifyPairs(n, pairs, depth), "") << "iteration " << iter << " n=" << n;
  }
}

TEST(VerifySendRecv, TooManyOperationsWithOnePeerDeadlock) {
  const Pairs pairs = {{0, 1}, {0, 1}, {0, 1}, {1, 0}, {1, 0}, {1, 0}};
  expectError(verifyPairs(2, pairs), {"deadlock", "rank 0 step 2 (send to 1 src=in[2])", "free slot towards 1"});
  EXPECT_EQ(verifyPairs(2, pairs, 3), "");
}

TEST(VerifySendRecv, WrongBlockCaught) {
  Pairs pairs = {{0, 1}, {0, 1}};
  std::vector<Schedule> all = {buildSendRecvSchedule(2, 0, {1, 1}, {}), buildSendRecvSchedule(2, 1, {}, {0, 0})};
  std::swap(all[0].steps[0].src, all[0].steps[1].src);  // sends in[1] first: lands in rank 1's out[0]
  VerifyOptions opt;
  opt.sendRecvPairs = pairs;
  expectError(verifySchedules(all, opt), {"rank 1 out[0] tile 0 holds rank 0's in[1]", "expected rank 0's in[0]"});
  opt.sendRecvPairs = {{0, 1}};
  expectError(verifySchedules(all, opt), {"rank 0 has inBlocks=2", "the pairs give 1 sends"});
}

TEST(RankSetTest, UniteSplitsAndMerges) {
  RankSetArena arena;
  RankSet s;
  int shared = -1;
  for (int r : {4, 0, 8, 2, 6}) ASSERT_TRUE(RankSet::unite(s, RankSet::of(r), &s, &shared, &arena));
  EXPECT_EQ(s.ranges(), 5);
  EXPECT_EQ(s.str(), "{0,2,4,6,8}");
  EXPECT_EQ(s.firstMissing(9), 1);
  EXPECT_FALSE(RankSet::unite(s, RankSet::of(6), &s, &shared, &arena));
  EXPECT_EQ(shared, 6);
  for (int r : {1, 3, 5, 7}) ASSERT_TRUE(RankSet::unite(s, RankSet::of(r), &s, &shared, &arena));
  EXPECT_TRUE(s.isRange(0, 9));
  EXPECT_EQ(s.firstMissing(9), -1);
  EXPECT_EQ(s.firstMissing(10), 9);
  EXPECT_TRUE(s == RankSet::range(0, 9));
}

// A hand-written reduce chain 0 -> 2 -> 4 -> 1 -> 3 (root 3): partial sets such as {0,2,4} need more than the two
// inline ranges, and a rank added twice is still caught there.
TEST(VerifyHandWritten, ScatteredChainReduce) {
  const int n = 5, order[] = {0, 2, 4, 1, 3};
  std::vector<Schedule> all(n);
  for (int pos = 0; pos < n; ++pos) {
    Schedule& s = all[order[pos]];
    s.coll = Coll::kReduce;
    s.nranks = n;
    s.rank = order[pos];
    s.root = 3;
    const int prev = pos > 0 ? order[pos - 1] : -1, next = pos + 1 < n ? order[pos + 1] : -1;
    const BufRef in{Buf::kInput, 0}, out{Buf::kOutput, 0};
    if (pos == 0) {
      s.steps.push_back(makeStep(StepOp::kSend, next, -1, in, {}));
    } else if (next >= 0) {
      s.steps.push_back(makeStep(StepOp::kRecvReduceSend, next, prev, in, {}));
    } else {
      s.steps.push_back(makeStep(StepOp::kRecvReduceCopy, -1, prev, in, out, true));
    }
  }
  EXPECT_EQ(verify(all), "");
  EXPECT_EQ(verify(all, true), "");
  all[1].steps.insert(all[1].steps.begin(),
                      makeStep(StepOp::kLocalReduce, -1, -1, {Buf::kInput, 0}, {Buf::kOutput, 0}));
  expectError(verify(all), {"rank 1 step 0", "reads out[0] before anything was written"});
  all[1].steps[0] = makeStep(StepOp::kCopy, -1, -1, {Buf::kInput, 0}, {Buf::kOutput, 0});
  all[1].steps[1].src = {Buf::kOutput, 0};
  all[1].steps.insert(all[1].steps.begin() + 1,
                      makeStep(StepOp::kLocalReduce, -1, -1, {Buf::kInput, 0}, {Buf::kOutput, 0}));
  expectError(verify(all), {"rank 1 step 1", "rank 1 counted twice"});
  all[1].steps.erase(all[1].steps.begin() + 1);
  all[4].steps[0].src = {Buf::kOutput, 0};  // rank 4 reads its (unwritten) output instead of its input
  expectError(verify(all), {"rank 4 step 0", "reads out[0]"});
}

// ---- broken schedules -------------------------------------------------------------------------------------------

TEST(VerifyCatches, DeadlockFromSwappedSteps) {
  auto all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  for (auto& s : all) std::swap(s.steps[0], s.steps[1]);  // everyone receives before anyone sends
  expectError(verify(all), {"deadlock", "rank 0 step 0 (recvReduceSend from 3 to 1 src=in[2]) tile 0",
                            "waits for a message from 3", "rank 3 step 0"});
}

TEST(VerifyCatches, DroppedSteps) {
  auto all = buildAll(Coll::kAllGather, Algo::kRing, 4);
  all[1].steps.pop_back();  // rank 1 never receives block 2 from rank 0
  expectError(verify(all, false, 1), {"messages left unreceived", "from rank 0 to rank 1", "rank 0 step 3"});
  // With two tiles, rank 1 takes that message as tile 1's first.
  expectError(verify(all), {"rank 1 step 2", "tile 1", "a message of tile 0 (sent by step 3)"});

  all = buildAll(Coll::kAllGather, Algo::kRing, 4);
  all[2].steps.erase(all[2].steps.begin());  // rank 2 never sends its block
  expectError(verify(all, false, 1),
              {"deadlock", "rank 3 step 4 (recv from 2 dst=out[0]) tile 0", "waits for a message from 2"});

  all = buildAll(Coll::kAllGather, Algo::kRing, 4);
  all[1].steps.erase(all[1].steps.begin() + 1);  // the local copy: needed out of place only
  expectError(verify(all), {"rank 1 out[1] tile 0 is never written", "rank 1's in[0]"});
  EXPECT_EQ(verify(all, /*inPlace=*/true), "");
}

TEST(VerifyCatches, DuplicateContribution) {
  auto all = buildAll(Coll::kAllReduce, Algo::kOneShot, 4);
  // Rank 2 adds its own block twice: step 5 is "localReduce src=in[0] dst=out[0]".
  ASSERT_EQ(all[2].steps[5].op, StepOp::kLocalReduce);
  all[2].steps.insert(all[2].steps.begin() + 5, all[2].steps[5]);
  expectError(verify(all), {"rank 2 step 6", "rank 2 counted twice"});

  all = buildAll(Coll::kReduce, Algo::kRing, 4, 0, 0);
  all[2].steps[0].src = {Buf::kOutput, 0};  // forwards its output (scratch, unwritten) instead of adding its input
  expectError(verify(all), {"rank 2 step 0", "reads out[0] before anything was written"});
}

TEST(VerifyCatches, WrongFinalFlag) {
  auto all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[2].steps[3].final = false;
  expectError(verify(all), {"rank 2 step 3", "every rank's contribution but is not final"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[2].steps[2].final = true;
  expectError(verify(all), {"rank 2 step 2", "final set, but rank 3 is missing"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[2].steps[4].final = true;  // a forward of the final value: post-op twice
  expectError(verify(all), {"rank 2 step 4", "already final"});

  all = buildAll(Coll::kBroadcast, Algo::kTree, 4);
  all[0].steps.back().final = true;
  expectError(verify(all), {"rank 0 step", "does not reduce"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 1);
  all[0].steps[0].final = false;  // one rank: the copy is where the post-op applies
  expectError(verify(all), {"rank 0 step 0", "not final"});
}

TEST(VerifyCatches, WrongPeer) {
  auto all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[0].steps[0].sendPeer = 2;  // rank 1 then takes rank 0's second message as its first
  expectError(verify(all), {"rank 1 step 1 (recvReduceSend from 0 to 2 src=in[3])", "different logical elements"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[1].steps[2].recvPeer = 2;
  expectError(verify(all), {"deadlock"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[3].steps[1].sendPeer = 4;
  expectError(verify(all), {"rank 3 step 1", "sendPeer 4 out of range [0, 4)"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[3].steps[1].recvPeer = 3;
  expectError(verify(all), {"rank 3 step 1", "recvPeer is the rank itself"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[3].steps[0].recvPeer = 2;  // a send carrying a receive peer: the executor would ignore it, which hides bugs
  expectError(verify(all), {"rank 3 step 0", "recvPeer 2 set but the op does not use one"});
}

TEST(VerifyCatches, DifferentLogicalElements) {
  auto all = buildAll(Coll::kAllReduce, Algo::kRing, 4);
  all[1].steps[1].src.block = 0;  // adds in[0] to block 3 arriving from rank 0
  expectError(verify(all),
              {"rank 1 step 1", "different logical elements", "block 3 of ranks {0}", "block 0 of ranks {1}"});
}

TEST(VerifyCatches, ReductionOrderDiffers) {
  // One-shot over 4 ranks: rank 3 folds ((c0+c2)+c1)+c3 instead of ((c0+c1)+c2)+c3: same set, other floats.
  auto all = buildAll(Coll::kAllReduce, Algo::kOneShot, 4);
  ASSERT_EQ(all[3].steps[4].recvPeer, 1);
  all[3].steps[4].recvPeer = 2;
  all[3].steps[5].recvPeer = 1;
  expectError(verify(all), {"rank 3 out[0] tile 0", "different order", "bitwise"});
}

TEST(VerifyCatches, AliasCorruption) {
  // Two-shot with rank 2 receiving its first peer's block straight into out[2] and adding its own input last: fine
  // out of place, but in place out[2] is in[2], overwritten before rank 2's own contribution is read.
  auto all = buildAll(Coll::kAllReduce, Algo::kTwoShot, 4);
  ASSERT_EQ(all[2].steps[3].op, StepOp::kRecvReduceCopy);
  all[2].steps[3].op = StepOp::kRecv;
  all[2].steps[3].src = {};
  all[2].steps[4].src = {Buf::kOutput, 2};
  all[2].steps[5].final = false;
  all[2].steps.insert(all[2].steps.begin() + 6,
                      makeStep(StepOp::kLocalReduce, -1, -1, {Buf::kInput, 2}, {Buf::kOutput, 2}));
  all[2].steps[6].final = true;
  EXPECT_EQ(verify(all), "");
  expectError(verify(all, /*inPlace=*/true), {"rank 2 step 6", "in-place alias corruption", "reads in[2]"});

  // One-shot is documented not alias safe from 3 ranks on.
  expectError(verify(buildAll(Coll::kAllReduce, Algo::kOneShot, 3), true), {"rank 2", "alias corruption"});

  // A self-copy written back in place and read again as input would apply the pre-multiplier twice.
  all = buildAll(Coll::kReduceScatter, Algo::kRing, 3);
  all[0].steps.insert(all[0].steps.begin(), makeStep(StepOp::kCopy, -1, -1, {Buf::kInput, 0}, {Buf::kOutput, 0}));
  expectError(verify(all, true), {"rank 0 step", "alias corruption"});
}

TEST(VerifyCatches, MissingContribution) {
  auto all = buildAll(Coll::kReduce, Algo::kRing, 4, 0, 3);
  Step& last = all[3].steps.back();  // root: recvReduceCopy from 2, final
  last.op = StepOp::kRecv;
  last.src = {};
  last.final = false;
  expectError(verify(all), {"rank 3 out[0] tile 0 holds block 0 of ranks {0-2}", "rank 3 is missing"});
}

TEST(VerifyCatches, UnreceivedAndCrossTileMessages) {
  auto all = buildAll(Coll::kBroadcast, Algo::kRing, 3);
  all[0].steps.push_back(makeStep(StepOp::kSend, 1, -1, {Buf::kInput, 0}, {}));
  // Rank 1 takes the extra tile-0 message as tile 1's.
  expectError(verify(all), {"rank 1 step 0", "tile 1", "a message of tile 0"});
  VerifyOptions one;
  one.tiles = 1;
  expectError(verifySchedules(all, one), {"messages left unreceived: 1 from rank 0 to rank 1", "rank 0 step 2"});
}

TEST(VerifyCatches, BufferMisuse) {
  auto all = buildAll(Coll::kAllReduce, Algo::kRing, 3);
  all[1].steps[2].dst = {Buf::kInput, 1};
  expectError(verify(all), {"rank 1 step 2", "writes the input buffer"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 3);
  all[1].steps[0].src = {Buf::kOutput, 2};
  expectError(verify(all), {"rank 1 step 0", "reads out[2] before anything was written"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 3);
  all[1].steps[0].src.block = 3;
  expectError(verify(all), {"rank 1 step 0", "src block 3 out of range [0, 3)"});

  all = buildAll(Coll::kBroadcast, Algo::kRing, 3, 0, 0);
  all[1].steps[0].op = StepOp::kRecvReduceCopySend;
  all[1].steps[0].src = {Buf::kInput, 0};
  expectError(verify(all), {"rank 1 step 0", "only the root has an input"});

  all = buildAll(Coll::kAllGather, Algo::kDirect, 3);
  all[0].steps.push_back(makeStep(StepOp::kLocalReduce, -1, -1, {Buf::kInput, 0}, {Buf::kOutput, 0}));
  expectError(verify(all), {"rank 0 step", "AllGather does not combine values"});
}

// Steps that move several blocks as one message (Step::span): a sender and receiver that disagree on the count, a span
// past the buffer's end, a span on a step that reduces, and a receive into the wrong run of blocks.
TEST(VerifyCatches, SpanMisuse) {
  // Recursive-doubling allgather over 4 ranks in rank order: rank 0 sends out[0..1] to rank 2 in round 2.
  auto all = buildAll(Coll::kAllGather, Algo::kDoubling, 4);
  ASSERT_EQ(verify(all), "");
  auto spanned = [](const Schedule& s, StepOp op) {
    for (size_t i = 0; i < s.steps.size(); i++)
      if (s.steps[i].op == op && s.steps[i].span > 1) return static_cast<int>(i);
    return -1;
  };
  const int send0 = spanned(all[0], StepOp::kSend), recv2 = spanned(all[2], StepOp::kRecv);
  ASSERT_GE(send0, 0);
  ASSERT_GE(recv2, 0);
  EXPECT_EQ(all[0].steps[send0].span, 2);

  auto bad = all;
  bad[2].steps[recv2].span = 1;  // takes one block of rank 0's two-block message
  expectError(verify(bad), {"rank 2 step", "receives 1 block(s) from 0 in one message", "sent 2"});

  bad = all;
  bad[0].steps[send0].src.block = 3;  // out[3..4] of 4 blocks
  expectError(verify(bad), {"rank 0 step", "src blocks 3..4 out of range [0, 4)"});

  bad = all;
  bad[2].steps[recv2].dst.block = 1;  // rank 0's blocks 0..1 land on out[1..2]
  EXPECT_FALSE(verify(bad).empty());

  bad = all;
  bad[0].steps[send0].span = 0;
  expectError(verify(bad), {"rank 0 step", "span 0"});

  all = buildAll(Coll::kAllReduce, Algo::kRing, 3);
  ASSERT_EQ(all[1].steps[1].op, StepOp::kRecvReduceSend);
  all[1].steps[1].span = 2;
  expectError(verify(all), {"rank 1 step 1", "span 2 on an op other than send or recv"});
}

TEST(VerifyCatches, InconsistentHeaders) {
  EXPECT_EQ(verifySchedules({}, VerifyOptions()), "no schedules");
  auto all = buildAll(Coll::kAllReduce, Algo::kRing, 3);
  all[1].rank = 2;
  expectError(verify(all), {"schedules[1] is for rank 2"});
  all = buildAll(Coll::kAllReduce, Algo::kRing, 3);
  all[2].outBlocks = 1;
  expectError(verify(all), {"rank 2 has inBlocks=3 outBlocks=1"});
  all = buildAll(Coll::kAllGather, Algo::kRing, 3);
  for (auto& s : all) s.outBlocks = 2;
  expectError(verify(all), {"AllGather over 3 ranks cannot use inBlocks=1 outBlocks=2"});
  all = buildAll(Coll::kBroadcast, Algo::kRing, 3, 0, 1);
  all[0].root = 0;
  expectError(verify(all), {"rank 1 has root 1, rank 0 has 0"});
}

}  // namespace
}  // namespace chorus
