#include "engine/device_engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "core/checks.h"
#include "core/params.h"
#include "core/process.h"
#include "core/timeout.h"
#include "engine/engine.h"
#include "engine/host_platform.h"
#include "kernels/device_kernel.h"
#include "kernels/dtypes.h"

namespace chorus {
namespace {

IntParam kDevChannels{"CHORUS_DEVICE_NCHANNELS", 0,
                      "Most blocks (channels) of one device-path operation; 0: the build's limit, 16 in CUDA builds "
                      "(large kernel arguments) and 2 otherwise.",
                      "performance"};
IntParam kDevChannelBytes{"CHORUS_DEVICE_CHANNEL_BYTES", 262144,
                          "Device path: an operation of B bytes (the larger of its input and output) uses "
                          "ceil(B / this) channels, at most CHORUS_DEVICE_NCHANNELS; past that, up to "
                          "CHORUS_DEVICE_CHANNEL_BLOCKS blocks per channel, one per this many bytes.",
                          "performance"};
IntParam kDevCopyKernelMax{"CHORUS_DEVICE_COPY_KERNEL_MAX_BYTES", 4 << 20,
                           "Device path: a stream-ordered copy (a 1-rank collective, a send to self, an own block "
                           "copied before the kernel) of at most this many bytes runs as a small kernel, larger ones "
                           "on the copy engine (a kernel is cheaper to issue; the copy engine takes no SMs). 0: always "
                           "the copy engine.",
                           "performance"};
IntParam kDevLanes{"CHORUS_DEVICE_CHANNEL_BLOCKS", 0,
                   "Device path: most blocks per channel of a collective through FIFOs, each with its own FIFOs and "
                   "its share of the channel's tiles (used once the channels are at CHORUS_DEVICE_NCHANNELS); 0: the "
                   "build's limit, 4 in CUDA builds (large kernel arguments) and 2 otherwise.",
                   "performance"};
// From the H100 run of 2026-11-23 (2 processes, allreduce): LL took 43 us at 8 KB and 128 us at 32 KB while
// Simple took 60 us at 128 KB, so LL up to 64 KB made time fall as size grew. At 4 KB and below LL stays under
// what Simple costs at any size.
IntParam kDevDirect{"CHORUS_DEVICE_DIRECT", 1,
                    "1: when every rank of a communicator is a thread of one process on one GPU, collectives read and "
                    "write the peers' buffers directly (no FIFO); 0: always through FIFOs.",
                    "performance"};
IntParam kDevIpc{"CHORUS_DEVICE_IPC", 1,
                 "1: when every rank is on one host and they are not all threads of one process on one GPU, an "
                 "allreduce of at most CHORUS_DEVICE_IPC_MAX_BYTES (one-shot up to CHORUS_DEVICE_ONESHOT_MAX_BYTES, "
                 "two-shot above), and a reduce, broadcast, allgather, reduce-scatter or alltoall whose count is at "
                 "most CHORUS_DEVICE_ONESHOT_MAX_BYTES, go through inboxes in the peers' GPU memory; 0: always through "
                 "FIFOs.",
                 "performance"};
IntParam kDevOneShotMax{"CHORUS_DEVICE_ONESHOT_MAX_BYTES", 65536,
                        "Device path: largest allreduce through inboxes that is one-shot (every rank reduces the whole "
                        "buffer; larger ones up to CHORUS_DEVICE_IPC_MAX_BYTES are two-shot), and largest count in "
                        "bytes (a rank's block for allgather, reduce-scatter and alltoall) of the other collectives "
                        "through inboxes.",
                        "tuning"};
IntParam kDevIpcMax{"CHORUS_DEVICE_IPC_MAX_BYTES", 1048576,
                    "Device path: largest allreduce through inboxes. Each rank holds 2 x this x (ranks - 1) bytes of "
                    "inboxes in its GPU memory once the first call through inboxes runs.",
                    "tuning"};
IntParam kDevIpcBlocks{"CHORUS_DEVICE_IPC_BLOCKS", 4,
                       "Device path: blocks of every launch through inboxes (at most the channel cap).", "tuning"};
IntParam kDevWindows{"CHORUS_DEVICE_WINDOWS", 1,
                     "1: when every rank is on one host and the buffers of an allreduce, allgather, reduce-scatter or "
                     "alltoall are in registered windows (ncclCommWindowRegister), the collective reads and writes the "
                     "peers' buffers directly (no FIFO, no inbox copy), above the sizes that go one-shot through "
                     "inboxes; 0: windows change no path.",
                     "performance"};
IntParam kNThreads{"NCCL_NTHREADS", -2,
                   "Threads per block of the device path's collective kernel, as NCCL reads it: a multiple of the "
                   "warp size from two warps (64) up; in HIP builds, as RCCL, of the wavefront (64) from four (256) "
                   "up. One that is not a multiple takes the most, one above NCCL's most (512) or under the least "
                   "is clamped, each with a WARN, as in NCCL. The kernel's launch bound is 256 threads: a larger "
                   "value that NCCL takes runs 256 here, with an INFO line. -2 or unset: 256.",
                   "performance"};
IntParam kDevLLMax{"CHORUS_DEVICE_LL_MAX_BYTES", 4096,
                   "Largest message (count x element size) that uses LL by default on the device path (NCCL_PROTO "
                   "overrides).",
                   "tuning"};

/// How often the watchdog looks at the local peer processes.
constexpr int kWatchMs = 100;
/// Pinned status block: DevStatus, the abort word, then one "process exited" byte per rank.
constexpr size_t kDeadPeersOffset = sizeof(DevStatus) + 64;

const char* waitText(uint32_t what) {
  switch (what) {
    case kDevWaitSpace:
      return "for FIFO space toward";
    case kDevWaitData:
      return "for data from";
    case kDevWaitLL:
      return "for LL data from";
    default:
      return "on";
  }
}

// Which rank of which communicator last launched on each (GPU, stream id) of this process. Two ranks of one
// communicator on one stream would deadlock: the first kernel waits for the second, which is queued behind it.
struct StreamUser {
  uint64_t commHash;
  int rank;
  const void* engine;
};
std::mutex gStreamMutex;
std::map<std::pair<int, uint64_t>, StreamUser> gStreamUsers;

}  // namespace

std::string deviceEnvKey() {
  return std::to_string(kDevChannels.get()) + "|" + std::to_string(kDevChannelBytes.get()) + "|" +
         std::to_string(kDevLanes.get()) + "|" + std::to_string(kDevLLMax.get()) + "|" +
         std::to_string(p2pReadSetting()) + "|" + std::to_string(kDevDirect.get()) + "|" +
         std::to_string(kDevIpc.get()) + "|" + std::to_string(kDevOneShotMax.get()) + "|" +
         std::to_string(kDevIpcMax.get()) + "|" + std::to_string(kDevIpcBlocks.get()) + "|" +
         std::to_string(kDevWindows.get()) + "|" + p2pPolicySetting();
}

namespace {

// Blocks of one launch every rank can use: the kernels of the ranks sharing a GPU wait for each other, so their blocks
// must all fit on it at once. Every rank computes the same value from the same peer table (blocks pair up across
// ranks).
int residentBlockCap(const ncclComm* comm, int* tightestGpuRanks, uint32_t* tightestBlocks) {
  std::map<std::pair<uint64_t, int64_t>, std::pair<int, uint32_t>> gpus;  // (host, bus id or device) -> ranks, blocks
  for (const PeerInfo& p : comm->peers) {
    if (p.cudaDev < 0) continue;
    auto& g = gpus[{p.hostHash, p.busId >= 0 ? p.busId : p.cudaDev}];
    g.first++;
    g.second = p.deviceBlocks;
  }
  int cap = kDevMaxBlocks;
  for (const auto& [key, g] : gpus) {
    if (g.second == 0) continue;  // unknown
    int fit = std::max(1, static_cast<int>(g.second) / g.first);
    if (fit < cap) {
      cap = fit;
      *tightestGpuRanks = g.first;
      *tightestBlocks = g.second;
    }
  }
  return cap;
}

/// Threads per block of the collective kernel from NCCL_NTHREADS, by NCCL's rules (see kNThreads) within the
/// kernel's launch bound; `rank` logs what it changed.
int kernelThreads(int rank) {
  constexpr int kMin = (CHORUS_HIP ? 4 : 2) * kWarpSize;  // NCCL's two warps; RCCL's four wavefronts
  constexpr int kNcclMost = 512;                          // NCCL_SIMPLE_MAX_NTHREADS
  const int64_t want = kNThreads.get();
  if (want <= 0) return kDevThreads;
  if (want % kWarpSize != 0) {
    WARN("NCCL_NTHREADS=%ld is not a multiple of the warp size (%d): using %d", static_cast<long>(want), kWarpSize,
         kDevThreads);
    return kDevThreads;
  }
  if (want < kMin) {
    WARN("NCCL_NTHREADS=%ld is under the least, %d: using %d", static_cast<long>(want), kMin, kMin);
    return kMin;
  }
  if (want > kNcclMost) {
    WARN("NCCL_NTHREADS=%ld is over the most, %d (NCCL's; this build's kernel holds %d): using %d",
         static_cast<long>(want), kNcclMost, kDevThreads, kDevThreads);
  } else if (want > kDevThreads && rank == 0) {
    INFO(kInit, "NCCL_NTHREADS=%ld: the collective kernel runs at most %d threads a block, so it runs %d",
         static_cast<long>(want), kDevThreads, kDevThreads);
  }
  return static_cast<int>(std::min<int64_t>(want, kDevThreads));
}

}  // namespace

DeviceEngine::DeviceEngine(ncclComm* comm, GpuRuntime* rt, Planner* planner, Connections* host,
                           const WindowTable* windows)
    : comm_(comm), rt_(rt), planner_(planner), host_(host), windows_(windows) {
  int64_t want = kDevChannels.get() > 0 ? kDevChannels.get() : kDevMaxChannels;
  nChannels_ = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kDevMaxChannels, want)));
  int ranks = 0;
  uint32_t blocks = 0;
  blockCap_ = residentBlockCap(comm, &ranks, &blocks);
  if (blockCap_ < kDevMaxBlocks && comm->rank == 0)
    INFO(kInit, "comm %p: %d block(s) a launch at most: %d ranks share a GPU that runs %u blocks of the kernel at once",
         (void*)comm, blockCap_, ranks, blocks);
  // config.maxCTAs (NCCL_MAX_CTAS, NCCL_MAX_NCHANNELS): the smallest of the ranks', so that their launches pair up.
  int capRank = -1;
  const int cap = configChannelCap(comm, &capRank);
  if (cap > 0 && cap < blockCap_) {
    blockCap_ = cap;
    if (comm->rank == 0)
      INFO(kInit, "comm %p: %d block(s) a launch at most: rank %d's config.maxCTAs (NCCL_MAX_CTAS, NCCL_MAX_NCHANNELS)",
           (void*)comm, blockCap_, capRank);
  }
  nChannels_ = std::min(nChannels_, blockCap_);
  // config.minCTAs (NCCL_MIN_CTAS, NCCL_MIN_NCHANNELS): the largest of the ranks', within the cap.
  int floorRank = -1;
  minBlocks_ = std::min(configChannelFloor(comm, &floorRank), blockCap_);
  if (minBlocks_ > 1 && comm->rank == 0)
    INFO(kInit,
         "comm %p: %d blocks a collective's launch at least: rank %d's config.minCTAs (NCCL_MIN_CTAS, "
         "NCCL_MIN_NCHANNELS)",
         (void*)comm, minBlocks_, floorRank);
  int64_t lanes = kDevLanes.get() > 0 ? kDevLanes.get() : kDevMaxLanes;
  maxLanes_ = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kDevMaxLanes, lanes)));
  llMax_ = kDevLLMax.get();
  threads_ = kernelThreads(comm->rank);
  inboxesReachEveryRank_ = inboxesReachEveryRank();
}

