// HostTopology's plain-data side: names, equality, the summary line and chorus-topo's report. Nothing here needs
// hwloc (topology_hwloc.cc fills the struct).
#include "topo/topology.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>

namespace chorus {

const char* pathClassName(PathClass c) {
  switch (c) {
    case PathClass::kPIX:
      return "PIX";
    case PathClass::kPXB:
      return "PXB";
    case PathClass::kPHB:
      return "PHB";
    case PathClass::kSYS:
      return "SYS";
    case PathClass::kNone:
      break;
  }
  return "-";
}

const char* gpuLinkKindName(GpuLinkKind k) { return k == GpuLinkKind::kXGMI ? "xGMI" : "NVLink"; }

bool naturalNameLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) i2++;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) j2++;
      unsigned long long x = std::strtoull(a.substr(i, i2 - i).c_str(), nullptr, 10);
      unsigned long long y = std::strtoull(b.substr(j, j2 - j).c_str(), nullptr, 10);
      if (x != y) return x < y;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      i++;
      j++;
    }
  }
  return a.size() - i < b.size() - j;
}

PathClass HostTopology::classAt(int i, int j) const {
  size_t n = gpus.size() + nics.size();
  if (i < 0 || j < 0 || static_cast<size_t>(i) >= n || static_cast<size_t>(j) >= n || classes.size() != n * n) {
    return PathClass::kNone;
  }
  return classes[static_cast<size_t>(i) * n + static_cast<size_t>(j)];
}

const TopoGpuLink* HostTopology::gpuLink(int a, int b) const {
  for (const TopoGpuLink& l : gpuLinks) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
  }
  return nullptr;
}

int HostTopology::pciNics() const {
  return static_cast<int>(std::count_if(nics.begin(), nics.end(), [](const TopoNic& n) { return !n.isVirtual; }));
}

