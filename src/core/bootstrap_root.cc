// The bootstrap root: one detached thread per rendezvous, started by ncclGetUniqueId (or by
// rank 0 when NCCL_COMM_ID fixes the address).
//
// The thread owns its listen socket and every connection it accepts; nothing else touches
// them. It is a single poll() loop, so a client that sends garbage or stalls never delays
// the legitimate ranks. It waits without limit for the first rank, then at most the
// timeout for the others. It exits after one rendezvous: success (every rank got its ring
// successor), or an error that it has told to every rank it could reach.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap_internal.h"
#include "core/checks.h"
#include "core/debug.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

/// How long an accepted connection may take to send its whole hello before it is dropped.
constexpr double kHelloTimeoutS = 10.0;
/// How long the root waits to hand one reply to a rank (they are small; the rank is reading).
constexpr double kReplyTimeoutS = 5.0;
/// Longest poll() once the first rank is in, so that a slow rendezvous is reported (SlowWait) while it waits.
constexpr int kSlowCheckMs = 1000;

// Constant-time comparison, so that the time to reject a guess does not leak the secret.
bool secretEqual(uint64_t a, uint64_t b) {
  volatile uint64_t diff = a ^ b;
  return diff == 0;
}

/// A connection that has not yet delivered a complete, authentic hello.
struct Pending {
  Socket sock;
  HelloMsg msg{};
  size_t got = 0;
  Clock::time_point since;
};

/// A rank that delivered its hello and waits for the verdict.
struct Joined {
  Socket sock;
  HelloMsg msg{};
};

class Root {
 public:
  Root(Socket listen, uint64_t secret, uint32_t version, double timeoutS)
      : listen_(std::move(listen)), secret_(secret), version_(version), timeoutS_(timeoutS) {
    addr_ = listen_.local().str();
  }

  void run();

 private:
  void acceptNew();
  bool progressPending(Pending& p);  // false: drop the connection
  void handleHello(Pending& p);
  void checkJoined(std::vector<int>& ranks, const std::vector<pollfd>& fds, size_t first);
  void fatal(ncclResult_t code, const std::string& text);
  void tell(Socket& sock, int rank, ncclResult_t code, const std::string& text);
  void finishSuccess();
  bool everyoneAccountedFor() const;
  int pollTimeoutMs() const;
  /// Ranks that have not joined (yet).
  std::vector<int> missing() const;
  std::string who(const HelloMsg& m, const Socket& s) const {
    return "rank " + std::to_string(m.rank) + " (" + s.peer().str() + ")";
  }

  Socket listen_;
  uint64_t secret_;
  uint32_t version_;
  double timeoutS_;
  std::string addr_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<int, Joined> joined_;  // by rank
  int nranks_ = -1;               // from the first authentic hello
  int firstRank_ = -1;
  bool started_ = false;  // first authentic hello seen: the deadline runs
  Deadline deadline_;
  SlowWait slow_;                       // restarted with the deadline
  ncclResult_t errCode_ = ncclSuccess;  // first fatal error; every rank must hear it
  std::string errText_;
  std::set<int> accounted_;  // ranks told the error or gone; the root may exit when all are
  bool done_ = false;
};

int Root::pollTimeoutMs() const {
  int ms = started_ ? std::min(deadline_.remainingMs(), kSlowCheckMs) : INT_MAX;
  auto now = Clock::now();
  for (const auto& p : pending_) {
    auto end = p->since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kHelloTimeoutS));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count();
    ms = std::min<int64_t>(ms, std::max<int64_t>(0, left + 1));
  }
  return ms == INT_MAX ? -1 : ms;  // -1: nobody came yet, wait without limit
}

