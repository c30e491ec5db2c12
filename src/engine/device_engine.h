// The device path of a communicator: operations on GPU buffers become launches of the collective kernel on the
// caller's stream (asynchronous, stream-ordered, capturable), planned by the same Planner as the host path.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "engine/device_connections.h"
#include "engine/op.h"
#include "engine/plan.h"
#include "kernels/device_work.h"
#include "runtime/runtime.h"

namespace chorus {

/// The device path's settings that every rank must share (part of the communicator's settings check).
std::string deviceEnvKey();

/// Launches a communicator's device operations.
class DeviceEngine {
 public:
  /// `host`: the host path's connections (network staging goes through its socket transport).
  DeviceEngine(ncclComm* comm, GpuRuntime* rt, Planner* planner, Connections* host);
  ~DeviceEngine();
  /// Pinned status and abort words, scratch, step counters.
  ncclResult_t init();
  /// Enqueues every operation of a group (all on device buffers) on its stream.
  ncclResult_t run(const std::vector<OpDesc>& ops);
  /// The failure an earlier kernel recorded, described with setLastError (ncclSuccess if none).
  ncclResult_t checkStatus();
  /// Makes running and future kernels of this communicator stop (ncclCommAbort).
  void abort();

 private:
  /// Starts the watchdog when peers live in other processes of this host: it marks a peer whose process has
  /// exited, and a kernel waiting for data that peer never wrote then fails at once, naming it.
  void watchPeers();
  uint8_t* deadPeers() const;
  ncclResult_t launchColl(const OpDesc& op);
  /// Channels for one collective: by its size, at most nChannels_ (the planner may use fewer to fit a launch).
  int channelsFor(const OpDesc& op) const;
  ncclResult_t launchP2P(const std::vector<const OpDesc*>& batch);
  /// Copies the channels' schedules into w (callers check kDevMaxSteps) and sets up their connections.
  ncclResult_t setSchedules(DevWork* w, const Schedule* scheds, int nChannels);
  ncclResult_t launch(DevWork& w, cudaStream_t stream, const char* what);
  /// Records that this rank launches on `stream`; refuses a stream another rank of this communicator uses.
  ncclResult_t claimStream(cudaStream_t stream);
  void fillCommon(DevWork* w) const;
  char* outScratch(size_t bytes);

  ncclComm* comm_;
  GpuRuntime* rt_;
  Planner* planner_;
  Connections* host_;
  std::unique_ptr<DeviceConnections> conns_;
  int nChannels_ = 1;
  int64_t llMax_ = 0;
  void* statusHost_ = nullptr;  ///< DevStatus followed by the abort word, pinned and mapped
  void* statusDev_ = nullptr;
  char* scratch_ = nullptr;  ///< kDevMaxChannels x 2 staging areas of scratchBytes_
  size_t scratchBytes_ = 0;
  std::vector<std::pair<char*, size_t>> outScratch_;  ///< ncclReduce output stand-ins (kept until destroy)
  std::thread watchdog_;
  std::mutex watchMutex_;
  std::condition_variable watchCv_;
  bool watchStop_ = false;  ///< guarded by watchMutex_
  bool launched_ = false;  ///< a kernel was enqueued: destroy waits for the device (user streams may be gone)
  uint64_t ticksPerMs_ = 1000000;
};

}  // namespace chorus
