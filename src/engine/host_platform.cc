#include "engine/host_platform.h"

#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/checks.h"
#include "core/process.h"
#include "kernels/dtypes.h"

namespace chorus {
namespace {

const char* collApiName(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "ncclAllReduce";
    case Coll::kAllGather:
      return "ncclAllGather";
    case Coll::kReduceScatter:
      return "ncclReduceScatter";
    case Coll::kBroadcast:
      return "ncclBroadcast";
    case Coll::kReduce:
      return "ncclReduce";
    case Coll::kAllToAll:
      return "ncclAlltoAll";
    case Coll::kGather:
      return "ncclGather";
    case Coll::kScatter:
      return "ncclScatter";
    case Coll::kSendRecv:
      return "ncclSend/ncclRecv";
    default:
      return "?";
  }
}

const char* reasonText(PoisonReason r) {
  switch (r) {
    case PoisonReason::kPeerDied:
      return "a peer process died";
    case PoisonReason::kTimeout:
      return "a peer made no progress before the deadline";
    case PoisonReason::kMismatch:
      return "ranks called mismatched operations";
    case PoisonReason::kAborted:
      return "the communicator was aborted";
    case PoisonReason::kNetSetup:
      return "a connection between hosts was not set up before the deadline";
    default:
      return "an error";
  }
}

uint64_t monotonicMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

}  // namespace

uint32_t packDesc(Coll coll, int dtype, int op) {
  return static_cast<uint32_t>(coll) | (static_cast<uint32_t>(dtype) << 8) |
         ((static_cast<uint32_t>(op) & 0xffff) << 16);
}

std::string slotOutOfStepText(int rank, int peer, uint64_t got, uint64_t want) {
  char buf[300];
  snprintf(buf, sizeof(buf),
           "rank %d read slot %lu of its connection from rank %d, whose header says rank %d wrote it as slot %lu: the "
           "two ends are out of step, so the data would be another slice's",
           rank, static_cast<unsigned long>(want), peer, peer, static_cast<unsigned long>(got));
  return buf;
}

std::string describeFingerprint(uint64_t seq, uint64_t count, uint32_t desc, int32_t root) {
  Coll c = static_cast<Coll>(desc & 0xff);
  int dtype = (desc >> 8) & 0xff, op = (desc >> 16) & 0xffff;
  char buf[200];
  int n = snprintf(buf, sizeof(buf), "%s #%lu (count %lu, %s", collApiName(c), static_cast<unsigned long>(seq),
                   static_cast<unsigned long>(count), DType::name(dtype));
  if (c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter)
    n += snprintf(buf + n, sizeof(buf) - n, ", op %d", op);
  if (c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter)
    n += snprintf(buf + n, sizeof(buf) - n, ", root %d", root);
  snprintf(buf + n, sizeof(buf) - n, ")");
  return buf;
}

Conn* HostPlatform::connOf(Fifo* f) {
  for (auto& [fifo, conn] : fifoConns_)
    if (fifo == f) return conn;
  return nullptr;
}

ncclResult_t HostPlatform::fifoFor(bool isSend, int ch, int peer, bool ll, Fifo** f, bool* useLL) {
  Conn* c;
  CHORUS_CHECK(isSend ? conns_->send(ch, peer, &c) : conns_->recv(ch, peer, &c));
  *f = &c->fifo;
  *useLL = ll && c->shm;  // LL needs both ends to see the same memory
  if (!connOf(*f)) fifoConns_.push_back({*f, c});
  return ncclSuccess;
}