void Root::run() {
  INFO(kBootstrap, "bootstrap root %s: waiting for the first rank", addr_.c_str());
  while (!done_) {
    std::vector<pollfd> fds;
    fds.push_back({listen_.fd(), POLLIN, 0});
    for (const auto& p : pending_) fds.push_back({p->sock.fd(), POLLIN, 0});
    std::vector<int> joinedRanks;
    for (const auto& [r, j] : joined_) {
      fds.push_back({j.sock.fd(), POLLIN, 0});
      joinedRanks.push_back(r);
    }
    int rc = poll(fds.data(), fds.size(), pollTimeoutMs());
    if (rc < 0 && errno != EINTR) {
      WARN("bootstrap root %s: poll failed (%s); giving up on this rendezvous", addr_.c_str(), strerror(errno));
      fatal(ncclSystemError, "the bootstrap root " + addr_ + " failed (poll: " + strerror(errno) + ")");
      break;
    }
    // Joined ranks must stay silent until the verdict: readable means they left (EOF) or misbehave.
    checkJoined(joinedRanks, fds, 1 + pending_.size());
    size_t n = pending_.size();
    std::vector<bool> drop(n, false);
    for (size_t i = 0; i < n; i++) {
      if (fds[1 + i].revents != 0 && !progressPending(*pending_[i])) drop[i] = true;
    }
    auto now = Clock::now();
    for (size_t i = 0; i < n; i++) {
      if (drop[i]) continue;
      Pending& p = *pending_[i];
      if (p.got == sizeof(HelloMsg)) {
        handleHello(p);
        drop[i] = true;  // the socket moved to joined_ (or was answered and closed)
      } else if (now - p.since > std::chrono::duration<double>(kHelloTimeoutS)) {
        WARN("bootstrap root %s: dropped connection from %s: incomplete hello (%zu of %zu bytes) after %g s",
             addr_.c_str(), p.sock.peer().str().c_str(), p.got, sizeof(HelloMsg), kHelloTimeoutS);
        drop[i] = true;
      }
    }
    for (size_t i = n; i-- > 0;) {
      if (drop[i]) pending_.erase(pending_.begin() + i);
    }
    if (fds[0].revents != 0) acceptNew();

    if (errCode_ == ncclSuccess && nranks_ > 0 && static_cast<int>(joined_.size()) == nranks_) {
      finishSuccess();
      break;
    }
    if (errCode_ != ncclSuccess && everyoneAccountedFor()) break;
    if (started_ && errCode_ == ncclSuccess) {
      slow_.check([&]() {
        return "bootstrap root " + addr_ + ": " + std::to_string(joined_.size()) + " of " + std::to_string(nranks_) +
               " ranks have joined in " + slow_.elapsedText() + " s; rank(s) " + rankListText(missing()) +
               " not yet (limit " + secondsText(timeoutS_) + " s)";
      });
    }
    if (started_ && deadline_.expired()) {
      if (errCode_ == ncclSuccess) {
        fatal(ncclRemoteError, "rank(s) " + rankListText(missing()) + " never joined within " + secondsText(timeoutS_) +
                                   " s (bootstrap root " + addr_ + "; " + std::to_string(joined_.size()) + " of " +
                                   std::to_string(nranks_) +
                                   " ranks arrived; CHORUS_TIMEOUT_S sets the limit, or NCCL_SOCKET_RETRY_CNT and "
                                   "NCCL_SOCKET_RETRY_SLEEP_MSEC where their window is longer)");
      }
      break;
    }
  }
  INFO(kBootstrap, "bootstrap root %s: exiting (%s)", addr_.c_str(),
       errCode_ == ncclSuccess ? "rendezvous complete" : errText_.c_str());
}

void Root::acceptNew() {
  for (;;) {
    auto p = std::make_unique<Pending>();
    IoResult r = listen_.tryAccept(&p->sock);
    if (!r.ok()) {
      WARN("bootstrap root %s: %s", addr_.c_str(), r.what.c_str());
      return;
    }
    if (!p->sock.valid()) return;
    p->since = Clock::now();
    pending_.push_back(std::move(p));
  }
}

bool Root::progressPending(Pending& p) {
  IoResult r = p.sock.recvSome(&p.msg, sizeof(HelloMsg), &p.got);
  if (p.got >= sizeof(uint64_t) && p.msg.magic != kHelloMagic) {
    WARN("bootstrap root %s: dropped connection from %s: not a chorus bootstrap hello (magic 0x%016llx)", addr_.c_str(),
         p.sock.peer().str().c_str(), static_cast<unsigned long long>(p.msg.magic));
    return false;
  }
  if (p.got >= 2 * sizeof(uint64_t) && !secretEqual(p.msg.secret, secret_)) {
    WARN(
        "bootstrap root %s: dropped connection from %s (claims rank %s): wrong secret, i.e. a stale or wrong "
        "ncclUniqueId",
        addr_.c_str(), p.sock.peer().str().c_str(),
        p.got >= offsetof(HelloMsg, nranks) ? std::to_string(p.msg.rank).c_str() : "?");
    return false;
  }
  if (!r.ok()) {
    WARN("bootstrap root %s: dropped connection from %s: short hello (%s)", addr_.c_str(), p.sock.peer().str().c_str(),
         r.what.c_str());
    return false;
  }
  return true;
}

void Root::handleHello(Pending& p) {
  const HelloMsg& m = p.msg;
  if (!started_) {
    started_ = true;
    deadline_ = Deadline::after(timeoutS_);
    slow_ = SlowWait();
    firstRank_ = m.rank;
    if (m.nranks >= 1) nranks_ = m.nranks;
    INFO(kBootstrap, "bootstrap root %s: first rank %d arrived (nranks %d); waiting up to %g s for the others",
         addr_.c_str(), m.rank, m.nranks, timeoutS_);
  }
  if (errCode_ != ncclSuccess) {
    // A latecomer to a failed rendezvous hears the error at once instead of waiting for the deadline.
    tell(p.sock, m.rank, errCode_, errText_);
    return;
  }
  std::string me = who(m, p.sock);
  if (m.version != version_) {
    Joined j{std::move(p.sock), m};
    fatal(ncclInvalidUsage, me + " runs library version " + std::to_string(m.version) + " but the root " + addr_ +
                                " (the process that made the ncclUniqueId) runs version " + std::to_string(version_) +
                                "; every rank must use the same version");
    tell(j.sock, m.rank, errCode_, errText_);
    return;
  }
  std::string problem;
  ncclResult_t code = ncclInvalidUsage;
  if (m.nranks < 1) {
    code = ncclInvalidArgument;
    problem = me + " was started with nranks=" + std::to_string(m.nranks);
  } else if (m.nranks != nranks_) {
    problem = me + " was started with nranks=" + std::to_string(m.nranks) + " but rank " + std::to_string(firstRank_) +
              " said nranks=" + std::to_string(nranks_);
  } else if (m.rank < 0 || m.rank >= nranks_) {
    code = ncclInvalidArgument;
    problem = "rank " + std::to_string(m.rank) + " (" + p.sock.peer().str() +
              ") is out of range for nranks=" + std::to_string(nranks_);
  } else if (joined_.count(m.rank) != 0) {
    problem = "rank " + std::to_string(m.rank) + " joined twice (from " + joined_[m.rank].sock.peer().str() +
              " and from " + p.sock.peer().str() + "); every rank number must be used exactly once";
  }
  if (!problem.empty()) {
    Joined j{std::move(p.sock), m};
    fatal(code, problem + " (bootstrap root " + addr_ + ")");
    tell(j.sock, m.rank, errCode_, errText_);
    return;
  }
  TRACE(kBootstrap, "bootstrap root %s: %s joined", addr_.c_str(), me.c_str());
  joined_[m.rank] = Joined{std::move(p.sock), m};
}

