// Registered windows: the collective exchange, the mappings of the peers' buffers, lookup (engine/windows.h).
#include "engine/windows.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/checks.h"
#include "core/debug.h"
#include "engine/device_connections.h"
#include "kernels/device_work.h"
#include "runtime/runtime.h"

namespace chorus {

/// What each rank tells the others about its part of a window.
struct WindowTable::Entry {
  uint64_t size = 0;
  uint64_t ptr = 0;      ///< the buffer in its own process (peers in the same process use it as it is)
  uint64_t offset = 0;   ///< the buffer's offset in the device allocation that holds it
  int32_t mappable = 0;  ///< device memory of its communicator's GPU, inside one allocation, exported if need be
  int32_t pad = 0;
  IpcHandle handle{};  ///< that allocation, exported
};

WindowTable::~WindowTable() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (ncclWindow_vidmem* w : wins_) {
    unmap(w);
    w->magic = 0;
    delete w;
  }
  for (ncclWindow_vidmem* w : failed_) {
    w->magic = 0;
    delete w;
  }
}

bool WindowTable::exportNeeded() const {
  for (const PeerInfo& p : comm_->peers)
    if (p.pid != comm_->peers[comm_->rank].pid) return true;
  return false;
}

ncclResult_t WindowTable::add(ncclWindow_vidmem* win) {
  const int n = comm_->nranks, me = comm_->rank;
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = ++registrations_;  // counted whatever the outcome, so that ids stay paired across ranks
  }
  GpuRuntime* rt = gpuRuntime();
  SetupScope setup(rt);
  std::vector<Entry> all(static_cast<size_t>(n));
  Entry& mine = all[static_cast<size_t>(me)];
  mine.size = win->size;
  mine.ptr = reinterpret_cast<uintptr_t>(win->buff);
  int dev = -1;
  void* base = nullptr;
  size_t allocBytes = 0;
  const char* why = nullptr;  // why this rank's buffer cannot be mapped by its peers
  if (rt == nullptr || comm_->cudaDev < 0) {
    why = "no GPU in use";
  } else if (rt->pointerKind(win->buff, &dev) != MemKind::kDevice || dev != comm_->cudaDev) {
    why = "not device memory of the communicator's GPU";
  } else if (rt->addressRange(win->buff, &base, &allocBytes) != ncclSuccess) {
    why = "its allocation is unknown to the GPU runtime";
  } else if (win->buff + win->size > static_cast<char*>(base) + allocBytes) {
    why = "it spans more than one allocation";
  } else if (exportNeeded() && rt->ipcGetHandle(base, &mine.handle) != ncclSuccess) {
    why = "its allocation cannot be exported through IPC";
  } else {
    mine.mappable = 1;
    mine.offset = static_cast<uint64_t>(win->buff - static_cast<char*>(base));
  }
  CHORUS_CHECK(comm_->bootstrap->allGather(all.data(), sizeof(Entry)));
  for (int q = 0; q < n; q++) {
    if (all[static_cast<size_t>(q)].size != win->size)
      CHORUS_FAIL(comm_, ncclInvalidUsage,
                  "ncclCommWindowRegister: rank %d registers %zu bytes but rank %d registers %lu as the same window "
                  "(#%u); registration is collective and every rank's window must have the same size",
                  me, win->size, q, static_cast<unsigned long>(all[static_cast<size_t>(q)].size), id);
  }
  bool colocated = n >= 2 && n <= kDevMaxDirect;
  for (int q = 0; q < n && colocated; q++) {
    colocated = comm_->peers[q].hostHash == comm_->peers[me].hostHash;
    if (!all[static_cast<size_t>(q)].mappable && why == nullptr) why = "a peer's buffer cannot be mapped";
  }
  if (!colocated && why == nullptr)
    why = n < 2 ? "one rank" : n > kDevMaxDirect ? "too many ranks" : "ranks on other hosts";
  // Every rank maps what it can; a second exchange makes the verdict the same everywhere.
  uint8_t ok = why == nullptr && mapPeers(win, all) ? 1 : 0;
  std::vector<uint8_t> oks(static_cast<size_t>(n));
  oks[static_cast<size_t>(me)] = ok;
  ncclResult_t res = comm_->bootstrap->allGather(oks.data(), 1);
  bool direct = res == ncclSuccess && std::all_of(oks.begin(), oks.end(), [](uint8_t o) { return o != 0; });
  if (!direct) unmap(win);
  CHORUS_CHECK(res);
  if (why == nullptr && !direct) why = "a rank could not map a peer's buffer";
  win->id = id;
  win->direct = direct;
  INFO(kReg, "rank %d: window #%u, %zu bytes at %p: %s%s", me, id, win->size, static_cast<void*>(win->buff),
       direct ? "collectives run on every rank's buffer" : "registered; collectives take their usual path: ",
       direct ? "" : why);
  std::lock_guard<std::mutex> lock(mutex_);
  wins_.push_back(win);
  return ncclSuccess;
}

