// Shared by the tests of schedules over hosts (hierarchical, rail, node-aware trees): every rank's schedule of one
// collective on one channel, and a random placement of ranks as a ring order.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/verify.h"

namespace chorus {

/// Every rank's schedule of `coll` with `algo` over hosts of localRanks ranks (0: one host) on `channel` of
/// nChannels (rings rail-aligned or not: ScheduleRequest::railAligned); a rank whose schedule does not build fails the
/// calling test.
inline std::vector<Schedule> buildHostSchedules(Coll coll, Algo algo, int n, int localRanks,
                                                const std::vector<int>* order = nullptr, int channel = 0,
                                                int nChannels = 4, int root = 0, bool railAligned = true) {
  std::vector<Schedule> all(n);
  for (int r = 0; r < n; ++r) {
    std::string err;
    ScheduleRequest req{coll, algo, n, r, channel, nChannels, root, order, localRanks, railAligned};
    EXPECT_TRUE(buildSchedule(req, &all[r], &err)) << err;
  }
  return all;
}

/// A random permutation of 0..n-1: ranks placed on hosts in no particular order.
inline std::vector<int> shuffledOrder(int n, std::mt19937& rng) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

/// The verifier's verdict out of place and (when inPlaceToo) in place, at FIFO depths 2 and 3: "" when every way
/// passes, else the first failure, saying which way.
inline std::string verifyEachWay(const std::vector<Schedule>& all, bool inPlaceToo, int tiles = 2) {
  for (bool inPlace : {false, true}) {
    if (inPlace && !inPlaceToo) continue;
    for (int depth : {2, 3}) {
      VerifyOptions opt;
      opt.inPlace = inPlace;
      opt.fifoDepth = depth;
      opt.tiles = tiles;
      std::string why = verifySchedules(all, opt);
      if (!why.empty())
        return why + (inPlace ? " (in place" : " (out of place") + ", depth " + std::to_string(depth) + ")";
    }
  }
  return "";
}

}  // namespace chorus
