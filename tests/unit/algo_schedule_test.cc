// Schedule names, printing, the generators' contracts (support matrix, layouts, errors, trees) and the
// point-to-point builder's order.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/schedule.h"

namespace chorus {
namespace {

Schedule build(Coll coll, Algo algo, int n, int rank, int channel = 0, int root = 0) {
  Schedule s;
  std::string err;
  EXPECT_TRUE(buildSchedule(ScheduleRequest{coll, algo, n, rank, channel, 2, root}, &s, &err)) << err;
  return s;
}

TEST(ScheduleNames, NamesAndParsing) {
  EXPECT_STREQ(collName(Coll::kAllReduce), "AllReduce");
  EXPECT_STREQ(collName(Coll::kSendRecv), "SendRecv");
  EXPECT_STREQ(collName(Coll::kNumColls), "?");
  EXPECT_STREQ(algoName(Algo::kTwoShot), "TwoShot");
  EXPECT_STREQ(algoName(Algo::kNumAlgos), "?");
  EXPECT_STREQ(stepOpName(StepOp::kRecvReduceCopySend), "recvReduceCopySend");
  EXPECT_STREQ(stepOpName(StepOp::kNumStepOps), "?");
  for (int c = 0; c < static_cast<int>(Coll::kNumColls); ++c) {
    Coll parsed = Coll::kNumColls;
    ASSERT_TRUE(parseColl(collName(static_cast<Coll>(c)), &parsed));
    EXPECT_EQ(static_cast<int>(parsed), c);
  }
  Coll coll;
  Algo algo;
  EXPECT_TRUE(parseColl("reducescatter", &coll));
  EXPECT_EQ(coll, Coll::kReduceScatter);
  EXPECT_TRUE(parseAlgo("ONESHOT", &algo));
  EXPECT_EQ(algo, Algo::kOneShot);
  EXPECT_FALSE(parseColl("allreduc", &coll));
  EXPECT_FALSE(parseColl("allreducee", &coll));
  EXPECT_FALSE(parseAlgo("", &algo));
}

TEST(ScheduleNames, StepOpClasses) {
  struct Row {
    StepOp op;
    bool recvs, sends, reduces;
  };
  const Row rows[] = {{StepOp::kSend, false, true, false},
                      {StepOp::kRecv, true, false, false},
                      {StepOp::kRecvReduceSend, true, true, true},
                      {StepOp::kRecvReduceCopy, true, false, true},
                      {StepOp::kRecvReduceCopySend, true, true, true},
                      {StepOp::kRecvCopySend, true, true, false},
                      {StepOp::kCopy, false, false, false},
                      {StepOp::kLocalReduce, false, false, true}};
  for (const Row& row : rows) {
    EXPECT_EQ(stepRecvs(row.op), row.recvs) << stepOpName(row.op);
    EXPECT_EQ(stepSends(row.op), row.sends) << stepOpName(row.op);
    EXPECT_EQ(stepReduces(row.op), row.reduces) << stepOpName(row.op);
  }
  EXPECT_TRUE(collReduces(Coll::kReduceScatter));
  EXPECT_FALSE(collReduces(Coll::kAllGather));
  EXPECT_TRUE(collRooted(Coll::kScatter));
  EXPECT_FALSE(collRooted(Coll::kAllToAll));
}

TEST(ScheduleFormat, RingAllReduce) {
  const std::string text = formatSchedule(build(Coll::kAllReduce, Algo::kRing, 4, 0));
  EXPECT_EQ(text,
            "AllReduce Ring nranks=4 rank=0 channel=0 inBlocks=4 outBlocks=4 steps=7\n"
            "0: send to 1 src=in[3]\n"
            "1: recvReduceSend from 3 to 1 src=in[2]\n"
            "2: recvReduceSend from 3 to 1 src=in[1]\n"
            "3: recvReduceCopySend from 3 to 1 src=in[0] dst=out[0] final\n"
            "4: recvCopySend from 3 to 1 dst=out[3]\n"
            "5: recvCopySend from 3 to 1 dst=out[2]\n"
            "6: recv from 3 dst=out[1]\n");
  EXPECT_NE(formatSchedule(build(Coll::kReduce, Algo::kRing, 4, 0, 0, 2)).find(" root=2 "), std::string::npos);
}

TEST(ScheduleFormat, Step) {
  Step st;
  st.op = StepOp::kLocalReduce;
  st.src = {Buf::kInput, 2};
  st.dst = {Buf::kOutput, 0};
  st.final = true;
  EXPECT_EQ(formatStep(st), "localReduce src=in[2] dst=out[0] final");
}

TEST(Generators, SupportMatrix) {
  EXPECT_TRUE(algoSupported(Coll::kAllReduce, Algo::kTree, 8));
  EXPECT_FALSE(algoSupported(Coll::kAllGather, Algo::kTree, 8));
  EXPECT_FALSE(algoSupported(Coll::kAllToAll, Algo::kRing, 8));
  EXPECT_TRUE(algoSupported(Coll::kAllGather, Algo::kDirect, 8));
  EXPECT_FALSE(algoSupported(Coll::kReduceScatter, Algo::kOneShot, 8));
  EXPECT_FALSE(algoSupported(Coll::kSendRecv, Algo::kDirect, 8));
  EXPECT_FALSE(algoSupported(Coll::kAllReduce, Algo::kRing, 0));
  EXPECT_TRUE(algoAliasSafe(Coll::kAllReduce, Algo::kOneShot, 2));
  EXPECT_FALSE(algoAliasSafe(Coll::kAllReduce, Algo::kOneShot, 3));
  EXPECT_TRUE(algoAliasSafe(Coll::kAllReduce, Algo::kTwoShot, 64));
}

TEST(Generators, Errors) {
  Schedule s;
  std::string err;
  EXPECT_FALSE(buildSchedule(ScheduleRequest{Coll::kAllGather, Algo::kTree, 4, 0, 0, 1, 0}, &s, &err));
  EXPECT_EQ(err, "Tree does not implement AllGather");
  EXPECT_FALSE(buildSchedule(ScheduleRequest{Coll::kAllReduce, Algo::kRing, 4, 4, 0, 1, 0}, &s, &err));
  EXPECT_NE(err.find("rank 4 out of range"), std::string::npos) << err;
  EXPECT_FALSE(buildSchedule(ScheduleRequest{Coll::kBroadcast, Algo::kRing, 4, 0, 0, 1, -1}, &s, &err));
  EXPECT_NE(err.find("root -1"), std::string::npos) << err;
  EXPECT_FALSE(buildSchedule(ScheduleRequest{Coll::kAllReduce, Algo::kRing, 4, 0, 2, 2, 0}, &s, &err));
  EXPECT_NE(err.find("channel 2"), std::string::npos) << err;
  EXPECT_FALSE(buildSchedule(ScheduleRequest{Coll::kSendRecv, Algo::kDirect, 4, 0, 0, 1, 0}, &s, &err));
  EXPECT_NE(err.find("buildSendRecvSchedule"), std::string::npos) << err;
  EXPECT_FALSE(buildSchedule(ScheduleRequest{Coll::kAllReduce, Algo::kRing, 0, 0, 0, 1, 0}, &s, &err));
  // Root is ignored, not rejected, where the collective has none.
  EXPECT_TRUE(buildSchedule(ScheduleRequest{Coll::kAllReduce, Algo::kRing, 4, 0, 0, 1, 99}, &s, &err));
}

TEST(Generators, BlockLayouts) {
  struct Row {
    Coll coll;
    Algo algo;
    int in, out;  // -1: nranks
  };
  const Row rows[] = {{Coll::kAllReduce, Algo::kRing, -1, -1},    {Coll::kAllReduce, Algo::kTwoShot, -1, -1},
                      {Coll::kAllReduce, Algo::kTree, 1, 1},      {Coll::kAllReduce, Algo::kOneShot, 1, 1},
                      {Coll::kAllGather, Algo::kRing, 1, -1},     {Coll::kAllGather, Algo::kDirect, 1, -1},
                      {Coll::kReduceScatter, Algo::kRing, -1, 1}, {Coll::kBroadcast, Algo::kTree, 1, 1},
                      {Coll::kReduce, Algo::kRing, 1, 1},         {Coll::kAllToAll, Algo::kDirect, -1, -1},
                      {Coll::kGather, Algo::kDirect, 1, -1},      {Coll::kScatter, Algo::kDirect, -1, 1}};
  for (const Row& row : rows) {
    const Schedule s = build(row.coll, row.algo, 6, 1);
    EXPECT_EQ(s.inBlocks, row.in < 0 ? 6 : row.in) << collName(row.coll) << " " << algoName(row.algo);
    EXPECT_EQ(s.outBlocks, row.out < 0 ? 6 : row.out) << collName(row.coll) << " " << algoName(row.algo);
  }
}

TEST(Generators, OneRankIsALocalCopy) {
  for (int c = 0; c < static_cast<int>(Coll::kNumColls); ++c) {
    for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); ++a) {
      const Coll coll = static_cast<Coll>(c);
      const Algo algo = static_cast<Algo>(a);
      if (!algoSupported(coll, algo, 1)) continue;
      const Schedule s = build(coll, algo, 1, 0);
      ASSERT_EQ(s.steps.size(), 1u) << collName(coll) << " " << algoName(algo);
      EXPECT_EQ(s.steps[0].op, StepOp::kCopy);
      EXPECT_EQ(s.steps[0].final, collReduces(coll));
    }
  }
}

