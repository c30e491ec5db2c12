// Node-aware trees (src/algo/gen_tree.cc, ScheduleRequest::localRanks): the double binary tree over hosts with a
// chain inside each host. Verified symbolically for every shape, root, channel kind and rank placement, in and out of
// place; each tree enters and leaves every host once; its trees enter hosts at different ranks, and the channels'
// rotations (src/algo/generators.cc) put the entries on every rank of a host; and one host or one rank a host gives
// exactly the flat tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"
#include "unit/algo_hosts_util.h"

namespace chorus {
namespace {

const Coll kColls[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce};

const std::vector<std::pair<int, int>> kShapes = {{2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4},
                                                  {3, 3}, {5, 3}, {8, 4}, {8, 8}};

std::vector<Schedule> buildAll(Coll coll, int n, int localRanks, int channel, int root,
                               const std::vector<int>* order = nullptr) {
  return buildHostSchedules(coll, Algo::kTree, n, localRanks, order, channel, 64, root);
}

// The channels that build different trees over hosts of P ranks: 0 .. channelKinds - 1.
std::vector<int> kindsOf(int n, int P) {
  std::vector<int> ch(static_cast<size_t>(channelKinds(Algo::kTree, n, P)));
  std::iota(ch.begin(), ch.end(), 0);
  return ch;
}

// The local rank (position within its host in the ring order) where channel c's tree crosses hosts: tree A (even c)
// at c mod P, tree B (odd c) at P - c mod P.
int entryOf(int channel, int P) { return channel % 2 == 0 ? channel % P : (P - channel % P) % P; }

// The host of each rank: its ring position (rank itself without an order) divided by P.
std::vector<int> hostOf(int n, int P, const std::vector<int>* order) {
  std::vector<int> host(n);
  for (int p = 0; p < n; ++p) host[order ? (*order)[p] : p] = p / P;
  return host;
}

std::string what(Coll coll, int H, int P, int channel, int root, const std::vector<int>* order) {
  return std::string(collName(coll)) + " " + std::to_string(H) + " hosts x " + std::to_string(P) + " channel " +
         std::to_string(channel) + " root " + std::to_string(root) + (order ? " shuffled" : "");
}

TEST(NodeAwareTree, OneHostOrOneRankAHostIsTheFlatTree) {
  std::mt19937 rng(11);
  for (int n : {1, 2, 3, 4, 6, 8, 9, 16}) {
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled})
      for (Coll coll : kColls)
        for (int channel : {0, 1, 2, 3})
          for (int root = 0; root < (collRooted(coll) ? n : 1); ++root) {
            const auto flat = buildAll(coll, n, 0, channel, root, order);
            for (int P : {1, n}) {
              const auto same = buildAll(coll, n, P, channel, root, order);
              for (int r = 0; r < n; ++r)
                ASSERT_EQ(formatSchedule(same[r]), formatSchedule(flat[r]))
                    << collName(coll) << " n=" << n << " localRanks " << P << " channel " << channel << " root " << root
                    << (order ? " shuffled" : "") << " rank " << r;
            }
          }
  }
}

TEST(NodeAwareTree, VerifiedEveryShapeRootAndPlacement) {
  std::mt19937 rng(7);
  for (auto [H, P] : kShapes) {
    const int n = H * P;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled})
      for (Coll coll : kColls)
        for (int channel : kindsOf(n, P))
          for (int root = 0; root < (collRooted(coll) ? n : 1); ++root) {
            ASSERT_EQ(verifyEachWay(buildAll(coll, n, P, channel, root, order), true, 3), "")
                << what(coll, H, P, channel, root, order);
          }
  }
}

TEST(NodeAwareTree, ThousandRanks) {
  const int H = 128, P = 8, n = H * P;
  std::mt19937 rng(3);
  const std::vector<int> shuffled = shuffledOrder(n, rng);
  VerifyOptions opt;
  opt.tiles = 2;
  for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled})
    for (int channel : {0, 1, 2, 5}) {
      EXPECT_EQ(verifySchedules(buildAll(Coll::kAllReduce, n, P, channel, 0, order), opt), "")
          << what(Coll::kAllReduce, H, P, channel, 0, order);
      for (Coll coll : {Coll::kBroadcast, Coll::kReduce})
        for (int root : {0, 517, n - 1})
          EXPECT_EQ(verifySchedules(buildAll(coll, n, P, channel, root, order), opt), "")
              << what(coll, H, P, channel, root, order);
    }
}

// Cross-host messages of one collective on one channel, split by phase: up (partials towards the root) and down
// (the result away from it). Per host: sends out in the up phase, receives from outside in the down phase.
struct Crossings {
  int up = 0, down = 0;
  std::vector<int> upOut, downIn;
};

