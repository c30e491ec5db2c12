// The connections of one communicator, made lazily per (channel, peer, direction) the first
// time an operation needs them: shm within a host, the transport between hosts (sockets or a net,
// transports/remote.h) across hosts or when NCCL_SHM_DISABLE=1. Both ends derive which from the peer
// info alone.
//
// Thread ownership: used by the one thread running the communicator's operations; poisonAll
// may also be called from ncclCommAbort's thread (it only writes FIFO control words).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/comm.h"
#include "kernels/fifo.h"
#include "transports/remote.h"
#include "transports/shm/shm.h"

namespace chorus {

/// NCCL_SHM_DISABLE as set in the environment.
bool shmDisabledSetting();

/// One end of one connection.
struct Conn {
  Fifo fifo;
  bool shm = false;  ///< LL is allowed only on shm connections
  int peer = -1;
  pid_t peerPid = 0;      ///< watched for liveness when the peer is another process on this host
  bool peerLocalProc = false;
  /// A host path connection to another host whose net proxy sends a slot passed by address (kDescribedSlot) from
  /// that address: the executor then skips the copy into the FIFO, and waits at the end of the operation until the
  /// proxy has handed the data to the net (HostPlatform::drainDescribed).
  bool byAddress = false;
  ShmSegment seg;
};

/// Lazily created connections of one communicator.
class Connections {
 public:
  Connections(ncclComm* comm, const FifoGeometry& geo);
  ~Connections();
  /// Collective: sets up what every rank must agree on (the transport between hosts: createRemoteTransport).
  ncclResult_t init();
  /// Whether some ranks of `comm` reach each other through a net rather than shared memory (ranks on different
  /// hosts, or NCCL_SHM_DISABLE=1). The same answer on every rank: it reads only what all ranks exchanged.
  static bool usesNet(const ncclComm* comm);
  /// The connection for (channel, peer); made on first use. The fast path is a table lookup.
  ncclResult_t send(int channel, int peer, Conn** out) {
    Conn* c = lookup(channel, peer, true);
    if (c) return (*out = c), ncclSuccess;
    return make(channel, peer, true, out);
  }
  ncclResult_t recv(int channel, int peer, Conn** out) {
    Conn* c = lookup(channel, peer, false);
    if (c) return (*out = c), ncclSuccess;
    return make(channel, peer, false, out);
  }
  /// The device path's network staging: a socket connection to or from `peer` (on another host) whose local
  /// FIFO the caller pins for its GPU. Socket channel kDeviceNetChannelBase + channel, apart from the host
  /// path's channels, since device kernels and host operations progress independently. Poisoned and shut down
  /// with the others.
  /// With `data`, the FIFO's slot data is that GPU memory (GPUDirect RDMA; the transport owns it from then on).
  ncclResult_t staging(int channel, int peer, bool isSend, Conn** out, const RemoteData* data = nullptr) {
    return make(kDeviceNetChannelBase + channel, peer, isSend, out, false, data);
  }
  /// Whether rank `peer` is reached through shared memory.
  bool viaShm(int peer) const;
  /// Marks every FIFO failed (reason, culprit) so the far ends stop waiting; remote peers learn it from the proxy.
  /// `calls` (may be null) describes a mismatch: {detector's call[3], offender's call[3], ranks}.
  void poisonAll(PoisonReason reason, int culprit, const uint64_t* calls = nullptr);
  const FifoGeometry& geometry() const { return geo_; }
  /// The transport between hosts (socket or a net), or null when every peer is reached through shared memory.
  RemoteTransport* remote() const { return remote_.get(); }

 private:
  /// `hostChannel`: a host-path channel (poisonAll opens shm FIFOs up to the highest one); false for staging.
  ncclResult_t make(int channel, int peer, bool isSend, Conn** out, bool hostChannel = true,
                    const RemoteData* data = nullptr);
  // table_[channel][2 * peer + isSend], filled by make() (only the operation thread reads it).
  Conn* lookup(int channel, int peer, bool isSend) const {
    if (channel >= static_cast<int>(table_.size()) || peer < 0 || peer >= comm_->nranks) return nullptr;
    return table_[channel][2 * peer + (isSend ? 1 : 0)];
  }
  std::vector<std::vector<Conn*>> table_;

  ncclComm* comm_;
  FifoGeometry geo_;
  bool shmDisabled_;
  std::unique_ptr<RemoteTransport> remote_;
  std::mutex mutex_;  // guards conns_ against poisonAll from an aborting thread
  std::map<std::tuple<int, int, bool>, std::unique_ptr<Conn>> conns_;
  int maxChannel_ = 0;  ///< highest channel any operation used (poisonAll covers 0..max)
};

}  // namespace chorus
