// ncclGroupStart/End: this thread's pending operations and inits, launched together at
// the outermost ncclGroupEnd. Operations of several communicators (one thread driving
// several ranks) run concurrently, one thread each, so their exchanges can meet.
#include "api/group.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "api/api.h"
#include "core/checks.h"
#include "core/worker.h"
#include "engine/engine.h"

namespace chorus {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::pair<ncclComm*, OpDesc>> ops;
  std::vector<std::pair<const ncclComm*, std::function<ncclResult_t()>>> inits;  ///< (serialOn, work)
  /// config.blocking of the group's communicator creations (joinGroupCreation), -1 before the first; 0: they run in
  /// the background, and ncclGroupEnd says ncclInProgress
  int creationBlocking = -1;
  ncclResult_t refused = ncclSuccess;  ///< the first refused call's result (noteRefusedCall)
  std::string refusedText;             ///< and its error text
};
thread_local GroupState tGroup;

ncclResult_t runOnComm(ncclComm* comm, const std::vector<OpDesc>& ops) {
  ActiveCall active(comm);
  ncclResult_t res = comm->engine->run(ops);
  if (res == ncclRemoteError || res == ncclSystemError) {
    int expected = ncclSuccess;
    comm->asyncError.compare_exchange_strong(expected, res);
  }
  return res;
}

// Runs fns concurrently (or inline when there is one) and returns the first failure, whose text becomes this
// thread's last error too (ncclGetLastError(NULL) after ncclGroupEnd).
ncclResult_t runAll(std::vector<std::function<ncclResult_t()>>& fns) {
  if (fns.size() == 1) return fns[0]();
  std::vector<ncclResult_t> res(fns.size(), ncclSuccess);
  std::vector<std::string> why(fns.size());
  std::vector<std::thread> threads;
  threads.reserve(fns.size());
  for (size_t i = 0; i < fns.size(); i++)
    threads.emplace_back([&, i]() {
      res[i] = fns[i]();
      if (res[i] != ncclSuccess) why[i] = threadLastError();
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < fns.size(); i++) {
    if (res[i] == ncclSuccess) continue;
    setThreadLastError(why[i].c_str());
    return res[i];
  }
  return ncclSuccess;
}

// The group's deferred inits as concurrent jobs: one per init, except that the inits serialized on one
// communicator form one job, run in call order. A job runs all of its inits and returns the first failure.
std::vector<std::function<ncclResult_t()>> initJobs(
    std::vector<std::pair<const ncclComm*, std::function<ncclResult_t()>>>& inits) {
  std::vector<std::pair<const ncclComm*, std::vector<std::function<ncclResult_t()>>>> lists;
  for (auto& [key, fn] : inits) {
    auto it = key == nullptr
                  ? lists.end()
                  : std::find_if(lists.begin(), lists.end(), [key = key](const auto& l) { return l.first == key; });
    if (it == lists.end()) {
      lists.push_back({key, {}});
      it = lists.end() - 1;
    }
    it->second.push_back(std::move(fn));
  }
  std::vector<std::function<ncclResult_t()>> jobs;
  for (auto& l : lists) {
    if (l.second.size() == 1) {
      jobs.push_back(std::move(l.second[0]));
      continue;
    }
    jobs.push_back([fns = std::move(l.second)]() {
      ncclResult_t first = ncclSuccess;
      std::string why;
      for (const auto& fn : fns) {
        ncclResult_t r = fn();
        if (r != ncclSuccess && first == ncclSuccess) {
          first = r;
          why = threadLastError();
        }
      }
      if (first != ncclSuccess) setThreadLastError(why.c_str());
      return first;
    });
  }
  return jobs;
}

// Splits the group's operations by communicator, keeping each comm's call order.
std::vector<std::pair<ncclComm*, std::vector<OpDesc>>> byComm(const std::vector<std::pair<ncclComm*, OpDesc>>& ops) {
  std::vector<std::pair<ncclComm*, std::vector<OpDesc>>> out;
  for (const auto& [comm, op] : ops) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == comm; });
    if (it == out.end()) {
      out.push_back({comm, {}});
      it = out.end() - 1;
    }
    it->second.push_back(op);
  }
  return out;
}

// A group with a refused call launches none of its operations (the ranks' calls would no longer pair up): it says so,
// naming the call, and the comms of the dropped operations say so too. Returns the refused call's result.
ncclResult_t dropRefusedGroup(GroupState& g, const char* fn) {
  const size_t n = g.ops.size();
  char text[1200];
  snprintf(text, sizeof(text), "%s: a call in the group was refused, so none of its operations ran (%zu dropped): %s",
           fn, n, g.refusedText.c_str());
  for (const auto& [comm, list] : byComm(g.ops))
    if (commValid(comm)) commStoreLastError(comm, text);
  setThreadLastError(text);
  WARN("%s", text);
  g.ops.clear();
  const ncclResult_t res = g.refused;
  g.refused = ncclSuccess;
  g.refusedText.clear();
  return res;
}

