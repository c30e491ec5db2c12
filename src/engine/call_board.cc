#include "engine/call_board.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/host_platform.h"
#include "transports/shm/shm.h"

namespace chorus {

namespace {

constexpr uint64_t kBoardMagic = 0x64726f62726f6863ull;  // "chorbord"
constexpr size_t kMaxPids = 128;

// A record as the segment holds it: written under a sequence lock (seq 0 while it changes).
struct Slot {
  uint64_t seq;
  uint64_t count;
  uint32_t desc;
  int32_t root;
  uint32_t path;
  uint32_t pad;
};
static_assert(sizeof(Slot) == sizeof(CallRecord), "a slot is a record");

bool kernelsCompare(CallPath p) {
  return p == CallPath::kOneShot || p == CallPath::kTwoShot || p == CallPath::kWindows;
}

}  // namespace

struct CallBoard::Segment {
  uint64_t magic;
  uint64_t pid;     ///< the owner's process (for sweepStale)
  uint64_t latest;  ///< seq of the newest record posted
  uint64_t mapped;  ///< peers that mapped this board (the owner unlinks the name once all have)
  uint64_t nPids;   ///< processes of the peers, in pids (more than kMaxPids: none recorded)
  uint64_t pad[3];
  uint64_t pids[kMaxPids];
  Slot slots[kSlots];
};

const char* callPathText(CallPath path) {
  switch (path) {
    case CallPath::kNothing:
      return "with nothing to move";
    case CallPath::kFifos:
      return "through FIFOs";
    case CallPath::kOneShot:
      return "through IPC inboxes (one-shot)";
    case CallPath::kTwoShot:
      return "through IPC inboxes (two-shot)";
    case CallPath::kWindows:
      return "on registered windows";
    case CallPath::kDirect:
      return "directly on the peers' buffers";
    case CallPath::kSendRecvs:
      return "as sends and receives";
    default:
      return "by an unknown path";
  }
}

// Whether two records of one collective differ in the call (count, type, op, root) or its path.
bool callsDiffer(const CallRecord& a, const CallRecord& b) {
  return a.count != b.count || a.desc != b.desc || a.root != b.root || a.path != b.path;
}

bool callsConflict(const CallRecord& a, const CallRecord& b) {
  if (a.seq != b.seq) return false;
  // Both kernels exchange flags that carry the call and the windows, and refuse a mismatch naming them.
  if (kernelsCompare(a.path) && kernelsCompare(b.path)) return false;
  return callsDiffer(a, b);
}

std::string describeCall(const CallRecord& r) {
  return describeFingerprint(r.seq, r.count, r.desc, r.root) + " " + callPathText(r.path);
}

CallBoard::CallBoard(uint64_t commHash, int rank, std::vector<int> peers, std::vector<uint64_t> peerPids)
    : commHash_(commHash), rank_(rank), peerPids_(std::move(peerPids)) {
  for (int p : peers) peers_.push_back(Peer{p});
  std::sort(peerPids_.begin(), peerPids_.end());
  peerPids_.erase(std::unique(peerPids_.begin(), peerPids_.end()), peerPids_.end());
}

CallBoard::~CallBoard() {
  for (const Peer& p : peers_)
    if (p.seg) munmap(p.seg, sizeof(Segment));
  if (mine_) {
    // A peer that has not mapped it yet may still need it to name this rank's call (after this rank failed on a
    // mismatch and left): the name then stays until sweepStale finds this process gone.
    if (__atomic_load_n(&mine_->mapped, __ATOMIC_ACQUIRE) >= peers_.size())
      shm_unlink(segmentName(commHash_, rank_).c_str());
    munmap(mine_, sizeof(Segment));
  }
}

std::string CallBoard::segmentName(uint64_t commHash, int rank) { return shmFifoName(commHash, 0, rank, rank, 'b'); }

int CallBoard::sweepStale() {
  return shmSweep([](const char* n) { return shmKind(n) == ShmKind::kCallBoard; },
                  [](const std::string& name) {
                    const auto* seg = static_cast<const Segment*>(shmMapMine(name, sizeof(Segment)));
                    if (seg == nullptr) return false;
                    // Its owner gone, and the peers that may still read it (a peer that has not mapped it yet reads
                    // there why the owner failed).
                    bool stale = seg->magic == kBoardMagic && shmPidGone(__atomic_load_n(&seg->pid, __ATOMIC_ACQUIRE));
                    const uint64_t n = __atomic_load_n(&seg->nPids, __ATOMIC_ACQUIRE);
                    for (uint64_t i = 0; stale && n <= kMaxPids && i < n; i++) stale = shmPidGone(seg->pids[i]);
                    munmap(const_cast<Segment*>(seg), sizeof(Segment));
                    return stale;
                  });
}

bool CallBoard::open(std::string* why) {
  const std::string name = segmentName(commHash_, rank_);
  shm_unlink(name.c_str());  // a fresh segment, never one a former communicator of the same id left
  int err = 0;
  const char* call = "";
  void* p = shmMapNamed(name, sizeof(Segment), true, &err, &call);
  if (p == nullptr) {
    *why = std::string(call) + "(" + name + "): " + strerror(err);
    return false;
  }
  mine_ = static_cast<Segment*>(p);
  mine_->pid = static_cast<uint64_t>(getpid());
  for (size_t i = 0; i < peerPids_.size() && i < kMaxPids; i++) mine_->pids[i] = peerPids_[i];
  mine_->nPids = peerPids_.size();
  __atomic_store_n(&mine_->magic, kBoardMagic, __ATOMIC_RELEASE);
  return true;
}

void CallBoard::post(const CallRecord& r) {
  if (mine_ == nullptr) return;
  Slot* s = &mine_->slots[r.seq % kSlots];
  __atomic_store_n(&s->seq, uint64_t{0}, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&s->count, r.count, __ATOMIC_RELAXED);
  __atomic_store_n(&s->desc, r.desc, __ATOMIC_RELAXED);
  __atomic_store_n(&s->root, r.root, __ATOMIC_RELAXED);
  __atomic_store_n(&s->path, static_cast<uint32_t>(r.path), __ATOMIC_RELAXED);
  __atomic_store_n(&s->seq, r.seq, __ATOMIC_RELEASE);
  __atomic_store_n(&mine_->latest, r.seq, __ATOMIC_RELEASE);
  std::lock_guard<std::mutex> lock(mutex_);
  posted_.push_back(r);
  if (posted_.size() > kSlots) posted_.pop_front();  // a peer that far behind has lost it from its ring too
}

bool CallBoard::readSlot(const Segment* seg, uint64_t seq, CallRecord* out) const {
  const Slot* s = &seg->slots[seq % kSlots];
  uint64_t before = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
  out->count = __atomic_load_n(&s->count, __ATOMIC_RELAXED);
  out->desc = __atomic_load_n(&s->desc, __ATOMIC_RELAXED);
  out->root = __atomic_load_n(&s->root, __ATOMIC_RELAXED);
  out->path = static_cast<CallPath>(__atomic_load_n(&s->path, __ATOMIC_RELAXED));
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  uint64_t after = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
  out->seq = before;
  return before == seq && after == seq;
}

void CallBoard::mapPeer(Peer* peer) {
  if (peer->seg != nullptr) return;
  int err = 0;
  const char* call = "";
  auto* seg =
      static_cast<Segment*>(shmMapNamed(segmentName(commHash_, peer->rank), sizeof(Segment), false, &err, &call));
  if (seg != nullptr && __atomic_load_n(&seg->magic, __ATOMIC_ACQUIRE) != kBoardMagic) {
    munmap(seg, sizeof(Segment));  // not made yet: the next look maps it again
    seg = nullptr;
  }
  peer->seg = seg;
  if (seg != nullptr) __atomic_add_fetch(&seg->mapped, 1, __ATOMIC_ACQ_REL);  // the one write to a peer's board
}

std::string CallBoard::conflictText(const CallRecord& mine, int peer, const CallRecord& theirs) const {
  return "rank " + std::to_string(rank_) + ": device operation #" + std::to_string(mine.seq) + " does not match rank " +
         std::to_string(peer) + "'s call at the same point: this rank called " + describeCall(mine) + ", rank " +
         std::to_string(peer) + " called " + describeCall(theirs);
}

std::string CallBoard::differs(int peer, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  CallRecord mine, theirs;
  for (Peer& p : peers_) {
    if (p.rank != peer || mine_ == nullptr) continue;
    mapPeer(&p);
    if (p.seg == nullptr || !readSlot(mine_, seq, &mine) || !readSlot(p.seg, seq, &theirs)) return std::string();
    return callsDiffer(mine, theirs) ? conflictText(mine, peer, theirs) : std::string();
  }
  return std::string();
}

std::string CallBoard::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!conflict_.empty() || mine_ == nullptr) return conflict_;
  uint64_t oldest = UINT64_MAX;  // the oldest record some peer still has to be compared with
  for (Peer& peer : peers_) {
    mapPeer(&peer);
    for (const CallRecord& r : posted_) {
      if (peer.seg == nullptr) break;
      if (r.seq <= peer.compared) continue;
      CallRecord theirs;
      bool held = readSlot(peer.seg, r.seq, &theirs);
      if (!held && __atomic_load_n(&peer.seg->latest, __ATOMIC_ACQUIRE) >= r.seq) {
        held = readSlot(peer.seg, r.seq, &theirs);  // it may have come between the two reads
        if (!held) {  // the peer is past it without a record here: it ran elsewhere, or its ring moved on
          peer.compared = r.seq;
          continue;
        }
      }
      if (!held) break;  // not there yet
      if (callsConflict(r, theirs)) return conflict_ = conflictText(r, peer.rank, theirs);
      peer.compared = r.seq;
    }
    oldest = std::min(oldest, peer.compared);
  }
  while (!posted_.empty() && posted_.front().seq <= oldest) posted_.pop_front();
  return conflict_;
}

}  // namespace chorus
