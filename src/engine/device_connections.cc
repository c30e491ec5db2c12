#include "engine/device_connections.h"

#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>

#include "chorus/net.h"
#include "core/checks.h"
#include "core/params.h"
#include "core/process.h"
#include "core/timeout.h"
#include "kernels/device_work.h"
#include "topo/affinity.h"
#include "topo/topology.h"
#include "transports/remote.h"
#include "transports/shm/shm.h"

namespace chorus {
namespace {

IntParam kP2PRead{"CHORUS_P2P_READ", 0,
                  "Device connections: 0 (write mode) puts each FIFO in the receiver's GPU memory and the sender "
                  "writes across the link; 1 (read mode) puts it in the sender's memory and the receiver reads.",
                  "transport"};
IntParam kP2PDisable{"NCCL_P2P_DISABLE", 0,
                     "1: GPUs of one host never map each other's memory (device FIFOs between them in pinned host "
                     "memory; windows not mapped across GPUs), as NCCL_P2P_LEVEL=LOC.",
                     "transport"};
StrParam kP2PLevel{"NCCL_P2P_LEVEL", "",
                   "The farthest path between two GPUs of a host over which they map each other's memory: LOC "
                   "(never), NVL (an NVLink or xGMI link), PIX, PXB, PHB, SYS, or NCCL's 0-5. A link counts as "
                   "nearer than any PCI path; the classes come from the host topology (docs/topology.md), and a "
                   "pair it does not place is taken as SYS. Unset: NCCL's default (PXB; SYS on AMD x86 CPUs with "
                   "at most two GPUs; for AMD GPUs RCCL's: SYS, PXB on ARM, Intel and Zhaoxin CPUs) where the "
                   "topology places both GPUs and knows their links, else wherever the GPU runtime allows.",
                   "transport"};

constexpr size_t kRendezvousBytes = 4096;           ///< one page per rendezvous record
constexpr uint64_t kReady = 0x63686f7275734456ull;  // "chorusDV"

// FIFO memory of one process is shared by the communicators of its ranks (several ranks per process): the
// owner's allocation is freed when the last communicator using it is destroyed, never under a peer's kernel.
std::mutex gSharedMutex;
std::map<void*, int> gSharedRefs;

void retainShared(void* p) {
  std::lock_guard<std::mutex> lock(gSharedMutex);
  gSharedRefs[p]++;
}

void releaseShared(GpuRuntime* rt, void* p) {
  {
    std::lock_guard<std::mutex> lock(gSharedMutex);
    auto it = gSharedRefs.find(p);
    if (it != gSharedRefs.end() && --it->second > 0) return;
    if (it != gSharedRefs.end()) gSharedRefs.erase(it);
  }
  rt->deviceFree(p);
}

}  // namespace

bool p2pReadSetting() { return kP2PRead.get() != 0; }

std::string p2pPolicySetting() {
  return std::to_string(kP2PDisable.get()) + "/" + (kP2PLevel.isSet() ? kP2PLevel.get() : std::string("-"));
}

PathClass p2pDefaultLevel(const std::string& arch, const std::string& vendor, bool amdGpus, int hostGpus) {
  if (arch.empty() && vendor.empty()) return PathClass::kNone;
  const bool arm = arch == "aarch64" || arch == "arm64" || arch.rfind("arm", 0) == 0;
  const bool x86 = arch == "x86_64" || arch == "i686" || arch == "amd64" || (arch.empty() && !vendor.empty());
  if (amdGpus) {
    const bool narrow =
        arm ||
        (x86 && (vendor == "GenuineIntel" || vendor == "CentaurHauls" || vendor.find("Shanghai") != std::string::npos));
    return narrow ? PathClass::kPXB : PathClass::kSYS;
  }
  return x86 && vendor == "AuthenticAMD" && hostGpus <= 2 ? PathClass::kSYS : PathClass::kPXB;
}

namespace {

// P2P between two GPUs of this host with NCCL_P2P_LEVEL unset (p2pPermitted).
bool p2pByDefault(const ncclComm* comm, const PeerInfo& me, const PeerInfo& far, std::string* why) {
  const HostTopology& t = processTopology();
  const int a = topologyGpuIndex(t, me.busId), b = topologyGpuIndex(t, far.busId);
  // A pair the topology does not place, or whose links it does not know (NVML or ROCm SMI did not answer for it: an
  // NVLink may be there unseen), is left to the runtime.
  if (a < 0 || b < 0 || !t.gpus[a].linksKnown || !t.gpus[b].linksKnown || t.gpuLink(a, b) != nullptr) return true;
  std::set<int64_t> hostGpus;
  for (const PeerInfo& p : comm->peers)
    if (p.hostHash == me.hostHash && p.busId >= 0) hostGpus.insert(p.busId);
  const bool amd = t.gpus[a].vendor == 0x1002 && t.gpus[b].vendor == 0x1002;
  const PathClass farthest = p2pDefaultLevel(t.cpuArch, t.cpuVendor, amd, static_cast<int>(hostGpus.size()));
  const PathClass c = t.gpuGpu(a, b);
  if (farthest == PathClass::kNone || (c != PathClass::kNone && c <= farthest)) return true;
  *why = std::string("NCCL_P2P_LEVEL unset: ") + (amd ? "RCCL's" : "NCCL's") + " default on this host (" + t.cpuText() +
         " CPUs, " + std::to_string(hostGpus.size()) + " GPU(s) of the communicator) is " + pathClassName(farthest) +
         ", and GPUs " + t.gpus[a].busId + " and " + t.gpus[b].busId + " are " + pathClassName(c) +
         " apart with no NVLink or xGMI link between them (NCCL_P2P_LEVEL=" + pathClassName(c) + " allows it)";
  return false;
}

}  // namespace

bool p2pPermitted(const ncclComm* comm, int peer, std::string* why) {
  const PeerInfo& me = comm->peers[comm->rank];
  const PeerInfo& far = comm->peers[peer];
  if (me.busId >= 0 ? me.busId == far.busId : me.cudaDev == far.cudaDev) return true;  // one GPU
  if (kP2PDisable.get() != 0) return (*why = "NCCL_P2P_DISABLE=" + std::to_string(kP2PDisable.get())), false;
  if (!kP2PLevel.isSet()) return p2pByDefault(comm, me, far, why);
  const std::string level = kP2PLevel.get(), setting = "NCCL_P2P_LEVEL=" + level;
  const bool linkOnly = strcasecmp(level.c_str(), "NVL") == 0 || strcasecmp(level.c_str(), "NVB") == 0 ||
                        strcasecmp(level.c_str(), "C2C") == 0;
  int farthest = static_cast<int>(PathClass::kSYS);
  if (!linkOnly && !parseGdrLevel(level, &farthest)) {
    static std::once_flag warned;
    std::call_once(warned,
                   [&setting] { WARN("%s is not LOC, NVL, PIX, PXB, PHB, SYS or 0-5: ignored", setting.c_str()); });
    return true;
  }
  if (!linkOnly && farthest < 0) return (*why = setting), false;
  const HostTopology& t = processTopology();
  const int a = topologyGpuIndex(t, me.busId), b = topologyGpuIndex(t, far.busId);
  const bool placed = a >= 0 && b >= 0;
  if (placed && t.gpuLink(a, b) != nullptr) return true;
  const std::string pair =
      "GPUs " + (a >= 0 ? t.gpus[a].busId : std::string("?")) + " and " + (b >= 0 ? t.gpus[b].busId : std::string("?"));
  if (linkOnly) return (*why = setting + ", and the host topology has no NVLink or xGMI link between " + pair), false;
  const PathClass c = placed ? t.gpuGpu(a, b) : PathClass::kSYS;
  if (c != PathClass::kNone && static_cast<int>(c) <= farthest) return true;
  *why = setting + ", and " + pair + " are " + pathClassName(c) + " apart" +
         (placed ? "" : " (the host topology does not place them)");
  return false;
}

std::string describeDevChannel(int ch) {
  if (ch == kDevIpcChannel) return "inboxes";
  std::string s = "channel " + std::to_string(ch % kDevMaxChannels);
  return ch < kDevMaxChannels ? s : s + " lane " + std::to_string(ch / kDevMaxChannels);
}

/// What the owner of a device FIFO publishes for the other end.
struct DeviceConnections::Rendezvous {
  RendezvousHead head;  ///< head.ready: kReady once the fields below are written
  uint64_t ownerPid;
  int32_t ownerDev;
  int32_t mode;  ///< 0: GPU memory (ptr in-process, handle otherwise), 1: pinned shm segment hostName
  uint64_t ptr;
  IpcHandle handle;
  char hostName[96];
};

DeviceConnections::DeviceConnections(ncclComm* comm, GpuRuntime* rt, const FifoGeometry& geo, Connections* host)
    : comm_(comm), rt_(rt), geo_(geo), host_(host), readMode_(kP2PRead.get() != 0) {}

DeviceConnections::~DeviceConnections() {
  for (auto& kv : conns_) {
    DevConn& c = kv.second;
    if (c.opened) rt_->ipcCloseHandle(c.opened);
    if (c.staged) rt_->hostUnregister(c.staged);  // the net transport frees it after this
    if (c.ownedDev) releaseShared(rt_, c.ownedDev);
    if (c.hostSeg) {
      rt_->hostUnregister(c.hostSeg);
      munmap(c.hostSeg, c.hostSize);
    }
    if (!c.hostName.empty()) shm_unlink(c.hostName.c_str());  // harmless when the far end already did
  }
  for (const std::string& n : rendezvous_) shm_unlink(n.c_str());
  if (steps_) rt_->deviceFree(steps_);
}

void DeviceConnections::drainOwned() {
  Deadline deadline = Deadline::fromEnv();
  for (auto& kv : conns_) {
    DevConn& c = kv.second;
    // (Staging FIFOs belong to the net transport, which sends what was published before it shuts down.)
    if (!c.fifo.isSend || !owns(true) || c.fifo.base == nullptr || c.staged || c.fifo.channel == kDevIpcChannel)
      continue;
    uint64_t produced = 0;
    if (rt_->copyToHost(&produced, c.fifo.step, sizeof(produced)) != ncclSuccess) return;
    Backoff backoff;
    for (;;) {
      uint64_t ctrl[2] = {0, 0};  // FifoCtrl: head at offset 64, poison at 128
      if (rt_->copyToHost(&ctrl[0], c.fifo.base + offsetof(FifoCtrl, head), sizeof(uint64_t)) != ncclSuccess ||
          rt_->copyToHost(&ctrl[1], c.fifo.base + offsetof(FifoCtrl, poison), sizeof(uint64_t)) != ncclSuccess)
        return;
      if (ctrl[0] >= produced || ctrl[1] != 0) break;
      if (comm_->abortFlag.load() || deadline.expired()) {
        WARN("rank %d: freeing a device FIFO that rank %d has not finished reading (%lu of %lu slots)", comm_->rank,
             c.fifo.peer, static_cast<unsigned long>(ctrl[0]), static_cast<unsigned long>(produced));
        return;
      }
      backoff.pause();
    }
  }
}

bool rendezvousStale(const std::string& name) {
  const auto* head = static_cast<const RendezvousHead*>(shmMapMine(name, sizeof(RendezvousHead)));
  if (head == nullptr) return false;
  uint64_t a = __atomic_load_n(&head->pids[0], __ATOMIC_ACQUIRE), b = __atomic_load_n(&head->pids[1], __ATOMIC_ACQUIRE);
  munmap(const_cast<RendezvousHead*>(head), sizeof(RendezvousHead));
  return (a != 0 || b != 0) && (a == 0 || shmPidGone(a)) && (b == 0 || shmPidGone(b));
}

int sweepStaleRendezvous() {
  // Records, not the pinned FIFOs a record may name (shmSweepStale's).
  return shmSweep([](const char* n) { return shmKind(n) == ShmKind::kDeviceRecord; }, rendezvousStale);
}

ncclResult_t DeviceConnections::init() {
  int swept = sweepStaleRendezvous();
  if (swept > 0)
    INFO(kShm, "rank %d: removed %d device-connection record(s) left by exited processes", comm_->rank, swept);
  size_t n = static_cast<size_t>(kDevIpcChannel + 1) * comm_->nranks * 2;  // every lane's, and the inboxes'
  void* p = nullptr;
  if (rt_->deviceAlloc(n * sizeof(uint64_t), &p) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: allocating device step counters: %s", comm_->rank,
                rt_->lastError().c_str());
  steps_ = static_cast<uint64_t*>(p);
  return ncclSuccess;
}

uint64_t* DeviceConnections::stepCounter(int ch, int peer, bool isSend) const {
  return steps_ + (static_cast<size_t>(ch) * comm_->nranks + peer) * 2 + (isSend ? 1 : 0);
}

std::string DeviceConnections::rendezvousName(int ch, int from, int to) const {
  return shmFifoName(comm_->commHash, ch, from, to, 'd');
}

ncclResult_t DeviceConnections::get(const std::vector<std::tuple<int, int, bool>>& need, std::vector<DevFifo>* out) {
  // Pass 1: what this rank owns or stages (never waits). Pass 2: what it opens (waits for the owner's record).
  // New connections are made near the GPU, so that the pinned host memory they first touch is on its NUMA node.
  std::optional<NearGpuScope> nearGpu;
  for (int pass = 0; pass < 2; pass++) {
    for (const auto& key : need) {
      int ch = std::get<0>(key), peer = std::get<1>(key);
      bool isSend = std::get<2>(key);
      bool first = remote(peer) || owns(isSend);
      if (first != (pass == 0) || conns_.count(key)) continue;
      if (!nearGpu) nearGpu.emplace(comm_->peers[comm_->rank].busId);
      DevConn c;
      c.fifo.geo = geo_;
      c.fifo.channel = static_cast<int16_t>(ch);
      c.fifo.peer = static_cast<int16_t>(peer);
      c.fifo.isSend = isSend ? 1 : 0;
      c.fifo.step = stepCounter(ch, peer, isSend);
      ncclResult_t res = remote(peer) ? stage(ch, peer, isSend, &c)
                         : pass == 0  ? publish(ch, peer, isSend, &c)
                                      : open(ch, peer, isSend, &c);
      conns_.emplace(key, c);  // kept even on failure so the destructor releases what was made
      if (res != ncclSuccess) return res;
      INFO(kP2P, "rank %d: device connection %s %s rank %d via %s", comm_->rank, describeDevChannel(ch).c_str(),
           isSend ? "to" : "from", peer, c.kind);
    }
  }
  out->clear();
  for (const auto& key : need) out->push_back(conns_.at(key).fifo);
  return ncclSuccess;
}

ncclResult_t DeviceConnections::mapRendezvous(int ch, int peer, bool isSend, std::string* name, Rendezvous** out) {
  static_assert(sizeof(Rendezvous) <= kRendezvousBytes, "rendezvous record fits its segment");
  // Either end may come first, so both create the segment (zero-filled: not ready).
  int from = isSend ? comm_->rank : peer, to = isSend ? peer : comm_->rank;
  *name = rendezvousName(ch, from, to);
  int err = 0;
  const char* call = "";
  void* p = shmMapNamed(*name, kRendezvousBytes, true, &err, &call);
  if (p == nullptr)
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: mapping %s for the device connection with rank %d: %s: %s",
                comm_->rank, name->c_str(), peer, call, strerror(err));
  *out = static_cast<Rendezvous*>(p);
  __atomic_store_n(&(*out)->head.pids[owns(isSend) ? 0 : 1], static_cast<uint64_t>(getpid()), __ATOMIC_RELEASE);
  return ncclSuccess;
}

