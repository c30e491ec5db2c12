// The engine's view of the transport between hosts: connections whose ends are local FIFOs, moved by a proxy
// thread. The implementation is the net proxy (transports/net/), which drives any net behind NCCL's ncclNet
// interface: sockets (transports/socket/), UCX, IB verbs, an external plugin. createRemoteTransport() picks the net
// as NCCL does (NCCL_NET, NCCL_NET_PLUGIN, NCCL_IB_DISABLE; docs/net.md).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "core/comm.h"
#include "kernels/fifo.h"
#include "runtime/runtime.h"

namespace chorus {

/// SlotHeader::bytes value that marks a failure notice sent in band (never a valid payload size): its seq holds the
/// sender's FIFO poison word.
constexpr uint32_t kPoisonFrameBytes = 0xffffffffu;

/// Whether a poison word received from a peer is well formed for a communicator of `nranks`.
inline bool poisonWordValid(uint64_t word, int nranks) {
  uint32_t reason = static_cast<uint32_t>(word >> 32);
  uint32_t culpritPlus1 = static_cast<uint32_t>(word);
  return reason >= static_cast<uint32_t>(PoisonReason::kPeerDied) &&
         reason <= static_cast<uint32_t>(PoisonReason::kNetSetup) && culpritPlus1 >= 1 &&
         culpritPlus1 <= static_cast<uint32_t>(nranks);
}

/// GPU memory that holds a connection's Simple slot data instead of the FIFO's host memory (GPUDirect RDMA: the net
/// reads and writes it in place). The FIFO's control words and headers stay in host memory.
struct RemoteData {
  char* ptr = nullptr;            ///< geo.nSlots x geo.slotStride() bytes
  int ptrType = 0;                ///< how the net registers it (NCCL_PTR_CUDA)
  std::function<void()> release;  ///< frees it; called once the transport no longer uses it
  /// GPUDirect RDMA through dma-buf (NetGdr::kDmaBuf): a dma-buf file descriptor for the memory and ptr's offset into
  /// it; the net registers it with regMrDmaBuf. The transport owns the descriptor: it closes it once registered or,
  /// never registered, with release. -1: regMr with ptrType.
  int dmaBufFd = -1;
  uint64_t dmaBufOffset = 0;
  /// Copies GPU memory to host memory (a failure notice's payload arrives there); false on failure.
  std::function<bool(void* dst, const void* src, size_t bytes)> toHost;
  /// Copies host memory to GPU memory (a slot's payload that a net delivered to host memory with its header); false
  /// on failure.
  std::function<bool(void* dst, const void* src, size_t bytes)> toDevice;
  /// A receiving side: each receive into ptr is flushed (iflush) before the kernel reads it (netNeedsFlush).
  bool flush = true;
};

/// Ends a RemoteData the transport owns: closes its dma-buf descriptor, if still open, and calls release.
void releaseRemoteData(RemoteData d);

/// What a transport's connections of one channel can take, for the device path's choice of GPUDirect RDMA.
struct RemoteDeviceInfo {
  int ptrSupport = 0;     ///< NCCL_PTR_* the net device of that channel registers
  int gpuDistance = -1;   ///< its PCI distance class to this rank's GPU (PathClass), -1 when the topology has none
  std::string name;       ///< the net device's name
  bool flushesGpuMemory = true;  ///< the net's iflush makes receives into GPU memory visible (NetChoice)
  bool forceFlush = false;       ///< its properties' forceFlush: receives into GPU memory always need a flush
};

/// Channels from this one up are the device path's (network staging, Connections::staging): their FIFOs are filled
/// and drained by kernels, which poison them when they fail without telling the transport (RemoteTransport's
/// markFailed), so the transport passes such a failure on itself.
constexpr int kDeviceNetChannelBase = 64;

/// Connections to ranks on other hosts, progressed by one proxy thread per communicator.
class RemoteTransport {
 public:
  virtual ~RemoteTransport() = default;
  /// Connects (lazily, once) the send side of (channel, peer); *out views the local FIFO. Never waits for the peer.
  /// With `data`, the FIFO's slot data is that GPU memory (the transport then owns it: see RemoteData).
  virtual ncclResult_t connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out,
                                   const RemoteData* data = nullptr) = 0;
  /// Prepares the receive side of (channel, peer); *out views the local FIFO.
  virtual ncclResult_t connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out,
                                   const RemoteData* data = nullptr) = 0;
  /// What the connections of `channel` would use; false when the transport cannot say (no GPUDirect RDMA then).
  virtual bool deviceInfo(int channel, RemoteDeviceInfo* out) const {
    (void)channel;
    (void)out;
    return false;
  }
  /// Flushes what was published, closes every connection and stops the proxy (peers see the connection end).
  virtual void shutdown() = 0;
  /// This rank failed with FIFO poison `word`: the proxy passes it on to peers where the transport can.
  virtual void markFailed(uint64_t word) = 0;
  /// For a mismatch, called before markFailed: the two calls and the ranks (FifoCtrl's failCall, failCall2 and
  /// failRanks, 7 words), which a transport that can passes on so that every rank's error names both calls.
  virtual void markFailedCalls(const uint64_t* calls) { (void)calls; }
  /// Called by the executor after it published or freed a slot: wakes a sleeping proxy (a fence and a load when
  /// the proxy is awake).
  virtual void kick() = 0;
  /// Called by a rank's thread that published a slot of FIFO `f` of this transport (data, or a freed slot): moves what
  /// can move now on f's connection (posts sends or receives, tests completions) on the calling thread, so that a
  /// small message need not wait for the proxy thread to be scheduled. Does nothing, and returns false, where the net
  /// takes calls from one thread only, while the proxy is in a pass, or once shutdown began. True if something moved.
  virtual bool progress(const Fifo* f) {
    (void)f;
    return false;
  }
  /// A rank's thread starts (true) or ends (false) an operation during which it drives this transport's open
  /// connections itself, in its waits (progressAll): the proxy thread steps aside meanwhile, sleeping rather than
  /// spinning, so that the two do not take turns on a shared core. Returns whether the rank's thread drives: false
  /// where the net takes calls from one thread only (IB, plugins), whose proxy then goes on as always.
  virtual bool engage(bool on) {
    (void)on;
    return false;
  }
  /// While engaged, on the calling thread: steps every open send connection with slots to hand over or complete, and
  /// the receive connection of `waitingOn` (a FIFO of this transport the caller waits for), or every receive
  /// connection when `waitingOn` is null. Data for another receive connection waits in the net until its turn. True
  /// if something moved.
  virtual bool progressAll(const Fifo* waitingOn) {
    (void)waitingOn;
    return false;
  }
  /// Where this rank's connections stand, for NCCL_RUNTIME_CONNECT=0's wait at init: every one open, some still being
  /// set up, or one failed. *why names the first not open one and what it waits for (or how it failed). Any thread;
  /// never waits for the proxy (kPending while it is in a pass).
  enum class Setup { kOpen, kPending, kFailed };
  virtual Setup setupState(std::string* why) {
    (void)why;
    return Setup::kOpen;
  }
  /// What this rank's net said when it failed its first connection ("rank 0: net IB dev 0 channel 0 -> rank 1
  /// (host): transfer failed (...): NET/IB: ... remote access error"); empty when it failed none. The first: once one
  /// end fails, the connections after it fail because their peers closed them. For an error report: a net error says
  /// that a connection broke, not which rank failed, so the rank that a failure notice names may learn the cause only
  /// from its own net. Any thread.
  virtual std::string netFailure() const { return ""; }
  /// A connection of this rank that the net failed while it was being set up, once the proxy has named the culprit in
  /// its FIFO's poison (within kSuspectS), or null; *conn then names it ("its connection over net Socket (dev 1,
  /// channel 1, to rank 0)"). The operation that made it cannot finish, nor can the communicator, but the rank may
  /// never wait on that FIFO (a send's slots are free, so its data goes in and the rank waits on a receive): a wait on
  /// any FIFO ends with its cause then, rather than at the deadline. Only a setup: an open connection the net fails
  /// may be a peer that sent everything and destroyed its communicator. Any thread.
  virtual const Fifo* failedSetup(std::string* conn) const {
    (void)conn;
    return nullptr;
  }
  /// What a wait's deadline found behind its connection (waitState): nothing to say, a connection not set up yet, a
  /// proxy held in one pass (a net call that does not return), so that the peer is not blamed for either; or a
  /// connection the net failed whose culprit the proxy has yet to name (kFailing): within kVerdictS it poisons the
  /// FIFO with the peer's failure notice, or names the peer.
  enum class Stall { kUnknown, kSettingUp, kProxyHeld, kFailing };
  static constexpr double kVerdictS = 2.0;
  /// For a wait on FIFO `f` that reached its deadline, where f's connection stands. Not set up yet (*stall
  /// kSettingUp): what it waits for ("its connection over net Socket (dev 1, channel 1, from rank 3) is not set up
  /// after 8.0 s: the net has not accepted the peer's connection"). Open: what the executor and the net moved
  /// through it ("... is open; slots received 1, posted to the net 9 (16 requests pending in the net), consumed by
  /// the executor 1"). A proxy that stayed in one pass for the second it was waited for (kProxyHeld, or kSettingUp
  /// for a connection it has not taken up): that it was busy. Failed in the net (kFailing while the proxy has not yet
  /// named the culprit): "... failed in the net (...); waiting for the peer's failure notice". Empty when the
  /// transport cannot tell. Logs every connection's state at INFO NET. Any thread; may wait up to a second for the
  /// proxy's pass.
  virtual std::string waitState(const Fifo* f, Stall* stall) {
    (void)f;
    *stall = Stall::kUnknown;
    return std::string();
  }
  /// The transport's name for logs ("net Socket", "net UCX", ...).
  virtual const char* name() const = 0;
  /// Whether the proxy sends a slot passed by address (kDescribedSlot) from that address in this process's memory,
  /// so that the executor need not copy the data into the FIFO.
  virtual bool sendsByAddress() const { return false; }
  /// The fewest devices (NICs) the net offers on any rank of the communicator, the same on every rank: how many
  /// channels it takes for every rank's connections to use all of them.
  virtual int commonDevices() const { return 1; }
};

