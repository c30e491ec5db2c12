// Socket transport, proxy thread: progresses every connection of one communicator.
//
// Each pass: adopt new connections, check every FIFO (poison, published slots, freed room),
// write what the executors published, then poll the sockets: with a zero timeout while there
// was recent progress (yielding the core between passes, as ranks may outnumber cores), else
// blocking for at most kIdlePollMs. Socket events wake poll() at once; FIFO counters are memory,
// not events, so the host executor kicks a blocked proxy through its eventfd (SocketProxy::kick),
// and a device kernel's counters (network staging) are noticed within kIdlePollMs.
#include "transports/socket/socket_proxy.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/checks.h"
#include "core/comm.h"
#include "core/params.h"

namespace chorus {
namespace {

IntParam kSpinUs{"CHORUS_SOCKET_SPIN_US", 1000,
                 "Microseconds the socket proxy keeps polling (yielding the core) after its last progress before "
                 "it blocks in poll(); lower saves CPU, higher lowers the latency of sparse operations.",
                 "network"};

using Clock = std::chrono::steady_clock;

/// poll() timeout while idle: bounds how late a blocked proxy sees a slot the executor published.
constexpr int kIdlePollMs = 1;
/// poll() timeout when no connection can change without a socket event (only wakes the abort check).
constexpr int kQuietPollMs = 200;
/// How long an accepted connection may take to send its hello.
constexpr double kHelloTimeoutS = 10.0;
/// How long a failing rank tries to tell a peer before closing anyway.
constexpr double kNotifyTimeoutS = 1.0;
/// How long the proxy stops accepting after accept() failed.
constexpr int kAcceptPauseMs = 100;
/// How often a receive side still waiting for its sender checks that the sender lives (same host, other host).
constexpr int kLocalLiveCheckMs = 200;
constexpr int kRemoteLiveCheckMs = 2000;
/// How long such a check waits for the sender's listener to answer.
constexpr double kQueryTimeoutS = 0.5;
/// Most frames one sendmsg() gathers (two iovecs each).
constexpr int kMaxFramesPerWrite = 16;

// Unread bytes at close() would turn our FIN into a reset that may overtake a poison word just written.
void drainUnread(Socket& s) {
  char sink[4096];
  for (int i = 0; i < 64 && ::recv(s.fd(), sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
  }
}

std::string errnoText(int e) {
  char buf[128];
  return std::string(strerror_r(e, buf, sizeof(buf)));
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Maps a socket failure to the reason the executor will report.
PoisonReason reasonOf(const IoResult& r) {
  if (r.status == IoStatus::kEof || r.status == IoStatus::kReset) return PoisonReason::kPeerDied;
  if (r.status == IoStatus::kTimeout || (r.status == IoStatus::kError && r.err == ETIMEDOUT))
    return PoisonReason::kTimeout;
  return PoisonReason::kError;
}

}  // namespace

SocketHello SocketProxy::hello(int channel, int to, const FifoGeometry* geo) const {
  SocketHello h;
  h.commHash = commHash_;
  h.channel = channel;
  h.from = rank_;
  h.to = to;
  if (geo != nullptr) {
    h.nSlots = geo->nSlots;
    h.slotBytes = geo->slotBytes;
  }
  return h;
}

std::string SocketProxy::connName(const SocketConn& c) const {
  char buf[200];
  snprintf(buf, sizeof(buf), "rank %d: socket channel %d %s rank %d (%s, %s)", rank_, c.channel, c.isSend ? "->" : "<-",
           c.peer, comm_->peers[c.peer].hostname,
           c.sock.valid() ? c.sock.peer().str().c_str() : addrs_[c.peer].str().c_str());
  return buf;
}

// ---- connection state changes ---------------------------------------------------------------

void SocketProxy::closeConn(SocketConn& c) {
  c.sock.close();
  c.state = SockConnState::kClosed;
}

// The peer (or the network) failed: poison the local FIFO naming the peer so that a waiting
// executor fails with it, and close. `loud` is false for a clean EOF between frames, which is
// also how a peer that destroyed its communicator looks: the executor reports it if it matters.
void SocketProxy::failConn(SocketConn& c, PoisonReason reason, bool loud, const std::string& why) {
  if (loud) {
    WARN("%s: %s", connName(c).c_str(), why.c_str());
  } else {
    INFO(kNet, "%s: %s", connName(c).c_str(), why.c_str());
  }
  poisonFifo(c.fifo, makePoison(reason, c.peer));
  closeConn(c);
}

// This rank poisoned the FIFO (executor failure or abort): pass the word on so that the peer
// names the real culprit, then close. The send side first finishes a frame it has begun.
void SocketProxy::beginNotify(SocketConn& c) {
  c.state = SockConnState::kNotifying;
  c.closeBy = after(kNotifyTimeoutS);
  uint64_t word = loadAcquire(&c.fifo.ctrl->poison);
  if (c.isSend) {
    c.notice = SlotHeader{};
    c.notice.seq = word;
    c.notice.bytes = kPoisonFrameBytes;
    c.noticeOff = 0;
  } else {
    c.word = word;
    c.wordOff = 0;
  }
  c.blocked = false;
}

bool SocketProxy::notify(SocketConn& c) {
  if (Clock::now() >= c.closeBy) {
    INFO(kNet, "%s: could not pass on the failure in %.0f s; closing", connName(c).c_str(), kNotifyTimeoutS);
    closeConn(c);
    return true;
  }
  if (c.blocked) return false;
  IoResult r;
  if (c.isSend) {
    if (c.off > 0) {  // the rest of the frame in flight, so that the stream stays parseable
      uint32_t slot = static_cast<uint32_t>(c.done % c.fifo.geo.nSlots);
      const SlotHeader& h = c.fifo.hdrs[slot];
      if (c.off < sizeof(SlotHeader)) r = c.sock.sendSome(&h, sizeof(SlotHeader), &c.off);
      if (r.ok() && c.off >= sizeof(SlotHeader)) {
        size_t pdone = c.off - sizeof(SlotHeader);
        r = c.sock.sendSome(c.fifo.data + static_cast<size_t>(slot) * c.fifo.geo.slotBytes, h.bytes, &pdone);
        c.off = sizeof(SlotHeader) + pdone;
        if (r.ok() && pdone == h.bytes) c.off = 0;
      }
      if (r.ok() && c.off > 0) {
        c.blocked = true;
        return false;
      }
    }
    if (r.ok()) r = c.sock.sendSome(&c.notice, sizeof(c.notice), &c.noticeOff);
    if (r.ok() && c.noticeOff < sizeof(c.notice)) {
      c.blocked = true;
      return false;
    }
  } else {
    r = c.sock.sendSome(&c.word, sizeof(c.word), &c.wordOff);
    if (r.ok() && c.wordOff < sizeof(c.word)) {
      c.blocked = true;
      return false;
    }
    drainUnread(c.sock);
  }
  if (r.ok()) INFO(kNet, "%s: told the peer about this rank's failure", connName(c).c_str());
  closeConn(c);
  return true;
}

// ---- data movement --------------------------------------------------------------------------

// Writes every published slot (gathered into one sendmsg) and frees each fully written one.
bool SocketProxy::sendFrames(SocketConn& c) {
  const Fifo& f = c.fifo;
  uint64_t tail = loadAcquire(&f.ctrl->tail);
  if (tail <= c.done) return false;
  iovec iov[2 * kMaxFramesPerWrite];
  int n = 0;
  size_t total = 0, skip = c.off;
  for (uint64_t s = c.done; s < tail && n + 2 <= 2 * kMaxFramesPerWrite; s++) {
    uint32_t slot = static_cast<uint32_t>(s % f.geo.nSlots);
    SlotHeader* h = &f.hdrs[slot];
    if (h->bytes > f.geo.slotBytes) {  // this rank's own executor broke the FIFO protocol
      WARN("%s: internal error: slot %lu claims %u bytes, more than a slot holds", connName(c).c_str(),
           static_cast<unsigned long>(s), h->bytes);
      poisonFifo(f, makePoison(PoisonReason::kError, rank_));
      closeConn(c);
      return true;
    }
    char* parts[2] = {reinterpret_cast<char*>(h), f.data + static_cast<size_t>(slot) * f.geo.slotBytes};
    size_t lens[2] = {sizeof(SlotHeader), h->bytes};
    for (int k = 0; k < 2; k++) {
      size_t cut = std::min(skip, lens[k]);
      skip -= cut;
      if (lens[k] - cut == 0) continue;
      iov[n].iov_base = parts[k] + cut;
      iov[n].iov_len = lens[k] - cut;
      total += iov[n].iov_len;
      n++;
    }
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n);
  ssize_t k = ::sendmsg(c.sock.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k < 0) {
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      c.blocked = true;
      return false;
    }
    if (e == EINTR) return false;
    IoResult r;
    r.status = e == EPIPE || e == ECONNRESET ? IoStatus::kReset : IoStatus::kError;
    r.err = e;
    failConn(c, reasonOf(r), true, "send failed: " + errnoText(e));
    return true;
  }
  size_t left = static_cast<size_t>(k);
  uint64_t before = c.done;
  while (left > 0) {
    size_t frame = sizeof(SlotHeader) + f.hdrs[c.done % f.geo.nSlots].bytes;
    size_t rest = frame - c.off;
    if (left >= rest) {
      left -= rest;
      c.off = 0;
      c.done++;
    } else {
      c.off += left;
      left = 0;
    }
  }
  // The kernel holds a copy of every byte written: the slots are free for the executor again.
  if (c.done != before) storeRelease(&f.ctrl->head, c.done);
  if (static_cast<size_t>(k) < total) c.blocked = true;  // a short write means the socket is full
  return true;
}

// Reads frames into free slots (header, then payload) and publishes each complete one.
bool SocketProxy::recvFrames(SocketConn& c) {
  const Fifo& f = c.fifo;
  bool progress = false;
  for (;;) {
    uint64_t head = loadAcquire(&f.ctrl->head);
    if (c.done - head >= f.geo.nSlots) return progress;  // full: the executor has to consume first
    uint32_t slot = static_cast<uint32_t>(c.done % f.geo.nSlots);
    SlotHeader* h = &f.hdrs[slot];
    IoResult r;
    if (c.off < sizeof(SlotHeader)) {
      size_t before = c.off;
      r = c.sock.recvSome(h, sizeof(SlotHeader), &c.off);
      progress |= c.off != before;
      if (!r.ok()) {
        if (r.status == IoStatus::kEof && c.off == 0) {
          // Between frames: everything the peer sent is here. Poison only once the executor has
          // consumed it (stepConn), so that no published slot is ever reported lost.
          INFO(kNet, "%s: the peer closed the connection", connName(c).c_str());
          c.sock.close();
          c.state = SockConnState::kEofSeen;
          return true;
        }
        failConn(c, reasonOf(r), true, r.what);
        return true;
      }
      if (c.off < sizeof(SlotHeader)) return progress;
      if (h->bytes == kPoisonFrameBytes) {
        uint64_t word = h->seq;
        bool valid = poisonWordValid(word, nranks_);
        INFO(kNet, "%s: the peer reports a failure (word %#lx)", connName(c).c_str(), static_cast<unsigned long>(word));
        *h = SlotHeader{};
        poisonFifo(f, valid ? word : makePoison(PoisonReason::kError, c.peer));
        closeConn(c);
        return true;
      }
      if (h->bytes > f.geo.slotBytes) {
        failConn(c, PoisonReason::kError, true,
                 "corrupt stream: a frame of " + std::to_string(h->bytes) + " bytes exceeds the slot size " +
                     std::to_string(f.geo.slotBytes));
        return true;
      }
    }
    size_t pdone = c.off - sizeof(SlotHeader);
    r = c.sock.recvSome(f.data + static_cast<size_t>(slot) * f.geo.slotBytes, h->bytes, &pdone);
    progress |= sizeof(SlotHeader) + pdone != c.off;
    c.off = sizeof(SlotHeader) + pdone;
    if (!r.ok()) {
      failConn(c, reasonOf(r), true, r.what);
      return true;
    }
    if (pdone < h->bytes) return progress;
    c.off = 0;
    c.done++;
    storeRelease(&f.ctrl->tail, c.done);
    progress = true;
  }
}

// The send side's socket is readable: the receiver sent a poison word, closed, or reset.
bool SocketProxy::readBackChannel(SocketConn& c) {
  IoResult r = c.sock.recvSome(&c.word, sizeof(c.word), &c.wordOff);
  if (r.ok() && c.wordOff < sizeof(c.word)) return false;
  if (r.ok()) {
    bool valid = poisonWordValid(c.word, nranks_);
    INFO(kNet, "%s: the peer reports a failure (word %#lx)", connName(c).c_str(), static_cast<unsigned long>(c.word));
    poisonFifo(c.fifo, valid ? c.word : makePoison(PoisonReason::kError, c.peer));
    closeConn(c);
    return true;
  }
  // A clean EOF with nothing in flight is also what a peer that destroyed its communicator looks like.
  bool quiet = r.status == IoStatus::kEof && c.off == 0 && loadAcquire(&c.fifo.ctrl->tail) == c.done;
  failConn(c, reasonOf(r), !quiet, r.what);
  return true;
}

// Per-pass work on one connection that needs no socket event.
bool SocketProxy::stepConn(SocketConn& c) {
  switch (c.state) {
    case SockConnState::kUnpaired:
      return checkUnpaired(c);
    case SockConnState::kClosed:
      return false;
    case SockConnState::kEofSeen:
      if (loadAcquire(&c.fifo.ctrl->poison) != 0) {
        c.state = SockConnState::kClosed;
        return true;
      }
      if (loadAcquire(&c.fifo.ctrl->head) == c.done) {
        poisonFifo(c.fifo, makePoison(PoisonReason::kPeerDied, c.peer));
        c.state = SockConnState::kClosed;
        return true;
      }
      return false;
    case SockConnState::kNotifying:
      return notify(c);
    case SockConnState::kOpen:
      // The proxy poisons only together with leaving kOpen, so a poison seen here is this rank's own.
      if (loadAcquire(&c.fifo.ctrl->poison) != 0) {
        beginNotify(c);
        notify(c);
        return true;
      }
      return c.isSend && !c.blocked && sendFrames(c);
  }
  return false;
}

// A receive side whose sender has not connected yet: a sender that died or failed first never will, and no socket
// event would say so. Its listener is asked now and then (status query): healthy, failed (its poison word names the
// culprit), or closed (its process exited, or its communicator was aborted or destroyed).
bool SocketProxy::checkUnpaired(SocketConn& c) {
  Clock::time_point now = Clock::now();
  if (now < c.nextLiveCheck || !comm_->bootstrap) return false;  // (no bootstrap: a test plays the peer)
  bool local = comm_->peers[c.peer].hostHash == comm_->peers[rank_].hostHash;
  c.nextLiveCheck = now + std::chrono::milliseconds(local ? kLocalLiveCheckMs : kRemoteLiveCheckMs);
  uint64_t word = 0;
  bool refused = false;
  bool answered = queryPeer(c.peer, &word, &refused);
  std::string why;
  bool gone = !answered && comm_->bootstrap->peerGone(c.peer, &why);
  if ((answered && word == 0) || (!answered && !refused && !gone)) {
    c.unpaired.check([&]() {
      return "socket transport: " + commLabel(comm_) + ": channel " + std::to_string(c.channel) + " has waited " +
             c.unpaired.elapsedText() + " s for " + comm_->bootstrap->describePeer(c.peer) +
             " to connect (it may not have reached this operation yet)";
    });
    return false;
  }
  // The sender may have connected, sent everything and left: take what waits in the listen backlog first.
  acceptAll();
  for (auto& p : pending_)
    if (p.sock.valid()) readHello(p);
  if (c.state != SockConnState::kUnpaired) return true;
  if (answered && poisonWordValid(word, nranks_)) {
    INFO(kNet, "%s: the sender failed before connecting (word %#lx)", connName(c).c_str(),
         static_cast<unsigned long>(word));
    poisonFifo(c.fifo, word);
    closeConn(c);
    return true;
  }
  if (!gone)
    why = comm_->bootstrap->describePeer(c.peer) +
          " has closed its socket transport (its communicator failed, or was aborted or destroyed)";
  failConn(c, gone ? PoisonReason::kPeerDied : PoisonReason::kError, true, "the sender never connected: " + why);
  return true;
}

bool SocketProxy::queryPeer(int peer, uint64_t* word, bool* refused) {
  *word = 0;
  *refused = false;
  Deadline dl = Deadline::after(kQueryTimeoutS);
  Socket s;
  // The listener existed before its address was shared: a refusal means it closed, so no retry.
  IoResult r = Socket::connect(addrs_[peer], dl, nullptr, &s, [](int err) { return err == ECONNREFUSED; });
  if (!r.ok()) {
    *refused = r.status == IoStatus::kRefused;
    return false;
  }
  SocketHello h = hello(kStatusQueryChannel, peer, nullptr);
  r = s.sendAll(&h, sizeof(h), dl, nullptr);
  if (r.ok()) r = s.recvAll(word, sizeof(*word), dl, nullptr);
  return r.ok();
}

void SocketProxy::answerFailed(Socket& s) {
  uint64_t word = failedWord_.load(std::memory_order_acquire);
  size_t done = 0;
  s.sendSome(&word, sizeof(word), &done);  // a fresh connection takes 8 bytes at once
  drainUnread(s);
  s.close();
}

// ---- accepting and pairing ------------------------------------------------------------------

void SocketProxy::acceptAll() {
  for (;;) {
    Socket s;
    IoResult r = listen_.tryAccept(&s);
    if (!r.ok()) {
      // Out of descriptors, typically: back off instead of spinning on a listen socket that stays readable.
      if (!acceptWarned_)
        WARN("rank %d: socket transport: %s (retrying every %d ms)", rank_, r.what.c_str(), kAcceptPauseMs);
      acceptWarned_ = true;
      acceptPausedUntil_ = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
      return;
    }
    if (!s.valid()) return;
    PendingHello p;
    p.sock = std::move(s);
    p.giveUpAt = after(kHelloTimeoutS);
    pending_.push_back(std::move(p));
  }
}

void SocketProxy::readHello(PendingHello& p) {
  IoResult r = p.sock.recvSome(&p.hello, sizeof(p.hello), &p.got);
  if (!r.ok()) {
    INFO(kNet, "rank %d: socket transport: dropped a connection before its hello: %s", rank_, r.what.c_str());
    p.sock.close();
    return;
  }
  if (p.got < sizeof(p.hello)) return;
  const SocketHello& h = p.hello;
  const char* bad = nullptr;
  if (h.magic != kSocketHelloMagic) {
    bad = "not a chorus socket-transport connection (bad magic)";
  } else if (h.commHash != commHash_) {
    bad = "it belongs to another communicator (commHash mismatch)";
  } else if (h.to != rank_ || h.from < 0 || h.from >= nranks_ || h.from == rank_ ||
             (h.channel < 0 && h.channel != kStatusQueryChannel)) {
    bad = "it names invalid ranks or channel";
  }
  if (bad != nullptr) {
    WARN("rank %d: socket transport: rejected a connection from %s: %s", rank_, p.sock.peer().str().c_str(), bad);
    p.sock.close();
    return;
  }
  if (h.channel == kStatusQueryChannel) {  // rank h.from waits for this rank to connect: tell it how we are
    answerFailed(p.sock);
    return;
  }
  pair(std::move(p));  // leaves p.sock invalid: the entry is removed on the next pass
}

// Gives an accepted connection with a complete hello to its receive FIFO, or stashes it.
void SocketProxy::pair(PendingHello p) {
  for (auto& c : conns_) {
    if (c->isSend || c->state != SockConnState::kUnpaired || c->channel != p.hello.channel || c->peer != p.hello.from)
      continue;
    c->sock = std::move(p.sock);
    c->state = SockConnState::kOpen;
    if (p.hello.nSlots != c->fifo.geo.nSlots || p.hello.slotBytes != c->fifo.geo.slotBytes) {
      failConn(*c, PoisonReason::kError, true,
               "FIFO geometry differs (" + std::to_string(p.hello.nSlots) + " x " + std::to_string(p.hello.slotBytes) +
                   " bytes there, " + std::to_string(c->fifo.geo.nSlots) + " x " +
                   std::to_string(c->fifo.geo.slotBytes) + " here): set CHORUS_FIFO_* alike on every rank");
      return;
    }
    INFO(kNet, "%s: connected", connName(*c).c_str());
    return;
  }
  if (failedWord_.load(std::memory_order_acquire) != 0) {  // this rank failed: it will never take this connection
    answerFailed(p.sock);
    return;
  }
  bool dup = false;
  for (auto& c : conns_) dup |= !c->isSend && c->channel == p.hello.channel && c->peer == p.hello.from;
  for (auto& s : stash_) dup |= s.hello.channel == p.hello.channel && s.hello.from == p.hello.from;
  if (dup) {
    WARN("rank %d: socket transport: rejected a second connection for channel %d from rank %d (%s)", rank_,
         p.hello.channel, p.hello.from, p.sock.peer().str().c_str());
    return;
  }
  stash_.push_back(std::move(p));
}

// A newly registered receive FIFO takes its stashed connection, if that already arrived.
bool SocketProxy::tryPair(SocketConn& c) {
  for (size_t i = 0; i < stash_.size(); i++) {
    if (stash_[i].hello.channel != c.channel || stash_[i].hello.from != c.peer) continue;
    PendingHello p = std::move(stash_[i]);
    stash_.erase(stash_.begin() + static_cast<std::ptrdiff_t>(i));
    pair(std::move(p));
    return true;
  }
  return false;
}

void SocketProxy::adopt() {
  std::vector<std::unique_ptr<SocketConn>> fresh;
  {
    std::lock_guard<std::mutex> lock(newMutex_);
    fresh.swap(newConns_);
    haveNew_.store(false, std::memory_order_relaxed);
  }
  for (auto& c : fresh) {
    conns_.push_back(std::move(c));
    SocketConn& added = *conns_.back();
    if (!added.isSend) tryPair(added);
  }
}

// ---- the loop -------------------------------------------------------------------------------

// Whether every byte the executors published has left (shutdown waits for this).
bool SocketProxy::drained() const {
  for (const auto& c : conns_) {
    if (c->state == SockConnState::kNotifying) return false;
    if (c->isSend && c->state == SockConnState::kOpen && (c->off != 0 || loadAcquire(&c->fifo.ctrl->tail) != c->done))
      return false;
  }
  return true;
}

// Whether some connection can change through memory alone (the executor), not a socket event.
bool SocketProxy::needsTimedPoll() const {
  for (const auto& c : conns_) {
    if (c->state == SockConnState::kOpen || c->state == SockConnState::kEofSeen ||
        c->state == SockConnState::kNotifying)
      return true;
  }
  return !pending_.empty();  // hello deadlines
}

void SocketProxy::buildPollSet(std::vector<pollfd>* fds, std::vector<SocketConn*>* who) const {
  fds->clear();
  who->clear();
  auto add = [&](int fd, short events, SocketConn* c) {
    fds->push_back(pollfd{fd, events, 0});
    who->push_back(c);
  };
  add(wake_.fd(), POLLIN, nullptr);
  add(listen_.fd(), Clock::now() < acceptPausedUntil_ ? 0 : POLLIN, nullptr);
  for (const auto& p : pending_) add(p.sock.fd(), POLLIN, nullptr);
  for (const auto& c : conns_) {
    if (c->state == SockConnState::kNotifying) {
      if (c->blocked) add(c->sock.fd(), POLLOUT, c.get());
    } else if (c->state == SockConnState::kOpen && c->isSend) {
      add(c->sock.fd(), static_cast<short>(POLLIN | (c->blocked ? POLLOUT : 0)), c.get());
    } else if (c->state == SockConnState::kOpen) {
      // Without room the bytes stay in the kernel; a peer's death is seen once room frees up.
      if (c->done - loadAcquire(&c->fifo.ctrl->head) < c->fifo.geo.nSlots) add(c->sock.fd(), POLLIN, c.get());
    }
  }
}

void SocketProxy::run() {
  pthread_setname_np(pthread_self(), "chorus-sock");
  const auto spin = std::chrono::microseconds(std::max<int64_t>(0, kSpinUs.get()));
  Clock::time_point lastWork = Clock::now();
  bool draining = false;
  Deadline drainBy;
  std::vector<pollfd> fds;
  std::vector<SocketConn*> who;
  for (;;) {
    if (stop_.load(std::memory_order_acquire) && !draining) {
      draining = true;
      drainBy = Deadline::fromEnv();
    }
    if (haveNew_.load(std::memory_order_acquire)) adopt();
    if (!stash_.empty() && failedWord_.load(std::memory_order_acquire) != 0) {
      for (auto& p : stash_) answerFailed(p.sock);  // connections this rank, now failed, will never take
      stash_.clear();
    }
    bool work = false;
    for (auto& c : conns_) work |= stepConn(*c);
    if (draining) {
      if (comm_->abortFlag.load(std::memory_order_relaxed) != 0 || drained()) break;
      if (drainBy.expired()) {
        WARN(
            "rank %d: socket transport: closing with data not yet delivered after %.0f s (CHORUS_TIMEOUT_S): a peer "
            "stopped reading",
            rank_, drainBy.seconds());
        break;
      }
    }
    // Incomplete hellos past their deadline are dropped; closed pending entries are removed.
    Clock::time_point now = Clock::now();
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [&](PendingHello& p) {
                                    if (p.sock.valid() && now >= p.giveUpAt) {
                                      WARN("rank %d: socket transport: %s sent no hello in %.0f s; closed", rank_,
                                           p.sock.peer().str().c_str(), kHelloTimeoutS);
                                      p.sock.close();
                                    }
                                    return !p.sock.valid();
                                  }),
                   pending_.end());

