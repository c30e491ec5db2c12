// Rings laid host by host (topo/ring_order.h) and ring schedules in any order (ScheduleRequest::ringOrder): the
// order groups each host's ranks, and every ring collective in a permuted order passes the symbolic verifier, in
// and out of place, with its peers and the rank's own blocks where the order says.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"
#include "topo/ring_order.h"

namespace chorus {
namespace {

TEST(RingOrder, GroupsEachHostsRanks) {
  // Round-robin over 3 hosts: rank r on host r % 3.
  EXPECT_EQ(ringOrderByHost({10, 11, 12, 10, 11, 12}), (std::vector<int>{0, 3, 1, 4, 2, 5}));
  // Hosts in the order of their lowest rank, whatever their hash.
  EXPECT_EQ(ringOrderByHost({9, 1, 1, 9, 5}), (std::vector<int>{0, 3, 1, 2, 4}));
  // Already host by host, one host, one rank per host: rank order, said as an empty order.
  EXPECT_TRUE(ringOrderByHost({7, 7, 8, 8, 8, 9}).empty());
  EXPECT_TRUE(ringOrderByHost({7, 7, 7}).empty());
  EXPECT_TRUE(ringOrderByHost({1, 2, 3, 4}).empty());
  EXPECT_TRUE(ringOrderByHost({}).empty());
}

TEST(RingOrder, GroupsEachHostsRanksByNumaNode) {
  // One host whose GPUs alternate between two sockets (ranks on GPUs 0, 4, 1, 5, ...): each socket's ranks together.
  EXPECT_EQ(ringOrderByHost({7, 7, 7, 7, 7, 7, 7, 7}, {0, 1, 0, 1, 0, 1, 0, 1}),
            (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  // Nodes in the order of their lowest rank.
  EXPECT_EQ(ringOrderByHost({7, 7, 7, 7}, {1, 0, 1, 0}), (std::vector<int>{0, 2, 1, 3}));
  // Round-robin over two hosts, each with two sockets: hosts first, then nodes within each.
  EXPECT_EQ(ringOrderByHost({1, 2, 1, 2, 1, 2, 1, 2}, {0, 0, 1, 1, 0, 0, 1, 1}),
            (std::vector<int>{0, 4, 2, 6, 1, 5, 3, 7}));
  // Unknown nodes (-1: no GPU, or no topology) and none given leave each host's ranks in rank order.
  EXPECT_EQ(ringOrderByHost({1, 2, 1, 2}, {-1, -1, -1, -1}), ringOrderByHost({1, 2, 1, 2}));
  EXPECT_EQ(ringOrderByHost({1, 2, 1, 2}, {-1, -1, -1, -1}), (std::vector<int>{0, 2, 1, 3}));
  // Already grouped by host and node: rank order, said as an empty order.
  EXPECT_TRUE(ringOrderByHost({7, 7, 7, 7}, {0, 0, 1, 1}).empty());
  EXPECT_TRUE(ringOrderByHost({7, 7, 8, 8}, {0, 1, 0, 1}).empty());
}

// Hosts a ring in `order` crosses into: with ranks grouped, exactly the number of hosts (when more than one).
int hostCrossings(const std::vector<int>& order, const std::vector<uint64_t>& hostOf) {
  int c = 0;
  for (size_t p = 0; p < order.size(); p++) c += hostOf[order[p]] != hostOf[order[(p + 1) % order.size()]];
  return c;
}

TEST(RingOrder, EntersAndLeavesEachHostOnce) {
  std::mt19937 rng(7);
  for (int hosts : {2, 3, 8}) {
    for (int perHost : {1, 2, 4, 8}) {
      const int n = hosts * perHost;
      std::vector<uint64_t> hostOf(n);
      for (int r = 0; r < n; r++) hostOf[r] = 100 + r % hosts;  // round-robin
      std::shuffle(hostOf.begin(), hostOf.end(), rng);          // and any other placement
      std::vector<int> order = ringOrderByHost(hostOf);
      if (order.empty()) {
        order.resize(n);
        std::iota(order.begin(), order.end(), 0);
      }
      std::vector<int> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int r = 0; r < n; r++) ASSERT_EQ(sorted[r], r);
      EXPECT_EQ(hostCrossings(order, hostOf), hosts) << hosts << " hosts x " << perHost;
    }
  }
}

std::vector<Schedule> buildAll(Coll coll, int n, int root, const std::vector<int>& order, Algo algo = Algo::kRing,
                               int channel = 0) {
  std::vector<Schedule> all(n);
  for (int r = 0; r < n; ++r) {
    std::string err;
    ScheduleRequest req{coll, algo, n, r, channel, 2, root, &order};
    EXPECT_TRUE(buildSchedule(req, &all[r], &err)) << err;
  }
  return all;
}

void verifyOrder(int n, const std::vector<int>& order, int tiles = 2) {
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast, Coll::kReduce}) {
    std::vector<int> roots = collRooted(coll) ? std::vector<int>{0, n / 2, n - 1} : std::vector<int>{0};
    for (int root : roots)
      for (bool inPlace : {false, true}) {
        VerifyOptions opt;
        opt.inPlace = inPlace;
        opt.tiles = tiles;
        std::string verdict = verifySchedules(buildAll(coll, n, root, order), opt);
        ASSERT_EQ(verdict, "") << collName(coll) << " n=" << n << " root " << root << (inPlace ? " in place" : "");
      }
  }
}

TEST(RingOrder, EveryRingCollectiveInRandomOrders) {
  std::mt19937 rng(11);
  for (int n : {2, 3, 4, 5, 8, 13, 32}) {
    for (int k = 0; k < 3; k++) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      verifyOrder(n, order);
    }
  }
}

