// Connections of the device path: one FIFO (kernels/fifo.h layout) per (channel, peer, direction), in GPU memory
// mapped by both ends (the same process: the pointer itself; another process: CUDA/HIP IPC), or in a pinned
// shared-memory segment when the two GPUs cannot map each other's memory. Made lazily, the first time a launch
// needs them; the owner (by default the receiver, so that LL polling stays local: "write mode"; the sender with
// CHORUS_P2P_READ=1) allocates and publishes a rendezvous record in a small named shm segment that the other end
// derives from the communicator hash alone, so no collective exchange is needed.
//
// A peer on another host is reached through network staging: the host path's net transport makes the
// connection (its own socket channel) and its proxy thread moves the slots; the FIFO it proxies lives in host
// memory that this end pins and maps for its GPU, so the kernel fills and drains it as it would a peer's. Both
// ends are local, so there is no rendezvous, and such connections use Simple only (the proxy forwards whole
// slots, not LL lines).
//
// Thread ownership: used by the thread that launches the communicator's operations.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/comm.h"
#include "engine/connections.h"
#include "kernels/device_work.h"
#include "kernels/fifo.h"
#include "runtime/runtime.h"
#include "topo/topology.h"

namespace chorus {

/// CHORUS_P2P_READ as set in the environment.
bool p2pReadSetting();

/// NCCL_P2P_DISABLE and NCCL_P2P_LEVEL as set, for the settings every rank must share.
std::string p2pPolicySetting();

/// Whether NCCL_P2P_DISABLE and NCCL_P2P_LEVEL let this rank's GPU and `peer`'s (another GPU of this host) map each
/// other's memory, as NCCL's P2P transport does: LOC (or NCCL_P2P_DISABLE=1) never; NVL over an NVLink or xGMI link
/// the host topology has between the two; PIX, PXB, PHB or SYS (or NCCL's 0-5) over such a link, or where the
/// topology puts their PCI path at that class or nearer. Unset: p2pDefaultLevel's class for the host's CPUs, where the
/// topology places both GPUs and knows their links (a file's, or NVML's or ROCm SMI's answer); elsewhere wherever the
/// GPU runtime allows it. When not, *why says which setting and what the topology says of the pair; the FIFOs between
/// them are then in pinned host memory, and registered windows do not map each other. Ranks sharing a GPU are not
/// P2P: they always may.
bool p2pPermitted(const ncclComm* comm, int peer, std::string* why);

/// The farthest PCI path over which two GPUs of a host use P2P when NCCL_P2P_LEVEL is unset, from the host's CPUs
/// (`arch`, `vendor` as HostTopology has them) and the communicator's GPUs on the host. NVIDIA GPUs as NCCL 2.28: PXB,
/// SYS on AMD x86 CPUs with at most two GPUs. AMD GPUs as RCCL: SYS, PXB on ARM, Intel and Zhaoxin CPUs. kNone when
/// neither the architecture nor the vendor is known (no default: the runtime decides).
PathClass p2pDefaultLevel(const std::string& arch, const std::string& vendor, bool amdGpus, int hostGpus);

/// The pseudo-channel of the allreduce inboxes between co-located processes (kernels/device_ipc.h): a connection
/// per ordered pair, in the receiver's memory (write mode), of DeviceConnections::setInboxBytes bytes.
constexpr int kDevIpcChannel = kDevMaxBlocks;

/// The connection channel of lane `lane` of schedule channel `ch` (DevWork::lanes): each lane has FIFOs of its own,
/// made the first time a launch uses that lane. Lane 0 is the channel itself. Below kDevIpcChannel; channel and lane
/// are its remainder and quotient by kDevMaxChannels.
constexpr int devLaneChannel(int ch, int lane) { return ch + lane * kDevMaxChannels; }
/// A connection channel in words: "channel 3", "channel 3 lane 1", "inboxes".
std::string describeDevChannel(int ch);

/// The start of a device-connection rendezvous record (a named shm segment of one page): each end writes its
/// process into `pids` when it maps the record ([0] the FIFO's owner, [1] the other end), so that a record both of
/// whose processes have exited can be told from one still in use.
struct RendezvousHead {
  uint64_t ready;    ///< nonzero once the owner has published the rest of the record
  uint64_t pids[2];  ///< 0: that end has not mapped it yet
};

/// Whether the rendezvous record `name` ("/chorus-...-d...") is garbage: an end has recorded itself and every end
/// recorded has exited. One whose ends are unrecorded, or one of them alive, may still be in use.
bool rendezvousStale(const std::string& name);
/// Removes this user's stale rendezvous records (/dev/shm/chorus-<hash>-d...): what ranks killed between setting
/// up a device connection and its other end opening it leave behind. Returns how many. Called at device-path init.
int sweepStaleRendezvous();

/// One end of one device connection.
struct DevConn {
  DevFifo fifo{};
  void* ownedDev = nullptr;  ///< FIFO memory this end allocated (deviceAlloc)
  void* opened = nullptr;    ///< the peer's FIFO memory mapped through IPC
  void* hostSeg = nullptr;   ///< pinned shm FIFO (mapped and registered)
  void* staged = nullptr;    ///< network staging: the net transport's FIFO memory (registered, not owned)
  size_t hostSize = 0;
  std::string hostName;   ///< its name, unlinked once both ends have it
  const char* kind = "";  ///< "local", "p2p/IPC", "shm (pinned host)"
};

/// Lazily created device connections of one communicator.
class DeviceConnections {
 public:
  /// `host`: the host path's connections, whose net transport carries the staging connections.
  DeviceConnections(ncclComm* comm, GpuRuntime* rt, const FifoGeometry& geo, Connections* host);
  ~DeviceConnections();
  /// Allocates the step counters (zero: every FIFO starts empty).
  ncclResult_t init();
  /// Size of the connections of kDevIpcChannel (set before the first of them is made).
  void setInboxBytes(size_t bytes) { inboxBytes_ = bytes; }
  /// Makes sure (channel, peer, direction) exists for every entry of `need`, owners first (each rank publishes
  /// what it owns before it waits for what it opens, so ranks never wait on each other in a cycle), and returns
  /// their kernel views in the same order.
  ncclResult_t get(const std::vector<std::tuple<int, int, bool>>& need, std::vector<DevFifo>* out);
  /// Before the FIFOs are freed (this rank's kernels are done): waits, at most CHORUS_TIMEOUT_S, until each peer
  /// has read what this rank produced into FIFOs it owns (read mode), so that freeing them cannot pull memory
  /// from under a peer's kernel. Skipped after a failure or an abort.
  void drainOwned();
  /// Called while a connection waits for its peer: a nonempty answer (a mismatched call found meanwhile) ends the
  /// wait with ncclInvalidUsage and that text.
  void setStopCheck(std::function<std::string()> check) { stopCheck_ = std::move(check); }

