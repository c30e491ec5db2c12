// Choosing the transport between hosts, as NCCL chooses its net: NCCL_NET names one (Socket, IB, UCX or an external
// plugin's name); otherwise an external plugin (NCCL_NET_PLUGIN, or libnccl-net.so) that has devices, then the IB
// verbs net unless NCCL_IB_DISABLE=1 or it finds no active port, then sockets. UCX is used when named.
#include "transports/remote.h"

#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/checks.h"
#include "core/debug.h"
#include "core/params.h"
#include "topo/nic_fusion.h"
#include "topo/topology.h"
#include "transports/net/net.h"
#include "transports/net/net_proxy.h"

namespace chorus {
namespace {

StrParam kNetName{
    "NCCL_NET", "",
    "The net between hosts: Socket, IB, UCX, or an external net plugin's name. Unset: the communicator's "
    "config.netName, else a plugin with devices, then IB, then Socket (docs/net.md).",
    "transports"};
StrParam kNetGdrLevel{"NCCL_NET_GDR_LEVEL", "",
                      "Device buffers between hosts: the farthest PCI distance between a GPU and its NIC at which the "
                      "NIC reads and writes the GPU's FIFO memory in place (GPUDirect RDMA), when the net registers GPU "
                      "memory: LOC (never), PIX, PXB, PHB, SYS, or NCCL's 0-5. Unset: PXB. Farther, or LOC: through "
                      "pinned host memory.",
                      "transports"};
IntParam kNetGdrRead{"NCCL_NET_GDR_READ", -1,
                     "GPUDirect RDMA for the sending side too (the NIC reads the GPU's memory): 1 on, 0 off (the "
                     "sender's FIFO stays in pinned host memory), -1 as NCCL: on from compute capability 8.0.",
                     "transports"};
IntParam kNetForceFlush{"NCCL_NET_FORCE_FLUSH", 0,
                        "1: flush every receive a net writes into GPU memory (GPUDirect RDMA) before a kernel reads "
                        "it, as on GPUs before compute capability 9.0; 0 (NCCL's default): from 9.0, on x86 hosts, "
                        "only where the net device asks for it (docs/net.md).",
                        "transports"};
}  // namespace

IntParam kDmaBufEnable{"NCCL_DMABUF_ENABLE", 1,
                       "GPUDirect RDMA through dma-buf: a net that registers dma-buf file descriptors (the IB net where "
                       "the HCA's driver takes them) gets the GPU memory of a FIFO as one; 0: never (peer memory, "
                       "nvidia_peermem, only).",
                       "transports"};

IntParam kGdrFlushDisable{"NCCL_GDR_FLUSH_DISABLE", 0,
                          "1: no flush of data received into GPU memory through GPUDirect RDMA (the IB and UCX nets' "
                          "iflush completes at once); 0: each flush reads the received buffer back (an RDMA read on a "
                          "loopback queue pair, or a UCX get through an endpoint to the worker itself).",
                          "transports"};

namespace {

IntParam kIbDisable{"NCCL_IB_DISABLE", 0, "1: never choose the IB verbs net on its own (NCCL_NET=IB still does).",
                    "transports"};

IntParam kSlotTrailer{"CHORUS_NET_SLOT_TRAILER", -1,
                      "IB and plugin nets, host buffers: 1: a FIFO slot goes to the net as one message, its payload "
                      "followed by its header; 0: as two messages, the header and then the payload; -1: 1 over "
                      "chorus's IB net, 0 over a plugin. One message took 25-35% less time for an 8 B allreduce over "
                      "aws-ofi-nccl and the test plugin, but 32 bytes more can take a payload past a plugin's "
                      "threshold (aws-ofi-nccl over TCP: a 16 KB payload, 1.3-1.8x the time; docs/net_plugin.md). "
                      "The device path's connections (GPU buffers), and the socket and UCX nets, which frame slots "
                      "their own way (docs/net.md), are not affected. Ranks must agree (checked when the "
                      "communicator is made).",
                      "transports"};

// Names compare as NCCL compares them: without case.
bool sameName(const std::string& a, const char* b) { return b != nullptr && strcasecmp(a.c_str(), b) == 0; }

// Calls `f`, a net's own call, with the thread's last error cleared: what the net says comes back in *said, and the
// caller's last error is put back, since a net that cannot do something here is not the caller's error.
template <typename F>
ncclResult_t callForText(F f, std::string* said) {
  const std::string before = threadLastError();
  setThreadLastError("");
  const ncclResult_t rc = f();
  *said = threadLastError();
  setThreadLastError(before.c_str());
  return rc;
}

// Initializes `api` for this communicator: true with *out filled when it has at least one device, else *why.
bool tryNet(ncclComm* comm, const ncclNet_v11_t* api, const std::string& reason, NetChoice* out, std::string* why) {
  void* ctx = nullptr;
  // config.trafficClass reaches the net as NCCL hands it over (the IB net sets its queue pairs' SL and TC from it).
  ncclNetCommConfig_v11_t config{comm->config.trafficClass == NCCL_CONFIG_UNDEF_INT ? NCCL_NET_TRAFFIC_CLASS_UNDEF
                                                                                    : comm->config.trafficClass};
  std::lock_guard<std::mutex> setup(netSetupMutex());
  // A net that cannot run here is not an error of this call (most hosts have no HCA): its text goes into *why.
  std::string said;
  ncclResult_t rc = callForText([&] { return api->init(&ctx, comm->commHash, &config, pluginLog, nullptr); }, &said);
  if (rc != ncclSuccess) {
    *why = std::string(api->name) + ": init failed: " + (!said.empty() ? said : ncclGetErrorString(rc));
    return false;
  }
  int ndev = 0;
  rc = api->devices(&ndev);
  if (rc != ncclSuccess || ndev <= 0) {
    *why = std::string(api->name) + (rc != ncclSuccess ? ": devices() failed" : ": no device");
    if (api->finalize != nullptr && ctx != nullptr) api->finalize(ctx);
    return false;
  }
  out->api = api;
  out->ctx = ctx;
  out->name = api->name;
  out->reason = reason;
  out->devs.clear();
  for (int d = 0; d < ndev; d++) out->devs.push_back(d);
  // api is not null here (its init ran), so comparing with ucxNet() is false in a build without UCX.
  out->hooks = api == socketNet() ? socketNetHooks() : api == ucxNet() ? ucxNetHooks() : nullptr;
  // The socket net takes 32 requests a comm: a whole FIFO (8 slots) in flight. Others keep what a v6 plugin allows.
  out->inflightSlots = api == socketNet() ? kMaxInflightSlots : kInflightSlots;
  out->sendsUnregistered = api == socketNet();
  out->flushesGpuMemory = api != ucxNet() || ucxFlushesGpuMemory();
  out->anyThread = api == socketNet() || api == ucxNet();
  return true;
}

// This rank's choice, initialized; the socket net when nothing better runs. A net that NCCL_NET names but cannot run is
// an error.
ncclResult_t choose(ncclComm* comm, NetChoice* net) {
  // As NCCL: NCCL_NET wins over the communicator's config.netName.
  const bool fromEnv = !kNetName.get().empty();
  const std::string want = fromEnv ? kNetName.get() : comm->config.netName;
  const std::string setting = fromEnv ? "NCCL_NET" : "config.netName";
  std::string pluginWhy;
  int pluginVersion = 0;
  const ncclNet_v11_t* plugin = pluginNet(&pluginWhy, &pluginVersion);
  std::string why;
  if (!want.empty()) {
    const std::string because = setting + "=" + want;
    const ncclNet_v11_t* api = nullptr;
    std::string missing;
    if (plugin != nullptr && sameName(want, plugin->name)) {
      api = plugin;
    } else if (sameName(want, "Socket")) {
      api = socketNet();
    } else if (sameName(want, "IB")) {
      api = ibNet();
      missing = "chorus was built without libibverbs headers (libibverbs-dev)";
    } else if (sameName(want, "UCX")) {
      api = ucxNet();
      missing = "chorus was built without UCX (libucx-dev)";
    } else {
      const std::string others = plugin != nullptr ? std::string(", and the plugin ") + plugin->name
                                                   : "; no net plugin is loaded (" + pluginWhy + ")";
      CHORUS_FAIL(comm, ncclInvalidUsage, "rank %d: %s names no net: chorus has Socket, IB and UCX%s", comm->rank,
                  because.c_str(), others.c_str());
    }
    if (api == nullptr)
      CHORUS_FAIL(comm, ncclInvalidUsage, "rank %d: %s: %s", comm->rank, because.c_str(), missing.c_str());
    if (!tryNet(comm, api, because, net, &why))
      CHORUS_FAIL(comm, ncclSystemError, "rank %d: %s, but it cannot run here: %s", comm->rank, because.c_str(),
                  why.c_str());
    return ncclSuccess;
  }
  if (plugin != nullptr) {
    if (tryNet(comm, plugin, "the net plugin (v" + std::to_string(pluginVersion) + ") has devices", net, &why))
      return ncclSuccess;
    INFO(kNet | kInit, "rank %d: net plugin %s not used: %s", comm->rank, plugin->name, why.c_str());
  } else {
    INFO(kNet | kInit, "rank %d: no net plugin: %s", comm->rank, pluginWhy.c_str());
  }
  std::string reason;
  if (kIbDisable.get() == 0 && ibNet() != nullptr) {
    if (tryNet(comm, ibNet(), "an InfiniBand/RoCE device is active", net, &why)) return ncclSuccess;
    reason = "no net plugin, and IB: " + why;
  } else {
    reason =
        std::string("no net plugin, and IB ") + (kIbDisable.get() != 0 ? "disabled (NCCL_IB_DISABLE=1)" : "not built");
  }
  if (!tryNet(comm, socketNet(), reason, net, &why))
    CHORUS_FAIL(comm, ncclSystemError, "rank %d: no net between hosts: %s (%s)", comm->rank, why.c_str(),
                reason.c_str());
  return ncclSuccess;
}

// NIC fusion, as NCCL makes virtual NICs through a net's makeVDevice: the devices NCCL_NET_FORCE_MERGE names, and
// devices within NCCL_NET_MERGE_LEVEL of each other (ports of one NIC by default), become one device each; net->devs
// lists what the communicator uses. A net without makeVDevice (the socket and UCX nets, plugins before v9) keeps its
// devices. A group NCCL_NET_FORCE_MERGE names that cannot be made fails; one the level made keeps its devices apart.
ncclResult_t fuseDevices(ncclComm* comm, NetChoice* net) {
  if (net->api->makeVDevice == nullptr || net->api == socketNet()) return ncclSuccess;
  bool valid = true;
  const MergeLevel level = mergeLevelSetting(&valid);
  if (!valid) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      WARN("NCCL_NET_MERGE_LEVEL=%s is not LOC, PORT, PIX, PXB, P2C, PXN, PHB or SYS: PORT",
           kNetMergeLevel.get().c_str());
    });
  }
  // The physical devices: a net's device count includes the merged devices made so far (by this process's other
  // communicators too), whose properties list more than one device.
  std::vector<int> phys;
  std::vector<NetDeviceDesc> descs;
  for (int d : net->devs) {
    ncclNetProperties_v11_t props{};
    if (net->api->getProperties(d, &props) != ncclSuccess) return ncclSuccess;  // nothing to go by
    if (props.vProps.ndevs > 1) continue;
    phys.push_back(d);
    descs.push_back(NetDeviceDesc{props.name != nullptr ? props.name : "",
                                  props.pciPath != nullptr ? props.pciPath : "", props.port});
  }
  const NicFusion f = fuseNics(processTopology(), descs, level, kNetForceMerge.get(), NCCL_NET_MAX_DEVS_PER_NIC_V11);
  if (!f.error.empty()) CHORUS_FAIL(comm, ncclInvalidUsage, "rank %d: %s", comm->rank, f.error.c_str());
  std::vector<int> devs;
  for (size_t g = 0; g < f.groups.size(); g++) {
    const std::vector<int>& group = f.groups[g];
    if (group.size() == 1) {
      devs.push_back(phys[static_cast<size_t>(group[0])]);
      continue;
    }
    ncclNetVDeviceProps_v11_t props{};
    std::string names;
    for (int d : group) {
      props.devs[props.ndevs++] = phys[static_cast<size_t>(d)];
      names += (names.empty() ? "" : ", ") + descs[static_cast<size_t>(d)].name + ":" +
               std::to_string(descs[static_cast<size_t>(d)].port);
    }
    int vdev = -1;
    ncclResult_t rc;
    std::string said;
    {
      std::lock_guard<std::mutex> setup(netSetupMutex());
      rc = callForText([&] { return net->api->makeVDevice(&vdev, &props); }, &said);
    }
    if (rc != ncclSuccess || vdev < 0) {
      if (f.forced[g])
        CHORUS_FAIL(comm, ncclInvalidUsage, "rank %d: NCCL_NET_FORCE_MERGE: the net %s cannot merge %s: %s", comm->rank,
                    net->name.c_str(), names.c_str(), said.empty() ? ncclGetErrorString(rc) : said.c_str());
      INFO(kNet | kInit, "rank %d: net %s: %s not merged (%s); set NCCL_NET_MERGE_LEVEL=LOC to not try", comm->rank,
           net->name.c_str(), names.c_str(), said.empty() ? ncclGetErrorString(rc) : said.c_str());
      for (int d : group) devs.push_back(phys[static_cast<size_t>(d)]);
      continue;
    }
    INFO(kNet | kInit, "rank %d: net %s: device %d merges %s (%s)", comm->rank, net->name.c_str(), vdev, names.c_str(),
         f.forced[g] ? "NCCL_NET_FORCE_MERGE" : ("NCCL_NET_MERGE_LEVEL=" + kNetMergeLevel.get()).c_str());
    devs.push_back(vdev);
  }
  net->devs = devs;
  return ncclSuccess;
}