// Off the root, broadcast/scatter never read the input (the user may pass none); reduce/gather write the output
// only where scheduleUses() says so, which tells the engine to supply scratch.
TEST(Generators, RootOnlyBuffers) {
  for (Algo algo : {Algo::kRing, Algo::kTree}) {
    for (int r = 1; r < 9; ++r) {
      EXPECT_FALSE(scheduleUses(build(Coll::kBroadcast, algo, 9, r), Buf::kInput)) << algoName(algo) << r;
    }
  }
  for (int r = 1; r < 9; ++r) {
    EXPECT_FALSE(scheduleUses(build(Coll::kScatter, Algo::kDirect, 9, r), Buf::kInput));
    EXPECT_FALSE(scheduleUses(build(Coll::kGather, Algo::kDirect, 9, r), Buf::kOutput));
    EXPECT_FALSE(scheduleUses(build(Coll::kReduce, Algo::kRing, 9, r), Buf::kOutput));
  }
  // Tree reduce: rank 4 of tree A over 9 ranks has children 2 and 6, and keeps the first partial in its output.
  EXPECT_TRUE(scheduleUses(build(Coll::kReduce, Algo::kTree, 9, 4), Buf::kOutput));
  EXPECT_FALSE(scheduleUses(build(Coll::kReduce, Algo::kTree, 9, 1), Buf::kOutput));
}

