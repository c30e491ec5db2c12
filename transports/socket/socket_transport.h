// Socket transport: connections between ranks on different hosts (or when NCCL_SHM_DISABLE=1).
//
// Each end of a connection sees an ordinary local FIFO (kernels/fifo.h); a proxy thread per
// communicator moves slots over TCP: on the send side it ships every produced slot
// (header + payload) and then frees it (head++); on the receive side it reads a slot into
// the local FIFO when there is room and publishes it (tail++). LL is never used here.
#pragma once

#include <memory>

#include "transports/remote.h"

namespace chorus {

/// TCP connections of one communicator, progressed by one proxy thread.
class SocketTransport : public RemoteTransport {
 public:
  /// Collective over the communicator: opens a listen socket and allgathers the addresses.
  static ncclResult_t create(ncclComm* comm, std::unique_ptr<RemoteTransport>* out);
  /// This rank failed with FIFO poison `word`: the proxy passes it on over every connection, and until shutdown()
  /// answers every later connection and status query with it (peers reaching this rank only now learn the cause).
  void markFailed(uint64_t word) override = 0;
  /// Device kernels cannot call kick(); the proxy's short poll timeout covers them.
  void kick() override = 0;
  const char* name() const override { return "socket"; }
};

}  // namespace chorus