DeviceEngine::~DeviceEngine() {
  {
    std::lock_guard<std::mutex> lock(gStreamMutex);
    for (auto it = gStreamUsers.begin(); it != gStreamUsers.end();)
      it = it->second.engine == this ? gStreamUsers.erase(it) : std::next(it);
  }
  // Kernels still queued read the FIFOs, scratch and status freed below: wait for them (each is bounded by
  // CHORUS_TIMEOUT_S, or stops at once when aborted). The whole device, not each stream this communicator used:
  // the user may have destroyed those streams already, and their handles may since name other streams.
  if (gate_) gate_->fail(comm_->rank, "its communicator was destroyed");
  SetupScope setup(rt_);
  int callerDev = -1;
  bool haveCallerDev = rt_->getDevice(&callerDev) == ncclSuccess;
  if (launched_ && rt_->setDevice(comm_->cudaDev) == ncclSuccess) rt_->deviceSynchronize();
  if (watchdog_.joinable()) {  // after the wait: a kernel stuck on a dead peer still needs it
    {
      std::lock_guard<std::mutex> lock(watchMutex_);
      watchStop_ = true;
    }
    watchCv_.notify_all();
    watchdog_.join();
  }
  bool failed = comm_->state.load() == static_cast<int>(CommState::kFailed) || comm_->abortFlag.load() != 0;
  if (conns_ && !failed) conns_->drainOwned();
  conns_.reset();
  if (scratch_) rt_->deviceFree(scratch_);
  if (orderTableDev_) rt_->deviceFree(orderTableDev_);
  if (ipcEpochs_) rt_->deviceFree(ipcEpochs_);
  for (auto& p : outScratch_) rt_->deviceFree(p.first);
  if (statusHost_) rt_->hostFree(statusHost_);
  if (orderEvent_) rt_->eventDestroy(orderEvent_);
  gate_.reset();  // the last communicator of the gate frees its counters (the device is idle now)
  if (haveCallerDev && callerDev != comm_->cudaDev) rt_->setDevice(callerDev);
}