/// "eth0 10000 Mbit/s, mlx5_1 ...": what the net says of its devices (the first 8), for the INFO line of the choice.
std::string describeDevices(const NetChoice& net) {
  std::string out;
  for (int i = 0; i < net.ndev() && i < 8; i++) {
    const int d = net.devs[static_cast<size_t>(i)];
    ncclNetProperties_v11_t props{};
    if (!out.empty()) out += ", ";
    if (net.api->getProperties(d, &props) != ncclSuccess) {
      out += "device " + std::to_string(d) + " (no properties)";
      continue;
    }
    out += props.name != nullptr ? props.name : ("device " + std::to_string(d));
    out += " " + std::to_string(props.speed) + " Mbit/s";
    if (props.pciPath != nullptr) out += std::string(" at ") + props.pciPath;
  }
  if (net.ndev() > 8) out += ", ...";
  return out;
}

}  // namespace

ProxyWake::~ProxyWake() {
  if (fd_ >= 0) ::close(fd_);
}

bool ProxyWake::open() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return fd_ >= 0;
}

void ProxyWake::wake() {
  uint64_t one = 1;
  // A full counter (never in practice) still leaves the fd readable, which is all a wake needs.
  ssize_t n = ::write(fd_, &one, sizeof(one));
  (void)n;
}

