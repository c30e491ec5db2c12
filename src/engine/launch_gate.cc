#include "engine/launch_gate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "core/checks.h"
#include "core/timeout.h"
#include "kernels/device_work.h"

namespace chorus {
namespace {

// The gates of this process by (communicator, GPU); entries expire with their last member.
std::mutex gGatesMutex;
std::map<std::pair<uint64_t, int>, std::weak_ptr<LaunchGate>>& gates() {
  static auto* m = new std::map<std::pair<uint64_t, int>, std::weak_ptr<LaunchGate>>();
  return *m;
}

// "rank 3" or "ranks 1, 2".
std::string ranksText(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankListText(ranks);
}

}  // namespace

std::shared_ptr<LaunchGate> LaunchGate::join(ncclComm* comm) {
  const PeerInfo& me = comm->peers[comm->rank];
  std::vector<int> members;
  for (const PeerInfo& p : comm->peers)
    if (p.hostHash == me.hostHash && p.pid == me.pid && p.cudaDev == me.cudaDev && p.cudaDev >= 0)
      members.push_back(p.rank);
  if (members.size() < 2) return nullptr;
  std::lock_guard<std::mutex> lock(gGatesMutex);
  auto key = std::make_pair(comm->commHash, comm->cudaDev);
  std::shared_ptr<LaunchGate> g = gates()[key].lock();
  if (!g) {
    g = std::make_shared<LaunchGate>(members);
    gates()[key] = g;
  }
  return g;
}

bool LaunchGate::tryRelease(int rank) {
  // Everything reachable from this launch through its waits must be here with the matching launch.
  std::vector<int> group{rank}, todo{rank};
  while (!todo.empty()) {
    int a = todo.back();
    todo.pop_back();
    for (const auto& [b, index] : state_[a].want) {
      Member& mb = state_[b];
      auto it = mb.want.find(a);
      if (!mb.pending || it == mb.want.end() || it->second != index) return false;
      if (std::find(group.begin(), group.end(), b) == group.end()) {
        group.push_back(b);
        todo.push_back(b);
      }
    }
  }
  int maxRank = 0;
  for (int a : group) maxRank = std::max(maxRank, a);
  for (int a : group) {
    Member& m = state_[a];
    m.pending = false;
    m.released = true;
    for (const auto& [b, index] : m.want) m.count[b] = index + 1;
    m.received.assign(static_cast<size_t>(maxRank) + 1, Payload{});
    for (int b : group) {
      m.received[b] = state_[b].payload;
      m.received[b].arrived = true;
    }
  }
  cv_.notify_all();
  return true;
}

ncclResult_t LaunchGate::pass(ncclComm* comm, const std::vector<int>& peers, const Payload* mine,
                              std::vector<Payload>* all) {
  std::unique_lock<std::mutex> lock(mutex_);
  Member& me = state_[comm->rank];
  me.payload = mine ? *mine : Payload{};
  me.received.clear();
  me.want.clear();
  for (int p : peers)
    if (p != comm->rank && std::find(members_.begin(), members_.end(), p) != members_.end()) me.want[p] = me.count[p];
  if (me.want.empty()) return ncclSuccess;
  me.pending = true;
  me.released = false;
  tryRelease(comm->rank);
  Deadline dl = Deadline::fromEnv();
  SlowWait slow;
  auto missing = [&]() {
    std::vector<int> out;
    for (const auto& [p, index] : me.want) {
      const Member& m = state_[p];
      auto it = m.want.find(comm->rank);
      if (!m.pending || it == m.want.end() || it->second != index) out.push_back(p);
    }
    return out;
  };
  while (!me.released) {
    for (const auto& [p, index] : me.want) {
      if (state_[p].failed.empty()) continue;
      me.pending = false;
      std::string why = state_[p].failed;
      lock.unlock();
      CHORUS_FAIL(comm, ncclRemoteError,
                  "rank %d: rank %d (a thread of this process on GPU %d) failed before making the matching call: %s",
                  comm->rank, p, comm->cudaDev, why.c_str());
    }
    if (comm->abortFlag.load() != 0 || dl.expired()) {
      me.pending = false;
      std::string who = ranksText(missing());
      bool aborted = comm->abortFlag.load() != 0;
      lock.unlock();
      if (aborted)
        CHORUS_FAIL(comm, ncclInvalidUsage, "rank %d: the communicator was aborted while this launch waited for %s",
                    comm->rank, who.c_str());
      CHORUS_FAIL(comm, ncclRemoteError,
                  "rank %d: %s (threads of this process on GPU %d) did not make the matching call within "
                  "%s s (CHORUS_TIMEOUT_S); their kernels and this rank's wait for each other, so none is launched "
                  "before all have called",
                  comm->rank, who.c_str(), comm->cudaDev, secondsText(dl.seconds()).c_str());
    }
    slow.check([&]() {
      return "device path: " + commLabel(comm) + " has waited " + slow.elapsedText() +
             " s to launch: " + ranksText(missing()) + " (threads of this process on GPU " +
             std::to_string(comm->cudaDev) + ") have not made the matching call yet";
    });
    cv_.wait_for(lock, std::chrono::milliseconds(10));
    if (!me.released) tryRelease(comm->rank);
  }
  if (all) *all = me.received;
  return ncclSuccess;
}

ncclResult_t LaunchGate::syncMemory(GpuRuntime* rt, uint64_t** out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (sync_ == nullptr) {
    if (rt->deviceAlloc(kDirectSyncBytes, &sync_) != ncclSuccess) return ncclUnhandledCudaError;
    syncRt_ = rt;
  }
  *out = static_cast<uint64_t*>(sync_);
  return ncclSuccess;
}

// The last member's engine has waited for the device before it lets go of the gate.
LaunchGate::~LaunchGate() {
  if (sync_ != nullptr) syncRt_->deviceFree(sync_);
}

void LaunchGate::fail(int rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  Member& m = state_[rank];
  if (m.failed.empty()) m.failed = why.empty() ? "it failed" : why;
  m.pending = false;
  cv_.notify_all();
}

}  // namespace chorus