ncclResult_t DeviceEngine::init() {
  SetupScope setup(rt_);
  if (rt_->setDevice(comm_->cudaDev) != ncclSuccess ||
      rt_->hostAllocMapped(kDeadPeersOffset + comm_->nranks, &statusHost_, &statusDev_) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: device path setup on GPU %d: %s", comm_->rank, comm_->cudaDev,
                rt_->lastError().c_str());
  const FifoGeometry& geo = planner_->geometry();
  scratchBytes_ = roundUp(FifoGeometry::kLLHeaderLines * 4 + geo.llPayload() + 8, 256);
  void* p = nullptr;
  if (rt_->deviceAlloc(scratchBytes_ * 2 * kDevMaxBlocks, &p) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: device scratch: %s", comm_->rank, rt_->lastError().c_str());
  scratch_ = static_cast<char*>(p);
  // The ring orders step runs look per-rank blocks up in (a few KB: nranks x host rotations).
  const std::vector<int32_t>& orders = planner_->orderTable();
  p = nullptr;
  if (rt_->deviceAlloc(orders.size() * sizeof(int32_t), &p) != ncclSuccess ||
      rt_->copyToDevice(p, orders.data(), orders.size() * sizeof(int32_t)) != ncclSuccess) {
    if (p != nullptr) rt_->deviceFree(p);
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: device ring-order table: %s", comm_->rank,
                rt_->lastError().c_str());
  }
  orderTableDev_ = static_cast<int32_t*>(p);
  ticksPerMs_ = rt_->clockTicksPerMs(comm_->cudaDev);
  conns_ = std::make_unique<DeviceConnections>(comm_, rt_, geo, host_);
  CHORUS_CHECK(conns_->init());
  if (rt_->eventCreate(&orderEvent_) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: device path event: %s", comm_->rank, rt_->lastError().c_str());
  gate_ = LaunchGate::join(comm_);
  std::vector<int> onHost;  // the ranks whose calls this rank's are compared with on the call board
  std::vector<uint64_t> onHostPids;
  for (int p = 0; p < comm_->nranks; p++)
    if (p != comm_->rank && comm_->peers[p].hostHash == comm_->peers[comm_->rank].hostHash) {
      onHost.push_back(p);
      onHostPids.push_back(comm_->peers[p].pid);
    }
  if (!onHost.empty()) {
    static std::once_flag swept;
    std::call_once(swept, [this] {
      int n = CallBoard::sweepStale();
      if (n > 0) INFO(kShm, "rank %d: removed %d call board(s) left by exited processes", comm_->rank, n);
    });
    board_ = std::make_unique<CallBoard>(comm_->commHash, comm_->rank, onHost, onHostPids);
    std::string why;
    if (board_->open(&why)) {
      // A host wait for a peer's connection looks at the board too (every 10 ms): a peer that called something
      // else never makes that connection.
      conns_->setStopCheck([this] {
        auto now = std::chrono::steady_clock::now();
        if (!boardFailed_.load() && now - lastBoardCheck_ < std::chrono::milliseconds(10)) return std::string();
        lastBoardCheck_ = now;
        return checkBoard();
      });
    } else {
      INFO(kInit, "rank %d: no call board (%s): a peer's call that takes another path is found at CHORUS_TIMEOUT_S",
           comm_->rank, why.c_str());
      board_.reset();
    }
  }
  watchPeers();
  if (comm_->rank == 0)
    INFO(kInit,
         "comm %p: device path on %s GPU %d, up to %d channel(s) of up to %d block(s) of %d threads, LL up to %ld "
         "bytes",
         (void*)comm_, rt_->name(), comm_->cudaDev, nChannels_, maxLanes_, threads_, static_cast<long>(llMax_));
  return ncclSuccess;
}

void DeviceEngine::abort() {
  if (statusHost_) {
    auto* flag = reinterpret_cast<int32_t*>(static_cast<char*>(statusHost_) + sizeof(DevStatus));
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  }
}

uint8_t* DeviceEngine::deadPeers() const { return static_cast<uint8_t*>(statusHost_) + kDeadPeersOffset; }

void DeviceEngine::postCall(uint64_t seq, const OpDesc& op, CallPath path) {
  if (!board_) return;
  const Fingerprint fp = collFingerprint(seq, op);  // what the FIFO slot headers carry
  CallRecord r;
  r.seq = fp.seq;
  r.count = fp.count;
  r.desc = fp.desc;
  r.root = fp.root;
  r.path = path;
  board_->post(r);
}

std::string DeviceEngine::checkBoard() {
  if (!board_) return std::string();
  std::string text = board_->check();
  if (text.empty() || boardFailed_.exchange(true)) return text;
  // The first to find it: the communicator fails, and this rank's kernels (waiting for the peer's part, which
  // never comes) stop. The peer finds the same records and stops its own.
  setLastError(comm_, "%s", text.c_str());
  comm_->state.store(static_cast<int>(CommState::kFailed));
  int expected = ncclSuccess;
  comm_->asyncError.compare_exchange_strong(expected, static_cast<int>(ncclInvalidUsage));
  abort();
  if (gate_) gate_->fail(comm_->rank, text);
  return text;
}

bool DeviceEngine::boardMismatch() {
  const std::string mismatch = checkBoard();
  if (mismatch.empty()) return false;
  if (commLastError(comm_).find(mismatch) == std::string::npos) setLastError(comm_, "%s", mismatch.c_str());
  return true;
}

void DeviceEngine::watchPeers() {
  std::vector<int> local;  // ranks in other processes of this host: the kernel waits on them through IPC
  const PeerInfo& me = comm_->peers[comm_->rank];
  for (int p = 0; p < comm_->nranks; p++)
    if (comm_->peers[p].hostHash == me.hostHash && comm_->peers[p].pid != me.pid) local.push_back(p);
  if (local.empty() && !board_) return;
  watchdog_ = std::thread([this, local]() mutable {
    pthread_setname_np(pthread_self(), "chorus-devwatch");
    std::unique_lock<std::mutex> lock(watchMutex_);
    while (!watchStop_ && (!local.empty() || (board_ && !boardFailed_.load()))) {
      if (board_) checkBoard();
      for (size_t i = 0; i < local.size();) {
        int p = local[i];
        if (!processGone(static_cast<pid_t>(comm_->peers[p].pid))) {
          i++;
          continue;
        }
        // A kernel waiting for this peer would otherwise spin until CHORUS_TIMEOUT_S. A peer that finished its
        // part and exited normally is harmless: kernels fail only if they still lack data it never wrote.
        __atomic_store_n(deadPeers() + p, uint8_t{1}, __ATOMIC_RELEASE);
        INFO(kInit, "rank %d: the process of rank %d (pid %lu) has exited", comm_->rank, p,
             static_cast<unsigned long>(comm_->peers[p].pid));
        local.erase(local.begin() + static_cast<long>(i));
      }
      watchCv_.wait_for(lock, std::chrono::milliseconds(kWatchMs));
    }
  });
}

namespace {

// Why a wait stopped, for the reasons every kind of wait shares; nullptr for a peer's own failure.
const char* stopText(PoisonReason reason) {
  switch (reason) {
    case PoisonReason::kTimeout:
      return "no progress before CHORUS_TIMEOUT_S";
    case PoisonReason::kAborted:
      return "the communicator was aborted";
    default:
      return nullptr;
  }
}

// A window launch refused a peer's call (DevStatus::got of kDevWaitWindow: the peer's window ids, this rank's, and
// which buffer: 0 input, 1 output, 2 whether the call is on windows at all).
void windowMismatchText(const volatile uint64_t* got, int rank, int peer, unsigned long seq, char* msg, size_t size) {
  const uint64_t theirs = got[0], mine = got[1];
  const int which = static_cast<int>(got[2]);
  const char* rule = "every rank's buffers of a collective on windows must be in the same registered windows";
  if (which == 2) {
    snprintf(msg, size,
             "rank %d: device operation #%lu has %s buffers in registered windows but rank %d's matching "
             "call has %s (ncclCommWindowRegister): %s",
             rank, seq, mine != 0 ? "its" : "none of its", peer, theirs != 0 ? "its there" : "none there", rule);
    return;
  }
  char theirText[32] = "no window", mineText[32] = "no window";
  if (windowId(theirs, which) != 0) snprintf(theirText, sizeof(theirText), "window #%u", windowId(theirs, which));
  if (windowId(mine, which) != 0) snprintf(mineText, sizeof(mineText), "window #%u", windowId(mine, which));
  snprintf(msg, size, "rank %d: device operation #%lu: rank %d's %s buffer is in %s but this rank's is in %s: %s", rank,
           seq, peer, which == 0 ? "input" : "output", theirText, mineText, rule);
}

}  // namespace

ncclResult_t DeviceEngine::checkStatus() {
  if (statusHost_ == nullptr) return ncclSuccess;
  auto* st = static_cast<volatile DevStatus*>(statusHost_);
  uint32_t code = st->code;
  if (code == 0 && !boardFailed_.load()) return ncclSuccess;
  // A kernel that stopped because the ranks' calls differ (or that the peer, having found that, stopped): the
  // mismatch is the cause, whatever the kernel saw.
  if (boardMismatch()) return ncclInvalidUsage;
  if (code == 0) return ncclSuccess;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  auto reason = static_cast<PoisonReason>(st->reason);
  int peer = st->peer;
  const char* stop = stopText(reason);  // nullptr: a peer's own failure
  char msg[1000];
  // A peer whose kernel refused this rank's call (its flag carries the call) may stop before its own flag reaches
  // this rank's kernel, which then sees only that the peer failed: the boards still hold both calls.
  std::string differs;
  if (board_ && st->what == kDevWaitIpc && stop == nullptr && reason != PoisonReason::kPeerDied)
    differs = board_->differs(peer, st->seq);
  if (!differs.empty()) {
    code = ncclInvalidUsage;
    snprintf(msg, sizeof(msg), "%s", differs.c_str());
  } else if (st->what == kDevWaitDirect) {
    snprintf(msg, sizeof(msg),
             "rank %d: device operation #%lu (direct collective) stopped while waiting for rank %d's kernel to %s "
             "(block %d): %s",
             comm_->rank, static_cast<unsigned long>(st->seq), peer,
             st->step == 0 ? "start" : "finish with this rank's buffers", st->channel, stop ? stop : "it failed");
  } else if (st->what == kDevSlotOrder) {
    snprintf(msg, sizeof(msg), "rank %d: device operation #%lu (channel %d): internal error: %s; the kernel stopped",
             comm_->rank, static_cast<unsigned long>(st->seq), st->channel,
             slotOutOfStepText(comm_->rank, peer, st->got[0], st->got[1]).c_str());
  } else if (st->what == kDevWaitWindow) {
    windowMismatchText(st->got, comm_->rank, peer, static_cast<unsigned long>(st->seq), msg, sizeof(msg));
  } else if (reason == PoisonReason::kMismatch && (st->got[1] != 0 || st->got[2] != 0)) {
    // The kernel saw the peer's call (a slot header: its count and description, never both zero).
    std::string theirs = describeFingerprint(st->got[0], st->got[1], static_cast<uint32_t>(st->got[2]),
                                             static_cast<int32_t>(st->got[2] >> 32));
    snprintf(msg, sizeof(msg), "rank %d: device operation #%lu does not match rank %d's call %s (channel %d, step %u)",
             comm_->rank, static_cast<unsigned long>(st->seq), peer, theirs.c_str(), st->channel, st->step);
  } else if (st->what == kDevWaitIpc) {
    // kError: the peer poisoned its inbox, naming a culprit (got[0] - 1).
    int culprit = static_cast<int>(st->got[0]) - 1;
    std::string why = stop                                ? stop
                      : reason == PoisonReason::kPeerDied ? "its process died"
                      : culprit == comm_->rank            ? "it failed, having given up on this rank"
                      : culprit >= 0 && culprit != peer   ? "it failed, reporting rank " + std::to_string(culprit)
                                                          : "it failed";
    const bool windows = st->launch == kDevDirectWindows;
    snprintf(msg, sizeof(msg),
             "rank %d: device operation #%lu (a collective %s) stopped while waiting for rank %d's %s "
             "(block %d): %s",
             comm_->rank, static_cast<unsigned long>(st->seq),
             windows ? "on registered windows" : "through IPC inboxes", peer,
             windows ? (st->step == 0 ? "kernel to start" : "kernel to finish with this rank's buffers")
                     : (st->step == 0 ? "input" : "reduced chunk"),
             st->channel, why.c_str());
  } else if (reason == PoisonReason::kMismatch) {
    // A peer's kernel found that two ranks' calls differ and poisoned its FIFOs; got[0] is the rank whose call it
    // refused, plus one. That rank's error names both calls.
    const int culprit = static_cast<int>(st->got[0]) - 1;
    const std::string whose = culprit == comm_->rank ? "this rank's call" : "rank " + std::to_string(culprit) + "'s call";
    snprintf(msg, sizeof(msg),
             "rank %d: device operation #%lu stopped while waiting %s rank %d (channel %d, slot %u): another rank "
             "found that %s does not match its own (a mismatched call; that rank's error names both calls)",
             comm_->rank, static_cast<unsigned long>(st->seq), waitText(st->what), peer, st->channel, st->step,
             whose.c_str());
  } else {
    const char* why = stop ? stop : reason == PoisonReason::kPeerDied ? "a peer process died" : "a peer failed";
    int culprit = static_cast<int>(st->got[0]) - 1;
    const RemoteTransport* net = host_->remote();
    std::string cause, conn;
    if (reason == PoisonReason::kError && net != nullptr && net->failedSetup(&conn) != nullptr) {
      // A connection of this rank's that the net failed while it was set up: the net's proxy stops every staging wait
      // with it (NetProxy::judged). The connection is the cause, not the peer.
      cause = setupFailureText(net, conn);
    } else {
      const bool timeout = reason == PoisonReason::kTimeout;
      cause = std::string(why) + (timeout ? "; rank " : "; reported by or about rank ") +
              std::to_string(timeout ? peer : culprit);
      // A peer across hosts: what this rank's net said, where it failed a connection (HostPlatform::poisoned).
      const bool acrossHosts =
          peer >= 0 && peer < comm_->nranks && comm_->peers[peer].hostHash != comm_->peers[comm_->rank].hostHash;
      if (reason == PoisonReason::kError && acrossHosts) cause += netFailureSuffix(net);
    }
    snprintf(msg, sizeof(msg),
             "rank %d: device operation #%lu stopped while waiting %s rank %d (channel %d, slot %u): %s", comm_->rank,
             static_cast<unsigned long>(st->seq), waitText(st->what), peer, st->channel, st->step, cause.c_str());
  }
  comm_->state.store(static_cast<int>(CommState::kFailed));
  int expected = ncclSuccess;
  comm_->asyncError.compare_exchange_strong(expected, static_cast<int>(code));
  CHORUS_FAIL(comm_, static_cast<ncclResult_t>(code), "%s", msg);
}

void DeviceEngine::fillCommon(DevWork* w) const {
  w->scratch = scratch_;
  w->scratchBytes = scratchBytes_;
  w->status = static_cast<DevStatus*>(statusDev_);
  w->abortFlag = reinterpret_cast<const volatile int32_t*>(static_cast<char*>(statusDev_) + sizeof(DevStatus));
  w->deadPeers = reinterpret_cast<const volatile uint8_t*>(static_cast<char*>(statusDev_) + kDeadPeersOffset);
  double s = timeoutSeconds();
  w->timeoutTicks = s > 0 ? static_cast<uint64_t>(s * 1000.0 * static_cast<double>(ticksPerMs_)) : 0;
  w->rank = comm_->rank;
  w->threads = threads_;
}

char* DeviceEngine::outScratch(size_t bytes) {
  for (auto& p : outScratch_)
    if (p.second >= bytes) return p.first;
  void* p = nullptr;
  if (rt_->deviceAlloc(bytes, &p) != ncclSuccess) return nullptr;
  outScratch_.emplace_back(static_cast<char*>(p), bytes);  // earlier ones may be in use by queued kernels
  return static_cast<char*>(p);
}

namespace {

bool sameRef(const BufRef& a, const BufRef& b) { return a.buf == b.buf && a.block == b.block; }
bool sameStep(const Step& a, const Step& b) {
  return a.op == b.op && sameRef(a.src, b.src) && sameRef(a.dst, b.dst) && a.final == b.final && a.span == b.span;
}

// The plain copies of a schedule the copy engine can do before the kernel: input block to output block, in every
// channel, with no transform (a non-reducing collective), into an output block no other step reads or writes.
std::vector<Step> copyEngineSteps(const Schedule* scheds, int nChannels, bool reducing) {
  std::vector<Step> out;
  if (reducing) return out;
  for (const Step& c : scheds[0].steps) {
    if (c.op != StepOp::kCopy || c.src.buf != Buf::kInput || c.dst.buf != Buf::kOutput || c.final) continue;
    bool ok = true;
    for (int ch = 0; ch < nChannels && ok; ch++) {
      int same = 0;
      for (const Step& st : scheds[ch].steps) {
        if (sameStep(st, c)) {
          same++;
          continue;
        }
        if (sameRef(st.src, c.dst) || sameRef(st.dst, c.dst)) ok = false;
      }
      ok = ok && same == 1;
    }
    if (ok) out.push_back(c);
  }
  return out;
}

}  // namespace

ncclResult_t DeviceEngine::setSchedules(DevWork* w, const Schedule* scheds, int nChannels,
                                        const std::vector<Step>& skip, int lanes,
                                        const std::function<int(int, bool)>& endLanes) {
  // Channel c's steps as runs, then the connection ends they use (each once), in step order.
  std::vector<StepRun> runs;
  std::vector<Step> kept;
  for (int ch = 0; ch < nChannels; ch++) {
    w->chanFirst[ch] = static_cast<uint16_t>(std::min<size_t>(runs.size(), kDevMaxRuns));
    kept.clear();
    int lagFrom = -1;  // the schedule's lagFrom, counted in the steps kept
    for (size_t i = 0; i < scheds[ch].steps.size(); i++) {
      const Step& st = scheds[ch].steps[i];
      if (static_cast<int>(i) == scheds[ch].lagFrom) lagFrom = static_cast<int>(kept.size());
      bool skipped = false;
      for (const Step& k : skip) skipped |= sameStep(st, k);
      if (!skipped) kept.push_back(st);
    }
    if (scheds[ch].lagFrom == static_cast<int>(scheds[ch].steps.size())) lagFrom = static_cast<int>(kept.size());
    w->chanSteps[ch] = static_cast<uint16_t>(kept.size());
    w->chanLagFrom[ch] = static_cast<int16_t>(scheds[ch].lag > 0 ? lagFrom : -1);
    w->chanLag[ch] = static_cast<uint8_t>(std::min(scheds[ch].lag, 255));
    // Per-rank blocks in a ring order that is not rank order run as few runs by ring position, looked up on the
    // device in the communicator's table (StepRun::ordered).
    RunBlockOrder bo;
    const bool ordered = planner_->runBlockOrder(scheds[ch], &bo);
    w->chanOrder[ch] = ordered ? orderTableDev_ + (bo.order - planner_->orderTable().data()) : nullptr;
    packStepRuns(kept.data(), kept.size(), &runs, ordered ? &bo : nullptr);
  }
  if (runs.size() > static_cast<size_t>(kDevMaxRuns))
    CHORUS_FAIL(comm_, ncclInvalidUsage,
                "rank %d: this device operation's schedule is %zu runs of steps over %d channel(s); one launch holds "
                "at most %d (set NCCL_ALGO, or use host buffers)",
                comm_->rank, runs.size(), nChannels, kDevMaxRuns);
  std::copy(runs.begin(), runs.end(), w->runs);
  w->chanFirst[nChannels] = static_cast<uint16_t>(runs.size());
  // Every lane of a channel has FIFOs of its own: lane j of channel c is connection channel devLaneChannel(c, j).
  std::vector<LaunchEnd> unique = launchEnds(scheds, nChannels);
  std::vector<LaunchEnd> ends;
  int most = 1;  // blocks: lanes of the end with the most (a launch has at least one block)
  for (const LaunchEnd& e : unique) {
    const int endLaneCount = endLanes ? endLanes(std::get<1>(e), std::get<2>(e)) : lanes;
    most = std::max(most, endLaneCount);
    for (int lane = 0; lane < endLaneCount; lane++)
      ends.emplace_back(devLaneChannel(std::get<0>(e), lane), std::get<1>(e), std::get<2>(e));
  }
  // One lane's ends over every channel bound what any one block uses (the planner keeps them within that).
  if (ends.size() > static_cast<size_t>(kDevMaxFifos) || unique.size() > static_cast<size_t>(kDevMaxBlockFifos))
    CHORUS_FAIL(comm_, ncclInvalidUsage,
                "rank %d: this device operation needs %zu connections (%zu a lane); one launch holds "
                "at most %d, %d a lane (fewer ranks, or host buffers)",
                comm_->rank, ends.size(), unique.size(), kDevMaxFifos, kDevMaxBlockFifos);
  std::vector<DevFifo> fifos;
  CHORUS_CHECK(conns_->get(ends, &fifos));
  w->nFifos = static_cast<uint16_t>(fifos.size());
  w->lanes = static_cast<uint8_t>(endLanes ? most : lanes);
  for (size_t i = 0; i < fifos.size(); i++) {
    const int conn = std::get<0>(ends[i]);  // devLaneChannel(channel, lane)
    w->fifos[i] = fifos[i];
    w->fifos[i].channel = static_cast<int16_t>(conn % kDevMaxChannels);
    w->fifos[i].lane = static_cast<int16_t>(conn / kDevMaxChannels);
  }
  return ncclSuccess;
}

ncclResult_t DeviceEngine::captureState(cudaStream_t stream, const char* what, bool* capturing, uint64_t* id) {
  if (rt_->streamCaptureInfo(stream, capturing, id) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: %s: %s", comm_->rank, what, rt_->lastError().c_str());
  return ncclSuccess;
}

uint64_t DeviceEngine::streamKey(cudaStream_t stream, bool capturing) {
  // A stream under capture is not asked for its id: on the H100, cudaStreamGetId on a capturing stream invalidated
  // the capture (every later launch then failed "due to a previous error during capture").
  uint64_t id = 0;
  if (capturing || !rt_->streamId(stream, &id)) return 0;
  return id;
}

ncclResult_t DeviceEngine::claimStream(cudaStream_t stream, uint64_t id) {
  // A stream under capture (id 0) is claimed by the launches outside a capture, which a communicator's first uses
  // normally are. Without ids there is no way to tell streams apart over time.
  if (id == 0) return ncclSuccess;
  std::lock_guard<std::mutex> lock(gStreamMutex);
  auto key = std::make_pair(comm_->cudaDev, id);
  auto it = gStreamUsers.find(key);
  if (it != gStreamUsers.end() && it->second.engine != this && it->second.commHash == comm_->commHash)
    CHORUS_FAIL(comm_, ncclInvalidUsage,
                "rank %d: stream %p on GPU %d already carries rank %d of this communicator; kernels of two ranks "
                "on one stream run one after the other, so the first would wait for the second forever. Give "
                "each rank its own stream (the default stream 0 is shared by every thread)",
                comm_->rank, static_cast<void*>(stream), comm_->cudaDev, it->second.rank);
  gStreamUsers[key] = StreamUser{comm_->commHash, comm_->rank, this};
  return ncclSuccess;
}

ncclResult_t DeviceEngine::orderBefore(cudaStream_t stream, uint64_t streamId, uint64_t captureId, const char* what) {
  // The same stream: by the handle and, where known, the id (a stream made after another was destroyed may have its
  // handle).
  const bool same = stream == lastStream_ && streamId == lastStreamId_;
  if (!haveLast_ || same || captureId != lastCaptureId_) return ncclSuccess;
  if (rt_->streamWaitEvent(stream, orderEvent_) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: ordering %s after the previous operation: %s", comm_->rank,
                what, rt_->lastError().c_str());
  return ncclSuccess;
}

ncclResult_t DeviceEngine::orderAfter(cudaStream_t stream, uint64_t streamId, uint64_t captureId, const char* what) {
  // Marked now, on the stream the work went to, and never later: by the next call the user may have destroyed that
  // stream (a stream a call, freed after it), and asking a destroyed stream anything crashed the driver (H200).
  if (rt_->eventRecord(orderEvent_, stream) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: marking the end of %s: %s", comm_->rank, what,
                rt_->lastError().c_str());
  haveLast_ = true;
  lastStream_ = stream;  // compared, never used
  lastStreamId_ = streamId;
  lastCaptureId_ = captureId;
  return ncclSuccess;
}

ncclResult_t DeviceEngine::meetAtGate(const OpDesc* op, const std::vector<int>& peers,
                                      std::vector<LaunchGate::Payload>* all) {
  LaunchGate::Payload mine;
  if (op != nullptr) {
    mine.set = true;
    mine.count = op->count;
    mine.desc = packDesc(op->coll, op->dtype, op->op);
    mine.root = op->root;
    mine.in = op->sendbuff;
    mine.out = op->recvbuff;
    gateColls_++;
  }
  CHORUS_CHECK(gate_->pass(comm_, peers, op ? &mine : nullptr, op ? all : nullptr));
  // Ranks sharing this GPU in this process compare their calls before any kernel runs.
  for (size_t q = 0; op != nullptr && q < all->size(); q++) {
    const LaunchGate::Payload& p = (*all)[q];
    if (q == static_cast<size_t>(comm_->rank) || !p.arrived) continue;
    if (!p.set || p.count != mine.count || p.desc != mine.desc || p.root != mine.root)
      CHORUS_FAIL(comm_, ncclInvalidUsage,
                  "rank %d called %s but rank %zu (a thread of this process on GPU %d) made %s at the same point",
                  comm_->rank, describeFingerprint(gateColls_, mine.count, mine.desc, mine.root).c_str(), q,
                  comm_->cudaDev,
                  p.set ? ("call " + describeFingerprint(gateColls_, p.count, p.desc, p.root)).c_str()
                        : "a point-to-point launch");
  }
  return ncclSuccess;
}

ncclResult_t DeviceEngine::launch(DevWork& w, cudaStream_t stream, const char* what, const std::vector<int>& peers,
                                  const OpDesc* op, bool gatePassed) {
  bool capturing = false;
  uint64_t captureId = 0;
  CHORUS_CHECK(captureState(stream, what, &capturing, &captureId));
  const uint64_t streamId = streamKey(stream, capturing);
  CHORUS_CHECK(claimStream(stream, streamId));
  fillCommon(&w);
  if (gate_ && !gatePassed) {
    std::vector<LaunchGate::Payload> all;
    CHORUS_CHECK(meetAtGate(op, peers, &all));
  }
  CHORUS_CHECK(orderBefore(stream, streamId, captureId, what));
  // A net proxy asleep would see the kernel's first staged slot only at its next poll (the kernel cannot kick it):
  // wake it now; it then polls, yielding at first and sleeping a little longer each idle round (docs/net.md).
  bool staged = false;
  for (int i = 0; i < w.nFifos; i++) staged |= (w.fifos[i].flags & kDevFifoStaged) != 0;
  if (staged && host_->remote() != nullptr) host_->remote()->kick();
  if (rt_->launch(w, stream) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: launching %s: %s", comm_->rank, what,
                rt_->lastError().c_str());
  launched_ = true;
  return orderAfter(stream, streamId, captureId, what);
}

ncclResult_t DeviceEngine::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0 || dst == src) return ncclSuccess;
  bool capturing = false;
  uint64_t captureId = 0;
  CHORUS_CHECK(captureState(stream, what, &capturing, &captureId));
  const uint64_t streamId = streamKey(stream, capturing);
  CHORUS_CHECK(orderBefore(stream, streamId, captureId, what));
  const bool byKernel = bytes <= static_cast<uint64_t>(std::max<int64_t>(0, kDevCopyKernelMax.get()));
  if ((byKernel ? rt_->copyKernelAsync(dst, src, bytes, stream) : rt_->memcpyAsync(dst, src, bytes, stream)) !=
      ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: %s: %s", comm_->rank, what, rt_->lastError().c_str());
  launched_ = true;
  return orderAfter(stream, streamId, captureId, what);
}

ncclResult_t DeviceEngine::copyColl(const OpDesc& op) {
  // One rank: every collective's output is its input (a premulsum, which scales, is not taken here).
  size_t bytes = op.count * DType::size(op.dtype);
  return copy(op.recvbuff, op.sendbuff, bytes, op.stream, collName(op.coll));
}

uint64_t DeviceEngine::opBytes(const OpDesc& op) const {
  bool perRank = op.coll == Coll::kAllGather || op.coll == Coll::kReduceScatter || op.coll == Coll::kAllToAll ||
                 op.coll == Coll::kGather || op.coll == Coll::kScatter;
  return static_cast<uint64_t>(op.count) * DType::size(op.dtype) * (perRank ? comm_->nranks : 1);
}

int DeviceEngine::unitsFor(const OpDesc& op, int per, int most) const {
  // Every rank computes the same from the call's arguments and the agreed floor: units of `per` blocks enough for
  // the bytes and for config.minCTAs.
  const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(1, kDevChannelBytes.get())) * static_cast<uint64_t>(per);
  const uint64_t forFloor = (static_cast<uint64_t>(minBlocks_) + per - 1) / static_cast<uint64_t>(std::max(1, per));
  return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(std::max(1, most)),
                                             std::max<uint64_t>({1, (opBytes(op) + bytes - 1) / bytes, forFloor})));
}

