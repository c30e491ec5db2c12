// One launch of the collective kernel, as plain data passed by value as the kernel argument (so that a launch
// captured in a CUDA/HIP graph replays exactly). The engine (src/engine/device_engine.cc) fills it from the same
// schedules and block layout the host path runs; kernels/device_kernel.h runs it with the executor of
// kernels/executor.h over the device platform of kernels/device_platform.h.
#pragma once

#include <cstdint>

#include "algo/schedule.h"
#include "kernels/executor.h"
#include "kernels/fifo.h"
#include "kernels/reduce.h"

namespace chorus {

/// Size limits of one launch. DevWork is the kernel's argument: CUDA 12.1 and newer pass up to 32 KB on sm_70 and
/// newer (the build defines CHORUS_DEVWORK_LARGE then, for every target, so all agree on the layout); elsewhere it
/// stays under the 4 KiB every CUDA and HIP target accepts.
#if defined(CHORUS_DEVWORK_LARGE)
constexpr int kDevMaxRuns = 320;      ///< step runs over all channels (a ring: at most 7 a channel, whatever the ranks)
constexpr int kDevMaxFifos = 256;     ///< connection ends one launch uses, over all its blocks
constexpr int kDevMaxBlockFifos = 128;  ///< connection ends one block uses
constexpr int kDevMaxChannels = 16;     ///< schedules of one launch (channels)
constexpr int kDevMaxLanes = 4;         ///< blocks per channel on the FIFO path, each with its own FIFOs
constexpr int kDevMaxP2P = 64;        ///< sends (and receives) in one point-to-point launch
constexpr size_t kDevWorkMaxBytes = 32764;
#else
constexpr int kDevMaxRuns = 40;     ///< step runs over all channels (a ring: at most 7 a channel, whatever the ranks)
constexpr int kDevMaxFifos = 24;    ///< connection ends one launch uses, over all its blocks
constexpr int kDevMaxBlockFifos = 24;  ///< connection ends one block uses
constexpr int kDevMaxChannels = 2;     ///< schedules of one launch (channels)
constexpr int kDevMaxLanes = 2;        ///< blocks per channel on the FIFO path, each with its own FIFOs
constexpr int kDevMaxP2P = 8;       ///< sends (and receives) in one point-to-point launch
constexpr size_t kDevWorkMaxBytes = 4096;
#endif

/// Most blocks of one launch: every channel's lanes (FIFO path), or the blocks of a direct or inbox launch (at most
/// kDevMaxChannels there: their counters are per block).
constexpr int kDevMaxBlocks = kDevMaxChannels * kDevMaxLanes;
static_assert(kDevMaxBlocks <= 255, "DevWork::nChannels counts blocks in a byte");

/// Most ranks a direct launch reaches: every rank of a communicator whose ranks are threads of one process on one
/// GPU, or processes of one host, each reading and writing the others' buffers (kernels/device_direct.h).
constexpr int kDevMaxDirect = 8;

/// One connection end as the kernel sees it: FIFO memory mapped for this device and this end's step counter,
/// which lives in this rank's device memory and carries over from one launch to the next (stream order).
struct DevFifo {
  char* base;      ///< FIFO memory (kernels/fifo.h layout), local, peer (IPC) or pinned host
  char* data;      ///< the Simple slot data when it is not in base (GPUDirect RDMA net FIFOs: GPU memory), else null
  uint64_t* step;  ///< this end's slots produced (send) or consumed (recv) so far
  FifoGeometry geo;
  int16_t channel;  ///< the schedule's channel (the connection's own channel number differs for lanes past 0)
  int16_t peer;
  int16_t isSend;
  int16_t flags;  ///< DevFifoFlags
  int16_t lane;   ///< which of the channel's blocks uses it (DevWork::lanes)
};

/// DevFifo::flags.
enum DevFifoFlags : int16_t {
  kDevFifoStaged = 1,  ///< network staging: a proxy forwards whole slots, so LL is never used on it
};

/// Written by the kernel (pinned host memory) when a launch fails; read by the host at the next call and by
/// ncclCommGetAsyncError. code 0 means no failure.
struct DevStatus {
  uint32_t code;    ///< ncclResult_t of the failure
  uint32_t reason;  ///< PoisonReason
  int32_t channel;  ///< block that failed
  int32_t peer;     ///< peer it was waiting for or that sent the offending slot
  uint32_t step;    ///< schedule step index
  uint32_t what;    ///< DevWait: what the kernel was waiting for
  uint64_t seq;     ///< operation sequence number
  uint64_t got[3];  ///< for a mismatch: the peer's slot header {seq, count, desc | root << 32}
  uint32_t launch;  ///< DevDirectKind of the launch that failed
  uint32_t pad;
};

/// What a failed kernel was waiting for.
enum DevWait : uint32_t {
  kDevWaitNone = 0,
  kDevWaitSpace = 1,
  kDevWaitData = 2,
  kDevWaitLL = 3,
  kDevWaitDirect = 4,
  kDevWaitIpc = 5,  ///< an inbox flag of a peer process (kernels/device_ipc.h); DevStatus::step is the phase
  /// A peer's call runs on windows and this one does not (or the reverse), or a peer's buffer is in another window
  /// (kernels/device_window.h). DevStatus::got: {the peer's window ids, this rank's, which buffer: 0 in, 1 out, 2
  /// whether the call is on windows at all}.
  kDevWaitWindow = 6,
  /// Not a wait: a slot read at another place on its connection than its sender wrote it (the two ends out of step).
  /// DevStatus::got: {the place the slot's header gives, this end's}, each the low 31 bits of a count.
  kDevSlotOrder = 7,
};

/// DevWork::direct: how a launch reaches its peers.
enum DevDirectKind : uint8_t {
  kDevThroughFifos = 0,   ///< schedules over FIFOs (kernels/executor.h)
  kDevDirectThreads = 1,  ///< the peers' own buffers: ranks are threads of one process on one GPU (device_direct.h)
  kDevDirectIpc = 2,      ///< through inboxes in the peers' memory: co-located processes (device_ipc.h)
  kDevDirectWindows = 3,  ///< the peers' own buffers, in registered windows: co-located processes (device_window.h)
};

/// The collective kernel's argument.
struct DevWork {
  // Block layout (BlockMap fields without pointers to host arrays).
  const char* in;
  char* out;
  uint64_t esize, inTotal, outTotal, blockElems, chanElems, tileElems, nTiles;
  RedOp red;
  const void* scalarDev;  ///< premulsum factor in GPU memory, read by every block at its start (null: red.scalar)
  Fingerprint fp;
  /// nChannels: the blocks of the launch. On the FIFO path that is (schedule channels) x lanes: block b runs channel
  /// b % (nChannels / lanes) as lane b / (nChannels / lanes), over that lane's own FIFOs, and takes tiles lane,
  /// lane + lanes, ... of the channel's part. A point-to-point launch (one channel) has as many lanes as its largest
  /// message has tiles, at most a cap every rank shares, so both ends of a pair agree on each tile's lane: a message
  /// of k tiles goes through lanes 0..k-1 on both ends when k is below the cap, and both ends have the cap otherwise.
  uint8_t reducing, ll, p2p, nChannels;
  uint8_t lanes, pad0[3];
  uint32_t sliceBytes;
  uint16_t chanFirst[kDevMaxChannels + 1];  ///< channel c runs the steps of runs [chanFirst[c], chanFirst[c + 1])
  uint16_t chanSteps[kDevMaxChannels];      ///< steps in channel c's runs
  int16_t chanLagFrom[kDevMaxChannels];     ///< channel c's Schedule::lagFrom, in its runs' step numbers (-1: none)
  uint8_t chanLag[kDevMaxChannels];         ///< channel c's Schedule::lag
  /// Channel c's ring order in device memory, where its step runs name blocks by ring position (StepRun::ordered);
  /// null otherwise.
  const int32_t* chanOrder[kDevMaxChannels];
  uint16_t nFifos;
  uint8_t nSends, nRecvs;
  StepRun runs[kDevMaxRuns];  ///< the channels' schedules as runs of steps (kernels/executor.h)
  DevFifo fifos[kDevMaxFifos];
  // Point-to-point: send i / recv j (bytes), with their own fingerprints.
  const char* sendPtrs[kDevMaxP2P];
  char* recvPtrs[kDevMaxP2P];
  size_t sendCounts[kDevMaxP2P];
  size_t recvCounts[kDevMaxP2P];
  Fingerprint sendFps[kDevMaxP2P];
  Fingerprint recvFps[kDevMaxP2P];
  char* scratch;  ///< per block: 2 staging areas of scratchBytes (LL unpacking)
  uint64_t scratchBytes;
  DevStatus* status;                  ///< device view of the communicator's pinned status word
  const volatile int32_t* abortFlag;  ///< device view of the communicator's pinned abort word
  const volatile uint8_t* deadPeers;  ///< pinned, one byte per rank: the host saw that rank's process exit
  uint64_t timeoutTicks;              ///< longest wait in device-timer ticks (0: none)
  int32_t rank;
  int32_t threads;  ///< threads per block the launch asks for (NCCL_NTHREADS); 0: the build's (kDevThreads)
  // Direct collectives (direct == kDevDirectThreads; kernels/device_direct.h): which (a Coll) and its root, every
  // rank's buffers by rank, and the counters the ranks' blocks meet at, [2 phases][kDevMaxDirect ranks][kDevMaxBlocks
  // blocks], 64 bytes apart.
  uint8_t direct, nDirect, directColl, pad2;
  int32_t directRoot;
  const char* directIn[kDevMaxDirect];
  char* directOut[kDevMaxDirect];
  uint64_t* directSync;
  // Allreduce through inboxes (direct == kDevDirectIpc; kernels/device_ipc.h): by peer rank, the inbox this rank
  // writes in that peer's memory and the inbox that peer writes in this rank's memory (null for this rank); the
  // data bytes of one inbox half; this rank's launch counters, one per block, 64 bytes apart, in its own memory.
  char* ipcTo[kDevMaxDirect];
  char* ipcFrom[kDevMaxDirect];
  uint64_t* ipcEpochs;
  uint64_t ipcHalfBytes;
  uint8_t ipcTwoShot, pad3[7];
  // Collectives on registered windows (direct == kDevDirectWindows; kernels/device_window.h), which also use the
  // inboxes' flag lines and counters above. directIn[q] / directOut[q] are then rank q's copy of the window holding
  // this rank's input / output, as mapped here; each peer's offset in it comes with its flag. Every inbox-family
  // launch sends these in its flags: the ids of the windows holding this rank's input (low half) and output (high
  // half), 0 for none (always 0 for an inbox launch), and the buffers' offsets in them.
  uint64_t winIds;
  uint64_t winOff[2];
};

/// A launch's lanes (blocks per channel): 1 where the engine left it 0 (direct and inbox launches).
CHORUS_HOST_DEVICE inline int workLanes(const DevWork& w) { return w.lanes > 0 ? w.lanes : 1; }
/// The schedule channel block b runs, and its lane in that channel.
CHORUS_HOST_DEVICE inline int blockChannel(const DevWork& w, int b) { return b % (w.nChannels / workLanes(w)); }
CHORUS_HOST_DEVICE inline int blockLane(const DevWork& w, int b) { return b / (w.nChannels / workLanes(w)); }

/// DevWork::winIds from the ids of the windows holding a launch's input and output (0: none).
CHORUS_HOST_DEVICE inline uint64_t packWindowIds(uint32_t in, uint32_t out) {
  return in | static_cast<uint64_t>(out) << 32;
}
/// The id of the window holding the input (which = 0) or the output (which = 1) in a packWindowIds word.
CHORUS_HOST_DEVICE inline uint32_t windowId(uint64_t ids, int which) {
  return static_cast<uint32_t>(ids >> (32 * which));
}

/// uint64_t words between two launch counters (one 64-byte line each): the direct launches' meeting counters and
/// the inbox-family launches' per-block epochs.
constexpr size_t kDirectSyncStride = 8;
/// Bytes of a communicator's direct-launch counters.
constexpr size_t kDirectSyncBytes = 2 * kDevMaxDirect * kDevMaxBlocks * kDirectSyncStride * sizeof(uint64_t);

static_assert(sizeof(DevWork) <= kDevWorkMaxBytes, "DevWork must fit the kernel argument limit of this build");

}  // namespace chorus
