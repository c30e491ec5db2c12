#include "topo/nic_choice.h"

#include <algorithm>

namespace chorus {

namespace {

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

// chooseNics for the GPU at index g of the topology.
NicChoice chooseNicsOfGpu(const HostTopology& t, int g,
                          const std::vector<std::pair<std::string, std::string>>& namesAndPaths) {
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
  NicChoice c;
  c.byTopology = true;
  for (size_t i = 0; i < near.size(); i++) {
    c.order.push_back(near[(static_cast<size_t>(before) + i) % near.size()]);
    c.classes.push_back(best);
  }
  c.why = "GPU " + t.gpus[static_cast<size_t>(g)].busId + ", the devices nearest it (" + pathClassName(best) + ")";
  return c;
}

}  // namespace

NicChoice chooseNics(const HostTopology& t, int64_t gpuBusId,
                     const std::vector<std::pair<std::string, std::string>>& namesAndPaths) {
  if (gpuBusId < 0) return everyDevice(namesAndPaths.size(), "no GPU");
  const int g = topologyGpuIndex(t, gpuBusId);
  if (g < 0) return everyDevice(namesAndPaths.size(), "its GPU is not in the host topology (" + t.source + ")");
  return chooseNicsOfGpu(t, g, namesAndPaths);
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

std::string formatNicChoices(const HostTopology& t) {
  std::vector<std::pair<std::string, std::string>> devices;
  for (const TopoNic& nic : t.nics)
    if (!nic.isVirtual) devices.emplace_back(nic.name, nic.busId);
  if (t.gpus.empty() || devices.empty()) return "";
  std::string out = "NICs by GPU (a net offering every PCI NIC; channels take them in turn, CHORUS_NET_NEAR_GPU):\n";
  for (size_t g = 0; g < t.gpus.size(); g++) {
    const NicChoice c = chooseNicsOfGpu(t, static_cast<int>(g), devices);
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
