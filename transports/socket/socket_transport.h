// Socket transport: connections between ranks on different hosts (or when NCCL_SHM_DISABLE=1).
//
// Each end of a connection sees an ordinary local FIFO (kernels/fifo.h); a proxy thread per
// communicator moves slots over TCP: on the send side it ships every produced slot
// (header + payload) and then frees it (head++); on the receive side it reads a slot into
// the local FIFO when there is room and publishes it (tail++). LL is never used here.
#pragma once

#include <memory>

#include "core/comm.h"
#include "kernels/fifo.h"

namespace chorus {

/// TCP connections of one communicator, progressed by one proxy thread.
class SocketTransport {
 public:
  /// Collective over the communicator: opens a listen socket and allgathers the addresses.
  static ncclResult_t create(ncclComm* comm, std::unique_ptr<SocketTransport>* out);
  virtual ~SocketTransport() = default;
  /// Connects (lazily, once) the send side of (channel, peer); *out views the local FIFO.
  virtual ncclResult_t connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out) = 0;
  /// Prepares the receive side of (channel, peer); *out views the local FIFO.
  virtual ncclResult_t connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out) = 0;
  /// Closes every socket and stops the proxy (peers see EOF and fail naming this rank).
  virtual void shutdown() = 0;
  /// This rank failed with FIFO poison `word`: the proxy passes it on over every connection, and until shutdown()
  /// answers every later connection and status query with it (peers reaching this rank only now learn the cause).
  virtual void markFailed(uint64_t word) = 0;
  /// Called by the executor after it published a slot or freed one in a socket FIFO: wakes the proxy if it is
  /// blocked in poll(), so that it does not see the change only at its next timeout. Costs a fence and a load
  /// while the proxy is awake. (Device kernels cannot call it; the proxy's short poll timeout covers them.)
  virtual void kick() = 0;
};

}  // namespace chorus