void Root::checkJoined(std::vector<int>& ranks, const std::vector<pollfd>& fds, size_t first) {
  for (size_t i = 0; i < ranks.size(); i++) {
    if (fds[first + i].revents == 0) continue;
    auto it = joined_.find(ranks[i]);
    if (it == joined_.end()) continue;
    char byte;
    size_t got = 0;
    IoResult r = it->second.sock.recvSome(&byte, 1, &got);
    if (r.ok() && got == 0) continue;  // spurious wakeup
    std::string me = who(it->second.msg, it->second.sock);
    int rank = ranks[i];
    joined_.erase(it);  // closes the socket
    accounted_.insert(rank);
    if (errCode_ == ncclSuccess) {
      fatal(ncclRemoteError, me + " left the bootstrap rendezvous before all " + std::to_string(nranks_) +
                                 " ranks joined (" + (r.ok() ? "it sent unexpected data" : r.what) +
                                 "; bootstrap root " + addr_ + ")");
    }
  }
}

void Root::fatal(ncclResult_t code, const std::string& text) {
  if (errCode_ != ncclSuccess) return;  // the first error is the cause; later ones are consequences
  errCode_ = code;
  errText_ = text.size() > kMaxErrorText ? text.substr(0, kMaxErrorText) : text;
  WARN("bootstrap root %s: %s", addr_.c_str(), errText_.c_str());
  for (auto& [rank, j] : joined_) tell(j.sock, rank, errCode_, errText_);
  joined_.clear();
}

void Root::tell(Socket& sock, int rank, ncclResult_t code, const std::string& text) {
  RootReply rep{};
  rep.magic = kReplyMagic;
  rep.code = code;
  rep.textLen = static_cast<uint32_t>(text.size());
  Deadline dl = Deadline::after(kReplyTimeoutS);
  IoResult r = sock.sendAll(&rep, sizeof(rep), dl, nullptr);
  if (r.ok()) r = sock.sendAll(text.data(), text.size(), dl, nullptr);
  if (!r.ok()) INFO(kBootstrap, "bootstrap root %s: could not tell rank %d: %s", addr_.c_str(), rank, r.what.c_str());
  accounted_.insert(rank);
  sock.close();
}

std::vector<int> Root::missing() const {
  std::vector<int> out;
  for (int r = 0; r < nranks_; r++)
    if (joined_.count(r) == 0) out.push_back(r);
  return out;
}

bool Root::everyoneAccountedFor() const {
  if (nranks_ < 1) return false;
  for (int r = 0; r < nranks_; r++) {
    if (accounted_.count(r) == 0) return false;
  }
  return true;
}

void Root::finishSuccess() {
  INFO(kBootstrap, "bootstrap root %s: all %d ranks joined; sending ring neighbours", addr_.c_str(), nranks_);
  for (auto& [rank, j] : joined_) {
    RootReply rep{};
    rep.magic = kReplyMagic;
    rep.code = ncclSuccess;
    rep.next = joined_[(rank + 1) % nranks_].msg.listen;
    IoResult r = j.sock.sendAll(&rep, sizeof(rep), Deadline::after(kReplyTimeoutS), nullptr);
    // A rank that died now is detected by its ring neighbours; the others can still proceed.
    if (!r.ok()) WARN("bootstrap root %s: could not answer rank %d: %s", addr_.c_str(), rank, r.what.c_str());
  }
  joined_.clear();
}

}  // namespace

ncclResult_t startRootThread(Socket listen, uint64_t secret, uint32_t version, double timeoutS) {
  auto root = std::make_shared<Root>(std::move(listen), secret, version, timeoutS);
  try {
    std::thread([root] { root->run(); }).detach();
  } catch (const std::exception& e) {
    CHORUS_FAIL(nullptr, ncclSystemError, "bootstrap: cannot start the root thread: %s", e.what());
  }
  return ncclSuccess;
}

}  // namespace chorus
