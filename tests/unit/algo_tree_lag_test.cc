// Pipelined tree allreduce (Schedule::lag, TileOrder in algo/schedule.h): below the root a rank runs its down phase
// `depth` tiles behind its up phase. The tile order runs every (tile, step) once, with a part-1 step of tile t after
// the part-0 steps of tile t + lag; every tree allreduce's lags are its ranks' depths (each one more than its
// parent's); the verifier runs lagged schedules in that order, and a lag that makes a rank wait for its own future
// deadlocks there.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"
#include "unit/algo_hosts_util.h"

namespace chorus {
namespace {

// Every (tile, step) the order runs, in order.
std::vector<std::pair<uint64_t, uint32_t>> walk(const TileOrder& o) {
  std::vector<std::pair<uint64_t, uint32_t>> out;
  for (uint64_t k = 0; k < o.rounds(); k++) {
    for (int which = 0; which < 2; which++) {
      uint64_t t = 0;
      uint32_t first = 0, end = 0;
      if (!o.part(k, which, &t, &first, &end)) continue;
      for (uint32_t i = first; i < end; i++) out.emplace_back(t, i);
    }
  }
  return out;
}

TEST(TileOrder, WithoutALagEveryTileRunsWholeInOrder) {
  for (int lagFrom : {-1, 2}) {
    const auto got = walk(TileOrder(3, 4, lagFrom, lagFrom < 0 ? 5 : 0));
    std::vector<std::pair<uint64_t, uint32_t>> want;
    for (uint64_t t = 0; t < 3; t++)
      for (uint32_t i = 0; i < 4; i++) want.emplace_back(t, i);
    EXPECT_EQ(got, want) << "lagFrom " << lagFrom;
  }
  EXPECT_EQ(TileOrder(0, 4, 2, 3).rounds(), 0u);
}

TEST(TileOrder, ALaggedPartRunsAfterTheFirstPartOfTheTileLagLater) {
  for (uint64_t tiles : {1, 2, 5, 9})
    for (int lag : {1, 2, 4})
      for (int split : {0, 1, 3, 4}) {
        const TileOrder o(tiles, 4, split, lag);
        const auto got = walk(o);
        ASSERT_EQ(got.size(), tiles * 4) << tiles << " " << lag << " " << split;
        std::vector<int> seen(tiles * 4, 0);
        for (size_t p = 0; p < got.size(); p++) {
          const uint64_t t = got[p].first;
          const uint32_t i = got[p].second;
          ASSERT_LT(t, tiles);
          ASSERT_EQ(seen[t * 4 + i]++, 0) << "tile " << t << " step " << i << " twice";
          if (i < static_cast<uint32_t>(split)) continue;
          // Part 1 of tile t: after every part-0 step of tiles up to t + lag, before any of tile t + lag + 1.
          for (size_t q = 0; q < got.size(); q++) {
            if (got[q].second >= static_cast<uint32_t>(split)) continue;
            if (got[q].first <= t + lag) {
              EXPECT_LT(q, p) << "tile " << t << " step " << i;
            } else if (got[q].first == t + lag + 1) {
              EXPECT_GT(q, p) << "tile " << t << " step " << i;
            }
          }
        }
      }
}

// For every rank below the root: lagFrom is where its down phase starts (a receive from its parent), and its lag is
// one more than that parent's, the root's being 0.
void expectDepthLags(const std::vector<Schedule>& all, const std::string& what) {
  const int n = static_cast<int>(all.size());
  std::vector<int> parent(n, -1);
  int roots = 0;
  for (int r = 0; r < n; r++) {
    const Schedule& s = all[r];
    if (s.lagFrom < 0) {
      EXPECT_EQ(s.lag, 0) << what << " rank " << r;
      roots++;
      continue;
    }
    ASSERT_LT(s.lagFrom, static_cast<int>(s.steps.size())) << what << " rank " << r;
    const Step& first = s.steps[s.lagFrom];
    ASSERT_TRUE(first.op == StepOp::kRecv || first.op == StepOp::kRecvCopySend) << what << " rank " << r;
    parent[r] = first.recvPeer;
  }
  EXPECT_EQ(roots, 1) << what;
  for (int r = 0; r < n; r++) {
    if (parent[r] < 0) continue;
    EXPECT_EQ(all[r].lag, all[parent[r]].lag + 1) << what << " rank " << r << " parent " << parent[r];
  }
}

TEST(TreeLag, AllReduceLagsAreDepthsAndVerify) {
  std::mt19937 rng(7);
  // Flat trees (one host), and node-aware trees over hosts of P ranks, in rank order and shuffled.
  const std::vector<std::pair<int, int>> shapes = {{2, 0}, {3, 0}, {7, 0}, {16, 0}, {33, 0}, {4, 2},
                                                   {6, 3}, {8, 2}, {12, 4}, {32, 8}};
  for (const auto& [n, P] : shapes) {
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled})
      for (int channel : {0, 1}) {
        const std::string what = std::to_string(n) + " ranks, P " + std::to_string(P) + ", channel " +
                                 std::to_string(channel) + (order ? " shuffled" : "");
        const std::vector<Schedule> all = buildHostSchedules(Coll::kAllReduce, Algo::kTree, n, P, order, channel);
        expectDepthLags(all, what);
        EXPECT_EQ(verifyEachWay(all, /*inPlaceToo=*/true), "") << what;
      }
  }
}

TEST(TreeLag, RootedTreesHaveNoLag) {
  for (Coll coll : {Coll::kBroadcast, Coll::kReduce})
    for (const Schedule& s : buildHostSchedules(coll, Algo::kTree, 9, 3, nullptr, 1, 4, 4)) {
      EXPECT_EQ(s.lagFrom, -1) << collName(coll) << " rank " << s.rank;
      EXPECT_EQ(s.lag, 0) << collName(coll) << " rank " << s.rank;
    }
}

TEST(TreeLag, AParentLaggingBehindItsChildDeadlocks) {
  // The chain 0 - 1 - 2 (flat tree over 3 ranks, channel 0): rank 2 is the leaf under rank 1. With rank 1 lagging 3
  // tiles and rank 2 none, rank 2 waits in round t for tile t from rank 1, which sends it only in round t + 3,
  // after tile t + 3 has come up from rank 2.
  std::vector<Schedule> all = buildHostSchedules(Coll::kAllReduce, Algo::kTree, 3, 0);
  int mid = -1, leaf = -1;
  for (int r = 0; r < 3; r++) {
    if (all[r].lagFrom < 0) continue;
    if (all[r].lag == 1) mid = r;
    if (all[r].lag == 2) leaf = r;
  }
  ASSERT_GE(mid, 0);
  ASSERT_GE(leaf, 0);
  VerifyOptions opt;
  opt.tiles = 6;
  EXPECT_EQ(verifySchedules(all, opt), "");
  all[mid].lag = 3;
  all[leaf].lag = 0;
  all[leaf].lagFrom = -1;
  EXPECT_NE(verifySchedules(all, opt).find("deadlock"), std::string::npos) << verifySchedules(all, opt);
}

}  // namespace
}  // namespace chorus
