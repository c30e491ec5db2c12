// The device path of a communicator: operations on GPU buffers become launches of the collective kernel on the
// caller's stream (asynchronous, stream-ordered, capturable), planned by the same Planner as the host path.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "engine/call_board.h"
#include "engine/device_connections.h"
#include "engine/launch_gate.h"
#include "engine/op.h"
#include "engine/plan.h"
#include "engine/windows.h"
#include "kernels/device_work.h"
#include "runtime/runtime.h"

namespace chorus {

/// The device path's settings that every rank must share (part of the communicator's settings check).
std::string deviceEnvKey();

/// Launches a communicator's device operations.
class DeviceEngine {
 public:
  /// `host`: the host path's connections (network staging goes through its net transport); `windows`: the
  /// communicator's registered windows.
  DeviceEngine(ncclComm* comm, GpuRuntime* rt, Planner* planner, Connections* host, const WindowTable* windows);
  ~DeviceEngine();
  /// Pinned status and abort words, scratch, step counters.
  ncclResult_t init();
  /// Enqueues every operation of a group (all on device buffers) on its stream.
  ncclResult_t run(const std::vector<OpDesc>& ops);
  /// NCCL_RUNTIME_CONNECT=0: makes the FIFOs of the collectives' schedules (Planner::initEnds) on the channels each
  /// size takes, lane 0 of each (a channel's other lanes, like sends and receives, are made on first use); *made: how
  /// many. Peers on this host do the same at their init, so a rank waits here for the records of FIFOs they own.
  ncclResult_t connectAtInit(size_t* made);
  /// The failure an earlier kernel recorded, described with setLastError (ncclSuccess if none).
  ncclResult_t checkStatus();
  /// Makes running and future kernels of this communicator stop (ncclCommAbort).
  void abort();

