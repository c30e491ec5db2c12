// Recursive-doubling allreduce and allgather (src/algo/gen_doubling.cc): verified symbolically over hosts and
// placements, and held to what they are for: ceil(log2 n) rounds a rank, and laid host by host over hosts of a power
// of two ranks, only the last log2(hosts) rounds cross hosts.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"
#include "unit/algo_hosts_util.h"

namespace chorus {
namespace {

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

/// The distinct peers a rank exchanges with, in order of first contact (a round is one peer, or two for Bruck's).
std::vector<int> peersInOrder(const Schedule& s) {
  std::vector<int> peers;
  for (const Step& st : s.steps)
    for (int p : {st.sendPeer, st.recvPeer})
      if (p >= 0 && (peers.empty() || peers.back() != p)) peers.push_back(p);
  return peers;
}

TEST(Doubling, EveryShapeAndPlacementVerifies) {
  std::mt19937 rng(11);
  for (auto [H, P] : std::vector<std::pair<int, int>>{
           {1, 2}, {2, 1}, {2, 2}, {3, 2}, {4, 2}, {2, 3}, {3, 3}, {5, 2}, {4, 4}, {8, 2}, {6, 1}, {7, 1}}) {
    const int n = H * P;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled})
      for (Coll coll : {Coll::kAllReduce, Coll::kAllGather}) {
        ASSERT_TRUE(algoAliasSafe(coll, Algo::kDoubling, n, P));
        const auto all = buildHostSchedules(coll, Algo::kDoubling, n, P, order, 0, 1);
        ASSERT_EQ(verifyEachWay(all, true, 3), "")
            << collName(coll) << " " << H << " hosts x " << P << (order ? " shuffled" : "");
      }
  }
}

TEST(Doubling, AllReduceTakesLog2RoundsAndFoldsTheRest) {
  for (int n = 2; n <= 64; n++) {
    const auto all = buildHostSchedules(Coll::kAllReduce, Algo::kDoubling, n, 0);
    int p = 1;
    while (p * 2 <= n) p *= 2;
    for (int r = 0; r < n; r++) {
      // Pairwise rounds: a send and a combine each; the folded ranks add one step each way, and their partners too.
      const bool folds = r >= p || r < n - p;
      const size_t expect = r >= p ? 2 : 2 * ceilLog2(p) + (folds ? 2 : 0);
      ASSERT_EQ(all[r].steps.size(), expect) << "n=" << n << " rank " << r << "\n" << formatSchedule(all[r]);
      if (r < p) {
        // Round d's peer is r xor d, and the last combine is the final one (the only final step).
        std::vector<int> peers = peersInOrder(all[r]);
        if (r < n - p) peers.erase(peers.begin());  // the folded rank
        for (int k = 0; (1 << k) < p; k++) EXPECT_EQ(peers[k], r ^ (1 << k)) << "n=" << n << " rank " << r;
        int finals = 0, lastCombine = -1;
        for (size_t i = 0; i < all[r].steps.size(); i++) {
          finals += all[r].steps[i].final;
          if (all[r].steps[i].op == StepOp::kRecvReduceCopy) lastCombine = static_cast<int>(i);
        }
        EXPECT_EQ(finals, 1) << "n=" << n << " rank " << r;
        ASSERT_GE(lastCombine, 0);
        EXPECT_TRUE(all[r].steps[lastCombine].final) << "n=" << n << " rank " << r;
      }
    }
  }
}

TEST(Doubling, AllGatherTakesLog2Rounds) {
  for (int n = 2; n <= 40; n++) {
    const auto all = buildHostSchedules(Coll::kAllGather, Algo::kDoubling, n, 0);
    for (int r = 0; r < n; r++) {
      // n-1 blocks in, n-1 out, and the own block copied: the same bytes as the ring, in ceil(log2 n) rounds.
      ASSERT_EQ(all[r].steps.size(), static_cast<size_t>(2 * (n - 1) + 1)) << "n=" << n;
      std::set<int> to, from;
      for (const Step& st : all[r].steps) {
        if (st.sendPeer >= 0) to.insert(st.sendPeer);
        if (st.recvPeer >= 0) from.insert(st.recvPeer);
      }
      EXPECT_EQ(to.size(), static_cast<size_t>(ceilLog2(n))) << "n=" << n << " rank " << r;
      EXPECT_EQ(from.size(), static_cast<size_t>(ceilLog2(n))) << "n=" << n << " rank " << r;
    }
  }
}

// 4 hosts x 2 ranks placed round-robin (rank r on host r mod 4): laid out host by host, the first round pairs the
// two ranks of a host and the other two cross hosts, whatever the ranks' numbers.
TEST(Doubling, HostByHostOnlyTheLastRoundsCrossHosts) {
  const int H = 4, P = 2, n = H * P;
  std::vector<int> order;  // the ring order: each host's ranks together
  for (int h = 0; h < H; h++)
    for (int l = 0; l < P; l++) order.push_back(h + l * H);
  auto host = [&](int rank) { return rank % H; };
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather}) {
    const auto all = buildHostSchedules(coll, Algo::kDoubling, n, P, &order, 0, 1);
    ASSERT_EQ(verifyEachWay(all, true), "") << collName(coll);
    for (int r = 0; r < n; r++) {
      const std::vector<int> peers = peersInOrder(all[r]);
      ASSERT_EQ(peers.size(), 3u) << collName(coll) << " rank " << r;
      EXPECT_EQ(host(peers[0]), host(r)) << collName(coll) << " rank " << r;
      EXPECT_NE(host(peers[1]), host(r)) << collName(coll) << " rank " << r;
      EXPECT_NE(host(peers[2]), host(r)) << collName(coll) << " rank " << r;
    }
  }
}

TEST(Doubling, ThousandRanks) {
  for (int n : {1000, 1024})
    EXPECT_EQ(verifyEachWay(buildHostSchedules(Coll::kAllReduce, Algo::kDoubling, n, 8), true), "") << n;
}

// The allreduce sends its value and then combines into it, so its sends must copy (no single copy, no sending by
// address); the allgather never rewrites a block it sent.
TEST(Doubling, AllReduceRewritesWhatItSent) {
  EXPECT_TRUE(algoRewritesSentBlocks(Coll::kAllReduce, Algo::kDoubling));
  EXPECT_FALSE(algoRewritesSentBlocks(Coll::kAllGather, Algo::kDoubling));
  EXPECT_TRUE(algoRewritesSentBlocks(Coll::kAllReduce, Algo::kTree));
  EXPECT_FALSE(algoRewritesSentBlocks(Coll::kAllReduce, Algo::kRing));
  EXPECT_FALSE(algoSupported(Coll::kReduceScatter, Algo::kDoubling, 4));
  EXPECT_FALSE(algoSupported(Coll::kBroadcast, Algo::kDoubling, 4));
}

}  // namespace
}  // namespace chorus