Crossings countCrossings(const std::vector<Schedule>& all, const std::vector<int>& host, int H) {
  Crossings c;
  c.upOut.assign(H, 0);
  c.downIn.assign(H, 0);
  for (size_t r = 0; r < all.size(); ++r) {
    // A rank's down phase starts where it receives the result (plain receive) or produces it (the root's final step).
    bool down = all[r].coll == Coll::kBroadcast;
    for (const Step& st : all[r].steps) {
      down |= st.final || st.op == StepOp::kRecv || st.op == StepOp::kRecvCopySend;
      if (!stepSends(st.op) || host[st.sendPeer] == host[r]) continue;
      if (down) {
        c.down++;
        c.downIn[host[st.sendPeer]]++;
      } else {
        c.up++;
        c.upOut[host[r]]++;
      }
    }
  }
  return c;
}

TEST(NodeAwareTree, EachTreeEntersAndLeavesEveryHostOnce) {
  std::mt19937 rng(9);
  for (auto [H, P] : kShapes) {
    const int n = H * P;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &shuffled}) {
      const std::vector<int> host = hostOf(n, P, order);
      for (Coll coll : kColls)
        for (int channel : kindsOf(n, P))
          for (int root = 0; root < (collRooted(coll) ? n : 1); ++root) {
            const Crossings c = countCrossings(buildAll(coll, n, P, channel, root, order), host, H);
            const std::string w = what(coll, H, P, channel, root, order);
            const bool up = coll != Coll::kBroadcast, down = coll != Coll::kReduce;
            ASSERT_EQ(c.up, up ? H - 1 : 0) << w;
            ASSERT_EQ(c.down, down ? H - 1 : 0) << w;
            // At most once a host, H-1 in all: every host but one (the root's) sends one partial out and takes the
            // result in once, and allreduce's tree enters a host where it leaves it.
            for (int h = 0; h < H; ++h) {
              ASSERT_LE(c.upOut[h], 1) << w << " host " << h;
              ASSERT_LE(c.downIn[h], 1) << w << " host " << h;
              if (up && down) {
                ASSERT_EQ(c.upOut[h], c.downIn[h]) << w << " host " << h;
              }
            }
            if (collRooted(coll)) {
              ASSERT_EQ(c.upOut[host[root]] + c.downIn[host[root]], 0) << w;
            }
          }
    }
  }
}

// The figure docs/algorithms.md quotes: 8 hosts x 8 laid host by host, allreduce over both trees. The flat tree over
// positions crosses hosts on 22 of its 126 edges, the node-aware tree on 2 x 7.
TEST(NodeAwareTree, FewerCrossingsThanTheFlatTree) {
  const int H = 8, P = 8, n = H * P;
  const std::vector<int> host = hostOf(n, P, nullptr);
  int flat = 0, aware = 0;
  for (int channel : {0, 1}) {
    flat += countCrossings(buildAll(Coll::kAllReduce, n, 0, channel, 0), host, H).up;
    aware += countCrossings(buildAll(Coll::kAllReduce, n, P, channel, 0), host, H).up;
  }
  EXPECT_EQ(flat, 22);
  EXPECT_EQ(aware, 2 * (H - 1));
}

// On channels 0 and 1, tree A crosses hosts at local rank 0 only and tree B at local rank P-1 only, and each further
// channel at the rank its rotation names (entryOf); the parents read off the reduce schedules (each rank's one send
// upwards) form a tree of arity at most 3 whose depth is the host tree's plus a chain.
TEST(NodeAwareTree, TreesEnterHostsAtDifferentRanksWithUpToThreeChildren) {
  EXPECT_EQ(entryOf(0, 8), 0);
  EXPECT_EQ(entryOf(1, 8), 7);
  for (auto [H, P] : kShapes) {
    const int n = H * P;
    for (int channel : kindsOf(n, P)) {
      const int entry = entryOf(channel, P);
      for (const Schedule& s : buildAll(Coll::kAllReduce, n, P, channel, 0))
        for (const Step& st : s.steps) {
          const bool across = (st.sendPeer >= 0 && st.sendPeer / P != s.rank / P) ||
                              (st.recvPeer >= 0 && st.recvPeer / P != s.rank / P);
          EXPECT_FALSE(across && s.rank % P != entry) << H << "x" << P << " channel " << channel << " rank " << s.rank;
        }
      for (int root : {0, n / 2 + 1, n - 1}) {
        std::vector<int> parent(n, -1), children(n, 0);
        for (const Schedule& s : buildAll(Coll::kReduce, n, P, channel, root))
          for (const Step& st : s.steps)
            if (stepSends(st.op)) {
              ASSERT_EQ(parent[s.rank], -1) << "rank " << s.rank << " sends twice";
              parent[s.rank] = st.sendPeer;
              children[st.sendPeer]++;
            }
        int maxDepth = 0, threes = 0;
        for (int r = 0; r < n; ++r) {
          EXPECT_LE(children[r], 3);
          threes += children[r] == 3;
          int depth = 0;
          for (int x = r; parent[x] >= 0 && depth <= n; x = parent[x]) depth++;
          ASSERT_LE(depth, n) << "cycle through rank " << r;
          maxDepth = std::max(maxDepth, depth);
        }
        EXPECT_EQ(parent[root], -1);
        EXPECT_LE(maxDepth, 2 * static_cast<int>(std::ceil(std::log2(H + 1))) + 1 + (P - 1));
        if (H >= 4) {
          EXPECT_GT(threes, 0) << H << "x" << P << ": no entry with two remote children and a chain";
        }
      }
    }
  }
}