// Trees are built over the same order: every tree collective, both trees of the double binary tree, any root.
TEST(RingOrder, TreesInRandomOrders) {
  std::mt19937 rng(13);
  for (int n : {2, 3, 5, 8, 13, 32}) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (Coll coll : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce})
      for (int channel : {0, 1})
        for (int root : collRooted(coll) ? std::vector<int>{0, n / 2, n - 1} : std::vector<int>{0})
          for (bool inPlace : {false, true}) {
            VerifyOptions opt;
            opt.inPlace = inPlace;
            opt.tiles = 2;
            ASSERT_EQ(verifySchedules(buildAll(coll, n, root, order, Algo::kTree, channel), opt), "")
                << collName(coll) << " n=" << n << " channel " << channel << " root " << root
                << (inPlace ? " in place" : "");
          }
  }
}

// Ranks placed round-robin over 8 hosts of 8: a tree in rank order crosses hosts on nearly every edge; over the
// host-by-host order, only where a subtree spans two hosts.
TEST(RingOrder, TreesOverTheHostOrderStayWithinHosts) {
  const int n = 64, hosts = 8;
  std::vector<uint64_t> hostOf(n);
  for (int r = 0; r < n; r++) hostOf[r] = r % hosts;
  std::vector<int> rankOrder(n);
  std::iota(rankOrder.begin(), rankOrder.end(), 0);
  auto crossingEdges = [&](const std::vector<int>& order) {
    int edges = 0;
    for (const Schedule& s : buildAll(Coll::kAllReduce, n, 0, order, Algo::kTree, 0))
      for (const Step& st : s.steps)
        if (st.sendPeer >= 0 && hostOf[st.sendPeer] != hostOf[s.rank]) edges++;
    return edges;
  };
  const int flat = crossingEdges(rankOrder), byHost = crossingEdges(ringOrderByHost(hostOf));
  // 63 edges, each used up and down: in rank order all but the edges 8 labels apart cross.
  EXPECT_GE(flat, 100) << "rank order";
  EXPECT_LE(byHost, 2 * 2 * (hosts - 1)) << "host order: at most two edges a host";
  EXPECT_LT(byHost * 4, flat) << byHost;
}

TEST(RingOrder, LargeRoundRobinPlacement) {
  const int n = 1024, hosts = 128;
  std::vector<uint64_t> hostOf(n);
  for (int r = 0; r < n; r++) hostOf[r] = r % hosts;
  std::vector<int> order = ringOrderByHost(hostOf);
  ASSERT_EQ(order.size(), size_t(n));
  VerifyOptions opt;
  opt.tiles = 1;
  EXPECT_EQ(verifySchedules(buildAll(Coll::kAllReduce, n, 0, order), opt), "");
}

// The neighbours are the order's, and the rank's own blocks stay its own.
TEST(RingOrder, PeersAndOwnBlocksFollowTheOrder) {
  const std::vector<int> order = {0, 3, 1, 4, 2, 5};
  std::vector<Schedule> ar = buildAll(Coll::kAllReduce, 6, 0, order);
  // Rank 3 sits between rank 0 and rank 1.
  for (const Step& st : ar[3].steps) {
    if (st.sendPeer >= 0) {
      EXPECT_EQ(st.sendPeer, 1);
    }
    if (st.recvPeer >= 0) {
      EXPECT_EQ(st.recvPeer, 0);
    }
  }
  std::vector<Schedule> ag = buildAll(Coll::kAllGather, 6, 0, order);
  bool ownCopy = false;
  for (const Step& st : ag[4].steps)
    ownCopy |= st.op == StepOp::kCopy && st.dst.buf == Buf::kOutput && st.dst.block == 4;
  EXPECT_TRUE(ownCopy) << "rank 4's input must land in its own output block";
}

TEST(RingOrder, AnOrderThatIsNotAPermutationIsRefused) {
  Schedule s;
  std::string err;
  for (const std::vector<int>& bad : {std::vector<int>{0, 1, 1}, std::vector<int>{0, 1}, std::vector<int>{0, 1, 3}}) {
    ScheduleRequest req{Coll::kAllReduce, Algo::kRing, 3, 0, 0, 1, 0, &bad};
    EXPECT_FALSE(buildSchedule(req, &s, &err));
    EXPECT_NE(err.find("not a permutation"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace chorus
