// Communicator creation and teardown: init (blocking, nonblocking, grouped, all-in-one,
// scalable), split, shrink, finalize, revoke, destroy, abort.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "api/api.h"
#include "api/group.h"
#include "core/checks.h"
#include "core/comm.h"
#include "core/hash.h"
#include "core/params.h"
#include "engine/engine.h"
#include "engine/link_costs.h"
#include "runtime/runtime.h"
#include "topo/affinity.h"
#include "topo/topology.h"

namespace chorus {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// As NCCL, these override every communicator's config (ncclCommInitRank's default one included).
IntParam kCommBlocking{"NCCL_COMM_BLOCKING", -1,
                       "0 or 1: every communicator's config.blocking, whatever the program set (0: init, split and "
                       "shrink return ncclInProgress and finish in the background). Other values: the config's.",
                       "general"};
IntParam kMaxCtas{"NCCL_MAX_CTAS", -1,
                  "Above 0: every communicator's config.maxCTAs, the most blocks (CTAs) one device-path launch of "
                  "it uses, and the most channels of a host-path operation. The communicator takes the smallest of "
                  "its ranks' values (and of NCCL_MAX_NCHANNELS).",
                  "general"};
IntParam kMinCtas{"NCCL_MIN_CTAS", -1,
                  "Above 0: every communicator's config.minCTAs, the fewest blocks (CTAs) one device-path launch of a "
                  "collective uses, and the fewest channels of a host-path collective. The communicator takes the "
                  "largest of its ranks' values (and of NCCL_MIN_NCHANNELS), at most its channel cap "
                  "(config.maxCTAs, NCCL_MAX_CTAS, NCCL_MAX_NCHANNELS).",
                  "general"};
IntParam kMaxNChannels{"NCCL_MAX_NCHANNELS", -1,
                       "Above 0: the most channels an operation uses (on the device path, blocks of a launch), as "
                       "config.maxCTAs (the smaller wins).",
                       "general"};
IntParam kMaxNRings{"NCCL_MAX_NRINGS", -1,
                    "NCCL_MAX_NCHANNELS's older name; NCCL_MAX_NCHANNELS wins where both are set.", "general"};
IntParam kMinNChannels{"NCCL_MIN_NCHANNELS", -1,
                       "Above 0: the fewest channels a collective uses (on the device path, blocks of a launch), as "
                       "config.minCTAs (the larger wins).",
                       "general"};
IntParam kMinNRings{"NCCL_MIN_NRINGS", -1,
                    "NCCL_MIN_NCHANNELS's older name; NCCL_MIN_NCHANNELS wins where both are set.", "general"};

// NCCL_XXX_NCHANNELS, else its older name NCCL_XXX_NRINGS, as NCCL reads them; 0 where neither is above 0.
int64_t channelsSetting(const IntParam& name, const IntParam& oldName) {
  if (name.get() > 0) return name.get();
  return oldName.get() > 0 ? oldName.get() : 0;
}

// Reads the fields of a user config that its `size` covers (older layouts are accepted).
ncclResult_t parseConfig(const ncclConfig_t* cfg, const CommConfig* inherit, CommConfig* out) {
  *out = inherit ? *inherit : CommConfig{};
  if (cfg == nullptr) return ncclSuccess;
  if (cfg->magic != kConfigMagic)
    CHORUS_FAIL(nullptr, ncclInvalidArgument,
                "ncclConfig_t was not initialized with NCCL_CONFIG_INITIALIZER (magic 0x%x, expected 0x%x)", cfg->magic,
                kConfigMagic);
  if (cfg->size < offsetof(ncclConfig_t, blocking) + sizeof(int) || cfg->size > (1u << 16))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclConfig_t size %zu is not a valid config size", cfg->size);
  auto has = [&](size_t off) { return cfg->size >= off + sizeof(int); };
  if (cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->blocking != 0 && cfg->blocking != 1)
      CHORUS_FAIL(nullptr, ncclInvalidArgument, "config.blocking must be 0 or 1, got %d", cfg->blocking);
    out->blocking = cfg->blocking;
  }
  if (has(offsetof(ncclConfig_t, minCTAs)) && cfg->minCTAs != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->minCTAs <= 0) CHORUS_FAIL(nullptr, ncclInvalidArgument, "config.minCTAs must be > 0, got %d", cfg->minCTAs);
    out->minCTAs = cfg->minCTAs;
  }
  if (has(offsetof(ncclConfig_t, maxCTAs)) && cfg->maxCTAs != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->maxCTAs <= 0) CHORUS_FAIL(nullptr, ncclInvalidArgument, "config.maxCTAs must be > 0, got %d", cfg->maxCTAs);
    out->maxCTAs = cfg->maxCTAs;
  }
  if (cfg->size >= offsetof(ncclConfig_t, netName) + sizeof(char*) && cfg->netName) out->netName = cfg->netName;
  if (has(offsetof(ncclConfig_t, splitShare)) && cfg->splitShare != NCCL_CONFIG_UNDEF_INT)
    out->splitShare = cfg->splitShare;
  if (has(offsetof(ncclConfig_t, trafficClass)) && cfg->trafficClass != NCCL_CONFIG_UNDEF_INT)
    out->trafficClass = cfg->trafficClass;
  if (cfg->size >= offsetof(ncclConfig_t, commName) + sizeof(char*) && cfg->commName) out->commName = cfg->commName;
  return ncclSuccess;
}