void ProxyWake::drain() {
  uint64_t v;
  ssize_t n = ::read(fd_, &v, sizeof(v));
  (void)n;
}

void poisonFifo(const Fifo& f, uint64_t word, const uint64_t* calls) {
  FifoCtrl* ctrl = f.ctrl;
  if (calls != nullptr && __atomic_load_n(&ctrl->poison, __ATOMIC_ACQUIRE) == 0) {
    for (int i = 0; i < 3; i++) {
      __atomic_store_n(&ctrl->failCall[i], calls[i], __ATOMIC_RELAXED);
      __atomic_store_n(&ctrl->failCall2[i], calls[3 + i], __ATOMIC_RELAXED);
    }
    __atomic_store_n(&ctrl->failRanks, calls[6], __ATOMIC_RELAXED);
  }
  uint64_t zero = 0;
  __atomic_compare_exchange_n(&ctrl->poison, &zero, word, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

std::string netFailureSuffix(const RemoteTransport* net) {
  const std::string said = net != nullptr ? net->netFailure() : std::string();
  return said.empty() ? said : "; this rank's net said: " + said;
}

std::string setupFailureText(const RemoteTransport* net, const std::string& conn) {
  return conn + " failed while it was set up" + netFailureSuffix(net);
}

bool parseGdrLevel(const std::string& text, int* level) {
  static const struct {
    const char* name;
    int level;
  } kNames[] = {{"LOC", -1}, {"NVL", -1}, {"NVB", -1}, {"C2C", -1},  // nearer than any GPU-NIC path chorus knows
                {"PIX", static_cast<int>(PathClass::kPIX)},  {"PXB", static_cast<int>(PathClass::kPXB)},
                {"PXN", static_cast<int>(PathClass::kPXB)},  {"P2C", static_cast<int>(PathClass::kPXB)},
                {"PHB", static_cast<int>(PathClass::kPHB)},  {"SYS", static_cast<int>(PathClass::kSYS)}};
  for (const auto& n : kNames)
    if (strcasecmp(text.c_str(), n.name) == 0) return (*level = n.level), true;
  // NCCL's numbers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS (5, all, is SYS here too).
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || v < 0 || v > 5) return false;
  *level = v == 0 ? -1 : static_cast<int>(std::min<long>(v - 1, static_cast<long>(PathClass::kSYS)));
  return true;
}

NetGdr useNetGdr(const RemoteDeviceInfo& info, bool isSend, const GdrRuntimeInfo& rt, std::string* why) {
  int level = static_cast<int>(PathClass::kPXB);
  if (kNetGdrLevel.isSet() && !parseGdrLevel(kNetGdrLevel.get(), &level)) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      WARN("NCCL_NET_GDR_LEVEL=%s is not LOC, PIX, PXB, PHB, SYS or 0-5: PXB", kNetGdrLevel.get().c_str());
    });
    level = static_cast<int>(PathClass::kPXB);
  }
  auto no = [why](const std::string& text) { return (*why = text), NetGdr::kNone; };
  const std::string dev = "net device " + (info.name.empty() ? std::string("?") : info.name);
  if ((info.ptrSupport & NCCL_PTR_CUDA) == 0) return no(dev + " does not register GPU memory");
  std::string flushWhy;
  if (!isSend && !info.flushesGpuMemory && netNeedsFlush(info, rt, &flushWhy))
    return no("the net does not flush receives into GPU memory, and they need one (" + flushWhy + ")");
  if (level < 0) return no("NCCL_NET_GDR_LEVEL=" + kNetGdrLevel.get());
  if (info.gpuDistance < 0) return no("the topology does not place " + dev + " beside the GPU");
  const char* dist = pathClassName(static_cast<PathClass>(info.gpuDistance));
  if (info.gpuDistance > level)
    return no(dev + " is " + dist + " from the GPU, past NCCL_NET_GDR_LEVEL " +
              pathClassName(static_cast<PathClass>(level)));
  if (!rt.ok) return no("the GPU runtime: " + rt.why);
  // dma-buf first, as NCCL: it needs no kernel module beside the drivers.
  const bool netDmaBuf = (info.ptrSupport & NCCL_PTR_DMABUF) != 0;
  const bool dmaBuf = rt.paths.dmaBuf && netDmaBuf && kDmaBufEnable.get() != 0;
  if (!dmaBuf && !rt.paths.peerMemory) {
    return no("no peer-memory module (nvidia_peermem, or amdkfd's on ROCm) is loaded, and " +
              (!rt.paths.dmaBuf        ? std::string("the GPU driver exports no dma-buf")
               : !netDmaBuf      ? dev + " does not take dma-buf registrations"
                                 : std::string("NCCL_DMABUF_ENABLE=0")));
  }
  if (isSend) {
    const int64_t read = kNetGdrRead.get();
    if (read == 0 || (read < 0 && rt.computeCap < 80))
      return no(read == 0 ? "NCCL_NET_GDR_READ=0" : "compute capability below 8.0 (NCCL_NET_GDR_READ unset)");
  }
  *why = dev + ", " + dist + " from the GPU" + (dmaBuf ? ", dma-buf" : "");
  return dmaBuf ? NetGdr::kDmaBuf : NetGdr::kPeerMemory;
}

