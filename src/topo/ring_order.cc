#include "topo/ring_order.h"

#include <map>
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
  // (host, NUMA node) -> its group, groups in order of first rank; a host's groups then sit together.
  std::map<uint64_t, std::vector<int>> hostGroups;  // host -> its groups, in order of first rank
  std::map<std::pair<uint64_t, int>, int> slot;
  std::vector<uint64_t> hostOrder;
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < n; r++) {
    const int numa = r < static_cast<int>(numaOf.size()) ? numaOf[r] : -1;
    auto key = std::make_pair(hostOf[r], numa);
    auto it = slot.find(key);
    if (it == slot.end()) {
      it = slot.emplace(key, static_cast<int>(groups.size())).first;
      groups.emplace_back();
      if (hostGroups[hostOf[r]].empty()) hostOrder.push_back(hostOf[r]);
      hostGroups[hostOf[r]].push_back(it->second);
    }
    groups[it->second].push_back(r);
  }
  std::vector<int> order;
  order.reserve(n);
  for (uint64_t h : hostOrder)
    for (int g : hostGroups[h]) order.insert(order.end(), groups[g].begin(), groups[g].end());
  for (int p = 0; p < n; p++)
    if (order[p] != p) return order;
  return {};
}

bool ringByHostSetting() { return kRingByHost.get() != 0; }

}  // namespace chorus
