// NVLink between a host's NVIDIA GPUs, from NVML, as NCCL's topology finds it: each active link's far end is another
// GPU of the host, or an NVSwitch, through which every GPU with switch links reaches every other. hwloc's Debian
// build has no NVML backend, and chorus does not link NVML: it is loaded at run time where NVIDIA's driver put it.
#include <dlfcn.h>

#include <algorithm>
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
                      "The NVML library a probe of the host asks for the NVLink between its NVIDIA GPUs (a name for "
                      "the loader or a path). \"none\": NVLink comes only from topology files.",
                      "topology"};

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

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*handleByBusId)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*linkState)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*remotePci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*remoteType)(NvmlDevice, unsigned, int*) = nullptr;  ///< optional (NVML 11.0 on)
};

// The GPU of the view at a PCI address (function 0), -1 when none.
int gpuAt(const HostTopology& t, unsigned domain, unsigned bus, unsigned device) {
  for (size_t g = 0; g < t.gpus.size(); g++) {
    unsigned d = 0, b = 0, v = 0, f = 0;
    if (std::sscanf(t.gpus[g].busId.c_str(), "%x:%x:%x.%x", &d, &b, &v, &f) == 4 && d == domain && b == bus &&
        v == device && f == 0)
      return static_cast<int>(g);
  }
  return -1;
}

}  // namespace

int addNvmlLinks(HostTopology* t, std::string* said) {
  std::vector<int> nvidia;
  for (size_t g = 0; g < t->gpus.size(); g++)
    if (t->gpus[g].vendor == 0x10de) nvidia.push_back(static_cast<int>(g));
  if (nvidia.size() < 2) {
    *said = "fewer than two NVIDIA GPUs: NVML not asked";
    return 0;
  }
  const std::string lib = kNvmlLibrary.get();
  if (lib == "none" || lib.empty()) {
    *said = "CHORUS_NVML_LIBRARY=none: NVML not asked";
    return -1;
  }
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *said = "NVML (" + lib + ") did not load: " + (e ? e : "?");
    return -1;
  }
  Nvml n;
  n.init = reinterpret_cast<NvmlReturn (*)()>(dlsym(h, "nvmlInit_v2"));
  n.shutdown = reinterpret_cast<NvmlReturn (*)()>(dlsym(h, "nvmlShutdown"));
  n.handleByBusId =
      reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
  n.linkState = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(dlsym(h, "nvmlDeviceGetNvLinkState"));
  n.remotePci = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
      dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  n.remoteType =
      reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(dlsym(h, "nvmlDeviceGetNvLinkRemoteDeviceType"));
  if (!n.init || !n.shutdown || !n.handleByBusId || !n.linkState || !n.remotePci) {
    *said = "NVML (" + lib +
            ") lacks the NVLink queries (nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, "
            "nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2)";
    dlclose(h);
    return -1;
  }
  if (NvmlReturn r = n.init(); r != 0) {
    *said = "nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")";
    dlclose(h);
    return -1;
  }
  // Links to another GPU, counted at the end with the lower index (each shows at both ends); links to a switch.
  std::map<std::pair<int, int>, int> direct;
  std::vector<int> toSwitch(t->gpus.size(), 0);
  int asked = 0;
  for (int g : nvidia) {
    NvmlDevice dev = nullptr;
    if (n.handleByBusId(t->gpus[static_cast<size_t>(g)].busId.c_str(), &dev) != 0) continue;
    asked++;
    for (unsigned link = 0; link < kNvmlMaxLinks; link++) {
      int active = 0;
      if (n.linkState(dev, link, &active) != 0 || active == 0) continue;  // past the GPU's links, or down
      NvmlPciInfo pci{};
      if (n.remotePci(dev, link, &pci) != 0) continue;
      const int peer = gpuAt(*t, pci.domain, pci.bus, pci.device);
      int type = -1;
      if (n.remoteType == nullptr || n.remoteType(dev, link, &type) != 0) type = peer >= 0 ? kRemoteGpu : kRemoteSwitch;
      if (type == kRemoteGpu && peer > g) direct[{g, peer}]++;
      if (type == kRemoteSwitch) toSwitch[static_cast<size_t>(g)]++;
    }
  }
  n.shutdown();
  dlclose(h);
  int added = 0, bySwitch = 0;
  for (size_t i = 0; i < nvidia.size(); i++) {
    for (size_t j = i + 1; j < nvidia.size(); j++) {
      const int a = nvidia[i], b = nvidia[j];
      auto d = direct.find({a, b});
      const int viaSwitch = std::min(toSwitch[static_cast<size_t>(a)], toSwitch[static_cast<size_t>(b)]);
      const int count = (d == direct.end() ? 0 : d->second) + viaSwitch;
      if (count == 0 || t->gpuLink(a, b) != nullptr) continue;
      TopoGpuLink l;
      l.a = a;
      l.b = b;
      l.kind = GpuLinkKind::kNVLink;
      l.count = count;
      t->gpuLinks.push_back(l);
      added++;
      bySwitch += viaSwitch > 0;
    }
  }
  std::sort(t->gpuLinks.begin(), t->gpuLinks.end(),
            [](const TopoGpuLink& x, const TopoGpuLink& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  *said = "NVML (" + lib + "): " + std::to_string(asked) + " of " + std::to_string(nvidia.size()) +
          " NVIDIA GPUs answered; NVLink between " + std::to_string(added) + " pair(s)" +
          (bySwitch > 0 ? ", " + std::to_string(bySwitch) + " through NVSwitch" : "");
  return added;
}

}  // namespace chorus