ncclResult_t DeviceConnections::publish(int ch, int peer, bool isSend, DevConn* c) {
  const PeerInfo& far = comm_->peers[peer];
  const PeerInfo& me = comm_->peers[comm_->rank];
  std::string name;
  Rendezvous* rv = nullptr;
  CHORUS_CHECK(mapRendezvous(ch, peer, isSend, &name, &rv));
  rendezvous_.push_back(name);
  int err = 0;
  const char* call = "";
  Rendezvous r = {};
  r.ownerPid = static_cast<uint64_t>(getpid());
  r.ownerDev = comm_->cudaDev;
  size_t bytes = bytesFor(ch);
  bool samePid = far.pid == me.pid;
  std::string notP2p;
  if (!p2pPermitted(comm_, peer, &notP2p))
    INFO(kP2P, "rank %d: device connection %s %s rank %d in pinned host memory: %s", comm_->rank,
         describeDevChannel(ch).c_str(), isSend ? "to" : "from", peer, notP2p.c_str());
  if (notP2p.empty() && rt_->canAccessPeer(comm_->cudaDev, far.cudaDev)) {
    ncclResult_t res = rt_->deviceAlloc(bytes, &c->ownedDev);
    // One reference for this end and, when the peer is a thread of this process, one for the peer taken now:
    // the peer may still be reading after this communicator is destroyed. (If it never opens, the FIFO lives
    // until the process exits.)
    if (res == ncclSuccess) retainShared(c->ownedDev);
    if (res == ncclSuccess && samePid) retainShared(c->ownedDev);
    if (res == ncclSuccess && !samePid) res = rt_->ipcGetHandle(c->ownedDev, &r.handle);
    if (res != ncclSuccess) {
      munmap(rv, kRendezvousBytes);
      CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: device FIFO for rank %d: %s", comm_->rank, peer,
                  rt_->lastError().c_str());
    }
    r.mode = 0;
    r.ptr = reinterpret_cast<uint64_t>(c->ownedDev);
    c->fifo.base = static_cast<char*>(c->ownedDev);
    c->kind = comm_->cudaDev == far.cudaDev ? "local (same GPU)" : samePid ? "p2p (same process)" : "p2p/IPC";
  } else {
    // The GPUs cannot map each other: the FIFO lives in pinned host memory both map.
    c->hostName = name + "-h";
    c->hostSize = bytes;
    c->hostSeg = shmMapNamed(c->hostName, bytes, true, &err, &call);
    void* dev = nullptr;
    if (c->hostSeg == nullptr || rt_->hostRegister(c->hostSeg, bytes, &dev) != ncclSuccess) {
      munmap(rv, kRendezvousBytes);
      CHORUS_FAIL(comm_, ncclSystemError, "rank %d: pinned FIFO %s for rank %d: %s", comm_->rank, c->hostName.c_str(),
                  peer, c->hostSeg ? rt_->lastError().c_str() : (std::string(call) + ": " + strerror(err)).c_str());
    }
    r.mode = 1;
    snprintf(r.hostName, sizeof(r.hostName), "%s", c->hostName.c_str());
    shmFifoRecordEnds(static_cast<FifoCtrl*>(c->hostSeg), far.pid);  // for shmSweepStale
    c->fifo.base = static_cast<char*>(dev);
    c->kind = "shm (pinned host memory)";
  }
  constexpr size_t kBody = sizeof(RendezvousHead);  // the head is written by each end itself
  std::memcpy(reinterpret_cast<char*>(rv) + kBody, reinterpret_cast<const char*>(&r) + kBody,
              sizeof(Rendezvous) - kBody);
  __atomic_store_n(&rv->head.ready, kReady, __ATOMIC_RELEASE);
  munmap(rv, kRendezvousBytes);
  return ncclSuccess;
}