/// How the executor wakes a proxy thread that sleeps: an eventfd the proxy polls, and a flag that lets kick() skip
/// the write while the proxy is awake. The proxy announces a sleep (sleeping(true)), looks at its work once more, and
/// only then blocks on fd(); an executor that published before seeing the flag is caught by that look, one that
/// publishes after it writes the eventfd. Both sides fence in between.
class ProxyWake {
 public:
  ProxyWake() = default;
  ProxyWake(const ProxyWake&) = delete;
  ProxyWake& operator=(const ProxyWake&) = delete;
  ~ProxyWake();
  /// Creates the eventfd; false (errno set) on failure.
  bool open();
  /// The descriptor to poll (-1 before open).
  int fd() const { return fd_; }
  /// Makes fd() readable.
  void wake();
  /// wake() if the proxy sleeps, or is about to.
  void kick() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the FIFO store before, the flag load after
    if (sleeping_.load(std::memory_order_relaxed)) wake();
  }
  /// The proxy thread: about to sleep (true), or awake again (false).
  void sleeping(bool s) {
    sleeping_.store(s, std::memory_order_relaxed);
    if (s) std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  /// The proxy thread: empties fd() after a wake.
  void drain();

 private:
  int fd_ = -1;
  std::atomic<bool> sleeping_{false};
};