char* HostPlatform::staging(int which, size_t bytes) {
  // Channels side by side each have their own: one may wait while another's data sits in its staging.
  const size_t ch = static_cast<size_t>(fibers_.current());
  if (staging_.size() <= ch) staging_.resize(ch + 1);
  std::vector<char>& v = staging_[ch][which];
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

ncclResult_t HostPlatform::fail(ncclResult_t res, PoisonReason reason, int culprit, const std::string& text) {
  if (fibers_.running() && fibers_.stopped() != ncclSuccess) return res;  // another channel failed first
  failReason_ = reason;
  failCulprit_ = culprit;
  setLastError(comm_, "%s", text.c_str());
  return res;
}

ncclResult_t HostPlatform::poisoned(const Fifo* f, uint64_t poison, const char* where) {
  int culprit;
  PoisonReason reason = poisonReason(poison, &culprit);
  char msg[600];
  if (reason == PoisonReason::kMismatch) {
    uint64_t a[3], b[3];
    for (int i = 0; i < 3; i++) {
      a[i] = __atomic_load_n(&f->ctrl->failCall[i], __ATOMIC_RELAXED);
      b[i] = __atomic_load_n(&f->ctrl->failCall2[i], __ATOMIC_RELAXED);
    }
    uint64_t ranks = __atomic_load_n(&f->ctrl->failRanks, __ATOMIC_RELAXED);
    int detector = static_cast<int>(ranks & 0xffffffff), offender = static_cast<int>(ranks >> 32);
    for (int i = 0; i < 3; i++) mismatch_[i] = a[i], mismatch_[3 + i] = b[i];  // pass it on unchanged
    mismatch_[6] = ranks;
    auto text = [](const uint64_t* c) {
      return describeFingerprint(c[0], c[1], static_cast<uint32_t>(c[2]), static_cast<int32_t>(c[2] >> 32));
    };
    std::string mine = describeFingerprint(fp_.seq, fp_.count, fp_.desc, fp_.root);
    if (ranks == 0) {
      // Only the poison word crossed (a transport that carries no more): the ranks that compared the calls
      // name both; this one can say only that they differ.
      snprintf(msg, sizeof(msg),
               "mismatched calls: rank %d found that the ranks' calls differ (this rank called "
               "%s; the ranks that compared them name both calls)",
               culprit, mine.c_str());
    } else if (comm_->rank == offender) {
      snprintf(msg, sizeof(msg), "mismatched calls: rank %d called %s but rank %d called %s", comm_->rank, mine.c_str(),
               detector, text(a).c_str());
    } else {
      snprintf(msg, sizeof(msg),
               "mismatched calls: rank %d called %s but rank %d called %s (this rank called "
               "%s; reported through rank %d)",
               detector, text(a).c_str(), offender, text(b).c_str(), mine.c_str(), f->peer);
    }
  } else if (reason == PoisonReason::kNetSetup && culprit == comm_->rank) {
    // The rank that found it named this one, the far end of the connection: its own error names the connection.
    snprintf(msg, sizeof(msg),
             "%s: a connection over the net between this rank and a peer was not set up before the deadline (the "
             "peer's error names it)",
             where);
  } else if (culprit == comm_->rank) {
    // A peer whose connection with this rank broke named this rank (a net error does not say which end failed).
    snprintf(msg, sizeof(msg), "%s: this rank's peers report it failed (%s), through rank %d", where,
             reasonText(reason), f->peer);
  } else {
    snprintf(msg, sizeof(msg), "%s: rank %d failed (%s)%s", where, culprit, reasonText(reason),
             culprit != f->peer ? " and the failure reached this rank through its peers" : "");
  }
  std::string text = msg;
  // What this rank's own net said, where it failed a connection: the cause a peer's notice cannot carry.
  if (reason == PoisonReason::kError) text += netFailureSuffix(conns_->remote());
  return fail(reason == PoisonReason::kMismatch ? ncclInvalidUsage : ncclRemoteError, reason, culprit, text);
}

template <class Ready>
ncclResult_t HostPlatform::waitFor(Fifo* f, Ready ready, const char* what) {
  if (ready()) return ncclSuccess;
  Backoff backoff;
  // Polls `ready` kPolls times: on this rank's other channels' turns when they run side by side, or with a backoff.
  RemoteTransport* remote = drive_ ? conns_->remote() : nullptr;
  // Driving the net, a step that moved nothing is followed by a yield before the next: each step is a system call.
  auto poll = [&]() -> ncclResult_t {
    bool idleStep = remote != nullptr && !remote->progressAll(f);
    if (fibers_.wait(ready)) {
      if (ready()) return ncclSuccess;
      return fibers_.stopped() != ncclSuccess ? fibers_.stopped() : ncclInProgress;
    }
    for (int i = 0; i < Fibers::kPolls; i++) {
      if (ready()) return ncclSuccess;
      if (remote == nullptr) {
        backoff.pause();
      } else if (idleStep || !remote->progressAll(f)) {
        backoff.yield();
        idleStep = false;
      }
    }
    return ncclInProgress;
  };
  // The clock, the heartbeat and the checks below run once per kPolls polls; most waits end before the first.
  ncclResult_t res = poll();
  if (res != ncclInProgress) return res;
  Deadline deadline = Deadline::fromEnv();
  const double timeoutS = deadline.seconds();  // CHORUS_TIMEOUT_S, for the messages: a verdict's wait has its own
  bool extended = false, awaitedVerdict = false;
  uint64_t nextLiveCheck = 0;  // monotonic ms
  Conn* conn = connOf(f);
  auto where = [&]() {
    char buf[160];
    snprintf(buf, sizeof(buf), "rank %d (%s) waiting %s rank %d during %s #%lu", comm_->rank,
             comm_->peers[comm_->rank].hostname, what, f->peer, label_.coll, static_cast<unsigned long>(label_.seq));
    return std::string(buf);
  };
  for (;;) {
    res = poll();
    if (res != ncclInProgress) return res;
    uint64_t now = monotonicMs();
    if (now - lastBeat_ >= 20) {
      for (auto& fc : fifoConns_) __atomic_store_n(&fc.first->ctrl->beat[fc.first->end], now, __ATOMIC_RELAXED);
      lastBeat_ = now;
    }
    if (comm_->abortFlag.load(std::memory_order_relaxed))
      return fail(ncclInvalidUsage, PoisonReason::kAborted, comm_->rank,
                  where() + ": the communicator was aborted (ncclCommAbort/ncclCommRevoke)");
    uint64_t poison = __atomic_load_n(&f->ctrl->poison, __ATOMIC_ACQUIRE);
    // A connection of this rank that the net could not set up: this wait may not depend on it, but the operation
    // does (its data went into a send FIFO that will never drain, say), so the peers wait too, until the deadline.
    // A net's own failure is named as the connection's, not the peer's: it did nothing wrong, and the net's words
    // say why.
    std::string name;
    RemoteTransport* net = conns_->remote();
    const Fifo* broken = net != nullptr ? net->failedSetup(&name) : nullptr;
    auto setupFailure = [&](uint64_t word) {
      int culprit = -1;
      poisonReason(word, &culprit);
      return fail(ncclRemoteError, PoisonReason::kError, culprit, where() + ": " + setupFailureText(net, name));
    };
    int ignored = -1;
    if (poison != 0) {
      if (broken != nullptr && broken->ctrl == f->ctrl && poisonReason(poison, &ignored) == PoisonReason::kError)
        return setupFailure(poison);
      return poisoned(f, poison, where().c_str());
    }
    if (broken != nullptr) {
      const uint64_t word = __atomic_load_n(&broken->ctrl->poison, __ATOMIC_ACQUIRE);
      if (word != 0 && poisonReason(word, &ignored) == PoisonReason::kError) return setupFailure(word);
      if (word != 0) return poisoned(broken, word, (where() + ": " + name + " failed").c_str());
    }
    // Liveness reads /proc (a zombie peer counts as gone): every 10 ms of waiting, not every round.
    bool checkPeer = conn && conn->peerLocalProc && now >= nextLiveCheck;
    if (checkPeer) nextLiveCheck = now + 10;
    if (checkPeer && processGone(conn->peerPid)) {
      // What the peer wrote before it exited is all there will be: it may have finished its part and left, or
      // failed and poisoned this FIFO (naming the cause) after the poison was read above.
      if (ready()) return ncclSuccess;
      const uint64_t late = __atomic_load_n(&f->ctrl->poison, __ATOMIC_ACQUIRE);
      if (late != 0) return poisoned(f, late, where().c_str());
      char msg[400];
      snprintf(msg, sizeof(msg), "%s: rank %d (pid %d on %s) died", where().c_str(), f->peer,
               static_cast<int>(conn->peerPid), comm_->peers[f->peer].hostname);
      return fail(ncclRemoteError, PoisonReason::kPeerDied, f->peer, msg);
    }
    if (deadline.expired()) {
      // A peer that still beats is alive and itself waiting (on the rank that is really stuck,
      // which that rank's own neighbour blames and poisons): give it one more period. It beats every 20 ms while it
      // waits; one that ranks outnumbering busy cores kept off the CPU for a while still counts if it beat within half
      // the timeout (at least 1 s), so that a starved bystander is not blamed for the stuck rank.
      uint64_t peerBeat = __atomic_load_n(&f->ctrl->beat[1 - f->end], __ATOMIC_RELAXED);
      const uint64_t aliveMs = static_cast<uint64_t>(std::max(1000.0, timeoutS * 500.0));
      bool peerAlive = peerBeat != 0 && now - peerBeat < aliveMs;
      if (peerAlive && !extended) {
        extended = true;
        deadline = Deadline::fromEnv();
        continue;
      }
      // A connection to another host that never came up says so: the peer waits on it too, so "no progress" alone
      // would blame the rank rather than the net (a device the net offers but cannot connect through, say); so does
      // a proxy held in a net call. An open one says what went through it, so that a stall in the net shows as sends
      // it completed on one rank and receives it never completed on the other.
      RemoteTransport* net = conn != nullptr && !conn->shm ? conns_->remote() : nullptr;
      RemoteTransport::Stall stall = RemoteTransport::Stall::kUnknown;
      const std::string state = net != nullptr ? net->waitState(f, &stall) : std::string();
      // The proxy may have taken a peer's failure notice while the state was read (waitState waits for its pass, and
      // the peer's deadline is often this one's): the cause it names is the answer, not this peer's silence.
      const uint64_t late = __atomic_load_n(&f->ctrl->poison, __ATOMIC_ACQUIRE);
      if (late != 0) return poisoned(f, late, where().c_str());
      if (stall == RemoteTransport::Stall::kFailing && !awaitedVerdict) {
        // The net failed the connection a moment ago and the proxy is about to name who failed: wait for its verdict.
        awaitedVerdict = true;
        deadline = Deadline::after(RemoteTransport::kVerdictS);
        continue;
      }
      if (stall == RemoteTransport::Stall::kSettingUp)
        return fail(ncclRemoteError, PoisonReason::kNetSetup, f->peer, where() + ": " + state);
      char msg[800];
      if (stall == RemoteTransport::Stall::kProxyHeld) {
        // This rank's own proxy did not come back from the net: the peer may have sent everything.
        snprintf(msg, sizeof(msg), "%s: no progress for %.0f s (CHORUS_TIMEOUT_S), and %s", where().c_str(), timeoutS,
                 state.c_str());
        return fail(ncclRemoteError, PoisonReason::kTimeout, comm_->rank, msg);
      }
      if (peerAlive) {
        snprintf(msg, sizeof(msg),
                 "%s: rank %d is alive but sent nothing for 2 x %.0f s (CHORUS_TIMEOUT_S): it is "
                 "waiting too, so the ranks are deadlocked (mismatched calls, or a rank stopped calling)",
                 where().c_str(), f->peer, timeoutS);
      } else {
        snprintf(msg, sizeof(msg),
                 "%s: rank %d made no progress for %.0f s (CHORUS_TIMEOUT_S); it may be stopped, "
                 "hung, or calling a different operation",
                 where().c_str(), f->peer, timeoutS);
      }
      std::string text = msg;
      if (!state.empty()) text += " (" + state + ")";
      return fail(ncclRemoteError, PoisonReason::kTimeout, f->peer, text);
    }
  }
}

ncclResult_t HostPlatform::waitSendSpace(Fifo* f) {
  uint64_t limit = f->geo.nSlots;
  return waitFor(
      f, [f, limit]() { return f->step - __atomic_load_n(&f->ctrl->head, __ATOMIC_ACQUIRE) < limit; },
      "for FIFO space toward");
}

ncclResult_t HostPlatform::waitRecvData(Fifo* f) {
  return waitFor(
      f, [f]() { return __atomic_load_n(&f->ctrl->tail, __ATOMIC_ACQUIRE) > f->step; }, "for data from");
}

ncclResult_t HostPlatform::waitLines(Fifo* f, const uint64_t* lines, size_t n, uint32_t flag, uint32_t* words) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = __atomic_load_n(&lines[i], __ATOMIC_ACQUIRE);
    if (static_cast<uint32_t>(v >> 32) != flag) {
      const uint64_t* line = &lines[i];
      CHORUS_CHECK(waitFor(
          f, [line, flag]() { return static_cast<uint32_t>(__atomic_load_n(line, __ATOMIC_ACQUIRE) >> 32) == flag; },
          "for LL data from"));
      v = __atomic_load_n(&lines[i], __ATOMIC_ACQUIRE);
    }
    words[i] = static_cast<uint32_t>(v);
  }
  return ncclSuccess;
}

