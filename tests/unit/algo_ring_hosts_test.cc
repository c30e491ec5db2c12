// Ring channels over hosts (src/algo/generators.cc): over H hosts of P ranks, channel c rotates each host's ranks by
// c mod P, and a rail-aligned ring (NCCL_CROSS_NIC 0 or 2, the default) walks every second host backwards. Through the
// symbolic verifier for every collective a ring runs, on every channel, with and without a shuffled ring order, in and
// out of place, both ways; and the crossings themselves: each channel enters and leaves every host once, on the ranks
// its rotation names, so that P channels cross on each rank once each way, and rail-aligned each crossing joins the
// same local rank of two hosts.
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

const Coll kColls[] = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast, Coll::kReduce};

TEST(RingHosts, EveryCollectiveEveryChannel) {
  std::mt19937 rng(11);
  for (auto [H, P] : std::vector<std::pair<int, int>>{{2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}, {3, 3}, {4, 4}}) {
    const int n = H * P;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled})
      for (Coll coll : kColls) {
        if (!algoSupported(coll, Algo::kRing, n)) continue;
        for (int ch = 0; ch <= P; ch++)
          for (bool railAligned : {true, false}) {
            const int root = collRooted(coll) ? (ch * 5 + 1) % n : 0;
            auto all = buildHostSchedules(coll, Algo::kRing, n, P, order, ch, P + 1, root, railAligned);
            ASSERT_EQ(verifyEachWay(all, algoAliasSafe(coll, Algo::kRing, n, P)), "")
                << collName(coll) << " " << H << " hosts x " << P << " channel " << ch << (order ? " shuffled" : "")
                << (railAligned ? " rail-aligned" : "");
          }
      }
  }
}

// Which rank of each host receives from another host, and which sends to one, in an allgather ring on `channel`.
struct Crossings {
  std::vector<std::vector<int>> in, out;  // [host position] -> ranks
};

Crossings crossings(int H, int P, const std::vector<int>& order, int channel, bool railAligned = true) {
  const int n = H * P;
  std::vector<int> hostOf(n);
  for (int p = 0; p < n; p++) hostOf[order[p]] = p / P;
  Crossings c;
  c.in.assign(H, {});
  c.out.assign(H, {});
  auto all = buildHostSchedules(Coll::kAllGather, Algo::kRing, n, P, &order, channel, 2 * P, 0, railAligned);
  for (int r = 0; r < n; r++) {
    bool in = false, out = false;
    for (const Step& st : all[r].steps) {
      in |= stepRecvs(st.op) && hostOf[st.recvPeer] != hostOf[r];
      out |= stepSends(st.op) && hostOf[st.sendPeer] != hostOf[r];
    }
    if (in) c.in[hostOf[r]].push_back(r);
    if (out) c.out[hostOf[r]].push_back(r);
  }
  return c;
}

TEST(RingHosts, ChannelsCrossOnEveryRank) {
  const int H = 4, P = 8, n = H * P;
  std::mt19937 rng(5);
  const std::vector<int> order = shuffledOrder(n, rng);
  for (bool railAligned : {false, true}) {
    std::vector<int> timesIn(n, 0), timesOut(n, 0);
    for (int ch = 0; ch < P; ch++) {
      Crossings c = crossings(H, P, order, ch, railAligned);
      for (int h = 0; h < H; h++) {
        // Entered at the host's (ch mod P)-th rank of the ring order, left at the one before it; rail-aligned, every
        // second host the other way round.
        int in = ch % P, out = (ch + P - 1) % P;
        if (railAligned && h % 2 == 1) std::swap(in, out);
        ASSERT_EQ(c.in[h], std::vector<int>{order[h * P + in]}) << "channel " << ch << " host " << h;
        ASSERT_EQ(c.out[h], std::vector<int>{order[h * P + out]}) << "channel " << ch << " host " << h;
        timesIn[c.in[h][0]]++;
        timesOut[c.out[h][0]]++;
      }
    }
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(timesIn[r], 1) << "rank " << r << (railAligned ? " rail-aligned" : "");
      EXPECT_EQ(timesOut[r], 1) << "rank " << r << (railAligned ? " rail-aligned" : "");
    }
    // Channel P wraps round to channel 0's ring.
    EXPECT_EQ(channelKinds(Algo::kRing, n, P), P);
    Crossings c0 = crossings(H, P, order, 0, railAligned), cP = crossings(H, P, order, P, railAligned);
    EXPECT_EQ(c0.in, cP.in);
    EXPECT_EQ(c0.out, cP.out);
  }
}

// The local rank (index among its host's ranks in the ring order) at each end of every crossing of a ring channel:
// how many crossings join two different local ranks, and so two rails where GPU i of every host uses the same NIC.
int crossingsBetweenRails(int H, int P, const std::vector<int>& order, int channel, bool railAligned) {
  const int n = H * P;
  std::vector<int> hostOf(n), localOf(n);
  for (int p = 0; p < n; p++) hostOf[order[p]] = p / P, localOf[order[p]] = p % P;
  int crossings = 0, between = 0;
  for (const Schedule& s : buildHostSchedules(Coll::kAllReduce, Algo::kRing, n, P, &order, channel, P, 0, railAligned))
    for (const Step& st : s.steps)
      if (stepSends(st.op) && hostOf[st.sendPeer] != hostOf[s.rank]) {
        crossings++;
        between += localOf[st.sendPeer] != localOf[s.rank];
        break;  // a ring rank sends to one peer: count it once
      }
  EXPECT_EQ(crossings, H) << H << " hosts x " << P << " channel " << channel;
  return between;
}

TEST(RingHosts, RailAlignedCrossingsJoinOneLocalRank) {
  std::mt19937 rng(17);
  for (int H : {2, 3, 4, 5, 8})
    for (int P : {2, 3, 4, 8}) {
      const std::vector<int> order = shuffledOrder(H * P, rng);
      for (int ch = 0; ch < P; ch++) {
        // Rail-aligned: every crossing over an even number of hosts; over an odd number all but the one from the last
        // host back to the first.
        EXPECT_EQ(crossingsBetweenRails(H, P, order, ch, true), H % 2) << H << " hosts x " << P << " channel " << ch;
        // Not: every crossing joins local rank c-1 to local rank c.
        EXPECT_EQ(crossingsBetweenRails(H, P, order, ch, false), H) << H << " hosts x " << P << " channel " << ch;
      }
    }
}

// One host, or hosts of unequal size (localRanks 0): every channel runs the one ring.
TEST(RingHosts, OneRingWithoutEqualHosts) {
  for (int localRanks : {0, 6}) {
    EXPECT_EQ(channelKinds(Algo::kRing, 6, localRanks), 1);
    auto ch0 = buildHostSchedules(Coll::kAllReduce, Algo::kRing, 6, localRanks, nullptr, 0, 4);
    auto ch3 = buildHostSchedules(Coll::kAllReduce, Algo::kRing, 6, localRanks, nullptr, 3, 4);
    for (int r = 0; r < 6; r++) {
      ASSERT_EQ(ch0[r].steps.size(), ch3[r].steps.size());
      for (size_t i = 0; i < ch0[r].steps.size(); i++) {
        EXPECT_EQ(ch0[r].steps[i].sendPeer, ch3[r].steps[i].sendPeer) << "rank " << r << " step " << i;
        EXPECT_EQ(ch0[r].steps[i].recvPeer, ch3[r].steps[i].recvPeer) << "rank " << r << " step " << i;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
