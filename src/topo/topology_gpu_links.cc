// Direct links between a host's GPUs that hwloc cannot see (Debian's hwloc has no NVML or ROCm SMI backend), as NCCL
// and RCCL find them: NVLink from NVML (each active link's far end is another GPU of the host, or an NVSwitch,
// through which every GPU with switch links reaches every other), xGMI from ROCm SMI. chorus links neither library:
// each is loaded at run time where the GPU driver put it.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/params.h"
#include "topo/topology.h"

namespace chorus {
namespace {

StrParam kNvmlLibrary{"CHORUS_NVML_LIBRARY", "libnvidia-ml.so.1",
                      "The NVML library a probe of the host asks for the NVLink between its NVIDIA GPUs (names for "
                      "the loader or paths, comma-separated: the first that loads). \"none\": NVLink comes only from "
                      "topology files.",
                      "topology"};
StrParam kRsmiLibrary{"CHORUS_ROCM_SMI_LIBRARY", "librocm_smi64.so.7,librocm_smi64.so.6,librocm_smi64.so.5",
                      "The ROCm SMI library a probe of the host asks for the xGMI links between its AMD GPUs (names "
                      "for the loader or paths, comma-separated: the first that loads). \"none\": xGMI comes only "
                      "from topology files.",
                      "topology"};

// A library loaded for one probe, closed when done.
class Library {
 public:
  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (h_ != nullptr) dlclose(h_);
  }
  /// Loads the first of the names `param` lists that loads. False and *said why not.
  bool open(const StrParam& param, const char* what, std::string* said) {
    const std::string names = param.get();
    if (names == "none") {
      *said = std::string(param.info().env) + "=none: " + what + " not asked";
      return false;
    }
    std::string errors;
    for (const std::string& name : splitList(names)) {
      h_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h_ != nullptr) {
        name_ = name;
        return true;
      }
      const char* e = dlerror();
      errors += (errors.empty() ? "" : "; ") + std::string(e != nullptr ? e : name.c_str());
    }
    *said = std::string(what) + " (" + names + ") did not load: " + errors;
    return false;
  }
  /// The symbol `name` as a function of type F, null when the library lacks it.
  template <class F>
  F sym(const char* name) const {
    return reinterpret_cast<F>(dlsym(h_, name));
  }
  const std::string& name() const { return name_; }

 private:
  void* h_ = nullptr;
  std::string name_;
};

// The view's GPUs of a PCI vendor, by index.
std::vector<int> gpusOf(const HostTopology& t, uint16_t vendor) {
  std::vector<int> out;
  for (size_t g = 0; g < t.gpus.size(); g++)
    if (t.gpus[g].vendor == vendor) out.push_back(static_cast<int>(g));
  return out;
}

// The view's GPU at a PCI address (function 0), -1 when none.
int gpuAt(const HostTopology& t, unsigned domain, unsigned bus, unsigned device) {
  for (size_t g = 0; g < t.gpus.size(); g++) {
    unsigned d = 0, b = 0, v = 0, f = 0;
    if (std::sscanf(t.gpus[g].busId.c_str(), "%x:%x:%x.%x", &d, &b, &v, &f) == 4 && d == domain && b == bus &&
        v == device && f == 0)
      return static_cast<int>(g);
  }
  return -1;
}