int DeviceEngine::channelsFor(const OpDesc& op) const { return unitsFor(op, 1, nChannels_); }

int DeviceEngine::peerBlocksFor(const OpDesc& op) const {
  // As many blocks as a collective through FIFOs could have (channels x lanes).
  return unitsFor(op, 1, std::min(nChannels_ * maxLanes_, blockCap_));
}

int DeviceEngine::lanesFor(const OpDesc& op, const CollPlan& plan) const {
  // Every rank computes the same from the call's arguments and the plan (which is the same on every rank).
  int lanes = unitsFor(op, plan.nChannels, std::min(maxLanes_, blockCap_ / std::max(1, plan.nChannels)));
  if (lanes > 1) {  // the ends, only for calls that may have lanes (small calls skip the walk)
    const size_t ends = launchEnds(plan.scheds->data(), plan.nChannels).size();
    if (ends > 0) lanes = std::min(lanes, static_cast<int>(static_cast<size_t>(kDevMaxFifos) / ends));
  }
  return std::max(1, lanes);
}

ncclResult_t DeviceEngine::launchColl(const OpDesc& op) {
  // A collective of nothing moves nothing (it may run on the host path on another rank, in a group of host buffers);
  // it still takes its place in the sequence of collectives, as it does there.
  if (op.count == 0) {
    postCall(planner_->nextCollSeq(), op, CallPath::kNothing);
    return ncclSuccess;
  }
  if (comm_->nranks == 1 && !op.userOp) return copyColl(op);
  const std::vector<int> all = allRanks();  // a collective waits on every rank
  // Every rank a thread of this process on this GPU: the calls meet at the gate first, and with every rank's
  // buffers known the collective may run directly on them.
  bool gatePassed = false;
  if (op.count > 0 && kDevDirect.get() != 0 && comm_->nranks <= kDevMaxDirect && gate_ &&
      static_cast<int>(gate_->members().size()) == comm_->nranks) {
    std::vector<LaunchGate::Payload> met;
    bool capturing = false;
    uint64_t captureId = 0;
    CHORUS_CHECK(captureState(op.stream, collName(op.coll), &capturing, &captureId));
    CHORUS_CHECK(claimStream(op.stream, streamKey(op.stream, capturing)));
    CHORUS_CHECK(meetAtGate(&op, all, &met));
    gatePassed = true;
    if (directSafe(op, met)) return launchDirect(op, met);
  }
  WindowRef inWin, outWin;
  if (windowsFor(op, &inWin, &outWin)) return launchWindows(op, inWin, outWin, gatePassed);
  if (ipcEligible(op)) return launchIpc(op, gatePassed);
  LaunchLimits limits{kDevMaxBlockFifos, kDevMaxRuns};  // lanes multiply the ends (lanesFor keeps them in bounds)
  // The direct schedule of an all-to-all has 2(n-1) connection ends a channel (a gather's root and a scatter's n-1):
  // past what one launch holds, it runs as its sends and receives, which split into launches of the same index.
  if ((op.coll == Coll::kAllToAll || op.coll == Coll::kGather || op.coll == Coll::kScatter) &&
      !planner_->fitsEveryRank(op.coll, Algo::kDirect, op.root, 1, limits))
    return collAsSendRecvs(op);
  CollPlan plan;
  bool empty = false;
  if (planner_->planColl(
          op, channelsFor(op), llMax_, [this](size_t b) { return outScratch(b); }, &plan, &empty, limits) !=
      ncclSuccess)
    CHORUS_FAIL(comm_, ncclInternalError, "rank %d: no schedule for %s", comm_->rank, collName(op.coll));
  if (empty) return ncclSuccess;
  postCall(plan.fp.seq, op, CallPath::kFifos);  // before any wait for a connection
  if (plan.nChannels > kDevMaxChannels)
    CHORUS_FAIL(comm_, ncclInternalError, "rank %d: %d channels exceed the kernel's %d", comm_->rank, plan.nChannels,
                kDevMaxChannels);
  DevWork w{};  // unused entries stay zero or default
  const BlockMap& m = plan.map;
  w.in = m.in;
  w.out = m.out;
  w.esize = m.esize;
  w.inTotal = m.inTotal;
  w.outTotal = m.outTotal;
  w.blockElems = m.blockElems;
  w.chanElems = plan.chanElems;
  // Several blocks per channel (lanes) share its tiles, so a channel gets at least one tile per lane: tiles shrink
  // (to no less than the lane's share) when the channel's part is short of that.
  const int lanes = lanesFor(op, plan);
  w.tileElems = m.tileElems;
  if (lanes > 1)
    w.tileElems = std::min<uint64_t>(m.tileElems, roundUp((plan.chanElems + lanes - 1) / lanes, size_t(16)));
  w.nTiles = (plan.chanElems + w.tileElems - 1) / w.tileElems;
  w.red = plan.red;
  w.scalarDev = op.scalarOnDevice ? op.scalarPtr : nullptr;
  w.fp = plan.fp;
  w.reducing = plan.reducing;
  w.ll = plan.choice.proto == Proto::kLL;
  w.nChannels = static_cast<uint8_t>(plan.nChannels * lanes);  // blocks: every channel's lanes
  w.sliceBytes = plan.sliceBytes;
  // Plain copies from the input to the output (the local block of an out-of-place allgather, a broadcast root's
  // own copy) go to the copy engine, before the kernel, which then leaves them out.
  std::vector<Step> copies = copyEngineSteps(plan.scheds->data(), plan.nChannels, plan.reducing);
  for (const Step& c : copies) {
    size_t sb = m.blockElems * static_cast<size_t>(c.src.block), db = m.blockElems * static_cast<size_t>(c.dst.block);
    size_t sn = sb < m.inTotal ? std::min(m.blockElems, m.inTotal - sb) : 0;
    size_t dn = db < m.outTotal ? std::min(m.blockElems, m.outTotal - db) : 0;
    if (sn != dn) CHORUS_FAIL(comm_, ncclInternalError, "rank %d: a copy step between blocks of different sizes", comm_->rank);
    CHORUS_CHECK(copy(m.out + db * m.esize, m.in + sb * m.esize, sn * m.esize, op.stream, collName(op.coll)));
  }
  CHORUS_CHECK(setSchedules(&w, plan.scheds->data(), plan.nChannels, copies, lanes));
  return launch(w, op.stream, collName(op.coll), all, &op, gatePassed);
}