// The config as NCCL's environment overrides leave it, its CTA bounds checked against each other.
ncclResult_t configWithEnv(const ncclConfig_t* cfg, const CommConfig* inherit, CommConfig* out) {
  CHORUS_CHECK(parseConfig(cfg, inherit, out));
  const int64_t blocking = kCommBlocking.get();
  if (blocking == 0 || blocking == 1) out->blocking = static_cast<int>(blocking);
  if (kMaxCtas.get() > 0) out->maxCTAs = static_cast<int>(std::min<int64_t>(kMaxCtas.get(), INT32_MAX));
  if (kMinCtas.get() > 0) out->minCTAs = static_cast<int>(std::min<int64_t>(kMinCtas.get(), INT32_MAX));
  // NCCL 2.28 lowers the floor to the cap rather than refusing the config.
  if (out->maxCTAs > 0 && out->minCTAs > out->maxCTAs) {
    INFO(kInit,
         "minCTAs %d is larger than maxCTAs %d (config.minCTAs/maxCTAs, or NCCL_MIN_CTAS/NCCL_MAX_CTAS): "
         "minCTAs set to %d",
         out->minCTAs, out->maxCTAs, out->maxCTAs);
    out->minCTAs = out->maxCTAs;
  }
  return ncclSuccess;
}

// NCCL prints its version once per process at NCCL_DEBUG=VERSION and above; so does chorus.
void printVersionOnce() {
  static std::once_flag once;
  std::call_once(once, []() {
    // The path communicators will really take: GPU buffers need a GPU runtime that sees a device.
    GpuRuntime* rt = gpuRuntime();
    std::string path = rt != nullptr
                           ? std::string(rt->name()) + " path: GPU buffers as kernels, host buffers on the host path"
                           : "host path: no GPU in use";
    CHORUS_LOG(LogLevel::kVersion, kInit, "version %d.%d.%d (NCCL %d.%d.%d API, %s)", CHORUS_MAJOR, CHORUS_MINOR,
               CHORUS_PATCH, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, path.c_str());
    INFO(kInit | kEnv, "env plugin: %s", envPluginSaid().c_str());
    // A setting tuned for NCCL that means nothing to chorus should not pass unnoticed.
    std::string unread;
    for (const std::string& name : unreadNcclVariables()) unread += (unread.empty() ? "" : ", ") + name;
    if (!unread.empty())
      INFO(kInit | kEnv,
           "environment: %s set, but chorus does not read %s (docs/env.md lists what it reads; a net or tuner "
           "plugin may read others)",
           unread.c_str(), unread.find(',') == std::string::npos ? "it" : "them");
  });
}