// Adds a link between GPUs a and b unless the view links them already; whether it did.
bool addLink(HostTopology* t, int a, int b, GpuLinkKind kind, int count) {
  if (t->gpuLink(a, b) != nullptr) return false;
  TopoGpuLink l;
  l.a = std::min(a, b);
  l.b = std::max(a, b);
  l.kind = kind;
  l.count = count;
  t->gpuLinks.push_back(l);
  std::sort(t->gpuLinks.begin(), t->gpuLinks.end(),
            [](const TopoGpuLink& x, const TopoGpuLink& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  return true;
}

// The parts of NVML's ABI used here, as nvml.h declares them.
using NvmlReturn = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using NvmlDevice = void*;
struct NvmlPciInfo {  // nvmlPciInfo_t, as the _v2/_v3 calls fill it
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr int kRemoteGpu = 0;           // NVML_NVLINK_DEVICE_TYPE_GPU
constexpr int kRemoteSwitch = 2;        // NVML_NVLINK_DEVICE_TYPE_SWITCH

// The parts of ROCm SMI's ABI used here, as rocm_smi.h declares them.
using RsmiStatus = int;       // rsmi_status_t: 0 is RSMI_STATUS_SUCCESS
constexpr int kRsmiXgmi = 2;  // RSMI_IOLINK_TYPE_XGMI

}  // namespace

int addNvmlLinks(HostTopology* t, std::string* said) {
  const std::vector<int> nvidia = gpusOf(*t, 0x10de);
  if (nvidia.size() < 2) {
    *said = "fewer than two NVIDIA GPUs: NVML not asked";
    return 0;
  }
  Library lib;
  if (!lib.open(kNvmlLibrary, "NVML", said)) return -1;
  auto init = lib.sym<NvmlReturn (*)()>("nvmlInit_v2");
  auto shutdown = lib.sym<NvmlReturn (*)()>("nvmlShutdown");
  auto handleByBusId = lib.sym<NvmlReturn (*)(const char*, NvmlDevice*)>("nvmlDeviceGetHandleByPciBusId_v2");
  auto linkState = lib.sym<NvmlReturn (*)(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  auto remotePci = lib.sym<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto remoteType = lib.sym<NvmlReturn (*)(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!init || !shutdown || !handleByBusId || !linkState || !remotePci) {
    *said = "NVML (" + lib.name() +
            ") lacks the NVLink queries (nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetNvLinkState, "
            "nvmlDeviceGetNvLinkRemotePciInfo_v2)";
    return -1;
  }
  if (NvmlReturn r = init(); r != 0) {
    *said = "nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")";
    return -1;
  }
  // Links to another GPU, counted at the end with the lower index (each shows at both ends); links to a switch.
  std::map<std::pair<int, int>, int> direct;
  std::vector<int> toSwitch(t->gpus.size(), 0);
  int answered = 0;
  for (int g : nvidia) {
    NvmlDevice dev = nullptr;
    if (handleByBusId(t->gpus[static_cast<size_t>(g)].busId.c_str(), &dev) != 0) continue;
    answered++;
    t->gpus[static_cast<size_t>(g)].linksKnown = true;
    for (unsigned link = 0; link < kNvmlMaxLinks; link++) {
      int active = 0;
      if (linkState(dev, link, &active) != 0 || active == 0) continue;  // past the GPU's links, or down
      NvmlPciInfo pci{};
      if (remotePci(dev, link, &pci) != 0) continue;
      const int peer = gpuAt(*t, pci.domain, pci.bus, pci.device);
      int type = -1;
      if (remoteType == nullptr || remoteType(dev, link, &type) != 0) type = peer >= 0 ? kRemoteGpu : kRemoteSwitch;
      if (type == kRemoteGpu && peer > g) direct[{g, peer}]++;
      if (type == kRemoteSwitch) toSwitch[static_cast<size_t>(g)]++;
    }
  }
  shutdown();
  int added = 0, bySwitch = 0;
  for (size_t i = 0; i < nvidia.size(); i++) {
    for (size_t j = i + 1; j < nvidia.size(); j++) {
      const int a = nvidia[i], b = nvidia[j];
      auto d = direct.find({a, b});
      const int viaSwitch = std::min(toSwitch[static_cast<size_t>(a)], toSwitch[static_cast<size_t>(b)]);
      const int count = (d == direct.end() ? 0 : d->second) + viaSwitch;
      if (count == 0 || !addLink(t, a, b, GpuLinkKind::kNVLink, count)) continue;
      added++;
      bySwitch += viaSwitch > 0;
    }
  }
  *said = "NVML (" + lib.name() + "): " + std::to_string(answered) + " of " + std::to_string(nvidia.size()) +
          " NVIDIA GPUs answered; NVLink between " + std::to_string(added) + " pair(s)" +
          (bySwitch > 0 ? ", " + std::to_string(bySwitch) + " through NVSwitch" : "");
  return added;
}

int addRsmiLinks(HostTopology* t, std::string* said) {
  const std::vector<int> amd = gpusOf(*t, 0x1002);
  if (amd.size() < 2) {
    *said = "fewer than two AMD GPUs: ROCm SMI not asked";
    return 0;
  }
  Library lib;
  if (!lib.open(kRsmiLibrary, "ROCm SMI", said)) return -1;
  auto init = lib.sym<RsmiStatus (*)(uint64_t)>("rsmi_init");
  auto shutDown = lib.sym<RsmiStatus (*)()>("rsmi_shut_down");
  auto numDevices = lib.sym<RsmiStatus (*)(uint32_t*)>("rsmi_num_monitor_devices");
  auto pciId = lib.sym<RsmiStatus (*)(uint32_t, uint64_t*)>("rsmi_dev_pci_id_get");
  auto linkType = lib.sym<RsmiStatus (*)(uint32_t, uint32_t, uint64_t*, int*)>("rsmi_topo_get_link_type");
  auto linkWeight = lib.sym<RsmiStatus (*)(uint32_t, uint32_t, uint64_t*)>("rsmi_topo_get_link_weight");
  if (!init || !shutDown || !numDevices || !pciId || !linkType) {
    *said = "ROCm SMI (" + lib.name() +
            ") lacks the link queries (rsmi_init, rsmi_num_monitor_devices, rsmi_dev_pci_id_get, "
            "rsmi_topo_get_link_type)";
    return -1;
  }
  if (RsmiStatus r = init(0); r != 0) {
    *said = "rsmi_init failed (ROCm SMI status " + std::to_string(r) + ")";
    return -1;
  }
  // ROCm SMI numbers its devices its own way: each is matched to the view's GPU by its PCI address (domain in bits
  // 63-32, bus 15-8, device 7-3, function 2-0).
  uint32_t n = 0;
  if (numDevices(&n) != 0) n = 0;
  std::vector<int> gpuOfDev(n, -1);
  int answered = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t bdf = 0;
    if (pciId(i, &bdf) != 0 || (bdf & 0x7) != 0) continue;
    gpuOfDev[i] = gpuAt(*t, static_cast<unsigned>(bdf >> 32), static_cast<unsigned>((bdf >> 8) & 0xff),
                        static_cast<unsigned>((bdf >> 3) & 0x1f));
    answered += gpuOfDev[i] >= 0;
    if (gpuOfDev[i] >= 0) t->gpus[static_cast<size_t>(gpuOfDev[i])].linksKnown = true;
  }
  // A direct xGMI link as RCCL tells it: an xGMI path of link weight 13, 15 or 41 (longer paths weigh more); where the
  // library has no weights, an xGMI path of one hop.
  int added = 0;
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t j = i + 1; j < n; j++) {
      if (gpuOfDev[i] < 0 || gpuOfDev[j] < 0) continue;
      uint64_t hops = 0, weight = 0;
      int type = 0;
      if (linkType(i, j, &hops, &type) != 0 || type != kRsmiXgmi) continue;
      const bool direct = linkWeight != nullptr && linkWeight(i, j, &weight) == 0
                              ? weight == 13 || weight == 15 || weight == 41
                              : hops == 1;
      if (direct && addLink(t, gpuOfDev[i], gpuOfDev[j], GpuLinkKind::kXGMI, 1)) added++;
    }
  }
  shutDown();
  *said = "ROCm SMI (" + lib.name() + "): " + std::to_string(answered) + " of " + std::to_string(amd.size()) +
          " AMD GPUs answered; xGMI between " + std::to_string(added) + " pair(s)";
  return added;
}

}  // namespace chorus