// Parent and child links agree, the tree spans every rank from `root`, and its depth stays logarithmic.
void checkTree(int n, int channel, int root) {
  std::vector<TreeLinks> t(n);
  for (int r = 0; r < n; ++r) t[r] = treeLinks(n, r, channel, root);
  std::vector<int> depth(n, -1);
  ASSERT_EQ(t[root].parent, -1) << "n=" << n << " channel=" << channel << " root=" << root;
  depth[root] = 0;
  std::vector<int> stack = {root};
  int maxDepth = 0, seen = 1;
  while (!stack.empty()) {
    const int p = stack.back();
    stack.pop_back();
    for (int c : t[p].children) {
      if (c < 0) continue;
      ASSERT_TRUE(c >= 0 && c < n && depth[c] < 0) << "n=" << n << " node " << p << " child " << c;
      ASSERT_EQ(t[c].parent, p) << "n=" << n << " child " << c;
      depth[c] = depth[p] + 1;
      maxDepth = std::max(maxDepth, depth[c]);
      ++seen;
      stack.push_back(c);
    }
  }
  EXPECT_EQ(seen, n) << "n=" << n << " channel=" << channel << " root=" << root;
  EXPECT_LE(maxDepth, 2 * static_cast<int>(std::ceil(std::log2(n + 1))) + 1) << "n=" << n;
}