// Bootstrap and connections; runs on the calling thread (blocking) or the init thread.
ncclResult_t commInitTail(ncclComm* comm, ncclUniqueId id) {
  printVersionOnce();
  topologyAtCommInit(comm->rank);  // once per process; never fails the init
  PeerInfo mine;
  mine.rank = comm->rank;
  mine.cudaDev = comm->cudaDev;
  if (GpuRuntime* rt = gpuRuntime(); rt != nullptr && comm->cudaDev >= 0) {
    SetupScope setup(rt);
    mine.busId = rt->busId(comm->cudaDev);
    mine.deviceBlocks = static_cast<uint32_t>(std::max(0, rt->maxResidentBlocks(comm->cudaDev)));
  }
  mine.maxBlocks = comm->config.maxCTAs;
  const int64_t maxChannels = channelsSetting(kMaxNChannels, kMaxNRings);
  if (maxChannels > 0 && (mine.maxBlocks == 0 || maxChannels < mine.maxBlocks))
    mine.maxBlocks = static_cast<int32_t>(std::min<int64_t>(maxChannels, INT32_MAX));
  mine.minBlocks = static_cast<int32_t>(std::min<int64_t>(
      std::max<int64_t>(comm->config.minCTAs, channelsSetting(kMinNChannels, kMinNRings)), INT32_MAX));
  mine.version = NCCL_VERSION_CODE;
  mine.envHash = engineEnvHash();
  mine.calibrate = calibrateSetting();
  mine.nicMbps = static_cast<uint32_t>(std::clamp<int64_t>(topologyNicMbps(processTopology()), 0, UINT32_MAX));
  mine.gpuNuma = topologyGpuNuma(processTopology(), mine.busId);
  // As NCCL's init: on the CPUs near the GPU until it returns, so that what it allocates and starts is near it.
  const NearGpuScope nearGpu(mine.busId);
  if (mine.busId >= 0)
    INFO(kInit, "comm %p rank %d: init near GPU %d: %s", (void*)comm, comm->rank, comm->cudaDev,
         nearGpu.said().c_str());
  CHORUS_CHECK(Bootstrap::create(comm, id, comm->rank, comm->nranks, mine, &comm->abortFlag, &comm->bootstrap));
  comm->peers = comm->bootstrap->peers();
  comm->commHash = fnv1a64(id.internal, sizeof(id.internal));
  comm->links = linkCostsAtInit(comm->peers);
  CHORUS_CHECK(Engine::create(comm, &comm->engine));
  CHORUS_CHECK(calibrateLinkCosts(comm));
  if (comm->rank == 0)
    INFO(kInit, "comm %p: cost model links: %s", (void*)comm, describeLinkCosts(modelLinkCosts(comm)).c_str());
  comm->state.store(static_cast<int>(CommState::kReady));
  INFO(kInit, "comm %p rank %d nranks %d cudaDev %d commHash %#lx name \"%s\" - Init COMPLETE", (void*)comm,
       comm->rank, comm->nranks, comm->cudaDev, (unsigned long)comm->commHash, comm->config.commName.c_str());
  return ncclSuccess;
}

void finishInit(ncclComm* comm, ncclResult_t res) {
  if (res != ncclSuccess) comm->state.store(static_cast<int>(CommState::kFailed));
  comm->asyncError.store(res);
}