ncclResult_t DeviceConnections::stage(int ch, int peer, bool isSend, DevConn* c) {
  // GPUDirect RDMA where the net and the GPU allow it: the slot data in GPU memory, which the NIC reads or writes in
  // place; the control words and headers stay in the host memory the proxy polls.
  RemoteTransport* remote = host_->remote();
  RemoteDeviceInfo info;
  RemoteData data;
  std::string why = "no net device information";
  NetGdr way = NetGdr::kNone;
  GdrRuntimeInfo gpu;
  if (remote != nullptr && remote->deviceInfo(kDeviceNetChannelBase + ch, &info)) {
    gpu.ok = rt_->gpuDirectRdma(comm_->cudaDev, &gpu.paths, &gpu.why);
    gpu.computeCap = rt_->computeCapability(comm_->cudaDev);
    gpu.cpuArch = processTopology().cpuArch;
    way = useNetGdr(info, isSend, gpu, &why);
  }
  if (way != NetGdr::kNone) {
    const size_t bytes = geo_.slotStride() * geo_.nSlots;
    void* p = nullptr;
    if (rt_->deviceAlloc(bytes, &p) != ncclSuccess) {
      why = "GPU memory for the FIFO: " + rt_->lastError();
      way = NetGdr::kNone;
    } else {
      GpuRuntime* rt = rt_;
      data.ptr = static_cast<char*>(p);
      data.ptrType = NCCL_PTR_CUDA;
      data.release = [rt, p]() { rt->deviceFree(p); };
      data.toHost = [rt](void* dst, const void* src, size_t bytes) {
        return rt->copyToHost(dst, src, bytes) == ncclSuccess;
      };
      data.toDevice = [rt](void* dst, const void* src, size_t bytes) {
        return rt->copyToDevice(dst, src, bytes) == ncclSuccess;
      };
      if (way == NetGdr::kDmaBuf && rt_->dmaBufFd(p, bytes, &data.dmaBufFd, &data.dmaBufOffset) != ncclSuccess) {
        // The driver said it exports dma-bufs but did not: decided again without dma-buf (peer memory where there is
        // some, else host memory).
        const std::string err = rt_->lastError();
        WARN("rank %d: exporting the FIFO's GPU memory as a dma-buf failed (%s): %s", comm_->rank, err.c_str(),
             gpu.paths.peerMemory ? "registering it through peer memory" : "staging through pinned host memory");
        data.dmaBufFd = -1;
        gpu.paths.dmaBuf = false;
        way = useNetGdr(info, isSend, gpu, &why);
        why += " (dma-buf export failed: " + err + ")";
        if (way == NetGdr::kNone) {
          data.release();
          data = RemoteData{};
        }
      }
    }
  }
  const bool gdr = way != NetGdr::kNone;
  if (gdr && !isSend) {
    std::string flushWhy;
    data.flush = netNeedsFlush(info, gpu, &flushWhy);
    why += std::string(data.flush ? "; each receive flushed: " : "; no flush: ") + flushWhy;
  }
  Conn* hc = nullptr;
  CHORUS_CHECK(host_->staging(ch, peer, isSend, &hc, gdr ? &data : nullptr));
  void* mem = hc->fifo.ctrl;  // the FIFO memory starts with its control block
  const bool apart = hc->fifo.data != static_cast<char*>(mem) + geo_.dataOffset();
  void* dev = nullptr;
  if (rt_->hostRegister(mem, remoteHostBytes(geo_, apart), &dev) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: pinning the network staging FIFO %s rank %d: %s",
                comm_->rank, isSend ? "to" : "from", peer, rt_->lastError().c_str());
  c->staged = mem;
  c->fifo.base = static_cast<char*>(dev);
  c->fifo.data = apart ? hc->fifo.data : nullptr;
  c->fifo.flags = kDevFifoStaged;
  c->kind = apart ? "network, GPUDirect RDMA (slot data in GPU memory, net proxy)"
                  : "network staging (pinned host memory, net proxy)";
  INFO(kNet, "rank %d: %s %s rank %d: %s (%s)", comm_->rank, describeDevChannel(ch).c_str(), isSend ? "->" : "<-",
       peer, apart ? "GPUDirect RDMA" : "staged through pinned host memory", why.c_str());
  return ncclSuccess;
}