 private:
  bool owns(bool isSend) const { return isSend == readMode_; }
  size_t bytesFor(int ch) const { return ch == kDevIpcChannel ? inboxBytes_ : geo_.totalBytes(); }
  ncclResult_t publish(int ch, int peer, bool isSend, DevConn* c);
  ncclResult_t open(int ch, int peer, bool isSend, DevConn* c);
  ncclResult_t stage(int ch, int peer, bool isSend, DevConn* c);
  bool remote(int peer) const { return comm_->peers[peer].hostHash != comm_->peers[comm_->rank].hostHash; }
  std::string rendezvousName(int ch, int from, int to) const;
  struct Rendezvous;  ///< what a FIFO's owner publishes for the other end (device_connections.cc)
  /// Maps (creating if needed) the rendezvous segment of (ch, peer, direction).
  ncclResult_t mapRendezvous(int ch, int peer, bool isSend, std::string* name, Rendezvous** out);
  uint64_t* stepCounter(int ch, int peer, bool isSend) const;

  ncclComm* comm_;
  GpuRuntime* rt_;
  FifoGeometry geo_;
  Connections* host_;
  bool readMode_;
  size_t inboxBytes_ = 0;
  uint64_t* steps_ = nullptr;  ///< device memory: one counter per (channel, peer, direction)
  std::map<std::tuple<int, int, bool>, DevConn> conns_;
  std::vector<std::string> rendezvous_;  ///< names this end created and must unlink if never opened
  std::function<std::string()> stopCheck_;
};

}  // namespace chorus
