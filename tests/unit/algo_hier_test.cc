// Hierarchical allreduce, allgather and reduce-scatter (src/algo/gen_hier.cc) through the symbolic verifier: hosts x
// ranks a host from 1 x n to n x 1, rank placements given as a ring order, in and out of place, several FIFO depths;
// each host's link carries 2(H-1)/H of the buffer (allreduce) or (H-1)/H of the gathered buffer (allgather,
// reduce-scatter) each way; a host count that does not divide the ranks is refused.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"
#include "unit/algo_hosts_util.h"

namespace chorus {
namespace {

const Coll kColls[] = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter};

std::vector<Schedule> buildAll(int n, int perHost, const std::vector<int>* order, Coll coll = Coll::kAllReduce) {
  return buildHostSchedules(coll, Algo::kHier, n, perHost, order, 0, 2);
}

TEST(Hierarchical, EveryShapeInAndOutOfPlace) {
  std::mt19937 rng(5);
  for (auto [H, P] : std::vector<std::pair<int, int>>{
           {2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}, {3, 3}, {5, 3}, {1, 4}, {4, 1}, {1, 1}, {2, 1}, {8, 4}}) {
    const int n = H * P;
    const std::vector<int> shuffled = shuffledOrder(n, rng);
    const std::vector<int>* none = nullptr;
    const std::vector<int>* mixed = &shuffled;
    for (const std::vector<int>* order : {none, mixed})
      for (Coll coll : kColls) {
        ASSERT_EQ(verifyEachWay(buildAll(n, P, order, coll), true), "")
            << collName(coll) << " " << H << " hosts x " << P << (order ? " shuffled" : "");
      }
  }
}

TEST(Hierarchical, ThousandRanks) {
  VerifyOptions opt;
  opt.tiles = 1;
  for (Coll coll : kColls) EXPECT_EQ(verifySchedules(buildAll(1024, 8, nullptr, coll), opt), "") << collName(coll);
}

// What crosses hosts: with hosts of P consecutive positions, the steps that send to another host carry 2(H-1)/H of
// the buffer from each host: 2(H-1) blocks of 1/n each per local rank, P ranks a host.
TEST(Hierarchical, EachHostSendsTheMinimum) {
  const int H = 4, P = 3, n = H * P;
  auto all = buildAll(n, P, nullptr);
  for (int h = 0; h < H; ++h) {
    int blocksOut = 0;  // blocks sent to other hosts by host h's ranks
    for (int l = 0; l < P; ++l)
      for (const Step& st : all[h * P + l].steps)
        if (st.sendPeer >= 0 && st.sendPeer / P != h) blocksOut++;
    // Each block is 1/n of the buffer: 2(H-1)/H of the buffer is 2(H-1) x P blocks.
    EXPECT_EQ(blocksOut, 2 * (H - 1) * P) << "host " << h;
  }
}

// Allgather and reduce-scatter: (H-1)/H of the gathered buffer leaves each host, (H-1) blocks of 1/n from each of its
// P ranks; a ring over all ranks laid host by host sends n-1 blocks over each host boundary.
TEST(Hierarchical, GatherAndScatterSendTheMinimumAcrossHosts) {
  const int H = 4, P = 3, n = H * P;
  for (Coll coll : {Coll::kAllGather, Coll::kReduceScatter}) {
    auto all = buildAll(n, P, nullptr, coll);
    for (int h = 0; h < H; ++h) {
      int blocksOut = 0, blocksIn = 0;
      for (int r = 0; r < n; ++r)
        for (const Step& st : all[r].steps) {
          if (st.sendPeer < 0) continue;
          blocksOut += r / P == h && st.sendPeer / P != h;
          blocksIn += r / P != h && st.sendPeer / P == h;
        }
      EXPECT_EQ(blocksOut, (H - 1) * P) << collName(coll) << " host " << h;
      EXPECT_EQ(blocksIn, (H - 1) * P) << collName(coll) << " host " << h;
    }
  }
}

TEST(Hierarchical, UnevenHostsAreRefused) {
  Schedule s;
  std::string err;
  ScheduleRequest req{Coll::kAllReduce, Algo::kHier, 6, 0, 0, 1, 0, nullptr, 4};
  EXPECT_FALSE(buildSchedule(req, &s, &err));
  EXPECT_NE(err.find("same number of ranks on every host"), std::string::npos) << err;
}

}  // namespace
}  // namespace chorus