// Runs the group's deferred inits (initJobs) and empties their list: the first failure, or ncclSuccess.
ncclResult_t runGroupInits(GroupState& g) {
  std::vector<std::function<ncclResult_t()>> inits = initJobs(g.inits);
  g.inits.clear();
  return inits.empty() ? ncclSuccess : runAll(inits);
}

// Ends the group's blocking mode for the next group on this thread: whether its creations were nonblocking.
bool takeNonblocking(GroupState& g) {
  const bool nonblocking = g.creationBlocking == 0;
  g.creationBlocking = -1;
  return nonblocking;
}

ncclResult_t launchGroup(GroupState& g) {
  const bool nonblocking = takeNonblocking(g);
  // Inits run even in a group with a refused call: the other ranks' inits expect this rank's.
  ncclResult_t res = runGroupInits(g);
  if (g.refused != ncclSuccess) return dropRefusedGroup(g, "ncclGroupEnd");
  auto ops = byComm(g.ops);
  g.ops.clear();
  if (ops.empty()) return res == ncclSuccess && nonblocking ? ncclInProgress : res;
  for (auto& [comm, list] : ops) CHORUS_CHECK(checkCommUsable(comm, "ncclGroupEnd"));
  // Every communicator but the first runs on its own persistent worker; the first runs here.
  for (size_t i = 1; i < ops.size(); i++) {
    ncclComm* comm = ops[i].first;
    if (!comm->worker) comm->worker = std::make_unique<Worker>();
    comm->worker->post([comm, &list = ops[i].second]() { return runOnComm(comm, list); });
  }
  ncclResult_t r = runOnComm(ops[0].first, ops[0].second);
  for (size_t i = 1; i < ops.size(); i++) {
    ncclResult_t ri = ops[i].first->worker->wait();
    if (r == ncclSuccess) r = ri;
  }
  if (res != ncclSuccess) return res;
  return r == ncclSuccess && nonblocking ? ncclInProgress : r;
}

}  // namespace

bool inGroup() { return tGroup.depth > 0; }

ncclResult_t enqueueOp(ncclComm* comm, const OpDesc& op) {
  if (tGroup.depth > 0) {
    tGroup.ops.push_back({comm, op});
    return ncclSuccess;
  }
  // Outside a group: an implicit group of one, without allocating.
  static thread_local std::vector<OpDesc> single(1);
  single[0] = op;
  return runOnComm(comm, single);
}

ncclResult_t noteRefusedCall(ncclResult_t res) {
  if (tGroup.depth == 0 || res == ncclSuccess || res == ncclInProgress || tGroup.refused != ncclSuccess) return res;
  tGroup.refused = res;
  tGroup.refusedText = threadLastError();
  return res;
}

ncclResult_t joinGroupCreation(int blocking, const char* fn) {
  if (tGroup.depth == 0) return ncclSuccess;
  if (tGroup.creationBlocking == -1) tGroup.creationBlocking = blocking;
  if (tGroup.creationBlocking != blocking)
    CHORUS_FAIL(nullptr, ncclInvalidArgument,
                "%s: blocking and nonblocking communicators cannot be created in one group (this one's "
                "config.blocking is %d, the group's earlier creations' %d)",
                fn, blocking, tGroup.creationBlocking);
  return ncclSuccess;
}

ncclResult_t enqueueInit(std::function<ncclResult_t()> init, const ncclComm* serialOn) {
  if (tGroup.depth > 0) {
    tGroup.inits.push_back({serialOn, std::move(init)});
    return ncclSuccess;
  }
  return init();
}

}  // namespace chorus

using namespace chorus;

NCCL_API(ncclResult_t, ncclGroupStart) {
  tGroup.depth++;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd) {
  if (tGroup.depth == 0) CHORUS_FAIL(nullptr, ncclInvalidUsage, "ncclGroupEnd called without a matching ncclGroupStart");
  if (--tGroup.depth > 0) return ncclSuccess;
  return launchGroup(tGroup);
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  if (tGroup.depth == 0)
    CHORUS_FAIL(nullptr, ncclInvalidUsage, "ncclGroupSimulateEnd called without a matching ncclGroupStart");
  if (simInfo == nullptr || simInfo->magic != 0x74685283 || simInfo->size < sizeof(ncclSimInfo_t))
    CHORUS_FAIL(nullptr, ncclInvalidArgument,
                "ncclGroupSimulateEnd: simInfo must be initialized with NCCL_SIM_INFO_INITIALIZER");
  if (--tGroup.depth > 0) return ncclSuccess;
  const bool nonblocking = takeNonblocking(tGroup);
  if (tGroup.refused != ncclSuccess) {
    runGroupInits(tGroup);  // as ncclGroupEnd: they run, the operations do not
    return dropRefusedGroup(tGroup, "ncclGroupSimulateEnd");
  }
  float worst = 0;
  for (auto& [comm, list] : byComm(tGroup.ops)) {
    if (commValid(comm) && comm->engine) worst = std::max(worst, comm->engine->estimateUs(list));
  }
  tGroup.ops.clear();  // a simulated group launches no operation
  simInfo->estimatedTime = worst;
  const ncclResult_t res = runGroupInits(tGroup);  // deferred inits still happen
  return res == ncclSuccess && nonblocking ? ncclInProgress : res;
}