// Over hosts of 8 ranks in a shuffled order, 8 channels' trees cross hosts on every rank of every host exactly once
// (tree A on channels 0, 2, 4, 6 at local ranks 0, 2, 4, 6; tree B on 1, 3, 5, 7 at 7, 5, 3, 1), so where each rank
// uses its own NIC the trees' traffic spreads over all of a host's NICs; channel 8 builds channel 0's tree again.
// Hosts of 2 ranks keep the two trees as they were (entries 0 and 1), and odd P takes 2P channels to cover.
TEST(NodeAwareTree, ChannelsEnterHostsAtEveryRank) {
  const int H = 4, P = 8, n = H * P;
  std::mt19937 rng(13);
  const std::vector<int> order = shuffledOrder(n, rng);
  const std::vector<int> host = hostOf(n, P, &order);
  ASSERT_EQ(channelKinds(Algo::kTree, n, P), P);
  std::vector<int> crossing(n, 0);
  for (int channel = 0; channel < P; ++channel) {
    std::vector<char> crosses(n, 0);
    for (const Schedule& s : buildAll(Coll::kAllReduce, n, P, channel, 0, &order))
      for (const Step& st : s.steps)
        if ((st.sendPeer >= 0 && host[st.sendPeer] != host[s.rank]) ||
            (st.recvPeer >= 0 && host[st.recvPeer] != host[s.rank]))
          crosses[s.rank] = 1;
    for (int h = 0; h < H; ++h)
      for (int l = 0; l < P; ++l) {
        const int r = order[h * P + l];
        EXPECT_EQ(crosses[r] != 0, l == entryOf(channel, P))
            << "channel " << channel << " host " << h << " local " << l;
        crossing[r] += crosses[r];
      }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(crossing[r], 1) << "rank " << r;
  const auto c0 = buildAll(Coll::kAllReduce, n, P, 0, 0, &order), c8 = buildAll(Coll::kAllReduce, n, P, P, 0, &order);
  // The same steps (the header line names the channel).
  auto steps = [](const Schedule& s) {
    const std::string f = formatSchedule(s);
    return f.substr(f.find('\n'));
  };
  for (int r = 0; r < n; ++r) EXPECT_EQ(steps(c0[r]), steps(c8[r])) << "rank " << r;
  EXPECT_EQ(channelKinds(Algo::kTree, 8, 2), 2);
  EXPECT_EQ(channelKinds(Algo::kTree, 9, 3), 6);
  EXPECT_EQ(channelKinds(Algo::kTree, 8, 0), 2);
  std::vector<int> entries;
  for (int channel = 0; channel < 6; ++channel) entries.push_back(entryOf(channel, 3));
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<int>{0, 0, 1, 1, 2, 2}));
}

// Reduce off the root keeps a partial in the output where a rank has several children: an entry with remote
// children needs scratch, a rank inside a chain does not.
TEST(NodeAwareTree, ReduceScratchOnlyWhereSeveralChildren) {
  const int H = 4, P = 3, n = H * P;
  const auto all = buildAll(Coll::kReduce, n, P, 0, 0);
  // Tree A over 4 hosts: host 2 is interior (children 1 and 3), so its entry, local rank 0, has three children.
  EXPECT_TRUE(scheduleUses(all[2 * P], Buf::kOutput));
  EXPECT_EQ(all[2 * P].steps.size(), 3u);
  EXPECT_FALSE(scheduleUses(all[2 * P + 1], Buf::kOutput));
  EXPECT_FALSE(scheduleUses(all[2 * P + 2], Buf::kOutput));
}

}  // namespace
}  // namespace chorus
