// The process's topology: resolved once per topology file setting, at the first communicator init, from a file or a
// probe, and dumped by one rank when asked. Nothing here may fail an init: problems are logged once and the view is
// left empty.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"
#include "core/params.h"
#include "runtime/runtime.h"
#include "topo/topology.h"

namespace chorus {
namespace {

StrParam kTopoFile{"CHORUS_TOPO_FILE", "",
                   "Load the host topology from this file (hwloc XML as NCCL_TOPO_DUMP_FILE or `lstopo --of xml` "
                   "writes it, or NCCL's own <system> XML; docs/topology.md) instead of probing the host. A file "
                   "that does not load is warned about and the host probed.",
                   "topology"};
StrParam kNcclTopoFile{"NCCL_TOPO_FILE", "",
                       "Same as CHORUS_TOPO_FILE, which wins when both are set. NCCL's own topology XML (as NVIDIA's "
                       "NCCL_TOPO_DUMP_FILE writes it, and cloud images ship it) is read too.",
                       "topology"};
StrParam kTopoDumpFile{"NCCL_TOPO_DUMP_FILE", "",
                       "Write the host topology chorus uses (hwloc XML plus chorus's GPUs, NICs, classes and "
                       "NVLink/xGMI facts) to this file at the first communicator init, once per process.",
                       "topology"};
IntParam kTopoDumpRank{"NCCL_TOPO_DUMP_FILE_RANK", 0, "The communicator rank that writes NCCL_TOPO_DUMP_FILE.",
                       "topology"};

// The GPU runtime's devices as bus ids: they name GPUs hwloc cannot tell by vendor and class.
std::vector<int64_t> runtimeBusIds() {
  std::vector<int64_t> ids;
  GpuRuntime* rt = gpuRuntime();
  if (rt == nullptr) return ids;
  SetupScope setup(rt);
  for (int d = 0, n = rt->deviceCount(); d < n; d++) ids.push_back(rt->busId(d));
  return ids;
}

}  // namespace

HostTopology resolveHostTopology(const std::string& file, const std::vector<int64_t>& runtimeBusIds,
                                 std::string* warning) {
  HostTopology t;
  std::string err;
  warning->clear();
  if (!file.empty()) {
    if (loadHostTopology(file, &t, &err)) return t;
    *warning = "topology: " + err + "; probing this host instead";
  }
  if (probeHostTopology(runtimeBusIds, &t, &err)) return t;
  t = HostTopology{};
  t.source = "none";
  // A build without hwloc has nothing to probe with, by choice: worth a WARN only when a file was asked for.
  if (!topologyHasHwloc()) {
    t.source = "none: chorus was built without hwloc";
    return t;
  }
  if (!warning->empty()) *warning += "; ";
  *warning += "topology: probe failed (" + err + "); continuing with an empty view";
  return t;
}

const HostTopology& processTopology() {
  // Once per topology file setting: a process whose environment names another file (or none) before a later init
  // gets that file's view. Views are kept for the process's life, so references handed out stay valid.
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<HostTopology>> views;
  const std::string file = kTopoFile.isSet() ? kTopoFile.get() : kNcclTopoFile.get();
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<HostTopology>& topo = views[file];
  if (topo) return *topo;
  std::string warning;
  topo = std::make_unique<HostTopology>(resolveHostTopology(file, runtimeBusIds(), &warning));
  if (!warning.empty()) WARN("%s", warning.c_str());
  std::string from = topo->source == "probe"               ? "probed"
                     : topo->source.rfind("file ", 0) == 0 ? "from " + topo->source
                                                           : topo->source;
  INFO(kInit, "topology: %s (%s)", topo->summary().c_str(), from.c_str());
  if (!topo->gpuLinksFrom.empty()) INFO(kInit, "topology: %s", topo->gpuLinksFrom.c_str());
  return *topo;
}

void topologyAtCommInit(int rank) {
  const HostTopology& topo = processTopology();
  if (rank != kTopoDumpRank.get() || !kTopoDumpFile.isSet()) return;
  static std::once_flag dumped;
  std::call_once(dumped, [&topo]() {
    std::string path = kTopoDumpFile.get(), err;
    if (dumpHostTopology(topo, path, &err)) {
      INFO(kInit, "topology: written to %s (NCCL_TOPO_DUMP_FILE)", path.c_str());
    } else {
      WARN("topology: NCCL_TOPO_DUMP_FILE: %s", err.c_str());
    }
  });
}

}  // namespace chorus