ncclResult_t HostPlatform::mismatch(Fifo* f, const SlotHeader& got, const Fingerprint& mine, size_t bytes,
                                    uint32_t step) {
  std::string a = describeFingerprint(mine.seq, mine.count, mine.desc, mine.root);
  std::string b = describeFingerprint(got.seq, got.count, got.desc, got.root);
  char msg[600];
  if (a == b) {
    snprintf(msg, sizeof(msg),
             "rank %d and rank %d disagree inside %s: expected %zu bytes at step %u, got %u bytes "
             "(the connection's slot %u); check NCCL_ALGO/NCCL_PROTO and chorus versions",
             comm_->rank, f->peer, a.c_str(), bytes, step, got.bytes, slotOrdinal(got.step));
  } else {
    snprintf(msg, sizeof(msg), "mismatched calls: rank %d called %s but rank %d called %s", comm_->rank, a.c_str(),
             f->peer, b.c_str());
  }
  mismatch_[0] = mine.seq;
  mismatch_[1] = mine.count;
  mismatch_[2] = mine.desc | (static_cast<uint64_t>(static_cast<uint32_t>(mine.root)) << 32);
  mismatch_[3] = got.seq;
  mismatch_[4] = got.count;
  mismatch_[5] = got.desc | (static_cast<uint64_t>(static_cast<uint32_t>(got.root)) << 32);
  mismatch_[6] = static_cast<uint64_t>(comm_->rank) | (static_cast<uint64_t>(f->peer) << 32);
  return fail(ncclInvalidUsage, PoisonReason::kMismatch, f->peer, msg);
}

