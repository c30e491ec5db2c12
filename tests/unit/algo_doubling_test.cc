// Recursive-doubling allreduce and allgather (src/algo/gen_doubling.cc): verified symbolically over hosts and
// placements, and held to what they are for: ceil(log2 n) rounds a rank, and laid host by host over hosts of a power
// of two ranks, only the last log2(hosts) rounds cross hosts.
#include <gtest/gtest.h>

#include <algorithm>
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
  std::mt19937 rng(5);
  for (int n = 2; n <= 40; n++) {
    const bool pow2 = (n & (n - 1)) == 0;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled}) {
      const auto all = buildHostSchedules(Coll::kAllGather, Algo::kDoubling, n, 0, order);
      int widest = 1;
      for (int r = 0; r < n; r++) {
        // n-1 blocks in, n-1 out, and the own block copied: the same bytes as the ring, in ceil(log2 n) rounds. A
        // round is one message each way (two for Bruck's rounds that wrap past the last rank), in any placement.
        size_t sent = 0, received = 0, sends = 0, recvs = 0, copies = 0;
        std::set<int> to, from;
        for (const Step& st : all[r].steps) {
          widest = std::max<int>(widest, st.span);
          EXPECT_LE(st.span, spanBound(Coll::kAllGather, Algo::kDoubling, n)) << "n=" << n << " rank " << r;
          if (st.op == StepOp::kSend) sent += st.span, sends++, to.insert(st.sendPeer);
          if (st.op == StepOp::kRecv) received += st.span, recvs++, from.insert(st.recvPeer);
          if (st.op == StepOp::kCopy) copies++;
        }
        ASSERT_EQ(sent, static_cast<size_t>(n - 1)) << "n=" << n << " rank " << r << "\n" << formatSchedule(all[r]);
        ASSERT_EQ(received, static_cast<size_t>(n - 1)) << "n=" << n << " rank " << r;
        EXPECT_EQ(copies, 1u);
        EXPECT_EQ(sends + recvs + copies, all[r].steps.size());
        EXPECT_EQ(to.size(), static_cast<size_t>(ceilLog2(n))) << "n=" << n << " rank " << r;
        EXPECT_EQ(from.size(), static_cast<size_t>(ceilLog2(n))) << "n=" << n << " rank " << r;
        // Rank order whatever the placement (a shuffled ring order is not followed).
        const size_t most = pow2 ? ceilLog2(n) : 2 * ceilLog2(n);
        EXPECT_LE(sends, most) << "n=" << n << " rank " << r << "\n" << formatSchedule(all[r]);
        EXPECT_LE(recvs, most) << "n=" << n << " rank " << r;
        if (pow2) {
          EXPECT_EQ(sends, static_cast<size_t>(ceilLog2(n))) << "n=" << n << " rank " << r;
        }
      }
      // The bound the planner divides tiles by is reached, so it is no looser than it needs to be.
      EXPECT_EQ(widest, spanBound(Coll::kAllGather, Algo::kDoubling, n)) << "n=" << n;
    }
  }
  EXPECT_EQ(spanBound(Coll::kAllReduce, Algo::kDoubling, 64), 1);
  EXPECT_EQ(spanBound(Coll::kAllGather, Algo::kRing, 64), 1);
  EXPECT_EQ(spanBound(Coll::kAllGather, Algo::kDoubling, 8), 4);
  EXPECT_EQ(spanBound(Coll::kAllGather, Algo::kDoubling, 7), 3);
}

// 4 hosts x 2 ranks placed round-robin (rank r on host r mod 4): the allreduce, laid out host by host, pairs the two
// ranks of a host in its first round and crosses hosts in the other two, whatever the ranks' numbers. The allgather
// keeps rank order, so that every round is one message: there the first two rounds cross hosts, carrying 1 and 2
// blocks, and the last, of 4 blocks, stays within a host.
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
      const bool gather = coll == Coll::kAllGather;
      EXPECT_EQ(host(peers[0]) == host(r), !gather) << collName(coll) << " rank " << r;
      EXPECT_NE(host(peers[1]), host(r)) << collName(coll) << " rank " << r;
      EXPECT_EQ(host(peers[2]) == host(r), gather) << collName(coll) << " rank " << r;
      if (gather) {
        for (int k = 0; k < 3; k++) EXPECT_EQ(peers[k], r ^ (1 << k)) << "rank " << r;
        EXPECT_EQ(all[r].steps.size(), 7u) << formatSchedule(all[r]);  // a copy, and a message each way a round
      }
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