bool DeviceEngine::directSafe(const OpDesc& op, const std::vector<LaunchGate::Payload>& met) const {
  if (static_cast<int>(met.size()) < comm_->nranks) return false;
  for (int q = 0; q < comm_->nranks; q++) {
    if (!met[q].arrived || !met[q].set) return false;
    // An alltoall in place would have rank q overwrite the block of its buffer a peer is still reading.
    if (op.coll == Coll::kAllToAll && met[q].in == met[q].out) return false;
  }
  return true;
}

DevWork DeviceEngine::peerWork(const OpDesc& op, uint8_t kind, int blocks) {
  DevWork w{};  // unused entries stay zero or default
  w.direct = kind;
  w.nDirect = static_cast<uint8_t>(comm_->nranks);
  w.directColl = static_cast<uint8_t>(op.coll);
  w.directRoot = op.root;
  w.esize = DType::size(op.dtype);
  w.inTotal = w.outTotal = op.count;
  w.reducing = collReducing(op.coll);
  w.red = planner_->redOpFor(op);  // also the element type of the copies
  w.scalarDev = w.reducing && op.scalarOnDevice ? op.scalarPtr : nullptr;
  w.nChannels = static_cast<uint8_t>(blocks);
  w.fp.seq = planner_->nextCollSeq();
  w.fp.count = op.count;
  w.fp.desc = packDesc(op.coll, op.dtype, w.reducing ? op.op : 0);
  w.fp.root = op.coll == Coll::kReduce || op.coll == Coll::kBroadcast ? op.root : -1;
  return w;
}