bool HostPlatform::canDescribe(Fifo* f, size_t bytes) {
  Conn* c = connOf(f);
  if (c == nullptr) return false;
  if (c->byAddress) return true;
  return c->shm && bytes >= describeMin_ && f->peer < static_cast<int>(readableBy_.size()) && readableBy_[f->peer];
}

bool HostPlatform::identityCopy(uint32_t flags) const {
  return !((flags & kPreLocal) && red_.kind == RedKind::kPreMulSum) &&
         !((flags & kPostOp) && red_.kind == RedKind::kSumPostDiv);
}

ncclResult_t HostPlatform::fetch(Fifo* f, char* dst, uint64_t remote, size_t bytes) {
  Conn* c = connOf(f);
  if (c != nullptr && !c->peerLocalProc) {
    std::memcpy(dst, reinterpret_cast<const void*>(remote), bytes);  // a thread of this process
    return ncclSuccess;
  }
  pid_t pid = c ? c->peerPid : 0;
  size_t done = 0;
  while (done < bytes) {
    struct iovec local = {dst + done, bytes - done};
    struct iovec far = {reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t got = process_vm_readv(pid, &local, 1, &far, 1, 0);
    int e = errno;
    if (got <= 0) {
      errno = e;
      char msg[300];
      snprintf(msg, sizeof(msg), "rank %d: reading %zu bytes from rank %d (pid %d) with process_vm_readv failed: %s",
               comm_->rank, bytes, f->peer, static_cast<int>(pid), got < 0 ? strerror(e) : "no progress");
      return fail(e == ESRCH ? ncclRemoteError : ncclSystemError,
                  e == ESRCH ? PoisonReason::kPeerDied : PoisonReason::kError, f->peer, msg);
    }
    done += static_cast<size_t>(got);
  }
  return ncclSuccess;
}

ncclResult_t HostPlatform::waitConsumed(Fifo* f) {
  return waitFor(
      f, [f]() { return __atomic_load_n(&f->ctrl->head, __ATOMIC_ACQUIRE) >= f->step; },
      "until it has read the data passed by address, for");
}

ncclResult_t HostPlatform::drainDescribed() {
  for (Fifo* f : described_) {
    ncclResult_t res = waitConsumed(f);
    if (res != ncclSuccess) {
      described_.clear();
      return res;
    }
  }
  described_.clear();
  return ncclSuccess;
}

void HostPlatform::sendLL(Fifo* f, const SlotHeader& h, const char* payload, size_t bytes) {
  uint64_t flag = static_cast<uint64_t>(static_cast<uint32_t>(f->step + 1)) << 32;
  uint64_t* lines = f->slotLL();
  uint32_t words[FifoGeometry::kLLHeaderLines];
  std::memcpy(words, &h, sizeof(h));
  for (uint32_t i = 0; i < FifoGeometry::kLLHeaderLines; i++)
    __atomic_store_n(&lines[i], flag | words[i], __ATOMIC_RELAXED);
  size_t nw = bytes / 4;
  uint64_t* d = lines + FifoGeometry::kLLHeaderLines;
  for (size_t i = 0; i < nw; i++) {
    uint32_t w;
    std::memcpy(&w, payload + 4 * i, 4);
    __atomic_store_n(&d[i], flag | w, __ATOMIC_RELAXED);
  }
  if (bytes % 4) {
    uint32_t w = 0;
    std::memcpy(&w, payload + 4 * nw, bytes % 4);
    __atomic_store_n(&d[nw], flag | w, __ATOMIC_RELAXED);
  }
  f->step++;
}

ncclResult_t HostPlatform::runSideBySide(const std::vector<Fibers::Task>& tasks) {
  RemoteTransport* remote = drive_ ? conns_->remote() : nullptr;
  if (remote != nullptr)
    fibers_.setPoller([](void* r) { return static_cast<RemoteTransport*>(r)->progressAll(nullptr); }, remote);
  ncclResult_t res = fibers_.run(tasks);
  fibers_.setPoller(nullptr, nullptr);
  if (res == ncclSystemError && fibers_.mapErrno() != 0) {
    char msg[200];
    snprintf(msg, sizeof(msg), "rank %d: mapping stacks to run %zu channels side by side failed: %s", comm_->rank,
             tasks.size(), strerror(fibers_.mapErrno()));
    return fail(res, PoisonReason::kError, comm_->rank, msg);
  }
  return res;
}

ncclResult_t HostPlatform::outOfOrder(Fifo* f, uint32_t got, uint32_t want) {
  return fail(ncclInternalError, PoisonReason::kError, comm_->rank,
              "internal error: " + slotOutOfStepText(comm_->rank, f->peer, got, want) + "; the operation stopped");
}

ncclResult_t HostPlatform::internalError(const char* what) {
  return fail(ncclInternalError, PoisonReason::kError, comm_->rank, std::string("internal error: ") + what);
}

}  // namespace chorus
