#include "engine/connections.h"

#include <unistd.h>

#include "core/checks.h"
#include "core/params.h"

namespace chorus {
namespace {
IntParam kShmDisable{"NCCL_SHM_DISABLE", 0, "1: never use shared memory between ranks of one host (use sockets).",
                     "transports"};
}  // namespace

bool shmDisabledSetting() { return kShmDisable.get() != 0; }

Connections::Connections(ncclComm* comm, const FifoGeometry& geo)
    : comm_(comm), geo_(geo), shmDisabled_(kShmDisable.get() != 0) {}

Connections::~Connections() {
  if (sockets_) sockets_->shutdown();
  std::lock_guard<std::mutex> lock(mutex_);
  // A healthy peer still attaches (and unlinks) a FIFO we wrote to; after a failure it may not.
  bool failed = comm_->abortFlag.load() != 0 || comm_->state.load() == static_cast<int>(CommState::kFailed);
  for (auto& [key, c] : conns_) shmFifoClose(&c->seg, failed);
}

bool Connections::viaShm(int peer) const {
  return !shmDisabled_ && comm_->peers[peer].hostHash == comm_->peers[comm_->rank].hostHash;
}

ncclResult_t Connections::init() {
  bool anyRemote = false;
  for (int r = 0; r < comm_->nranks; r++)
    if (r != comm_->rank && !viaShm(r)) anyRemote = true;
  // Every rank computes the same answer from the same peer info, so the collective inside
  // SocketTransport::create is entered by all or none. (Mixed NCCL_SHM_DISABLE settings are
  // refused by the bootstrap's environment check.)
  bool anyRemoteGlobal = shmDisabled_ && comm_->nranks > 1;
  for (int a = 0; a < comm_->nranks && !anyRemoteGlobal; a++)
    for (int b = a + 1; b < comm_->nranks; b++)
      if (comm_->peers[a].hostHash != comm_->peers[b].hostHash) anyRemoteGlobal = true;
  (void)anyRemote;
  if (anyRemoteGlobal) CHORUS_CHECK(SocketTransport::create(comm_, &sockets_));
  return ncclSuccess;
}

ncclResult_t Connections::send(int channel, int peer, Conn** out) { return make(channel, peer, true, out); }
ncclResult_t Connections::recv(int channel, int peer, Conn** out) { return make(channel, peer, false, out); }

ncclResult_t Connections::make(int channel, int peer, bool isSend, Conn** out) {
  auto key = std::make_tuple(channel, peer, isSend);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = conns_.find(key);
  if (it != conns_.end()) {
    *out = it->second.get();
    return ncclSuccess;
  }
  if (peer < 0 || peer >= comm_->nranks || peer == comm_->rank)
    CHORUS_FAIL(comm_, ncclInternalError, "rank %d: schedule names invalid peer %d", comm_->rank, peer);
  auto c = std::make_unique<Conn>();
  c->peer = peer;
  c->fifo.peer = peer;
  const PeerInfo& pi = comm_->peers[peer];
  if (viaShm(peer)) {
    c->shm = true;
    c->peerPid = static_cast<pid_t>(pi.pid);
    c->peerLocalProc = pi.pid != static_cast<uint64_t>(getpid());
    int from = isSend ? comm_->rank : peer, to = isSend ? peer : comm_->rank;
    CHORUS_CHECK(shmFifoOpen(shmFifoName(comm_->commHash, channel, from, to), geo_, &c->seg));
    c->fifo.attach(c->seg.base, geo_);
    INFO(kShm, "rank %d channel %d %s rank %d via shm (%s)", comm_->rank, channel, isSend ? "->" : "<-", peer,
         c->peerLocalProc ? "another process" : "same process");
  } else {
    if (!sockets_)
      CHORUS_FAIL(comm_, ncclInternalError, "rank %d: no socket transport for remote rank %d", comm_->rank, peer);
    CHORUS_CHECK(isSend ? sockets_->connectSend(channel, peer, geo_, &c->fifo)
                        : sockets_->connectRecv(channel, peer, geo_, &c->fifo));
    INFO(kNet, "rank %d channel %d %s rank %d via socket", comm_->rank, channel, isSend ? "->" : "<-", peer);
  }
  *out = c.get();
  conns_[key] = std::move(c);
  return ncclSuccess;
}

void Connections::poisonAll(PoisonReason reason, int culprit) {
  uint64_t word = (static_cast<uint64_t>(reason) << 32) | static_cast<uint64_t>(culprit + 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, c] : conns_) {
      uint64_t zero = 0;
      __atomic_compare_exchange_n(&c->fifo.ctrl->poison, &zero, word, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
  }
  if (sockets_) sockets_->shutdown();
}

}  // namespace chorus