std::vector<int> DeviceEngine::allRanks() const {
  std::vector<int> all(comm_->nranks);
  for (int r = 0; r < comm_->nranks; r++) all[r] = r;
  return all;
}

ncclResult_t DeviceEngine::launchDirect(const OpDesc& op, const std::vector<LaunchGate::Payload>& met) {
  // As many blocks as the bytes warrant; each rank's share is split among them.
  DevWork w = peerWork(op, kDevDirectThreads, peerBlocksFor(op));
  postCall(w.fp.seq, op, CallPath::kDirect);
  for (int q = 0; q < comm_->nranks; q++) {
    w.directIn[q] = static_cast<const char*>(met[q].in);
    w.directOut[q] = static_cast<char*>(met[q].out);
  }
  if (gate_->syncMemory(rt_, &w.directSync) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: direct-launch counters: %s", comm_->rank,
                rt_->lastError().c_str());
  std::string what = std::string(collName(op.coll)) + " (direct)";
  return launch(w, op.stream, what.c_str(), allRanks(), &op, true);
}

bool DeviceEngine::inboxesReachEveryRank() const {
  // Fixed for the engine's life, as the connections' read mode is (DeviceConnections).
  if (p2pReadSetting() || comm_->nranks < 2 || comm_->nranks > kDevMaxDirect) return false;
  for (const PeerInfo& p : comm_->peers)
    if (p.hostHash != comm_->peers[comm_->rank].hostHash || p.cudaDev < 0) return false;
  return true;
}