TEST(Trees, SpanEveryRank) {
  for (int n = 1; n <= 300; ++n) {
    for (int channel : {0, 1}) {
      for (int root : {0, n / 2, n - 1, treeRoot(n, channel)}) checkTree(n, channel, root);
      if (HasFailure()) return;
    }
  }
}

TEST(Trees, DoubleTreeRoots) {
  EXPECT_EQ(treeRoot(8, 0), 0);
  EXPECT_EQ(treeRoot(8, 1), 7);
  EXPECT_EQ(treeRoot(7, 1), 1);
  EXPECT_EQ(treeRoot(1, 1), 0);
  // Tree A over 8 ranks: 0 -> 4; 4 -> 2, 6; 2 -> 1, 3; 6 -> 5, 7.
  EXPECT_EQ(treeLinks(8, 0, 0, 0).children[0], 4);
  EXPECT_EQ(treeLinks(8, 4, 0, 0).children[0], 2);
  EXPECT_EQ(treeLinks(8, 4, 0, 0).children[1], 6);
  EXPECT_EQ(treeLinks(8, 7, 0, 0).parent, 6);
  // Tree A over 6 ranks: 4's right child moves down to 5.
  EXPECT_EQ(treeLinks(6, 4, 0, 0).children[1], 5);
  EXPECT_EQ(treeLinks(6, 5, 0, 0).parent, 4);
}

// The point of two trees: for even n no rank is interior (forwarding) in both, so each rank's links carry about one
// tree's worth of traffic. For odd n the shift leaves at most one rank interior in both.
TEST(Trees, InteriorInAtMostOneTree) {
  for (int n = 2; n <= 300; ++n) {
    int both = 0;
    for (int r = 0; r < n; ++r) {
      const TreeLinks a = treeLinks(n, r, 0, treeRoot(n, 0)), b = treeLinks(n, r, 1, treeRoot(n, 1));
      const bool interiorA = a.children[0] >= 0 && a.parent >= 0, interiorB = b.children[0] >= 0 && b.parent >= 0;
      both += interiorA && interiorB;
    }
    EXPECT_LE(both, n % 2 == 0 ? 0 : 1) << "n=" << n;
  }
}

TEST(SendRecvBuilder, OrderAndSelfPairs) {
  // Rank 1 of 5: sends in[0..3] to 3, 2, 0, 3 and receives out[0..3] from 0, 4, 1, 2 (out[2] from itself).
  const Schedule s = buildSendRecvSchedule(5, 1, {3, 2, 1, 0, 3}, {0, 4, 1, 2});
  EXPECT_EQ(s.coll, Coll::kSendRecv);
  EXPECT_EQ(s.inBlocks, 5);
  EXPECT_EQ(s.outBlocks, 4);
  EXPECT_EQ(formatSchedule(s),
            "SendRecv Direct nranks=5 rank=1 channel=0 inBlocks=5 outBlocks=4 steps=8\n"
            "0: copy src=in[2] dst=out[2]\n"
            "1: send to 2 src=in[1]\n"
            "2: send to 3 src=in[0]\n"
            "3: send to 3 src=in[4]\n"
            "4: send to 0 src=in[3]\n"
            "5: recv from 0 dst=out[0]\n"
            "6: recv from 4 dst=out[1]\n"
            "7: recv from 2 dst=out[3]\n");
  EXPECT_TRUE(buildSendRecvSchedule(3, 0, {}, {}).steps.empty());
}

}  // namespace
}  // namespace chorus