// Validates init arguments, makes the communicator and starts (or finishes) its init.
ncclResult_t commInitRankImpl(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                              const CommConfig* inherit) {
  if (out == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommInitRank: comm pointer is NULL");
  *out = nullptr;
  if (nranks < 1) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommInitRank: nranks %d must be >= 1", nranks);
  if (rank < 0 || rank >= nranks)
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank %d is out of range [0, %d)", rank, nranks);
  CommConfig cfg;
  CHORUS_CHECK(configWithEnv(config, inherit, &cfg));
  CHORUS_CHECK(joinGroupCreation(cfg.blocking, "ncclCommInitRank"));
  ncclComm* comm = new ncclComm();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->config = cfg;
  // As in NCCL, the communicator belongs to the calling thread's current GPU (none: host ranks).
  if (GpuRuntime* rt = gpuRuntime()) {
    int dev = -1;
    if (rt->getDevice(&dev) == ncclSuccess) comm->cudaDev = dev;
  }
  *out = comm;
  if (cfg.blocking) {
    auto run = [comm, id]() {
      ncclResult_t res = commInitTail(comm, id);
      finishInit(comm, res);
      return res;
    };
    if (inGroup()) {
      comm->asyncError.store(ncclInProgress);
      return enqueueInit(run);
    }
    ncclResult_t res = run();
    if (res != ncclSuccess) {
      delete comm;
      *out = nullptr;
    }
    return res;
  }
  comm->asyncError.store(ncclInProgress);
  comm->initThread = std::thread([comm, id]() { finishInit(comm, commInitTail(comm, id)); });
  return ncclInProgress;
}

// Waits until no entry point is running on comm (bounded by the deadline).
void waitQuiescent(ncclComm* comm, const char* fn) {
  Deadline dl = Deadline::fromEnv();
  Backoff backoff;
  while (comm->activeCalls.load() > 0) {
    if (dl.expired()) {
      WARN("%s: rank %d: %d call(s) still running on the communicator after %.0f s", fn, comm->rank,
           comm->activeCalls.load(), dl.seconds());
      return;
    }
    backoff.pause();
  }
}

ncclResult_t commFree(ncclComm* comm, bool abort, const char* fn) {
  if (comm == nullptr) return ncclSuccess;
  if (!commValid(comm)) CHORUS_FAIL(nullptr, ncclInvalidArgument, "%s: %p is not a valid communicator (destroyed?)", fn,
                                    (void*)comm);
  if (abort) {
    comm->abortFlag.store(1);
    if (comm->engine) comm->engine->shutdown();
  }
  waitQuiescent(comm, fn);
  if (comm->initThread.joinable()) comm->initThread.join();
  if (comm->childJobs.joinable()) comm->childJobs.join();
  INFO(kInit, "comm %p rank %d nranks %d - %s COMPLETE", (void*)comm, comm->rank, comm->nranks, abort ? "Abort" : "Destroy");
  delete comm;
  return ncclSuccess;
}

// Ranks of a new communicator get their id from its leader through the parent's bootstrap.
constexpr int kTagSplitId = 0x5e11;

// A split or shrink once its arguments are checked.
struct ChildJob {
  ncclComm* parent = nullptr;
  const char* fn = "";
  bool split = true;         ///< false: shrink
  int color = 0, key = 0;    ///< split
  std::vector<int> members;  ///< parent ranks of the child in its rank order (split: found by the allgather)
  CommConfig config;         ///< the child's, resolved (inherited from the parent where config is NULL)
  ncclComm_t* newcomm = nullptr;
};

// Runs a split or shrink to its end on the calling thread: the members agree (split), the child's first member
// passes its id to the others through the parent's bootstrap, and the child initializes. As in NCCL, *newcomm is
// set only once the child is ready; a failed job leaves it NULL.
ncclResult_t runChildJob(ChildJob& j) {
  ncclComm* parent = j.parent;
  if (j.split) {
    struct Entry {
      int32_t color, key, rank;
    };
    std::vector<Entry> all(parent->nranks);
    all[parent->rank] = Entry{j.color, j.key, parent->rank};
    CHORUS_CHECK(parent->bootstrap->allGather(all.data(), sizeof(Entry)));
    if (j.color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    std::vector<Entry> mine;
    for (const Entry& e : all)
      if (e.color == j.color) mine.push_back(e);
    std::stable_sort(mine.begin(), mine.end(),
                     [](const Entry& a, const Entry& b) { return a.key != b.key ? a.key < b.key : a.rank < b.rank; });
    for (const Entry& e : mine) j.members.push_back(e.rank);
  }
  const std::vector<int>& members = j.members;
  int myIndex = static_cast<int>(std::find(members.begin(), members.end(), parent->rank) - members.begin());
  ncclUniqueId id;
  if (myIndex == 0) {
    CHORUS_CHECK(bootstrapGetUniqueId(&id));
    for (size_t i = 1; i < members.size(); i++)
      CHORUS_CHECK(parent->bootstrap->send(members[i], kTagSplitId, &id, sizeof(id)));
  } else {
    CHORUS_CHECK(parent->bootstrap->recv(members[0], kTagSplitId, &id, sizeof(id)));
  }
  ncclComm* child = new ncclComm();
  child->rank = myIndex;
  child->nranks = static_cast<int>(members.size());
  child->config = j.config;
  child->cudaDev = parent->cudaDev;
  ncclResult_t res = commInitTail(child, id);
  if (res != ncclSuccess) {
    // The child goes away: its error becomes the parent's (ncclGetLastError(parent)) and this thread's.
    std::string why = commLastError(child);
    delete child;
    CHORUS_FAIL(parent, res, "%s: rank %d could not create its new communicator (rank %d of %zu): %s", j.fn,
                parent->rank, myIndex, members.size(), why.c_str());
  }
  finishInit(child, res);
  __atomic_store_n(j.newcomm, child, __ATOMIC_RELEASE);
  return ncclSuccess;
}

// Runs a checked split or shrink where NCCL would: in the background with a nonblocking child config (the
// parent's ncclCommGetAsyncError says ncclInProgress until it is done), at ncclGroupEnd inside a group (so that
// one thread can split every rank it drives), or now.
ncclResult_t startChildJob(ChildJob job) {
  ncclComm* parent = job.parent;
  if (parent->pendingChildJobs.load() > 0 && job.config.blocking)
    CHORUS_FAIL(parent, ncclInvalidUsage,
                "%s: rank %d: a nonblocking ncclCommSplit/ncclCommShrink of this "
                "communicator is still in progress; poll ncclCommGetAsyncError until it is not ncclInProgress",
                job.fn, parent->rank);
  if (!job.config.blocking) {
    // Jobs of one parent run one after the other in call order: every rank must meet the others' jobs in the
    // same order on the parent's bootstrap. Each job's thread first joins the one before it.
    parent->pendingChildJobs.fetch_add(1);
    parent->activeCalls.fetch_add(1);
    int expected = ncclSuccess;
    parent->asyncError.compare_exchange_strong(expected, ncclInProgress);
    std::thread before = std::move(parent->childJobs);
    parent->childJobs = std::thread([job = std::move(job), before = std::move(before)]() mutable {
      if (before.joinable()) before.join();
      ncclResult_t res = runChildJob(job);
      ncclComm* p = job.parent;
      int left = p->pendingChildJobs.fetch_sub(1) - 1;
      int inProgress = ncclInProgress;
      if (res != ncclSuccess || left == 0) p->asyncError.compare_exchange_strong(inProgress, res);
      p->activeCalls.fetch_sub(1);
    });
    return ncclInProgress;
  }
  if (inGroup()) {
    return enqueueInit(
        [job]() mutable {
          ActiveCall active(job.parent);
          return runChildJob(job);
        },
        job.parent);
  }
  ActiveCall active(parent);
  return runChildJob(job);
}

ncclResult_t commSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  CHORUS_CHECK(checkCommUsable(comm, "ncclCommSplit", /*allowRevoked=*/true));
  if (newcomm == nullptr) CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommSplit: color %d must be >= 0 or NCCL_SPLIT_NOCOLOR", color);
  *newcomm = nullptr;
  ChildJob job;
  job.parent = comm;
  job.fn = "ncclCommSplit";
  job.color = color;
  job.key = key;
  job.newcomm = newcomm;
  CHORUS_CHECK(configWithEnv(config, &comm->config, &job.config));
  CHORUS_CHECK(joinGroupCreation(job.config.blocking, "ncclCommSplit"));
  comm->splitCount++;
  return startChildJob(std::move(job));
}

ncclResult_t commShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                        ncclConfig_t* config, int shrinkFlags) {
  CHORUS_CHECK(checkCommUsable(comm, "ncclCommShrink", /*allowRevoked=*/true));
  if (newcomm == nullptr) CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommShrink: unknown shrinkFlags %d", shrinkFlags);
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr))
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommShrink: invalid exclude list (count %d, list %p)",
                excludeRanksCount, (void*)excludeRanksList);
  *newcomm = nullptr;
  std::vector<bool> excluded(comm->nranks, false);
  for (int i = 0; i < excludeRanksCount; i++) {
    int r = excludeRanksList[i];
    if (r < 0 || r >= comm->nranks)
      CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommShrink: excluded rank %d is out of range [0, %d)", r,
                  comm->nranks);
    if (excluded[r]) CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommShrink: rank %d is listed twice", r);
    excluded[r] = true;
  }
  if (excluded[comm->rank])
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommShrink: rank %d is in its own exclude list", comm->rank);
  ChildJob job;
  job.parent = comm;
  job.fn = "ncclCommShrink";
  job.split = false;
  job.newcomm = newcomm;
  for (int r = 0; r < comm->nranks; r++)
    if (!excluded[r]) job.members.push_back(r);
  CHORUS_CHECK(configWithEnv(config, &comm->config, &job.config));
  CHORUS_CHECK(joinGroupCreation(job.config.blocking, "ncclCommShrink"));
  if (shrinkFlags == NCCL_SHRINK_ABORT && comm->engine) {
    // Stop whatever the parent is doing (a peer may be dead), then keep only the bootstrap.
    comm->abortFlag.store(1);
    waitQuiescent(comm, "ncclCommShrink");
    comm->abortFlag.store(0);
  }
  return startChildJob(std::move(job));
}

