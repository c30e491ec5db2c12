// Rail allgather and reduce-scatter (src/algo/gen_rail.cc) through the symbolic verifier: hosts x ranks a host from
// 1 x n to n x 1, rank placements given as a ring order, in and out of place (reduce-scatter: where algoAliasSafe
// allows), FIFO depths 2 and 3; each host sends and receives (H-1) x P blocks across hosts; a block is at most two
// hops from its owner and a block from another host is passed on in the step that receives it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"
#include "unit/algo_hosts_util.h"

namespace chorus {
namespace {

const Coll kColls[] = {Coll::kAllGather, Coll::kReduceScatter};

std::vector<Schedule> buildAll(int n, int perHost, const std::vector<int>* order, Coll coll) {
  return buildHostSchedules(coll, Algo::kRail, n, perHost, order, 0, 1);
}

TEST(Rail, EveryShapeInAndOutOfPlace) {
  std::mt19937 rng(7);
  for (auto [H, P] : std::vector<std::pair<int, int>>{
           {1, 4}, {4, 1}, {2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}, {3, 3}, {5, 3}, {8, 4}, {2, 1}, {1, 2}}) {
    const int n = H * P;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    const std::vector<int>* none = nullptr;
    const std::vector<int>* mixed = &shuffled;
    for (const std::vector<int>* order : {none, mixed})
      for (Coll coll : kColls) {
        auto all = buildAll(n, P, order, coll);
        // Reduce-scatter builds other hosts' partials in out[0] from 3 ranks a host; up to 2 it needs no room.
        const bool aliasSafe = algoAliasSafe(coll, Algo::kRail, n, P);
        EXPECT_EQ(aliasSafe, coll == Coll::kAllGather || P <= 2 || H == 1);
        ASSERT_EQ(verifyEachWay(all, aliasSafe), "")
            << collName(coll) << " " << H << " hosts x " << P << (order ? " shuffled" : "");
      }
  }
}

// The verifier sees the in-place hazard that algoAliasSafe reports for reduce-scatter over hosts of 3 ranks or more.
TEST(Rail, ReduceScatterInPlaceFromThreeRanksAHostIsCaught) {
  EXPECT_FALSE(algoAliasSafe(Coll::kReduceScatter, Algo::kRail, 6, 3));
  EXPECT_TRUE(algoAliasSafe(Coll::kReduceScatter, Algo::kRail, 6, 2));
  EXPECT_TRUE(algoAliasSafe(Coll::kReduceScatter, Algo::kRail, 6, 6));
  EXPECT_TRUE(algoAliasSafe(Coll::kAllGather, Algo::kRail, 6, 3));
  VerifyOptions opt;
  opt.inPlace = true;
  EXPECT_NE(verifySchedules(buildAll(6, 3, nullptr, Coll::kReduceScatter), opt).find("alias corruption"),
            std::string::npos);
}

TEST(Rail, ThousandRanks) {
  VerifyOptions opt;
  opt.tiles = 1;
  for (Coll coll : kColls) EXPECT_EQ(verifySchedules(buildAll(1024, 8, nullptr, coll), opt), "") << collName(coll);
}

// (H-1)/H of the gathered buffer leaves and enters each host, (H-1) blocks of 1/n from each of its P ranks (as the
// hierarchical ring); every rank sends n-1 blocks in all.
TEST(Rail, EachHostSendsTheMinimumAcrossHosts) {
  for (auto [H, P] : std::vector<std::pair<int, int>>{{4, 3}, {3, 2}, {5, 1}, {2, 4}}) {
    const int n = H * P;
    for (Coll coll : kColls) {
      auto all = buildAll(n, P, nullptr, coll);
      for (int h = 0; h < H; ++h) {
        int blocksOut = 0, blocksIn = 0;
        for (int r = 0; r < n; ++r)
          for (const Step& st : all[r].steps) {
            if (st.sendPeer < 0) continue;
            blocksOut += r / P == h && st.sendPeer / P != h;
            blocksIn += r / P != h && st.sendPeer / P == h;
          }
        EXPECT_EQ(blocksOut, (H - 1) * P) << collName(coll) << " " << H << "x" << P << " host " << h;
        EXPECT_EQ(blocksIn, (H - 1) * P) << collName(coll) << " " << H << "x" << P << " host " << h;
      }
      for (int r = 0; r < n; ++r) {
        const auto sends =
            std::count_if(all[r].steps.begin(), all[r].steps.end(), [](const Step& st) { return st.sendPeer >= 0; });
        EXPECT_EQ(sends, n - 1) << collName(coll) << " " << H << "x" << P << " rank " << r;
      }
    }
  }
}

// Allgather hops: out[b] of rank r came from the rank its receiving step names, which got it one hop earlier. No
// block is more than two hops from its owner, and two only when it crossed hosts and then moved within one.
TEST(Rail, AllGatherBlocksTravelAtMostTwoHops) {
  for (auto [H, P] : std::vector<std::pair<int, int>>{{4, 3}, {8, 4}, {3, 1}, {1, 5}}) {
    const int n = H * P;
    auto all = buildAll(n, P, nullptr, Coll::kAllGather);
    std::vector<std::vector<int>> from(n, std::vector<int>(n, -1));  // [rank][block]: sender, or -1 (own)
    for (int r = 0; r < n; ++r)
      for (const Step& st : all[r].steps)
        if (st.recvPeer >= 0) from[r][st.dst.block] = st.recvPeer;
    std::function<int(int, int)> hops = [&](int r, int b) {
      if (from[r][b] < 0) return r == b ? 0 : n;  // n: the block never arrived
      return 1 + hops(from[r][b], b);
    };
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) {
        const int want = b == r ? 0 : (b / P != r / P && b % P != r % P) ? 2 : 1;
        EXPECT_EQ(hops(r, b), want) << H << "x" << P << " rank " << r << " block " << b;
      }
  }
}

// Dependency depth: a block received from another host goes on to a local peer in the step that receives it, and to
// the other local peers in the steps right after, before anything else is received.
TEST(Rail, AllGatherForwardsWhatCrossesHostsAtOnce) {
  const int H = 4, P = 3, n = H * P;
  auto all = buildAll(n, P, nullptr, Coll::kAllGather);
  for (int r = 0; r < n; ++r) {
    const std::vector<Step>& steps = all[r].steps;
    int crossed = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      if (st.recvPeer < 0 || st.recvPeer / P == r / P) continue;
      crossed++;
      ASSERT_EQ(st.op, StepOp::kRecvCopySend) << "rank " << r << " step " << i;
      ASSERT_LE(i + P - 1, steps.size());
      for (int k = 0; k < P - 1; ++k) {
        const Step& fwd = steps[i + k];
        EXPECT_EQ(fwd.sendPeer / P, r / P) << "rank " << r << " step " << i + k;
        EXPECT_EQ(k == 0 ? fwd.dst.block : fwd.src.block, st.dst.block) << "rank " << r << " step " << i + k;
        EXPECT_EQ(fwd.op, k == 0 ? StepOp::kRecvCopySend : StepOp::kSend) << "rank " << r << " step " << i + k;
      }
    }
    EXPECT_EQ(crossed, H - 1) << "rank " << r;
  }
}

TEST(Rail, UnevenHostsAreRefused) {
  Schedule s;
  std::string err;
  ScheduleRequest req{Coll::kAllGather, Algo::kRail, 6, 0, 0, 1, 0, nullptr, 4};
  EXPECT_FALSE(buildSchedule(req, &s, &err));
  EXPECT_NE(err.find("same number of ranks on every host"), std::string::npos) << err;
  req.coll = Coll::kAllReduce;
  req.localRanks = 3;
  EXPECT_FALSE(buildSchedule(req, &s, &err));
}

}  // namespace
}  // namespace chorus