ncclResult_t DeviceConnections::open(int ch, int peer, bool isSend, DevConn* c) {
  const PeerInfo& far = comm_->peers[peer];
  std::string name;
  Rendezvous* rv = nullptr;
  CHORUS_CHECK(mapRendezvous(ch, peer, isSend, &name, &rv));
  int err = 0;
  const char* call = "";
  Deadline deadline = Deadline::fromEnv();
  SlowWait slow;
  Backoff backoff;
  while (__atomic_load_n(&rv->head.ready, __ATOMIC_ACQUIRE) != kReady) {
    slow.check([&]() {
      return "device path: " + commLabel(comm_) + " has waited " + slow.elapsedText() + " s for " +
             (comm_->bootstrap ? comm_->bootstrap->describePeer(peer) : "rank " + std::to_string(peer)) +
             " to set up its device connection (" + describeDevChannel(ch) + ") (CHORUS_TIMEOUT_S " +
             secondsText(deadline.seconds()) + " s)";
    });
    const char* why = nullptr;
    if (comm_->abortFlag.load(std::memory_order_relaxed)) why = "the communicator was aborted";
    if (far.pid != comm_->peers[comm_->rank].pid && processGone(static_cast<pid_t>(far.pid)))
      why = "that rank's process died";
    if (why == nullptr && deadline.expired()) why = "it did not call the same operation before CHORUS_TIMEOUT_S";
    if (why == nullptr && stopCheck_) {
      std::string mismatch = stopCheck_();
      if (!mismatch.empty()) {
        munmap(rv, kRendezvousBytes);
        CHORUS_FAIL(comm_, ncclInvalidUsage, "%s (found while waiting for its device connection, %s)", mismatch.c_str(),
                    describeDevChannel(ch).c_str());
      }
    }
    if (why) {
      munmap(rv, kRendezvousBytes);
      CHORUS_FAIL(comm_, ncclRemoteError, "rank %d: waiting for rank %d to set up the device connection (%s): %s",
                  comm_->rank, peer, describeDevChannel(ch).c_str(), why);
    }
    backoff.pause();
  }
  Rendezvous r;
  std::memcpy(&r, rv, sizeof(r));
  munmap(rv, kRendezvousBytes);
  shm_unlink(name.c_str());  // both ends have it now
  if (r.mode == 0) {
    if (r.ownerPid == static_cast<uint64_t>(getpid())) {
      // The owner took this end's reference when it published (see publish), so the memory outlives both.
      c->fifo.base = reinterpret_cast<char*>(r.ptr);
      c->ownedDev = reinterpret_cast<void*>(r.ptr);
      if (r.ownerDev != comm_->cudaDev) rt_->enablePeerAccess(r.ownerDev);
      c->kind = r.ownerDev == comm_->cudaDev ? "local (same GPU)" : "p2p (same process)";
    } else {
      if (rt_->ipcOpenHandle(r.handle, &c->opened) != ncclSuccess)
        CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: mapping rank %d's FIFO (pid %lu) through IPC: %s",
                    comm_->rank, peer, static_cast<unsigned long>(r.ownerPid), rt_->lastError().c_str());
      c->fifo.base = static_cast<char*>(c->opened);
      c->kind = "p2p/IPC";
    }
  } else {
    c->hostName = r.hostName;
    c->hostSize = bytesFor(ch);
    c->hostSeg = shmMapNamed(c->hostName, c->hostSize, false, &err, &call);
    void* dev = nullptr;
    if (c->hostSeg == nullptr || rt_->hostRegister(c->hostSeg, c->hostSize, &dev) != ncclSuccess)
      CHORUS_FAIL(comm_, ncclSystemError, "rank %d: mapping rank %d's pinned FIFO %s: %s", comm_->rank, peer,
                  c->hostName.c_str(),
                  c->hostSeg ? rt_->lastError().c_str() : (std::string(call) + ": " + strerror(err)).c_str());
    shm_unlink(c->hostName.c_str());
    c->hostName.clear();
    c->fifo.base = static_cast<char*>(dev);
    c->kind = "shm (pinned host memory)";
  }
  return ncclSuccess;
}

}  // namespace chorus