bool netNeedsFlush(const RemoteDeviceInfo& info, const GdrRuntimeInfo& rt, std::string* why) {
  if (info.forceFlush) return (*why = "the net device asks for it"), true;
  if (kNetForceFlush.get() == 1) return (*why = "NCCL_NET_FORCE_FLUSH=1"), true;
  if (rt.computeCap < 90) {
    *why = rt.computeCap == 0 ? "compute capability unknown" : "compute capability below 9.0";
    return true;
  }
  if (rt.cpuArch != "x86_64") {
    *why = "compute capability 9.0 or more, but " +
           (rt.cpuArch.empty() ? std::string("the CPU architecture is unknown") : "the host is " + rt.cpuArch) +
           ", which may reach its GPU over C2C";
    return true;
  }
  *why = "compute capability 9.0 or more on an x86 host";
  return false;
}

void releaseRemoteData(RemoteData d) {
  if (d.dmaBufFd >= 0) close(d.dmaBufFd);
  if (d.release) d.release();
}

void* allocRemoteFifo(const FifoGeometry& geo, bool dataApart) {
  // Whole pages: the device path pins this memory for its GPU (network staging), and a page shared with another
  // allocation could not be pinned twice. (dataOffset() is a whole number of pages.)
  size_t bytes = remoteHostBytes(geo, dataApart);
  void* mem = std::aligned_alloc(4096, bytes);
  if (mem != nullptr) std::memset(mem, 0, bytes);
  return mem;
}

