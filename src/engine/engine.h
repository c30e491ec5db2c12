// The engine: turns a group of validated operations into schedules, plans them over the
// communicator's connections and runs them: host buffers on the calling thread, device buffers
// as kernels on the caller's stream (src/engine/device_engine.h).
#pragma once

#include <memory>
#include <vector>

#include "core/comm.h"
#include "engine/op.h"
#include "engine/windows.h"

namespace chorus {

/// Hash of the settings every rank must share (algorithms, protocols, transports, FIFO geometry).
unsigned long engineEnvHash();

/// The most channels (and, on the device path, blocks) one launch of the communicator may use: the smallest of its
/// ranks' config.maxCTAs and NCCL_MAX_NCHANNELS, exchanged at init, so that every rank agrees; `*rank` is the rank
/// that set it. 0 (and -1) when no rank set one.
int configChannelCap(const ncclComm* comm, int* rank);

/// The fewest channels (and, on the device path, blocks) one launch of a collective of the communicator uses: the
/// largest of its ranks' config.minCTAs and NCCL_MIN_NCHANNELS, at most configChannelCap's cap, so that every rank
/// agrees; `*rank` is the rank that set it. 1 (and -1) when no rank asked for more than one.
int configChannelFloor(const ncclComm* comm, int* rank);

/// Per-communicator execution state: connections, channels, scratch.
class Engine {
 public:
  /// Collective over the communicator: establishes connections with every peer that the
  /// algorithms need (shm within a host, sockets across hosts).
  static ncclResult_t create(ncclComm* comm, std::unique_ptr<Engine>* out);
  virtual ~Engine() = default;
  /// Runs the operations of one group on this communicator. On the host path the call
  /// returns when they are complete.
  virtual ncclResult_t run(const std::vector<OpDesc>& ops) = 0;
  /// Estimated time (microseconds) of a group, for ncclGroupSimulateEnd.
  virtual float estimateUs(const std::vector<OpDesc>& ops) = 0;
  /// Abort: marks every connection failed so that peers stop waiting for this rank.
  /// (Destroying the engine without it is the graceful path: data already sent stays readable.)
  virtual void shutdown() = 0;
  /// The failure an asynchronous (device) operation recorded since the last call, or ncclSuccess.
  virtual ncclResult_t pollAsync() { return ncclSuccess; }
  /// The communicator's registered windows (ncclCommWindowRegister).
  virtual WindowTable& windows() = 0;
};

}  // namespace chorus