bool WindowTable::mapPeers(ncclWindow_vidmem* win, const std::vector<Entry>& all) {
  GpuRuntime* rt = gpuRuntime();
  const int n = comm_->nranks, me = comm_->rank;
  win->peers.assign(static_cast<size_t>(n), nullptr);
  win->opened.assign(static_cast<size_t>(n), nullptr);
  win->peers[static_cast<size_t>(me)] = win->buff;
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    const Entry& e = all[static_cast<size_t>(q)];
    const PeerInfo& p = comm_->peers[q];
    if (p.cudaDev != comm_->cudaDev) {
      std::string notP2p;
      if (!p2pPermitted(comm_, q, &notP2p)) {
        INFO(kReg, "rank %d: GPU %d does not map GPU %d (rank %d): %s", me, comm_->cudaDev, p.cudaDev, q,
             notP2p.c_str());
        return false;
      }
      if (!rt->canAccessPeer(comm_->cudaDev, p.cudaDev)) {
        INFO(kReg, "rank %d: GPU %d cannot map GPU %d (rank %d)", me, comm_->cudaDev, p.cudaDev, q);
        return false;
      }
      if (rt->enablePeerAccess(p.cudaDev) != ncclSuccess) {
        INFO(kReg, "rank %d: peer access to GPU %d (rank %d): %s", me, p.cudaDev, q, rt->lastError().c_str());
        return false;
      }
    }
    if (p.pid == comm_->peers[me].pid) {  // another rank of this process: its pointer as it is
      win->peers[static_cast<size_t>(q)] = reinterpret_cast<char*>(static_cast<uintptr_t>(e.ptr));
      continue;
    }
    void* base = nullptr;
    if (rt->ipcOpenHandle(e.handle, &base) != ncclSuccess) {
      INFO(kReg, "rank %d: mapping rank %d's window (pid %lu) through IPC: %s", me, q,
           static_cast<unsigned long>(p.pid), rt->lastError().c_str());
      return false;
    }
    win->opened[static_cast<size_t>(q)] = base;
    win->peers[static_cast<size_t>(q)] = static_cast<char*>(base) + e.offset;
  }
  return true;
}

void WindowTable::unmap(ncclWindow_vidmem* win) {
  GpuRuntime* rt = gpuRuntime();
  for (void*& m : win->opened) {
    if (m != nullptr && rt != nullptr) rt->ipcCloseHandle(m);
    m = nullptr;
  }
  win->peers.clear();
  win->direct = false;
}

bool WindowTable::remove(ncclWindow_vidmem* win) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find(wins_.begin(), wins_.end(), win);
  if (it == wins_.end()) {
    auto f = std::find(failed_.begin(), failed_.end(), win);
    if (f == failed_.end()) return false;
    failed_.erase(f);  // nothing maps it
    return true;
  }
  wins_.erase(it);
  bool mapped = std::any_of(win->opened.begin(), win->opened.end(), [](void* m) { return m != nullptr; });
  GpuRuntime* rt = gpuRuntime();
  if (mapped && rt != nullptr) {
    // A kernel still queued on a collective of this window would read through these mappings.
    SetupScope setup(rt);
    (void)rt->deviceSynchronize();
  }
  unmap(win);
  return true;
}

void WindowTable::keepFailed(ncclWindow_vidmem* win) {
  std::lock_guard<std::mutex> lock(mutex_);
  failed_.push_back(win);
}

WindowRef WindowTable::find(const void* p, size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  WindowRef best;
  for (const ncclWindow_vidmem* w : wins_) {
    if (!w->direct || c < w->buff || bytes > w->size || c - w->buff > static_cast<ptrdiff_t>(w->size - bytes)) continue;
    if (best.win == nullptr || w->id < best.win->id) best = {w, static_cast<size_t>(c - w->buff)};
  }
  return best;
}

}  // namespace chorus