 private:
  /// Starts the watchdog when peers live on this host: it marks a peer in another process whose process has exited
  /// (a kernel waiting for data that peer never wrote then fails at once, naming it), and compares this rank's
  /// calls with the peers' on the call board.
  void watchPeers();
  /// Posts this rank's record of collective `seq` (op, taken by `path`) on the call board.
  void postCall(uint64_t seq, const OpDesc& op, CallPath path);
  /// Compares the call board; on the first mismatch found, fails the communicator with its text (ncclInvalidUsage)
  /// and makes this rank's kernels stop. Returns the text ("" when none).
  std::string checkBoard();
  /// checkBoard, for a failure being reported: whether the ranks' calls differ (then the last error names them).
  bool boardMismatch();
  uint8_t* deadPeers() const;
  ncclResult_t runOps(const std::vector<OpDesc>& ops);
  /// Sends and receives: those to itself as copies, the others in batches of launches (Planner::p2pLaunches).
  ncclResult_t runSendRecvs(const std::vector<OpDesc>& ops);
  ncclResult_t launchColl(const OpDesc& op);
  /// An all-to-all, gather or scatter as the sends and receives it is made of (when its direct schedule needs more
  /// connection ends than one launch holds).
  ncclResult_t collAsSendRecvs(const OpDesc& op);
  /// A collective on one rank (not a premulsum): a device-to-device copy, or nothing in place.
  ncclResult_t copyColl(const OpDesc& op);
  /// The bytes that size a collective's launch: the larger of its input and output.
  uint64_t opBytes(const OpDesc& op) const;
  /// One unit (channel, block, lane) per `per` x CHORUS_DEVICE_CHANNEL_BYTES of op, and units of `per` blocks
  /// enough for minBlocks_; at least 1, at most `most`.
  int unitsFor(const OpDesc& op, int per, int most) const;
  /// Channels for one collective: by its size, at most nChannels_ (the planner may use fewer to fit a launch).
  int channelsFor(const OpDesc& op) const;
  /// Blocks of a launch on the peers' buffers (thread ranks' direct launches, registered windows): one per
  /// CHORUS_DEVICE_CHANNEL_BYTES, as many as a collective through FIFOs could have (channels x lanes).
  int peerBlocksFor(const OpDesc& op) const;
  /// Blocks per channel (lanes) for a collective through FIFOs planned as `plan`: one per
  /// CHORUS_DEVICE_CHANNEL_BYTES of a channel's part, at most maxLanes_, within the launch's block cap and its
  /// connection ends.
  int lanesFor(const OpDesc& op, const CollPlan& plan) const;
  ncclResult_t launchP2P(const std::vector<const OpDesc*>& batch);
  /// Packs the channels' schedules into w as runs of steps (at most kDevMaxRuns) and sets up their connections, those
  /// of every one of `lanes` lanes a channel, or, where `endLanes` is given, the first endLanes(peer, isSend) lanes of
  /// each end (w->lanes is then the most of those). Steps equal to one in `skip` are left out (the copy engine does
  /// them).
  ncclResult_t setSchedules(DevWork* w, const Schedule* scheds, int nChannels, const std::vector<Step>& skip = {},
                            int lanes = 1, const std::function<int(int, bool)>& endLanes = nullptr);
  /// The most lanes of a point-to-point launch (at most NCCL_MAX_P2P_NCHANNELS). The same on every rank (settings,
  /// peer table and size of the communicator), and such that a batch's ends always fit one launch.
  int p2pMaxLanes() const;
  /// Enqueues the kernel for w on stream; `peers`: the ranks it waits on (the launch gate's business). A collective
  /// passes `op`: ranks sharing the gate then compare their calls before any kernel runs, and a direct launch
  /// learns its peers' buffers.
  ncclResult_t launch(DevWork& w, cudaStream_t stream, const char* what, const std::vector<int>& peers,
                      const OpDesc* op = nullptr, bool gatePassed = false);
  /// The launch gate: waits for the co-located ranks among `peers`; with `op`, compares their calls (refusing a
  /// mismatch) and returns their payloads (buffers) in *all.
  ncclResult_t meetAtGate(const OpDesc* op, const std::vector<int>& peers, std::vector<LaunchGate::Payload>* all);
  /// Whether op, met at the gate by every rank (threads of this process on this GPU), may run directly on the
  /// ranks' buffers (kernels/device_direct.h); every rank decides the same from the same payloads.
  bool directSafe(const OpDesc& op, const std::vector<LaunchGate::Payload>& met) const;
  /// The DevWork fields shared by launches on peers' buffers (kind: kDevDirectThreads or kDevDirectIpc): the call,
  /// its element type, reduction and fingerprint, run by `blocks` blocks.
  DevWork peerWork(const OpDesc& op, uint8_t kind, int blocks);
  /// 0 .. nranks-1: the ranks a collective waits on.
  std::vector<int> allRanks() const;
  ncclResult_t launchDirect(const OpDesc& op, const std::vector<LaunchGate::Payload>& met);
  /// Whether every rank can be reached through inboxes in its GPU memory: all on this host, each with a GPU
  /// (worked out once, into inboxesReachEveryRank_).
  bool inboxesReachEveryRank() const;
  /// Whether op goes through inboxes in the peers' GPU memory (kernels/device_ipc.h): every
  /// rank on this host with a GPU, and small enough. Every rank decides the same.
  bool ipcEligible(const OpDesc& op) const;
  /// Makes the inboxes (and launch counters) on first use and points w at them.
  ncclResult_t setInboxes(DevWork* w);
  ncclResult_t launchIpc(const OpDesc& op, bool gatePassed);
  /// Whether op runs on the ranks' buffers in registered windows (kernels/device_window.h): every rank on this host
  /// with a GPU, this rank's buffers that peers reach in direct windows (*in, *out), and too large to go one-shot
  /// through inboxes.
  bool windowsFor(const OpDesc& op, WindowRef* in, WindowRef* out) const;
  ncclResult_t launchWindows(const OpDesc& op, const WindowRef& in, const WindowRef& out, bool gatePassed);
  /// Enqueues a device-to-device copy on stream, in this communicator's call order.
  ncclResult_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what);
  /// Call order across streams: makes work about to be enqueued on `stream` wait for this communicator's previous
  /// launch when that was on another stream (of the same capture, or both outside any).
  /// `streamId` is streamKey's.
  ncclResult_t orderBefore(cudaStream_t stream, uint64_t streamId, uint64_t captureId, const char* what);
  /// Marks the end of this communicator's latest work, just enqueued on `stream`.
  ncclResult_t orderAfter(cudaStream_t stream, uint64_t streamId, uint64_t captureId, const char* what);
  /// The stream's id (cudaStreamGetId: unique for the process's life, unlike the handle), 0 under capture or where
  /// the runtime has none.
  uint64_t streamKey(cudaStream_t stream, bool capturing);
  /// Whether `stream` is under capture, and that capture's id (0 when not); a failed query fails the call `what`.
  ncclResult_t captureState(cudaStream_t stream, const char* what, bool* capturing, uint64_t* id);
  /// Records that this rank launches on `stream` (`id`: streamKey's); refuses a stream another rank of this
  /// communicator uses. A stream under capture (id 0) is not claimed.
  ncclResult_t claimStream(cudaStream_t stream, uint64_t id);
  void fillCommon(DevWork* w) const;
  char* outScratch(size_t bytes);

