// NIC fusion (nic_fusion.h).
#include "topo/nic_fusion.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "chorus/net.h"

namespace chorus {

StrParam kNetMergeLevel{"NCCL_NET_MERGE_LEVEL", "PORT",
                        "Nets with merged devices (IB, plugins of v9 and later): how near net devices must be to be "
                        "merged into one whose connections use all of them, as NCCL's NIC fusion: LOC (never), PORT "
                        "(ports of one NIC: one PCI device), PIX, PXB, PHB or SYS (the PCI distance the host topology "
                        "gives between the NICs).",
                        "network"};
StrParam kNetForceMerge{"NCCL_NET_FORCE_MERGE", "",
                        "Nets with merged devices: groups of net devices to merge whatever their distance, as NCCL: "
                        "groups separated by ';', each a ','-separated list of name[:port] (exact names); a group "
                        "that cannot be made fails the communicator.",
                        "network"};

namespace {

// "dddd:bb:dd.f" (hex digits): a PCI bus id.
bool isBusId(const std::string& s) {
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i = 0; i < s.size(); i++)
    if (i != 4 && i != 7 && i != 10 && !isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// The PCI bus id of a device: the last component of its sysfs path, else the topology's bus id of the NIC of its
// name; "" when neither says.
std::string busIdOf(const HostTopology& t, const NetDeviceDesc& d) {
  const size_t slash = d.pciPath.find_last_of('/');
  const std::string last = slash == std::string::npos ? d.pciPath : d.pciPath.substr(slash + 1);
  if (isBusId(last)) return last;
  const int n = topologyNicIndex(t, d.name, d.pciPath);
  return n >= 0 ? t.nics[static_cast<size_t>(n)].busId : "";
}

// Whether devices a and b are within `level` of each other.
bool near(const HostTopology& t, const NetDeviceDesc& a, const NetDeviceDesc& b, MergeLevel level) {
  if (level == MergeLevel::kLoc) return false;
  const std::string ia = busIdOf(t, a), ib = busIdOf(t, b);
  // Ports of one NIC: one PCI device (functions differ in the bus id's last digit), or one function with ports.
  if (!ia.empty() && ia.size() == ib.size() && ia.compare(0, ia.size() - 1, ib, 0, ib.size() - 1) == 0) return true;
  if (level == MergeLevel::kPort) return false;
  const int na = topologyNicIndex(t, a.name, a.pciPath), nb = topologyNicIndex(t, b.name, b.pciPath);
  if (na < 0 || nb < 0) return false;
  const PathClass c = t.nicNic(na, nb);
  if (c == PathClass::kNone) return false;
  static const PathClass kMost[] = {PathClass::kPIX, PathClass::kPIX, PathClass::kPIX,
                                    PathClass::kPXB, PathClass::kPHB, PathClass::kSYS};
  return static_cast<int>(c) <= static_cast<int>(kMost[static_cast<int>(level)]);
}

// Splits `s` at `sep`, dropping empty pieces.
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

bool parseMergeLevel(const std::string& text, MergeLevel* level) {
  static const struct {
    const char* name;
    MergeLevel level;
  } kNames[] = {{"LOC", MergeLevel::kLoc}, {"PORT", MergeLevel::kPort}, {"PIX", MergeLevel::kPix},
                {"PXB", MergeLevel::kPxb}, {"P2C", MergeLevel::kPxb},   {"PXN", MergeLevel::kPxb},
                {"PHB", MergeLevel::kPhb}, {"SYS", MergeLevel::kSys}};
  for (const auto& n : kNames)
    if (strcasecmp(text.c_str(), n.name) == 0) return (*level = n.level), true;
  return false;
}

NicFusion fuseNics(const HostTopology& t, const std::vector<NetDeviceDesc>& devs, MergeLevel level,
                   const std::string& force, int maxPerGroup) {
  NicFusion out;
  std::vector<bool> placed(devs.size(), false);
  std::vector<std::vector<int>> forced;
  for (const std::string& group : split(force, ';')) {
    std::vector<int> members;
    for (const std::string& entry : split(group, ',')) {
      const size_t colon = entry.find(':');
      const std::string name = entry.substr(0, colon);
      const int port = colon == std::string::npos ? -1 : std::atoi(entry.c_str() + colon + 1);
      int found = -1;
      for (size_t d = 0; d < devs.size() && found < 0; d++)
        if (!placed[d] && devs[d].name == name && (port < 0 || devs[d].port == port)) found = static_cast<int>(d);
      if (found < 0) {
        out.error = "NCCL_NET_FORCE_MERGE=" + force + ": " + entry + " matches no device not already merged";
        return out;
      }
      placed[static_cast<size_t>(found)] = true;
      members.push_back(found);
    }
    if (static_cast<int>(members.size()) > maxPerGroup) {
      out.error = "NCCL_NET_FORCE_MERGE=" + force + ": " + group + " merges " + std::to_string(members.size()) +
                  " devices, more than the " + std::to_string(maxPerGroup) + " a merged device may have";
      return out;
    }
    if (!members.empty()) forced.push_back(members);
  }
  std::vector<std::vector<int>> automatic;
  for (size_t i = 0; i < devs.size(); i++) {
    if (placed[i]) continue;
    std::vector<int> members{static_cast<int>(i)};
    placed[i] = true;
    for (size_t j = i + 1; j < devs.size() && static_cast<int>(members.size()) < maxPerGroup; j++) {
      if (placed[j] || !near(t, devs[i], devs[j], level)) continue;
      placed[j] = true;
      members.push_back(static_cast<int>(j));
    }
    automatic.push_back(members);
  }
  // In the order of their first members.
  std::vector<std::pair<std::vector<int>, bool>> all;
  for (auto& g : forced) all.emplace_back(std::move(g), true);
  for (auto& g : automatic) all.emplace_back(std::move(g), false);
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first[0] < b.first[0]; });
  for (auto& g : all) {
    out.groups.push_back(std::move(g.first));
    out.forced.push_back(g.second);
  }
  return out;
}

MergeLevel mergeLevelSetting(bool* valid) {
  MergeLevel level = MergeLevel::kPort;
  const bool ok = parseMergeLevel(kNetMergeLevel.get(), &level);
  if (valid != nullptr) *valid = ok;
  return ok ? level : MergeLevel::kPort;
}

std::string formatNicFusion(const HostTopology& t) {
  std::vector<NetDeviceDesc> devs;
  for (const TopoNic& nic : t.nics)
    if (!nic.isVirtual) devs.push_back(NetDeviceDesc{nic.name, nic.busId, 1});
  if (devs.size() < 2) return "";
  std::string out = "NIC fusion (NCCL_NET_MERGE_LEVEL=" + kNetMergeLevel.get() +
                    (kNetForceMerge.get().empty() ? "" : ", NCCL_NET_FORCE_MERGE=" + kNetForceMerge.get()) +
                    "; a net that merges, such as IB, a port a NIC):\n";
  const NicFusion f = fuseNics(t, devs, mergeLevelSetting(), kNetForceMerge.get(), NCCL_NET_MAX_DEVS_PER_NIC_V11);
  if (!f.error.empty()) return out + "  " + f.error + "\n";
  for (const std::vector<int>& g : f.groups) {
    std::string line;
    for (int d : g) line += (line.empty() ? "" : " + ") + devs[static_cast<size_t>(d)].name;
    out += "  " + line + "\n";
  }
  return out;
}

}  // namespace chorus
