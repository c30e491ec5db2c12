#include "engine/connections.h"

#include <unistd.h>

#include "core/checks.h"
#include "core/params.h"
#include "core/process.h"

namespace chorus {
namespace {
IntParam kShmDisable{"NCCL_SHM_DISABLE", 0, "1: never use shared memory between ranks of one host (use sockets).",
                     "transports"};
}  // namespace

bool shmDisabledSetting() { return kShmDisable.get() != 0; }

Connections::Connections(ncclComm* comm, const FifoGeometry& geo)
    : comm_(comm), geo_(geo), shmDisabled_(kShmDisable.get() != 0) {}

Connections::~Connections() {
  if (remote_) remote_->shutdown();
  std::lock_guard<std::mutex> lock(mutex_);
  // A live peer still attaches (and then unlinks) a FIFO we wrote to or poisoned, even after
  // a failure: leave the name for it. Only a dead peer's FIFOs are unlinked here.
  for (auto& [key, c] : conns_) {
    pid_t pid = static_cast<pid_t>(comm_->peers[c->peer].pid);
    bool peerDead = pid != getpid() && processGone(pid);
    shmFifoClose(&c->seg, peerDead);
  }
}

bool Connections::viaShm(int peer) const {
  return !shmDisabled_ && comm_->peers[peer].hostHash == comm_->peers[comm_->rank].hostHash;
}

ncclResult_t Connections::init() {
  int swept = shmSweepStale();
  if (swept > 0) INFO(kShm, "rank %d: removed %d shared-memory FIFO(s) left by exited processes", comm_->rank, swept);
  // Every rank computes the same answer from the same peer info, so the collective inside
  // SocketTransport::create is entered by all or none. (Mixed NCCL_SHM_DISABLE settings are
  // refused by the bootstrap's environment check.)
  if (usesNet(comm_)) CHORUS_CHECK(createRemoteTransport(comm_, &remote_));
  return ncclSuccess;
}

bool Connections::usesNet(const ncclComm* comm) {
  if (comm->nranks < 2) return false;
  if (shmDisabledSetting()) return true;
  for (const PeerInfo& p : comm->peers)
    if (p.hostHash != comm->peers[0].hostHash) return true;
  return false;
}

ncclResult_t Connections::make(int channel, int peer, bool isSend, Conn** out, bool hostChannel,
                               const RemoteData* data) {
  auto key = std::make_tuple(channel, peer, isSend);
  std::lock_guard<std::mutex> lock(mutex_);
  if (hostChannel && channel > maxChannel_) maxChannel_ = channel;
  // GPU memory for the slot data belongs to this call from here: to the transport once it is given there.
  auto drop = [data]() {
    if (data != nullptr && data->release) data->release();
  };
  auto it = conns_.find(key);
  if (it != conns_.end()) {
    drop();  // the connection keeps the memory it was made with (its fifo says where)
    *out = it->second.get();
    return ncclSuccess;
  }
  if (peer < 0 || peer >= comm_->nranks || peer == comm_->rank) {
    drop();
    CHORUS_FAIL(comm_, ncclInternalError, "rank %d: schedule names invalid peer %d", comm_->rank, peer);
  }
  auto c = std::make_unique<Conn>();
  c->peer = peer;
  c->fifo.peer = peer;
  const PeerInfo& pi = comm_->peers[peer];
  if (hostChannel && viaShm(peer)) {
    c->shm = true;
    c->peerPid = static_cast<pid_t>(pi.pid);
    c->peerLocalProc = pi.pid != static_cast<uint64_t>(getpid());
    int from = isSend ? comm_->rank : peer, to = isSend ? peer : comm_->rank;
    CHORUS_CHECK(shmFifoOpen(shmFifoName(comm_->commHash, channel, from, to), geo_, &c->seg, pi.pid));
    c->fifo.attach(c->seg.base, geo_);
    INFO(kShm, "rank %d channel %d %s rank %d via shm (%s)", comm_->rank, channel, isSend ? "->" : "<-", peer,
         c->peerLocalProc ? "another process" : "same process");
  } else {
    if (!remote_) {
      drop();
      CHORUS_FAIL(comm_, ncclInternalError, "rank %d: no transport between hosts for remote rank %d", comm_->rank,
                  peer);
    }
    CHORUS_CHECK(isSend ? remote_->connectSend(channel, peer, geo_, &c->fifo, data)
                        : remote_->connectRecv(channel, peer, geo_, &c->fifo, data));
    c->byAddress = isSend && hostChannel && remote_->sendsByAddress();
    INFO(kNet, "rank %d channel %d %s rank %d via %s", comm_->rank, channel, isSend ? "->" : "<-", peer,
         remote_->name());
  }
  c->fifo.end = isSend ? 0 : 1;
  *out = c.get();
  if (!hostChannel) {  // staging ends are looked up by the device path once, not through table_
    conns_[key] = std::move(c);
    return ncclSuccess;
  }
  if (static_cast<int>(table_.size()) <= channel) table_.resize(channel + 1);
  table_[channel].resize(2 * comm_->nranks, nullptr);
  table_[channel][2 * peer + (isSend ? 1 : 0)] = c.get();
  conns_[key] = std::move(c);
  return ncclSuccess;
}

void Connections::poisonAll(PoisonReason reason, int culprit, const uint64_t* calls) {
  uint64_t word = makePoison(reason, culprit);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Connections are made lazily, so a peer may be waiting on a FIFO this rank never
    // opened (it had not reached that step). Open every shm FIFO to and from local peers on
    // the channels in use, so that each waiting peer sees the poison now rather than at its
    // deadline. (A socket peer learns through its connection closing.)
    for (int peer = 0; peer < comm_->nranks; peer++) {
      if (peer == comm_->rank || !viaShm(peer)) continue;
      for (int ch = 0; ch <= maxChannel_; ch++) {
        for (bool isSend : {true, false}) {
          auto key = std::make_tuple(ch, peer, isSend);
          if (conns_.count(key)) continue;
          auto c = std::make_unique<Conn>();
          int from = isSend ? comm_->rank : peer, to = isSend ? peer : comm_->rank;
          if (shmFifoOpen(shmFifoName(comm_->commHash, ch, from, to), geo_, &c->seg, comm_->peers[peer].pid) !=
              ncclSuccess)
            continue;
          c->fifo.attach(c->seg.base, geo_);
          c->peer = peer;
          conns_[key] = std::move(c);
        }
      }
    }
    for (auto& [key, c] : conns_) poisonFifo(c->fifo, word, calls);
  }
  // The proxy goes on until the communicator is destroyed: it passes the failure on over every connection and
  // answers peers that connect only now with it.
  if (remote_ && calls != nullptr) remote_->markFailedCalls(calls);
  if (remote_) remote_->markFailed(word);
}

}  // namespace chorus