int topologyGpuIndex(const HostTopology& t, int64_t runtimeBusId) {
  if (runtimeBusId < 0) return -1;
  for (size_t i = 0; i < t.gpus.size(); i++) {
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(t.gpus[i].busId.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) continue;
    if ((static_cast<int64_t>(dom) << 32 | static_cast<int64_t>(bus) << 8 | dev) == runtimeBusId) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int topologyNicIndex(const HostTopology& t, const std::string& name, const std::string& pciPath) {
  for (size_t i = 0; i < t.nics.size(); i++) {
    const TopoNic& nic = t.nics[i];
    if (!name.empty() && (nic.name == name || nic.netdev == name)) return static_cast<int>(i);
    const std::string& id = nic.busId;
    if (id.empty() || pciPath.size() < id.size()) continue;
    if (pciPath.compare(pciPath.size() - id.size(), id.size(), id) == 0 &&
        (pciPath.size() == id.size() || pciPath[pciPath.size() - id.size() - 1] == '/')) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int topologyGpuNuma(const HostTopology& t, int64_t runtimeBusId) {
  const int g = topologyGpuIndex(t, runtimeBusId);
  return g < 0 ? -1 : t.gpus[static_cast<size_t>(g)].numa;
}

int64_t topologyNicMbps(const HostTopology& t) {
  int64_t pci = 0, virt = 0;
  for (const TopoNic& nic : t.nics) {
    if (nic.speedMbps <= 0) continue;
    if (!nic.isVirtual) {
      pci = pci == 0 ? nic.speedMbps : std::min(pci, nic.speedMbps);
    } else {
      virt = std::max(virt, nic.speedMbps);
    }
  }
  return pci > 0 ? pci : virt;
}

double topologyNvlinkBytesPerUs(const HostTopology& t) {
  if (t.gpus.size() < 2) return 0;
  int minLinks = 0;
  for (size_t a = 0; a < t.gpus.size(); a++)
    for (size_t b = a + 1; b < t.gpus.size(); b++) {
      const TopoGpuLink* l = t.gpuLink(static_cast<int>(a), static_cast<int>(b));
      if (l == nullptr || l->kind != GpuLinkKind::kNVLink) return 0;
      minLinks = minLinks == 0 ? l->count : std::min(minLinks, l->count);
    }
  return minLinks * 20.5 * 1000;
}

namespace {

std::string plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

// Tuples of every compared field. PCI link speeds compare to 1 MB/s: hwloc computes a probe's from the link's rate and
// width, and a file keeps the six decimals its XML writes.
long speedKey(float gbps) { return std::lround(gbps * 1000); }
auto fields(const TopoGpu& g) {
  return std::make_tuple(g.busId, g.vendor, g.device, g.pciClass, g.byRuntime, g.name, g.numa, g.package, g.cpus,
                         speedKey(g.linkGBps));
}
auto fields(const TopoNic& n) {
  return std::make_tuple(n.name, n.netdev, n.rdma, n.isVirtual, n.busId, n.vendor, n.device, n.numa, n.package, n.cpus,
                         speedKey(n.linkGBps), n.speedMbps);
}
auto fields(const TopoGpuLink& l) { return std::tie(l.a, l.b, l.kind, l.count); }

template <typename T>
bool sameList(const std::vector<T>& a, const std::vector<T>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const T& x, const T& y) { return fields(x) == fields(y); });
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

std::string speedText(int64_t mbps) {
  if (mbps <= 0) return "speed ?";
  char buf[32];
  if (mbps % 1000 == 0) {
    std::snprintf(buf, sizeof(buf), "%lld Gb/s", static_cast<long long>(mbps / 1000));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld Mb/s", static_cast<long long>(mbps));
  }
  return buf;
}

std::string where(int numa, const std::string& cpus, float linkGBps) {
  char buf[64];
  std::string s = numa >= 0 ? "NUMA " + std::to_string(numa) : "NUMA ?";
  if (linkGBps > 0) {
    std::snprintf(buf, sizeof(buf), ", PCIe %.1f GB/s", linkGBps);
    s += buf;
  }
  if (!cpus.empty()) s += ", CPUs " + cpus;
  return s;
}

}  // namespace

std::string HostTopology::summary() const {
  int virt = static_cast<int>(nics.size()) - pciNics();
  std::string s = plural(packages, "package", "packages") + ", " + std::to_string(numaNodes) + " NUMA, " +
                  plural(cores, "core", "cores") + ", " + plural(pus, "PU", "PUs") + ", " +
                  plural(static_cast<int>(gpus.size()), "GPU", "GPUs") + ", " + plural(pciNics(), "NIC", "NICs");
  if (virt > 0) s += ", " + plural(virt, "virtual NIC", "virtual NICs");
  return s;
}

std::string HostTopology::cpuText() const {
  return (cpuArch.empty() ? std::string("?") : cpuArch) + " " + (cpuVendor.empty() ? std::string("?") : cpuVendor);
}

bool operator==(const HostTopology& a, const HostTopology& b) {
  return std::tie(a.packages, a.numaNodes, a.cores, a.pus, a.cpuArch, a.cpuVendor, a.classes) ==
             std::tie(b.packages, b.numaNodes, b.cores, b.pus, b.cpuArch, b.cpuVendor, b.classes) &&
         sameList(a.gpus, b.gpus) && sameList(a.nics, b.nics) && sameList(a.gpuLinks, b.gpuLinks);
}

std::string formatTopology(const HostTopology& t) {
  std::string out = "topology (" + t.source + "): " + t.summary();
  if (!t.cpuArch.empty() || !t.cpuVendor.empty()) out += "; CPUs " + t.cpuText();
  out += "\n";
  if (!t.gpus.empty()) out += "\n";
  for (size_t i = 0; i < t.gpus.size(); i++) {
    const TopoGpu& g = t.gpus[i];
    char ids[64];
    std::snprintf(ids, sizeof(ids), "%04x:%04x class %04x", g.vendor, g.device, g.pciClass);
    out += "  " + pad("GPU" + std::to_string(i), 7) + g.busId + "  " + ids + "  " + where(g.numa, g.cpus, g.linkGBps);
    if (g.byRuntime) out += "  (by runtime bus id)";
    if (!g.name.empty()) out += "  " + g.name;
    out += "\n";
  }
  if (!t.nics.empty()) out += "\n";
  for (size_t i = 0; i < t.nics.size(); i++) {
    const TopoNic& n = t.nics[i];
    std::string name = n.name;
    if (!n.netdev.empty() && n.netdev != n.name) name += " (" + n.netdev + ")";
    out += "  " + pad("NIC" + std::to_string(i), 7) + pad(name, 22);
    if (n.isVirtual) {
      out += "virtual, no PCI device  " + speedText(n.speedMbps);
    } else {
      out += n.busId + "  " + (n.rdma ? "RDMA" : "Ethernet") + "  " + speedText(n.speedMbps) + "  " +
             where(n.numa, n.cpus, n.linkGBps);
    }
    out += "\n";
  }
  size_t ng = t.gpus.size(), nn = t.nics.size();
  if (ng + nn == 0) return out;

  // The matrix, as nvidia-smi topo -m lays it out: every endpoint against every other, NUMA affinity last.
  std::vector<std::string> names;
  for (size_t i = 0; i < ng; i++) names.push_back("GPU" + std::to_string(i));
  for (size_t i = 0; i < nn; i++) names.push_back("NIC" + std::to_string(i));
  const size_t w = 7;
  out += "\n" + std::string(w, ' ');
  for (const std::string& n : names) out += pad(n, w);
  out += "NUMA\n";
  for (size_t i = 0; i < names.size(); i++) {
    out += pad(names[i], w);
    for (size_t j = 0; j < names.size(); j++) {
      std::string cell;
      if (i == j) {
        cell = "X";
      } else if (i < ng && j < ng && t.gpuLink(static_cast<int>(i), static_cast<int>(j)) != nullptr) {
        const TopoGpuLink* l = t.gpuLink(static_cast<int>(i), static_cast<int>(j));
        cell = l->kind == GpuLinkKind::kXGMI ? "XGMI" : "NV" + std::to_string(l->count);
      } else if (i < ng && j < ng) {
        cell = pathClassName(t.gpuGpu(static_cast<int>(i), static_cast<int>(j)));
      } else if (i < ng || j < ng) {
        size_t g = std::min(i, j), n = std::max(i, j) - ng;
        cell = pathClassName(t.gpuNic(static_cast<int>(g), static_cast<int>(n)));
      } else {
        cell = pathClassName(t.nicNic(static_cast<int>(i - ng), static_cast<int>(j - ng)));
      }
      out += pad(cell, w);
    }
    int numa = i < ng ? t.gpus[i].numa : t.nics[i - ng].numa;
    out += (numa >= 0 ? std::to_string(numa) : std::string("N/A")) + "\n";
  }
  out +=
      "\nLegend:\n"
      "  X    = self\n"
      "  SYS  = across NUMA nodes or sockets (the SMP interconnect)\n"
      "  PHB  = through a CPU host bridge, same NUMA node\n"
      "  PXB  = through several PCIe bridges, no host bridge\n"
      "  PIX  = through at most one PCIe switch\n"
      "  -    = no PCI path (virtual interface)\n";
  if (!t.gpuLinks.empty())
    out +=
        "  NV#  = # NVLinks (from the file, or NVML when probed)\n"
        "  XGMI = an xGMI link (from the file, or ROCm SMI when probed)\n";
  return out;
}

}  // namespace chorus
