#include "topo/nic_choice.h"

#include <strings.h>

#include <algorithm>
#include <cstdlib>

#include "core/params.h"

namespace chorus {

namespace {

StrParam kNetDevsPolicy{"NCCL_NETDEVS_POLICY", "AUTO",
                        "How many of the NICs nearest its GPU a rank's connections between hosts use, as in NCCL "
                        "2.28: AUTO, those NICs divided among the GPUs nearest them (two GPUs and two NICs under one "
                        "PCI switch: one each); ALL, every one; MAX:N, at most N. Ranks without a GPU use every "
                        "device (docs/net.md).",
                        "transports"};

// The devices at GPU g's nearest class and that class (kNone, and no devices, when the topology
// places none of them). nicOf maps a device to its topology NIC, -1 when unplaced.
std::vector<int> nearestDevices(const HostTopology& t, int g, const std::vector<int>& nicOf, PathClass* best) {
  *best = PathClass::kNone;
  for (int n : nicOf)
    if (n >= 0) *best = std::min(*best, t.gpuNic(g, n));
  std::vector<int> near;
  if (*best == PathClass::kNone) return near;
  for (size_t d = 0; d < nicOf.size(); d++)
    if (nicOf[d] >= 0 && t.gpuNic(g, nicOf[d]) == *best) near.push_back(static_cast<int>(d));
  // In the topology's NIC order (PCI order), so that every host of one kind pairs a GPU with the same NIC whatever
  // order its net lists them in.
  std::stable_sort(near.begin(), near.end(), [&](int a, int b) { return nicOf[a] < nicOf[b]; });
  return near;
}

NicChoice everyDevice(size_t ndev, std::string why) {
  NicChoice c;
  for (size_t d = 0; d < ndev; d++) c.order.push_back(static_cast<int>(d));
  c.classes.assign(ndev, PathClass::kNone);
  c.why = std::move(why);
  return c;
}

// The GPUs nearest topology NIC n: those at the nearest class any GPU is from it (NCCL's ncclTopoGetLocal from a NIC).
int gpusNearestNic(const HostTopology& t, int n) {
  PathClass best = PathClass::kNone;
  for (size_t g = 0; g < t.gpus.size(); g++) best = std::min(best, t.gpuNic(static_cast<int>(g), n));
  int count = 0;
  for (size_t g = 0; g < t.gpus.size(); g++) count += t.gpuNic(static_cast<int>(g), n) == best ? 1 : 0;
  return std::max(1, count);
}

// chooseNics for the GPU at index g of the topology.
NicChoice chooseNicsOfGpu(const HostTopology& t, int g,
                          const std::vector<std::pair<std::string, std::string>>& namesAndPaths,
                          const NetDevsPolicy& policy) {
  std::vector<int> nicOf;
  for (const auto& [name, path] : namesAndPaths) nicOf.push_back(topologyNicIndex(t, name, path));
  PathClass best = PathClass::kNone;
  const std::vector<int> near = nearestDevices(t, g, nicOf, &best);
  if (near.empty())
    return everyDevice(namesAndPaths.size(), "the host topology places none of the net's devices on PCI");

  // GPUs whose nearest devices are these same ones take turns: the k-th of them starts at the k-th device.
  int before = 0;
  for (int other = 0; other < g; other++) {
    PathClass cls = PathClass::kNone;
    if (nearestDevices(t, other, nicOf, &cls) == near) before++;
  }
  const size_t nearCount = near.size();
  size_t take = nearCount;
  std::string how;
  if (policy.kind == NetDevsPolicy::Kind::kAuto) {
    const size_t gpus = static_cast<size_t>(gpusNearestNic(t, nicOf[static_cast<size_t>(near[0])]));
    take = (nearCount + gpus - 1) / gpus;
    how = std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s") + " nearest them";
  } else if (policy.kind == NetDevsPolicy::Kind::kMax) {
    take = std::min(nearCount, static_cast<size_t>(policy.max));
  }
  NicChoice c;
  c.byTopology = true;
  for (size_t i = 0; i < take; i++) {
    c.order.push_back(near[(static_cast<size_t>(before) + i) % nearCount]);
    c.classes.push_back(best);
  }
  c.why = "GPU " + t.gpus[static_cast<size_t>(g)].busId + ", the devices nearest it (" + pathClassName(best) + ")";
  if (take < nearCount || policy.kind != NetDevsPolicy::Kind::kAuto || !policy.note.empty())
    c.why += ": " + std::to_string(take) + " of " + std::to_string(nearCount) +
             ", NCCL_NETDEVS_POLICY=" + policy.name() + (how.empty() ? "" : " with " + how) +
             (policy.note.empty() ? "" : " (" + policy.note + ")");
  return c;
}

}  // namespace

std::string NetDevsPolicy::name() const {
  switch (kind) {
    case Kind::kAll:
      return "ALL";
    case Kind::kMax:
      return "MAX:" + std::to_string(max);
    case Kind::kAuto:
      break;
  }
  return "AUTO";
}

NetDevsPolicy parseNetDevsPolicy(const std::string& text) {
  NetDevsPolicy p;
  if (text.empty() || strcasecmp(text.c_str(), "AUTO") == 0) return p;
  if (strcasecmp(text.c_str(), "ALL") == 0) {
    p.kind = NetDevsPolicy::Kind::kAll;
    return p;
  }
  if (strncasecmp(text.c_str(), "MAX:", 4) == 0) {
    const int n = std::atoi(text.c_str() + 4);
    if (n > 0) {
      p.kind = NetDevsPolicy::Kind::kMax;
      p.max = n;
      return p;
    }
  }
  p.note = "\"" + text + "\" not recognized, so AUTO";
  return p;
}

NetDevsPolicy netDevsPolicy() { return parseNetDevsPolicy(kNetDevsPolicy.get()); }

NicChoice chooseNics(const HostTopology& t, int64_t gpuBusId,
                     const std::vector<std::pair<std::string, std::string>>& namesAndPaths,
                     const NetDevsPolicy& policy) {
  if (gpuBusId < 0) return everyDevice(namesAndPaths.size(), "no GPU");
  const int g = topologyGpuIndex(t, gpuBusId);
  if (g < 0) return everyDevice(namesAndPaths.size(), "its GPU is not in the host topology (" + t.source + ")");
  return chooseNicsOfGpu(t, g, namesAndPaths, policy);
}

std::string describeNicChoice(const NicChoice& c,
                              const std::vector<std::pair<std::string, std::string>>& namesAndPaths) {
  std::string out;
  for (size_t i = 0; i < c.order.size(); i++) {
    const int d = c.order[i];
    if (!out.empty()) out += ", ";
    out += std::to_string(d);
    const std::string& name =
        d < static_cast<int>(namesAndPaths.size()) ? namesAndPaths[static_cast<size_t>(d)].first : "";
    if (c.byTopology) {
      out += " (" + (name.empty() ? std::string("?") : name) + ", " + pathClassName(c.classes[i]) + ")";
    } else if (!name.empty()) {
      out += " (" + name + ")";
    }
  }
  return out;
}

std::string formatNicChoices(const HostTopology& t, const NetDevsPolicy& policy) {
  std::vector<std::pair<std::string, std::string>> devices;
  for (const TopoNic& nic : t.nics)
    if (!nic.isVirtual) devices.emplace_back(nic.name, nic.busId);
  if (t.gpus.empty() || devices.empty()) return "";
  std::string out =
      "NICs by GPU (a net offering every PCI NIC; channels take them in turn, CHORUS_NET_NEAR_GPU, "
      "NCCL_NETDEVS_POLICY=" +
      policy.name() + "):\n";
  for (size_t g = 0; g < t.gpus.size(); g++) {
    const NicChoice c = chooseNicsOfGpu(t, static_cast<int>(g), devices, policy);
    std::string line = "  GPU" + std::to_string(g) + "   " + t.gpus[g].busId + "  ";
    for (size_t i = 0; i < c.order.size(); i++) {
      if (i > 0) line += ", ";
      line += devices[static_cast<size_t>(c.order[i])].first;
      if (c.byTopology) line += std::string(" (") + pathClassName(c.classes[i]) + ")";
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace chorus