  ncclComm* comm_;
  GpuRuntime* rt_;
  Planner* planner_;
  Connections* host_;
  const WindowTable* windows_;
  std::unique_ptr<DeviceConnections> conns_;
  int nChannels_ = 1;  ///< most channels of a launch (and blocks of a direct or inbox launch)
  int blockCap_ = 1;   ///< most blocks of a launch: what the ranks sharing a GPU can run at once
  int minBlocks_ = 1;  ///< fewest blocks of a collective's launch: the agreed config.minCTAs, within blockCap_
  int maxLanes_ = 1;   ///< most blocks per channel on the FIFO path (CHORUS_DEVICE_CHANNEL_BLOCKS)
  int64_t llMax_ = 0;
  int threads_ = 0;  ///< threads per block of the collective kernel (NCCL_NTHREADS)
  bool inboxesReachEveryRank_ = false;
  void* statusHost_ = nullptr;  ///< DevStatus followed by the abort word, pinned and mapped
  void* statusDev_ = nullptr;
  char* scratch_ = nullptr;  ///< kDevMaxBlocks x 2 staging areas of scratchBytes_
  int32_t* orderTableDev_ = nullptr;  ///< the planner's orderTable() in device memory (StepRun::ordered lookups)
  size_t scratchBytes_ = 0;
  std::vector<std::pair<char*, size_t>> outScratch_;  ///< ncclReduce output stand-ins (kept until destroy)
  std::thread watchdog_;
  std::mutex watchMutex_;
  std::condition_variable watchCv_;
  bool watchStop_ = false;  ///< guarded by watchMutex_
  std::unique_ptr<CallBoard> board_;  ///< null without peers on this host
  std::atomic<bool> boardFailed_{false};
  std::chrono::steady_clock::time_point lastBoardCheck_;  ///< of the launching thread's checks while it waits
  bool launched_ = false;  ///< a kernel was enqueued: destroy waits for the device (user streams may be gone)
  std::shared_ptr<LaunchGate> gate_;  ///< ranks of this communicator that are threads of this process on this GPU
  // Call order (orderBefore/orderAfter), used by the calling thread only.
  void* orderEvent_ = nullptr;  ///< marks the end of the latest work, recorded after every launch
  bool haveLast_ = false;
  cudaStream_t lastStream_ = nullptr;  ///< the latest work's stream: compared, never used (it may be gone)
  uint64_t lastStreamId_ = 0;
  uint64_t lastCaptureId_ = 0;
  uint64_t gateColls_ = 0;     ///< collective launches through the gate (their number, in messages)
  uint64_t ticksPerMs_ = 1000000;
  uint64_t* ipcEpochs_ = nullptr;  ///< device memory: per-block counters of the inbox launches (made on first use)
};

}  // namespace chorus