ncclResult_t commInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                  ncclConfig_t* config) {
  if (commIds == nullptr || nId < 1 || nId > nranks)
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommInitRankScalable: need 1 <= nId (%d) <= nranks (%d) ids", nId,
                nranks);
  // One rendezvous serves every rank: the first id's root coordinates (the others are
  // accepted so that programs written for several roots run unchanged).
  return commInitRankImpl(newcomm, nranks, commIds[0], myrank, config, nullptr);
}

}  // namespace

ncclResult_t checkCommUsable(ncclComm* comm, const char* fn, bool allowRevoked) {
  if (comm == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (!commValid(comm))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "%s: %p is not a valid communicator (destroyed or never created)", fn,
                (void*)comm);
  if (!allowRevoked && comm->pendingChildJobs.load() > 0)
    CHORUS_FAIL(comm, ncclInvalidUsage,
                "%s: rank %d: a nonblocking ncclCommSplit/ncclCommShrink of this "
                "communicator is still in progress (poll ncclCommGetAsyncError until it is not ncclInProgress)",
                fn, comm->rank);
  CommState st = static_cast<CommState>(comm->state.load());
  switch (st) {
    case CommState::kReady: return ncclSuccess;
    case CommState::kInitializing:
      CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: the communicator is still initializing (poll "
                  "ncclCommGetAsyncError until it returns ncclSuccess)", fn, comm->rank);
    case CommState::kRevoked:
      if (allowRevoked) return ncclSuccess;
      CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: the communicator was revoked (ncclCommRevoke); only split, "
                  "shrink and destroy are allowed", fn, comm->rank);
    case CommState::kFinalized:
      CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: the communicator was finalized (ncclCommFinalize)", fn,
                  comm->rank);
    case CommState::kFailed: {
      // The cause, kept from the first refusal: later refusals set the last error themselves, and naming that would
      // nest one "failed earlier (...)" in the next for a program that calls on after a failure.
      std::string cause;
      {
        std::lock_guard<std::mutex> lock(comm->errMutex);
        if (comm->failCause.empty()) comm->failCause = comm->lastError;
        cause = comm->failCause;
      }
      CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: the communicator failed earlier (%s); destroy or abort it", fn,
                  comm->rank, cause.c_str());
    }
  }
  return ncclInternalError;
}