/// Collective over the communicator: chooses the net (every rank must choose the same; a mismatch fails naming
/// the ranks), logs the choice and why, and starts its proxy.
ncclResult_t createRemoteTransport(ncclComm* comm, std::unique_ptr<RemoteTransport>* out);

/// Sets a FIFO's poison word unless one is there (the first failure wins). For a mismatch, `calls` (7 words:
/// FifoCtrl's failCall, failCall2 and failRanks; null otherwise) are written first, so that the rank that reads the
/// word can name both calls.
void poisonFifo(const Fifo& f, uint64_t word, const uint64_t* calls = nullptr);

/// The end of an error report that a peer's failure ended: "; this rank's net said: " and net->netFailure(), or ""
/// when there is no net or it failed no connection.
std::string netFailureSuffix(const RemoteTransport* net);

/// What a wait that a failed setup ended says of it: `conn` (RemoteTransport::failedSetup's name), " failed while it
/// was set up", and netFailureSuffix(net). The net failed it, so the peer is not blamed.
std::string setupFailureText(const RemoteTransport* net, const std::string& conn);

/// NCCL_NET_GDR_LEVEL's value as the farthest PathClass (topo/topology.h) at which GPUDirect RDMA is used, -1 for
/// never (LOC); false when it is none of NCCL's names or numbers.
bool parseGdrLevel(const std::string& text, int* level);
/// What the GPU runtime says of GPUDirect RDMA for a rank's GPU (GpuRuntime::gpuDirectRdma, computeCapability).
struct GdrRuntimeInfo {
  bool ok = false;       ///< the device and driver support it, and a NIC can reach its memory one of `paths`' ways
  GpuDirectPaths paths;  ///< which of those ways exist
  std::string why;       ///< when not ok, what is missing
  int computeCap = 0;    ///< major * 10 + minor, 0 when unknown
  std::string cpuArch;   ///< the host's CPU architecture ("x86_64", "aarch64"; HostTopology::cpuArch), "" unknown
};

