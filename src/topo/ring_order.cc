#include "topo/ring_order.h"

#include <map>

#include "core/params.h"

namespace chorus {
namespace {

IntParam kRingByHost{"CHORUS_RING_BY_HOST", 1,
                     "1: rings visit the ranks host by host, entering and leaving each host once, whatever the "
                     "rank placement; 0: rings follow rank order.",
                     "tuning"};

}  // namespace

std::vector<int> ringOrderByHost(const std::vector<uint64_t>& hostOf) {
  const int n = static_cast<int>(hostOf.size());
  std::map<uint64_t, int> slot;  // host -> its index in order of first rank
  std::vector<std::vector<int>> hosts;
  for (int r = 0; r < n; r++) {
    auto it = slot.find(hostOf[r]);
    if (it == slot.end()) {
      it = slot.emplace(hostOf[r], static_cast<int>(hosts.size())).first;
      hosts.emplace_back();
    }
    hosts[it->second].push_back(r);
  }
  std::vector<int> order;
  order.reserve(n);
  for (const std::vector<int>& h : hosts) order.insert(order.end(), h.begin(), h.end());
  for (int p = 0; p < n; p++)
    if (order[p] != p) return order;
  return {};
}

bool ringByHostSetting() { return kRingByHost.get() != 0; }

}  // namespace chorus