ActiveCall::ActiveCall(ncclComm* comm) : comm_(comm) { comm_->activeCalls.fetch_add(1); }
ActiveCall::~ActiveCall() { comm_->activeCalls.fetch_sub(1); }

}  // namespace chorus

using namespace chorus;

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  return bootstrapGetUniqueId(uniqueId);
}

// As in NCCL, a creating call refused inside a group fails the group (group.h, noteRefusedCall).
NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  return noteRefusedCall(commInitRankImpl(comm, nranks, commId, rank, config, nullptr));
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return noteRefusedCall(commInitRankImpl(comm, nranks, commId, rank, nullptr, nullptr));
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  return noteRefusedCall(commInitRankScalable(newcomm, nranks, myrank, nId, commIds, config));
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommInitAll: ndev %d must be >= 1", ndev);
  // Rank i uses devlist[i] (NULL: GPU i). A device may repeat: several ranks then share one GPU.
  GpuRuntime* rt = gpuRuntime();
  int nGpus = rt ? rt->deviceCount() : 0;
  for (int i = 0; i < ndev && (devlist != nullptr || nGpus > 0); i++) {
    int d = devlist ? devlist[i] : i % nGpus;
    if (d == -1 && devlist) continue;
    if (d < 0 || d >= nGpus)
      CHORUS_FAIL(nullptr, ncclInvalidArgument,
                  "ncclCommInitAll: devlist[%d] = %d but %d GPU(s) are visible%s; pass devlist NULL (or -1 entries) "
                  "for host ranks", i, d, nGpus, rt ? "" : " (no GPU backend in use)");
  }
  ncclUniqueId id;
  CHORUS_CHECK(bootstrapGetUniqueId(&id));
  std::vector<ncclResult_t> res(ndev, ncclSuccess);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; i++)
    threads.emplace_back([&, i]() {
      int d = devlist ? devlist[i] : (nGpus > 0 ? i % nGpus : -1);
      if (rt != nullptr && d >= 0) rt->setDevice(d);
      res[i] = commInitRankImpl(&comms[i], ndev, id, i, nullptr, nullptr);
    });
  for (auto& t : threads) t.join();
  // Nonblocking (NCCL_COMM_BLOCKING=0): the inits go on in the background, each communicator polled on its own.
  bool inProgress = false;
  for (int i = 0; i < ndev; i++) {
    inProgress |= res[i] == ncclInProgress;
    if (res[i] != ncclSuccess && res[i] != ncclInProgress) {
      for (int j = 0; j < ndev; j++) {
        if (comms[j]) commFree(comms[j], true, "ncclCommInitAll");
        comms[j] = nullptr;
      }
      return res[i];
    }
  }
  return inProgress ? ncclInProgress : ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  CHORUS_CHECK(checkCommUsable(comm, "ncclCommFinalize"));
  // Host-path calls are complete when they return, so nothing is outstanding.
  comm->state.store(static_cast<int>(CommState::kFinalized));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) { return commFree(comm, false, "ncclCommDestroy"); }

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) { return commFree(comm, true, "ncclCommAbort"); }

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  CHORUS_CHECK(checkCommUsable(comm, "ncclCommRevoke"));
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), got %d",
                revokeFlags);
  comm->state.store(static_cast<int>(CommState::kRevoked));
  comm->abortFlag.store(1);  // releases in-flight waits
  waitQuiescent(comm, "ncclCommRevoke");
  comm->abortFlag.store(0);  // the bootstrap stays usable for split/shrink
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return noteRefusedCall(commSplit(comm, color, key, newcomm, config));
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return noteRefusedCall(commShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || !commValid(comm))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: %p is not a valid communicator", (void*)comm);
  if (asyncError == nullptr) CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  // Device-path kernels record their failures in pinned memory; look at it now.
  if (comm->asyncError.load() == ncclSuccess && comm->engine) comm->engine->pollAsync();
  *asyncError = static_cast<ncclResult_t>(comm->asyncError.load());
  return ncclSuccess;
}