/// Whether what a net writes into GPU memory must be flushed (iflush) before a kernel reads it, as NCCL 2.28 decides
/// (ncclTopoNeedFlush): always where the net device says so (forceFlush) or NCCL_NET_FORCE_FLUSH=1; otherwise not
/// from compute capability 9.0 (Hopper and later order the NIC's writes before its completion reaches the GPU).
/// NCCL flushes such a GPU too where it reaches its CPU over C2C (Grace) and the NIC is within PXB; chorus's topology
/// has no C2C class, so only on an x86 host does a GPU of 9.0 or more go without. *why says which.
bool netNeedsFlush(const RemoteDeviceInfo& info, const GdrRuntimeInfo& rt, std::string* why);

/// How the net registers a FIFO's GPU memory for GPUDirect RDMA (none: the FIFO stays in pinned host memory).
enum class NetGdr { kNone, kPeerMemory, kDmaBuf };

/// Whether a device-path connection to another host keeps its slot data in GPU memory for the net (GPUDirect RDMA),
/// and how the net registers it, as NCCL decides: the connection's net device registers GPU memory (NCCL_PTR_CUDA),
/// it is within NCCL_NET_GDR_LEVEL (default PXB) of the GPU, the GPU runtime supports it, through dma-buf where the
/// runtime exports one, the net device takes it (NCCL_PTR_DMABUF) and NCCL_DMABUF_ENABLE allows it, else through a
/// peer-memory module; for a sending side NCCL_NET_GDR_READ allows it (default: compute capability 8.0 or more), for
/// a receiving side the net flushes receives into GPU memory. *why says why, either way, in a phrase.
NetGdr useNetGdr(const RemoteDeviceInfo& info, bool isSend, const GdrRuntimeInfo& rt, std::string* why);

/// Page-aligned, zeroed memory for one FIFO of geometry `geo`, in whole pages (the device path pins it for its
/// GPU); null when out of memory. Free with std::free. With `dataApart` (RemoteData) only the part before the slot
/// data, and a page after it for a failure notice's payload (remoteNoticeArea).
void* allocRemoteFifo(const FifoGeometry& geo, bool dataApart = false);
/// The host memory a FIFO allocated with dataApart has for a failure notice's payload (a page).
inline char* remoteNoticeArea(void* mem, const FifoGeometry& geo) { return static_cast<char*>(mem) + geo.dataOffset(); }
/// Bytes of such a FIFO's host memory.
inline size_t remoteHostBytes(const FifoGeometry& geo, bool dataApart) {
  return dataApart ? geo.dataOffset() + 4096 : (geo.totalBytes() + 4095) / 4096 * 4096;
}

}  // namespace chorus