bool DeviceEngine::ipcEligible(const OpDesc& op) const {
  // Every rank decides the same from the call's arguments, the shared settings and the peer table.
  if (kDevIpc.get() == 0 || op.count == 0 || !inboxesReachEveryRank_) return false;
  // Bytes one rank pushes to one peer: the count's (a rank's block for allgather, reduce-scatter and alltoall).
  uint64_t bytes = static_cast<uint64_t>(op.count) * DType::size(op.dtype);
  uint64_t limit = static_cast<uint64_t>(std::max<int64_t>(0, kDevOneShotMax.get()));
  switch (op.coll) {
    case Coll::kAllReduce:
      limit = static_cast<uint64_t>(std::max<int64_t>(0, kDevIpcMax.get()));
      break;
    case Coll::kReduce:
    case Coll::kBroadcast:
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
      break;
    default:
      return false;
  }
  return bytes <= std::min<uint64_t>(limit, static_cast<uint64_t>(std::max<int64_t>(0, kDevIpcMax.get())));
}

bool DeviceEngine::windowsFor(const OpDesc& op, WindowRef* in, WindowRef* out) const {
  // Each rank looks at its own buffers only: the peers' must be in the same windows (NCCL's contract for window
  // buffers); a rank whose call is not is refused by the kernels, naming it. Calls small enough to go one-shot
  // through inboxes still do: one flag exchange instead of two.
  if (kDevWindows.get() == 0 || op.count == 0 || !inboxesReachEveryRank_) return false;
  const Coll c = op.coll;
  if (c != Coll::kAllReduce && c != Coll::kAllGather && c != Coll::kReduceScatter && c != Coll::kAllToAll) return false;
  const uint64_t bytes = static_cast<uint64_t>(op.count) * DType::size(op.dtype);
  if (bytes <= static_cast<uint64_t>(std::max<int64_t>(0, kDevOneShotMax.get())) && ipcEligible(op)) return false;
  const uint64_t n = static_cast<uint64_t>(comm_->nranks);
  const uint64_t inBytes = bytes * (c == Coll::kReduceScatter || c == Coll::kAllToAll ? n : 1);
  const uint64_t outBytes = bytes * (c == Coll::kAllGather || c == Coll::kAllToAll ? n : 1);
  // An alltoall in place would have a rank overwrite blocks of its buffer that peers still read.
  const char* s = static_cast<const char*>(op.sendbuff);
  const char* r = static_cast<const char*>(op.recvbuff);
  if (c == Coll::kAllToAll && s < r + outBytes && r < s + inBytes) return false;
  if (windowReadsInputs(c) && (*in = windows_->find(op.sendbuff, inBytes)).win == nullptr) return false;
  if (windowWritesOutputs(c) && (*out = windows_->find(op.recvbuff, outBytes)).win == nullptr) return false;
  return true;
}

ncclResult_t DeviceEngine::setInboxes(DevWork* w) {
  const int n = comm_->nranks, me = comm_->rank;
  if (ipcEpochs_ == nullptr) {
    // The inboxes (made once, kept until destroy) and this rank's launch counters, one line per block.
    conns_->setInboxBytes(ipcInboxBytes(static_cast<size_t>(kDevIpcMax.get())));
    void* p = nullptr;
    if (rt_->deviceAlloc(kDevMaxBlocks * kIpcLineBytes, &p) != ncclSuccess)
      CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: inbox launch counters: %s", me, rt_->lastError().c_str());
    ipcEpochs_ = static_cast<uint64_t*>(p);
  }
  std::vector<std::tuple<int, int, bool>> need;
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    need.emplace_back(kDevIpcChannel, q, true);
    need.emplace_back(kDevIpcChannel, q, false);
  }
  std::vector<DevFifo> ends;
  CHORUS_CHECK(conns_->get(need, &ends));
  for (size_t i = 0; i < need.size(); i++) {
    int q = std::get<1>(need[i]);
    (std::get<2>(need[i]) ? w->ipcTo[q] : w->ipcFrom[q]) = ends[i].base;
  }
  w->ipcEpochs = ipcEpochs_;
  w->ipcHalfBytes = static_cast<uint64_t>(kDevIpcMax.get());
  return ncclSuccess;
}

ncclResult_t DeviceEngine::launchIpc(const OpDesc& op, bool gatePassed) {
  const int64_t blocks = std::max<int64_t>(minBlocks_, kDevIpcBlocks.get());
  DevWork w =
      peerWork(op, kDevDirectIpc, static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nChannels_, blocks))));
  uint64_t bytes = static_cast<uint64_t>(op.count) * DType::size(op.dtype);
  w.ipcTwoShot =
      op.coll == Coll::kAllReduce && bytes > static_cast<uint64_t>(std::max<int64_t>(0, kDevOneShotMax.get())) ? 1 : 0;
  postCall(w.fp.seq, op, w.ipcTwoShot ? CallPath::kTwoShot : CallPath::kOneShot);
  CHORUS_CHECK(setInboxes(&w));
  w.in = static_cast<const char*>(op.sendbuff);
  w.out = static_cast<char*>(op.recvbuff);
  std::string what = std::string(collName(op.coll)) + (w.ipcTwoShot ? " (two-shot" : " (one-shot") + " through IPC)";
  return launch(w, op.stream, what.c_str(), allRanks(), &op, gatePassed);
}

ncclResult_t DeviceEngine::launchWindows(const OpDesc& op, const WindowRef& in, const WindowRef& out, bool gatePassed) {
  // As many blocks as the bytes warrant, as for the thread ranks' direct launches.
  DevWork w = peerWork(op, kDevDirectWindows, peerBlocksFor(op));
  postCall(w.fp.seq, op, CallPath::kWindows);
  CHORUS_CHECK(setInboxes(&w));
  w.in = static_cast<const char*>(op.sendbuff);
  w.out = static_cast<char*>(op.recvbuff);
  for (int q = 0; q < comm_->nranks; q++) {
    if (in.win) w.directIn[q] = in.win->peers[static_cast<size_t>(q)];
    if (out.win) w.directOut[q] = out.win->peers[static_cast<size_t>(q)];
  }
  w.winIds = packWindowIds(in.win ? in.win->id : 0, out.win ? out.win->id : 0);
  w.winOff[0] = in.offset;
  w.winOff[1] = out.offset;
  std::string what = std::string(collName(op.coll)) + " (on registered windows)";
  return launch(w, op.stream, what.c_str(), allRanks(), &op, gatePassed);
}

int DeviceEngine::p2pMaxLanes() const {
  // A batch holds at most one send and one receive a peer, and kDevMaxP2P of each.
  const size_t ends = std::min<size_t>(2 * static_cast<size_t>(comm_->nranks - 1), 2 * static_cast<size_t>(kDevMaxP2P));
  const int fit = static_cast<int>(static_cast<size_t>(kDevMaxFifos) / std::max<size_t>(1, ends));
  return std::max(1, std::min({maxLanes_, blockCap_, fit, maxP2PChannelsSetting()}));
}

