#include "topo/ring_order.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "core/params.h"

namespace chorus {
namespace {

IntParam kRingByHost{"CHORUS_RING_BY_HOST", 1,
                     "1: rings visit the ranks host by host, entering and leaving each host once, whatever the "
                     "rank placement; 0: rings follow rank order.",
                     "tuning"};

IntParam kCrossNic{"NCCL_CROSS_NIC", 2,
                   "Rings over hosts with the same number of ranks: 0 or 2 (NCCL's default), every second host is "
                   "walked backwards, so that each channel leaves a host and enters the next at the same local rank: "
                   "where GPU i of every host uses the same NIC, each crossing stays on one rail (one leaf switch of "
                   "a rail-optimized fabric); over an odd number of hosts one crossing a channel, from the last host "
                   "back to the first, joins two rails. 1: every host walked forwards, each crossing from local rank "
                   "c-1 of a host to local rank c of the next (two rails on every crossing where each GPU has its own "
                   "NIC). Each end of a connection uses the NIC nearest its own GPU either way. Every rank must agree.",
                   "tuning"};

}  // namespace

std::vector<int> ringOrderByHost(const std::vector<uint64_t>& hostOf, const std::vector<int>& numaOf) {
  const int n = static_cast<int>(hostOf.size());
  auto numa = [&](int r) { return r < static_cast<int>(numaOf.size()) ? numaOf[r] : -1; };
  // Each rank sorts by the lowest rank of its host, then by the lowest rank of its (host, NUMA node); the sort is
  // stable, so rank order holds within a node.
  std::map<uint64_t, int> hostFirst;
  std::map<std::pair<uint64_t, int>, int> nodeFirst;
  for (int r = 0; r < n; r++) {
    hostFirst.emplace(hostOf[r], r);
    nodeFirst.emplace(std::make_pair(hostOf[r], numa(r)), r);
  }
  std::vector<std::pair<int, int>> key(n);
  for (int r = 0; r < n; r++) key[r] = {hostFirst[hostOf[r]], nodeFirst[std::make_pair(hostOf[r], numa(r))]};
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key[a] < key[b]; });
  for (int p = 0; p < n; p++)
    if (order[p] != p) return order;
  return {};
}

bool ringByHostSetting() { return kRingByHost.get() != 0; }

bool railAlignedRingsSetting() { return kCrossNic.get() != 1; }

}  // namespace chorus