ncclResult_t createRemoteTransport(ncclComm* comm, std::unique_ptr<RemoteTransport>* out) {
  out->reset();
  NetChoice net;
  ncclResult_t chosen = choose(comm, &net);
  if (chosen == ncclSuccess) chosen = fuseDevices(comm, &net);  // a failure releases the net below, after the exchange
  // Every rank takes part in the exchange, even one whose choice failed (it sends an empty name), so that the others
  // fail naming it rather than waiting. Each rank's entry: its net's name, how many devices it offers, and how its
  // proxy frames a slot (CHORUS_NET_SLOT_TRAILER), which both ends of a connection must share.
  struct Entry {
    char name[56];
    int32_t ndev;
    int32_t trailer;
  };
  static_assert(sizeof(Entry) == 64, "one bootstrap allgather entry");
  std::vector<Entry> entries(comm->nranks, Entry{});
  std::string mine = chosen != ncclSuccess ? "" : net.name;
  strncpy(entries[comm->rank].name, mine.c_str(), sizeof(Entry::name) - 1);
  entries[comm->rank].ndev = chosen != ncclSuccess ? 0 : net.ndev();
  // As set, or by the net: chorus's IB net takes a message of any size alike; a plugin may have thresholds.
  const int64_t asSet = kSlotTrailer.get();
  const int32_t trailer = asSet > 0 || (asSet < 0 && chosen == ncclSuccess && net.api == ibNet()) ? 1 : 0;
  entries[comm->rank].trailer = trailer;
  ncclResult_t ag = comm->bootstrap->allGather(entries.data(), sizeof(Entry));
  auto release = [&]() {
    if (net.api == nullptr || net.api->finalize == nullptr || net.ctx == nullptr) return;
    std::lock_guard<std::mutex> setup(netSetupMutex());
    net.api->finalize(net.ctx);
  };
  if (chosen != ncclSuccess || ag != ncclSuccess) {
    release();
    return chosen != ncclSuccess ? chosen : ag;
  }
  int common = net.ndev();
  for (int r = 0; r < comm->nranks; r++) {
    const char* theirs = entries[r].name;
    common = std::min(common, static_cast<int>(entries[r].ndev));
    if (strncmp(theirs, entries[comm->rank].name, sizeof(Entry::name)) == 0) continue;  // as sent: cut to 55
    release();
    if (theirs[0] == '\0')
      CHORUS_FAIL(comm, ncclSystemError, "rank %d: rank %d could not choose a net between hosts (see its log)",
                  comm->rank, r);
    CHORUS_FAIL(comm, ncclInvalidUsage,
                "rank %d chose the net %s between hosts but rank %d chose %s: set NCCL_NET (and NCCL_NET_PLUGIN) or "
                "config.netName the same way on every rank",
                comm->rank, mine.c_str(), r, theirs);
  }
  // (Only over a net that takes it: the socket and UCX nets frame slots their own way.)
  for (int r = 0; r < comm->nranks && net.takesTrailers(); r++) {
    if (entries[r].trailer == trailer) continue;
    release();
    CHORUS_FAIL(comm, ncclInvalidUsage,
                "rank %d frames its slots with CHORUS_NET_SLOT_TRAILER=%d but rank %d with %d: set it the same way "
                "on every rank",
                comm->rank, trailer, r, entries[r].trailer);
  }
  net.slotTrailer = trailer != 0 && net.takesTrailers();
  INFO(kNet | kInit, "rank %d: net %s between hosts, %d device(s): %s (%s)", comm->rank, net.name.c_str(), net.ndev(),
       describeDevices(net).c_str(), net.reason.c_str());
  net.commonDevices = std::max(common, 1);
  auto proxy = std::make_unique<NetProxy>(comm, net);
  CHORUS_CHECK(proxy->start());
  *out = std::move(proxy);
  return ncclSuccess;
}

}  // namespace chorus