ncclResult_t DeviceEngine::launchP2P(const std::vector<const OpDesc*>& batch) {
  P2PPlan plan;
  planner_->planP2P(batch, &plan);
  if (plan.maxBytes == 0) return ncclSuccess;
  if (plan.sendPtrs.size() > static_cast<size_t>(kDevMaxP2P) || plan.recvPtrs.size() > static_cast<size_t>(kDevMaxP2P))
    CHORUS_FAIL(comm_, ncclInternalError,
                "rank %d: a launch of %zu sends and %zu receives exceeds the %d of each one launch holds "
                "(p2pLaunches splits batches)",
                comm_->rank, plan.sendPtrs.size(), plan.recvPtrs.size(), kDevMaxP2P);
  DevWork w{};  // unused entries stay zero or default
  w.p2p = 1;
  w.esize = 1;
  w.tileElems = plan.tileBytes;
  w.nTiles = plan.nTiles;
  w.red = makeRedOp(ncclSum, ncclInt8, comm_->nranks);
  w.fp = plan.fp;
  w.sliceBytes = plan.sliceBytes;
  w.nSends = static_cast<uint8_t>(plan.sendPtrs.size());
  w.nRecvs = static_cast<uint8_t>(plan.recvPtrs.size());
  for (size_t i = 0; i < plan.sendPtrs.size(); i++) {
    w.sendPtrs[i] = plan.sendPtrs[i];
    w.sendCounts[i] = plan.sendBytes[i];
    w.sendFps[i] = plan.sendFps[i];
  }
  for (size_t i = 0; i < plan.recvPtrs.size(); i++) {
    w.recvPtrs[i] = plan.recvPtrs[i];
    w.recvCounts[i] = plan.recvBytes[i];
    w.recvFps[i] = plan.recvFps[i];
  }
  // Tile t of a send or receive goes through lane t mod lanes, where the launch's lanes are as many as its largest
  // message has tiles, at most the shared cap. The peer's batch may hold other messages, yet both ends put each tile
  // of the pair's message in the same lane: a message of k tiles uses lanes 0..k-1 on both ends when k is under the
  // cap, and when it is not, both launches have the cap.
  const int cap = p2pMaxLanes();
  // A message of nothing needs no connection (the peer may run it on the host path, where it uses none either).
  std::map<std::pair<int, bool>, int> pairLanes;
  for (const OpDesc* op : batch) {
    const uint64_t tiles = (op->count * DType::size(op->dtype) + plan.tileBytes - 1) / plan.tileBytes;
    pairLanes[{op->root, op->isSend}] = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(cap), tiles));
  }
  CHORUS_CHECK(setSchedules(&w, &plan.schedule, 1, {}, 1, [&pairLanes](int peer, bool isSend) {
    auto it = pairLanes.find({peer, isSend});
    return it == pairLanes.end() ? 1 : it->second;
  }));
  w.nChannels = w.lanes;  // one channel
  std::vector<int> peers;
  for (const OpDesc* op : batch) peers.push_back(op->root);
  return launch(w, batch[0]->stream, "ncclSend/ncclRecv", peers);
}

ncclResult_t DeviceEngine::connectAtInit(size_t* made) {
  SetupScope setup(rt_);
  if (rt_->setDevice(comm_->cudaDev) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: selecting GPU %d: %s", comm_->rank, comm_->cudaDev,
                rt_->lastError().c_str());
  const std::vector<LaunchEnd> ends =
      planner_->initEnds([this](const OpDesc& op) { return std::vector<int>{channelsFor(op)}; });
  std::vector<std::tuple<int, int, bool>> need;
  for (const auto& [ch, peer, isSend] : ends) need.emplace_back(devLaneChannel(ch, 0), peer, isSend);
  std::vector<DevFifo> fifos;
  CHORUS_CHECK(conns_->get(need, &fifos));
  *made = need.size();
  return ncclSuccess;
}

ncclResult_t DeviceEngine::run(const std::vector<OpDesc>& ops) {
  CHORUS_CHECK(checkStatus());
  // The user's stream may be under capture: setup runs in relaxed mode (runtime.h, SetupScope).
  SetupScope setup(rt_);
  ncclResult_t res = runOps(ops);
  if (res != ncclSuccess && res != ncclInProgress && board_) {
    // A peer that found the ranks' calls differ fails and may leave before this rank sees that on the board: what
    // this rank then meets (its process gone, its FIFO unmappable) follows from the mismatch, which is the cause.
    if (boardMismatch()) res = ncclInvalidUsage;
  }
  if (res != ncclSuccess && gate_) gate_->fail(comm_->rank, commLastError(comm_));
  return res;
}

ncclResult_t DeviceEngine::collAsSendRecvs(const OpDesc& op) {
  const int n = comm_->nranks, me = comm_->rank;
  const size_t bytes = op.count * DType::size(op.dtype);
  const char* in = static_cast<const char*>(op.sendbuff);
  char* out = static_cast<char*>(op.recvbuff);
  // A block's send and the receive into its place meet different peers, so they may fall in different launches: an
  // alltoall whose buffers overlap sends from a copy of its input, made first on the same stream.
  if (op.coll == Coll::kAllToAll && in < out + bytes * n && out < in + bytes * n) {
    char* saved = outScratch(bytes * n);
    if (saved == nullptr)
      CHORUS_FAIL(comm_, ncclUnhandledCudaError,
                  "rank %d: a copy of the input of an in-place ncclAlltoAll (%zu bytes): %s", me, bytes * n,
                  rt_->lastError().c_str());
    CHORUS_CHECK(copy(saved, in, bytes * n, op.stream, "ncclAlltoAll (a copy of its input, in place)"));
    in = saved;
  }
  // It keeps its place among the collectives, on every rank alike.
  postCall(planner_->nextCollSeq(), op, CallPath::kSendRecvs);
  INFO(kColl,
       "rank %d: %s over %d ranks as sends and receives (its direct schedule needs more connections than one "
       "launch holds)",
       me, collName(op.coll), n);
  std::vector<OpDesc> ops;
  auto add = [&](bool isSend, int peer, const void* buf) {
    OpDesc o = op;
    o.coll = Coll::kSendRecv;
    o.isSend = isSend;
    o.root = peer;
    o.sendbuff = isSend ? buf : nullptr;
    o.recvbuff = isSend ? nullptr : const_cast<void*>(buf);
    o.userOp = false;
    ops.push_back(o);
  };
  for (int q = 0; q < n; q++) {
    const size_t at = bytes * static_cast<size_t>(q);
    const bool sends = op.coll == Coll::kAllToAll || (op.coll == Coll::kGather ? q == op.root : me == op.root);
    const bool recvs = op.coll == Coll::kAllToAll || (op.coll == Coll::kGather ? me == op.root : q == op.root);
    if (sends) add(true, q, op.coll == Coll::kGather ? in : in + at);
    if (recvs) add(false, q, op.coll == Coll::kScatter ? out : out + at);
  }
  return runSendRecvs(ops);
}

ncclResult_t DeviceEngine::runOps(const std::vector<OpDesc>& ops) {
  if (rt_->setDevice(comm_->cudaDev) != ncclSuccess)
    CHORUS_FAIL(comm_, ncclUnhandledCudaError, "rank %d: selecting GPU %d: %s", comm_->rank, comm_->cudaDev,
                rt_->lastError().c_str());
  std::vector<OpDesc> sendRecvs;
  for (const OpDesc& op : ops) {
    if (op.coll != Coll::kSendRecv) {
      CHORUS_CHECK(launchColl(op));
    } else {
      sendRecvs.push_back(op);
    }
  }
  return runSendRecvs(sendRecvs);
}

ncclResult_t DeviceEngine::runSendRecvs(const std::vector<OpDesc>& ops) {
  std::vector<OpDesc> p2p;
  std::vector<const OpDesc*> selfSends, selfRecvs;
  for (const OpDesc& op : ops) {
    if (op.root == comm_->rank) {
      (op.isSend ? selfSends : selfRecvs).push_back(&op);
    } else {
      p2p.push_back(op);
    }
  }
  // Sends to self meet receives from self in call order: device-to-device copies on the copy engine.
  for (size_t i = 0; i < selfSends.size() || i < selfRecvs.size(); i++) {
    if (i >= selfSends.size() || i >= selfRecvs.size()) {
      CHORUS_FAIL(comm_, ncclInvalidUsage,
                  "rank %d: %zu ncclSend(s) to itself but %zu ncclRecv(s) from itself in "
                  "one group; each must have its match",
                  comm_->rank, selfSends.size(), selfRecvs.size());
    }
    const OpDesc& s = *selfSends[i];
    const OpDesc& r = *selfRecvs[i];
    size_t sb = s.count * DType::size(s.dtype), rb = r.count * DType::size(r.dtype);
    if (sb != rb)
      CHORUS_FAIL(comm_, ncclInvalidUsage, "rank %d: ncclSend to itself of %zu bytes meets an ncclRecv of %zu bytes",
                  comm_->rank, sb, rb);
    CHORUS_CHECK(copy(r.recvbuff, s.sendbuff, sb, r.stream, "ncclSend/ncclRecv to itself"));
  }
  // A batch holds one send and one receive a peer; one launch holds kDevMaxP2P of each, so a larger batch (an
  // all-to-all of sends and receives over more ranks) runs as several launches that meet their peers' in order.
  for (auto& batch : Planner::p2pBatches(p2p))
    for (auto& launch : Planner::p2pLaunches(batch, comm_->nranks, comm_->rank, kDevMaxP2P))
      CHORUS_CHECK(launchP2P(launch));
  return ncclSuccess;
}

}  // namespace chorus
