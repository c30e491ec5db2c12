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

}  // namespace chorus