    int timeoutMs = 0;
    if (work) {
      lastWork = now;
    } else if (now - lastWork < spin) {
      sched_yield();
    } else {
      timeoutMs = needsTimedPoll() ? kIdlePollMs : kQuietPollMs;
      // Announce the sleep, then look once more: an executor that published before seeing the flag is caught
      // here, one that publishes after it writes the eventfd (SocketProxy::kick). Both sides fence in between.
      wake_.sleeping(true);
      bool more = false;
      for (auto& c : conns_) more |= stepConn(*c);
      if (more) {
        wake_.sleeping(false);
        lastWork = now;
        timeoutMs = 0;
      }
    }
    buildPollSet(&fds, &who);
    int rc = poll(fds.data(), fds.size(), timeoutMs);
    wake_.sleeping(false);
    if (rc < 0 && errno != EINTR) {
      WARN("rank %d: socket transport: poll failed: %s", rank_, errnoText(errno).c_str());
      timespec ts = {0, 1000000};
      nanosleep(&ts, nullptr);
      continue;
    }
    if (rc <= 0) continue;
    size_t nPending = pending_.size();
    for (size_t i = 0; i < fds.size(); i++) {
      short ev = fds[i].revents;
      if (ev == 0) continue;
      lastWork = Clock::now();
      if (i == 0) {
        wake_.drain();
      } else if (i == 1) {
        acceptAll();
      } else if (i < 2 + nPending) {
        readHello(pending_[i - 2]);
      } else {
        SocketConn& c = *who[i];
        if (ev & POLLOUT) c.blocked = false;
        if (c.state != SockConnState::kOpen) continue;
        if (c.isSend && (ev & (POLLIN | POLLHUP | POLLERR))) readBackChannel(c);
        if (!c.isSend && (ev & (POLLIN | POLLHUP | POLLERR))) recvFrames(c);
      }
    }
  }
  INFO(kNet | kProxy, "rank %d: socket proxy thread exits", rank_);
}

}  // namespace chorus
