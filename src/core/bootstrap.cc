// Rank side of the bootstrap: joining the rendezvous, the ring allgather and barrier, and
// tagged point-to-point messages. The root side lives in bootstrap_root.cc.
//
// Threading and lock order: Bootstrap methods may be called from several threads (e.g. the
// user's thread and the proxy thread), so each kind of traffic has its own lock and the
// locks are never nested: ringMutex (allGather/barrier: next/prev sockets), sendMutex
// (outgoing point-to-point sockets), recvMutex (listen socket, incoming sockets, stash).
// close() takes only fdMutex and shuts every registered descriptor down so that blocked
// waits, ours and the peers', end at once; descriptors are closed only by ~Impl, so a
// number is never reused while another thread may still poll it.
#include "core/bootstrap.h"

#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "core/bootstrap_internal.h"
#include "core/checks.h"
#include "core/comm.h"
#include "core/params.h"
#include "core/process.h"

namespace chorus {
namespace {

StrParam kCommId{"NCCL_COMM_ID", "",
                 "Fixed bootstrap root address \"host:port\" or \"[ipv6]:port\": ncclGetUniqueId returns an id for it "
                 "and rank 0 hosts the root there at init (ranks may then pass an all-zero id).",
                 "bootstrap"};

StrParam kHostId{"NCCL_HOSTID", "",
                 "Names the host a rank runs on, in place of the host name and network namespace: ranks with "
                 "different values never share memory (sockets between them, and network staging for GPU buffers).",
                 "bootstrap"};

/// How long an accepted rank-to-rank connection may take to prove the secret.
constexpr double kPeerHelloTimeoutS = 5.0;
/// Extra time a rank waits for the root's verdict beyond CHORUS_TIMEOUT_S: the root's own
/// deadline starts when the first rank arrives, so its "never joined" message must win the race.
constexpr double kRootReplySlackS = 2.0;
/// Largest point-to-point message accepted: a bigger length means a garbled stream, not a real message.
constexpr uint64_t kMaxMessageBytes = 1ull << 32;
/// Best-effort limit for telling the ring successor about an error.
constexpr double kForwardTimeoutS = 1.0;

thread_local uint32_t tVersionOverride = 0;

bool allZero(const ncclUniqueId& id) {
  for (char c : id.internal) {
    if (c != 0) return false;
  }
  return true;
}

ncclResult_t randomU64(uint64_t* out) {
  if (getrandom(out, sizeof(*out), 0) == static_cast<ssize_t>(sizeof(*out))) return ncclSuccess;
  FILE* f = fopen("/dev/urandom", "rb");
  bool ok = f != nullptr && fread(out, sizeof(*out), 1, f) == 1;
  if (f != nullptr) fclose(f);
  if (!ok) CHORUS_FAIL(nullptr, ncclSystemError, "bootstrap: cannot read random bytes for the unique id secret");
  return ncclSuccess;
}

// The id for NCCL_COMM_ID: every process derives the same one from the same string.
ncclResult_t idFromEnv(const std::string& text, UniqueIdLayout* out) {
  SockAddr addr;
  std::string why;
  if (parseAddress(text, &addr, &why) != ncclSuccess) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NCCL_COMM_ID: %s", why.c_str());
  }
  if (addr.port() == 0) CHORUS_FAIL(nullptr, ncclInvalidArgument, "NCCL_COMM_ID=%s needs a port", text.c_str());
  *out = UniqueIdLayout{};
  out->magic = kIdMagic;
  out->version = bootstrapVersion();
  out->flags = kIdFromEnv;
  out->root = packAddr(addr);
  out->secret = fnv1a64(text.data(), text.size(), 0x4e43434c5f434f4dull);
  return ncclSuccess;
}

// How a message describes a peer after an I/O failure: EOF and reset mean the peer went away.
const char* lostText(const IoResult& r) {
  return r.status == IoStatus::kEof || r.status == IoStatus::kReset
             ? " closed its bootstrap connection (it exited or failed): "
             : ": ";
}

// Wire form of what the allgather at init exchanges.
struct PeerWire {
  PeerInfo info;
  PackedAddr listen;
};

}  // namespace

// ---- helpers shared with the root --------------------------------------------------------

uint32_t bootstrapVersion() { return tVersionOverride != 0 ? tVersionOverride : NCCL_VERSION_CODE; }
void bootstrapSetVersionForTest(uint32_t version) { tVersionOverride = version; }

uint64_t localHostHash() {
  std::string id = kHostId.get();
  if (!id.empty()) return fnv1a64(id.data(), id.size());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string key = host;
  // Containers and network namespaces on one machine cannot reach each other's loopback or
  // shared memory the same way: the namespace inode makes them different "hosts".
  char ns[128] = {0};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  if (n > 0) key += std::string("|") + std::string(ns, static_cast<size_t>(n));
  return fnv1a64(key.data(), key.size());
}

void encodeUniqueId(const UniqueIdLayout& layout, ncclUniqueId* id) {
  UniqueIdLayout l = layout;
  l.checksum = fnv1a64(&l, offsetof(UniqueIdLayout, checksum));
  memcpy(id->internal, &l, sizeof(l));
}

bool decodeUniqueId(const ncclUniqueId& id, UniqueIdLayout* out, std::string* why) {
  memcpy(out, id.internal, sizeof(*out));
  char buf[160];
  if (out->magic != kIdMagic) {
    snprintf(buf, sizeof(buf), "bad magic 0x%016llx: not made by ncclGetUniqueId of this library, or corrupted",
             static_cast<unsigned long long>(out->magic));
    *why = buf;
    return false;
  }
  if (out->checksum != fnv1a64(out, offsetof(UniqueIdLayout, checksum))) {
    *why = "checksum mismatch: the id was corrupted (or truncated) on its way to this rank";
    return false;
  }
  SockAddr addr;
  if (!unpackAddr(out->root, &addr) || addr.port() == 0) {
    *why = "the id holds no valid root address";
    return false;
  }
  return true;
}

ncclResult_t bootstrapGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  UniqueIdLayout l{};
  if (kCommId.isSet()) {
    // As NCCL: the id only names the fixed address; rank 0 starts the root there at init, so
    // any number of processes may call this without fighting over the port.
    CHORUS_CHECK(idFromEnv(kCommId.get(), &l));
    encodeUniqueId(l, id);
    INFO(kBootstrap | kEnv, "NCCL_COMM_ID set by environment to %s", kCommId.get().c_str());
    return ncclSuccess;
  }
  SockAddr addr;
  std::string ifName, why;
  if (findInterface(&addr, &ifName, &why) != ncclSuccess) {
    CHORUS_FAIL(nullptr, ncclSystemError, "ncclGetUniqueId: %s", why.c_str());
  }
  Socket listen;
  IoResult r = Socket::listen(addr, &listen);
  if (!r.ok()) CHORUS_FAIL(nullptr, ncclSystemError, "ncclGetUniqueId: bootstrap root: %s", r.what.c_str());
  l.magic = kIdMagic;
  l.version = bootstrapVersion();
  l.root = packAddr(listen.local());
  CHORUS_CHECK(randomU64(&l.secret));
  std::string where = listen.local().str();
  CHORUS_CHECK(startRootThread(std::move(listen), l.secret, l.version, rendezvousSeconds()));
  encodeUniqueId(l, id);
  INFO(kBootstrap, "bootstrap root listening on %s (%s)", where.c_str(), ifName.c_str());
  return ncclSuccess;
}

std::string uniqueIdDescribe(const ncclUniqueId& id) {
  UniqueIdLayout l;
  std::string why;
  if (!decodeUniqueId(id, &l, &why)) return "invalid unique id: " + why;
  SockAddr addr;
  unpackAddr(l.root, &addr);
  return addr.str();
}

// ---- Impl -----------------------------------------------------------------------------------

/// An outgoing point-to-point connection and its sticky failure.
struct OutConn {
  Socket sock;
  ncclResult_t err = ncclSuccess;
  std::string errText;
};

struct Bootstrap::Impl {
  ncclComm* comm = nullptr;
  std::atomic<int>* abortFlag = nullptr;
  int rank = 0;
  int nranks = 0;
  uint64_t secret = 0;
  double timeoutS = 0;
  std::vector<SockAddr> addrs;     // every rank's listen address (complete after init)
  std::vector<std::string> hosts;  // every rank's host name, for messages (complete after init)
  std::atomic<bool> closed{false};

  std::mutex ringMutex;  // guards next, prev, ringErr*
  Socket next, prev;
  ncclResult_t ringErr = ncclSuccess;  // sticky: a failed ring step leaves the stream unusable
  std::string ringErrText;

  std::mutex sendMutex;  // guards out
  std::vector<OutConn> out;

  std::mutex recvMutex;  // guards listen, in, retired, stash
  Socket listen;
  std::vector<Socket> in;
  std::vector<Socket> retired;  // replaced incoming sockets, kept open until ~Impl (see file comment)
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> stash;  // (peer, tag) -> unexpected messages

  std::mutex fdMutex;  // guards fds
  std::vector<int> fds;

  void track(const Socket& s) {
    std::lock_guard<std::mutex> lock(fdMutex);
    fds.push_back(s.fd());
  }
  std::string peerName(int p) const {
    std::string host = p < static_cast<int>(hosts.size()) && !hosts[p].empty() ? "host " + hosts[p] : "";
    std::string addr = p < static_cast<int>(addrs.size()) && addrs[p].len != 0 ? addrs[p].str() : "";
    if (host.empty() && addr.empty()) return "rank " + std::to_string(p);
    return "rank " + std::to_string(p) + " (" + host + (host.empty() || addr.empty() ? "" : ", ") + addr + ")";
  }
  ncclResult_t checkUsable(const char* op) {
    if (closed.load())
      CHORUS_FAIL(comm, ncclInvalidUsage, "bootstrap rank %d: %s: this rank's bootstrap was closed", rank, op);
    if (abortFlag != nullptr && abortFlag->load() != 0)
      CHORUS_FAIL(comm, ncclInternalError, "bootstrap rank %d: %s: communicator aborted", rank, op);
    return ncclSuccess;
  }
  ncclResult_t acceptOne(const char* during);
  /// Reads one whole frame from rank `peer`'s connection (readable now) into the stash. recvMutex held.
  /// On failure *why says what happened; nothing is recorded (the caller decides whether it is the error).
  ncclResult_t readFrame(int peer, const std::string& op, std::string* why);
  ncclResult_t ringStep(int step, const char* sendBuf, char* recvBuf, size_t bytes, const char* op, SlowWait& slow);
  ncclResult_t ringFail(ncclResult_t code, const std::string& text, bool nextUsable, const FrameHeader& sentHdr,
                        size_t sentHdrBytes, const char* sendBuf, size_t sentDataBytes, const char* op);
};

// Accepts one pending connection (if any) and files it by the kind it announces. A connection
// that cannot prove the secret is logged and dropped; that is never an error for us.
ncclResult_t Bootstrap::Impl::readFrame(int peer, const std::string& op, std::string* why) {
  Socket& s = in[peer];
  Deadline dl = Deadline::fromEnv();
  FrameHeader h{};
  IoResult r = s.recvAll(&h, sizeof(h), dl, abortFlag);
  char buf[512];
  if (r.ok() && (h.magic != kFrameMagic || h.len > kMaxMessageBytes)) {
    snprintf(buf, sizeof(buf), "bootstrap rank %d: garbled message from %s (length %llu)", rank, peerName(peer).c_str(),
             static_cast<unsigned long long>(h.len));
    *why = buf;
    return ncclInternalError;
  }
  std::vector<char> msg;
  if (r.ok()) {
    msg.resize(h.len);
    r = s.recvAll(msg.data(), msg.size(), dl, abortFlag);
  }
  if (!r.ok()) {
    snprintf(buf, sizeof(buf), "bootstrap rank %d: %s: %s%s%s", rank, op.c_str(), peerName(peer).c_str(), lostText(r),
             r.what.c_str());
    *why = buf;
    return ioToNccl(r);
  }
  stash[{peer, h.tag}].push_back(std::move(msg));
  return ncclSuccess;
}

ncclResult_t Bootstrap::Impl::acceptOne(const char* during) {
  Socket s;
  IoResult r = listen.tryAccept(&s);
  if (!r.ok()) CHORUS_FAIL(comm, ncclSystemError, "bootstrap rank %d: %s (%s)", rank, r.what.c_str(), during);
  if (!s.valid()) return ncclSuccess;
  PeerHello h{};
  r = s.recvAll(&h, sizeof(h), Deadline::after(std::min(kPeerHelloTimeoutS, timeoutS > 0 ? timeoutS : 1e9)), abortFlag);
  const char* bad = nullptr;
  if (!r.ok()) {
    bad = "no complete hello";
  } else if (h.magic != kPeerMagic) {
    bad = "not a chorus bootstrap peer";
  } else if (h.secret != secret) {
    bad = "wrong secret (a rank of another communicator?)";
  } else if (h.rank < 0 || h.rank >= nranks || h.rank == rank) {
    bad = "invalid rank";
  } else if (h.kind == kConnRing && (h.rank != (rank + nranks - 1) % nranks || prev.valid())) {
    bad = "unexpected ring connection (not our predecessor, or a second one)";
  } else if (h.kind != kConnRing && h.kind != kConnP2p && h.kind != kConnProbe) {
    bad = "unknown connection kind";
  }
  if (bad != nullptr) {
    WARN("bootstrap rank %d: dropped connection from %s: %s%s%s", rank, s.peer().str().c_str(), bad, r.ok() ? "" : ": ",
         r.what.c_str());
    return ncclSuccess;
  }
  if (h.kind == kConnProbe) return ncclSuccess;  // a peer checking that we are alive: answered by accepting
  track(s);
  if (h.kind == kConnRing) {
    prev = std::move(s);  // setup is single-threaded: ringMutex is not needed yet
  } else {
    if (in[h.rank].valid()) retired.push_back(std::move(in[h.rank]));
    in[h.rank] = std::move(s);
  }
  return ncclSuccess;
}

// One ring step: send a frame to the successor while receiving one from the predecessor.
// Both directions progress together so that large payloads cannot deadlock the ring.
ncclResult_t Bootstrap::Impl::ringStep(int step, const char* sendBuf, char* recvBuf, size_t bytes, const char* op,
                                       SlowWait& slow) {
  int nextRank = (rank + 1) % nranks, prevRank = (rank + nranks - 1) % nranks;
  FrameHeader sh{kFrameMagic, ncclSuccess, 0, 0, bytes};
  FrameHeader rh{};
  size_t sHdr = 0, sData = 0, rHdr = 0, rData = 0;
  Deadline dl = Deadline::after(timeoutS);
  for (;;) {
    // Receive side first: when both neighbours fail together, the predecessor's EOF or forwarded error
    // is the cause, and the successor's broken pipe is usually its own reaction to that same event.
    IoResult r;
    if (rHdr < sizeof(rh)) {
      r = prev.recvSome(&rh, sizeof(rh), &rHdr);
      if (r.ok() && rHdr == sizeof(rh)) {
        if (rh.magic != kFrameMagic) {
          std::string t = "garbled bootstrap data from " + peerName(prevRank) + " in " + op;
          return ringFail(ncclInternalError, t, true, sh, sHdr, sendBuf, sData, op);
        }
        if (rh.code != ncclSuccess) {
          // The predecessor failed and forwards the cause; pass it on unchanged.
          std::string text(std::min<uint64_t>(rh.len, kMaxErrorText), '\0');
          IoResult t = prev.recvAll(&text[0], text.size(), Deadline::after(kForwardTimeoutS), abortFlag);
          if (!t.ok()) text = "(text lost: " + t.what + ")";
          ncclResult_t code =
              rh.code > 0 && rh.code < ncclNumResults ? static_cast<ncclResult_t>(rh.code) : ncclRemoteError;
          return ringFail(code, text, true, sh, sHdr, sendBuf, sData, op);
        }
        if (rh.len != bytes) {
          std::string t = peerName(prevRank) + " contributes " + std::to_string(rh.len) + " bytes per rank to " + op +
                          " but rank " + std::to_string(rank) + " expects " + std::to_string(bytes) +
                          " (mismatched bootstrap calls)";
          return ringFail(ncclInvalidUsage, t, true, sh, sHdr, sendBuf, sData, op);
        }
      }
    }
    if (r.ok() && rHdr == sizeof(rh)) r = prev.recvSome(recvBuf, bytes, &rData);
    if (!r.ok()) {
      std::string t = peerName(prevRank) + lostText(r) + r.what + " (" + op + " step " + std::to_string(step) +
                      ", reported by rank " + std::to_string(rank) + ")";
      return ringFail(ioToNccl(r), t, true, sh, sHdr, sendBuf, sData, op);
    }
    if (sHdr < sizeof(sh)) r = next.sendSome(&sh, sizeof(sh), &sHdr);
    if (r.ok() && sHdr == sizeof(sh)) r = next.sendSome(sendBuf, bytes, &sData);
    if (!r.ok()) {
      std::string t = peerName(nextRank) + lostText(r) + r.what + " (" + op + " step " + std::to_string(step) +
                      ", reported by rank " + std::to_string(rank) + ")";
      return ringFail(ioToNccl(r), t, false, sh, sHdr, sendBuf, sData, op);
    }
    bool sendDone = sHdr == sizeof(sh) && sData == bytes;
    bool recvDone = rHdr == sizeof(rh) && rData == bytes;
    if (sendDone && recvDone) return ncclSuccess;

    pollfd fds[2];
    int n = 0;
    if (!sendDone) fds[n++] = {next.fd(), POLLOUT, 0};
    if (!recvDone) fds[n++] = {prev.fd(), POLLIN, 0};
    if (abortFlag != nullptr && abortFlag->load() != 0) {
      return ringFail(ncclInternalError,
                      "communicator aborted during " + std::string(op) + " on rank " + std::to_string(rank), true, sh,
                      sHdr, sendBuf, sData, op);
    }
    if (closed.load()) {
      return ringFail(ncclInvalidUsage,
                      std::string(op) + " interrupted: rank " + std::to_string(rank) + " closed its bootstrap", false,
                      sh, sHdr, sendBuf, sData, op);
    }
    if (dl.expired()) {
      std::string t = "timed out after " + secondsText(timeoutS) + " s in " + op + " step " + std::to_string(step) +
                      " on rank " + std::to_string(rank) + " waiting for " +
                      (!recvDone ? "data from " + peerName(prevRank) : "") + (!recvDone && !sendDone ? " and " : "") +
                      (!sendDone ? "room to send to " + peerName(nextRank) : "");
      return ringFail(ncclSystemError, t, true, sh, sHdr, sendBuf, sData, op);
    }
    slow.check([&]() {
      // Blocks still to come: the one of this step (unless it is here) and those of the later steps, each of
      // which originates one hop further upstream.
      std::vector<int> missing;
      for (int s = recvDone ? step + 1 : step; s < nranks - 1; s++) missing.push_back((rank - s - 1 + nranks) % nranks);
      return std::string(op) + " on " + commLabel(comm) + " has waited " + slow.elapsedText() + " s (step " +
             std::to_string(step + 1) + " of " + std::to_string(nranks - 1) + "): " +
             (missing.empty() ? std::string("all data is here")
                              : "the data of rank(s) " + rankListText(missing) + " has not arrived") +
             (recvDone ? "" : "; waiting on " + peerName(prevRank)) +
             (sendDone ? "" : "; " + peerName(nextRank) + " has not taken this rank's data") + " (CHORUS_TIMEOUT_S " +
             secondsText(timeoutS) + " s)";
    });
    if (poll(fds, n, std::min(kPollSliceMs, dl.remainingMs())) < 0 && errno != EINTR) {
      return ringFail(ncclSystemError, std::string("poll failed in ") + op + ": " + strerror(errno), true, sh, sHdr,
                      sendBuf, sData, op);
    }
  }
}

// Records a ring failure and makes it visible around the ring: the successor gets an error
// frame (after the rest of the frame we were sending, so it parses) and forwards it, so every
// rank learns the original cause. Only the successor's socket is shut down (it then sees EOF
// after the frame, never instead of it): shutting the predecessor's would make it fail with
// "broken pipe" naming us instead of the cause that travels to it around the ring.
ncclResult_t Bootstrap::Impl::ringFail(ncclResult_t code, const std::string& text, bool nextUsable,
                                       const FrameHeader& sentHdr, size_t sentHdrBytes, const char* sendBuf,
                                       size_t sentDataBytes, const char* op) {
  ringErr = code;
  ringErrText = text;
  if (nextUsable && next.valid()) {
    Deadline dl = Deadline::after(kForwardTimeoutS);
    IoResult r;
    if (sentHdrBytes > 0 && sentHdrBytes < sizeof(sentHdr)) {
      r = next.sendAll(reinterpret_cast<const char*>(&sentHdr) + sentHdrBytes, sizeof(sentHdr) - sentHdrBytes, dl,
                       nullptr);
    }
    if (r.ok() && sentHdrBytes > 0) r = next.sendAll(sendBuf + sentDataBytes, sentHdr.len - sentDataBytes, dl, nullptr);
    std::string t = text.substr(0, kMaxErrorText);
    FrameHeader eh{kFrameMagic, code, 0, 0, t.size()};
    if (r.ok()) r = next.sendAll(&eh, sizeof(eh), dl, nullptr);
    if (r.ok()) r = next.sendAll(t.data(), t.size(), dl, nullptr);
  }
  next.shutdown();
  CHORUS_FAIL(comm, code, "bootstrap rank %d: %s failed: %s", rank, op, text.c_str());
}

// ---- Bootstrap ------------------------------------------------------------------------------

Bootstrap::~Bootstrap() = default;

ncclResult_t Bootstrap::create(ncclComm* comm, const ncclUniqueId& id, int rank, int nranks, const PeerInfo& mine,
                               std::atomic<int>* abortFlag, std::unique_ptr<Bootstrap>* out) {
  if (out == nullptr) CHORUS_FAIL(comm, ncclInvalidArgument, "bootstrap: output pointer is NULL");
  out->reset();
  UniqueIdLayout l;
  std::string why;
  if (!decodeUniqueId(id, &l, &why)) {
    if (!(kCommId.isSet() && allZero(id))) {
      CHORUS_FAIL(comm, ncclInvalidArgument, "bootstrap rank %d: invalid ncclUniqueId: %s", rank, why.c_str());
    }
    CHORUS_CHECK(idFromEnv(kCommId.get(), &l));  // an all-zero id means "use NCCL_COMM_ID"
  }
  if (nranks < 1) CHORUS_FAIL(comm, ncclInvalidArgument, "bootstrap rank %d: nranks=%d must be >= 1", rank, nranks);
  SockAddr rootAddr;
  unpackAddr(l.root, &rootAddr);
  std::string rootText = rootAddr.str();
  double timeoutS = timeoutSeconds();
  // NCCL_SOCKET_RETRY_CNT / _SLEEP_MSEC, where set: how long to try a root that is not listening yet, and the
  // rendezvous lasts at least that long.
  const double retryWindowS = socketRetryWindowSeconds();
  const double rendezvousS = rendezvousSeconds();

  if ((l.flags & kIdFromEnv) != 0 && rank == 0) {
    Socket rootListen;
    IoResult r = Socket::listen(rootAddr, &rootListen);
    if (!r.ok()) {
      CHORUS_FAIL(comm, ncclSystemError,
                  "bootstrap rank 0: cannot host the root at NCCL_COMM_ID=%s (%s); it must be a free port on rank "
                  "0's host",
                  rootText.c_str(), r.what.c_str());
    }
    CHORUS_CHECK(startRootThread(std::move(rootListen), l.secret, l.version, rendezvousS));
  }

  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->nranks_ = nranks;
  b->impl_ = std::make_unique<Impl>();
  Impl& im = *b->impl_;
  im.comm = comm;
  im.abortFlag = abortFlag;
  im.rank = rank;
  im.nranks = nranks;
  im.secret = l.secret;
  im.timeoutS = timeoutS;
  im.out.resize(nranks);
  im.in.resize(nranks);

  SockAddr me;
  std::string ifName;
  if (findInterface(&me, &ifName, &why) != ncclSuccess) {
    CHORUS_FAIL(comm, ncclSystemError, "bootstrap rank %d: %s", rank, why.c_str());
  }
  IoResult r = Socket::listen(me, &im.listen);
  if (!r.ok()) CHORUS_FAIL(comm, ncclSystemError, "bootstrap rank %d: %s", rank, r.what.c_str());
  im.track(im.listen);

  // Join the rendezvous: connect to the root, prove the secret, wait for the verdict.
  Socket root;
  r = Socket::connect(rootAddr, Deadline::after(retryWindowS >= 0 ? retryWindowS : timeoutS), abortFlag, &root);
  if (!r.ok()) {
    CHORUS_FAIL(comm, r.status == IoStatus::kAborted ? ncclInternalError : ncclSystemError,
                "bootstrap rank %d: cannot reach the bootstrap root %s named by the unique id: %s (a stale id, or "
                "the process that called ncclGetUniqueId is gone?)",
                rank, rootText.c_str(), r.what.c_str());
  }
  HelloMsg hello{};
  hello.magic = kHelloMagic;
  hello.secret = l.secret;
  hello.version = bootstrapVersion();
  hello.rank = rank;
  hello.nranks = nranks;
  hello.listen = packAddr(im.listen.local());
  RootReply rep{};
  r = root.sendAll(&hello, sizeof(hello), Deadline::after(timeoutS), abortFlag);
  if (r.ok()) {
    // The root answers once every rank has joined; it alone knows who is missing (and says so after a while).
    Deadline replyBy = Deadline::after(rendezvousS > 0 ? rendezvousS + kRootReplySlackS : 0);
    SlowWait slow;
    r = waitFd(root.fd(), POLLIN, replyBy, abortFlag, "the bootstrap root " + rootText, [&]() {
      slow.check([&]() {
        return "bootstrap: " + commLabel(comm) + " has waited " + slow.elapsedText() +
               " s for the other ranks to join at the bootstrap root " + rootText +
               " (the process that called ncclGetUniqueId logs which ranks are missing)";
      });
    });
    if (r.ok()) r = root.recvAll(&rep, sizeof(rep), replyBy, abortFlag);
  }
  if (!r.ok()) {
    const char* hint = r.status == IoStatus::kEof || r.status == IoStatus::kReset
                           ? " without answering: it rejected our secret (a stale or wrong unique id?) or it failed"
                           : "";
    CHORUS_FAIL(comm, r.status == IoStatus::kAborted ? ncclInternalError : ioToNccl(r),
                "bootstrap rank %d: waiting for the bootstrap root %s: %s%s", rank, rootText.c_str(), r.what.c_str(),
                hint);
  }
  if (rep.magic != kReplyMagic) {
    CHORUS_FAIL(comm, ncclSystemError, "bootstrap rank %d: %s is not a chorus bootstrap root (bad reply)", rank,
                rootText.c_str());
  }
  if (rep.code != ncclSuccess) {
    std::string text(std::min(rep.textLen, kMaxErrorText), '\0');
    r = root.recvAll(&text[0], text.size(), Deadline::after(kForwardTimeoutS), abortFlag);
    if (!r.ok()) text = "(the root's explanation was lost: " + r.what + ")";
    ncclResult_t code =
        rep.code > 0 && rep.code < ncclNumResults ? static_cast<ncclResult_t>(rep.code) : ncclRemoteError;
    CHORUS_FAIL(comm, code, "bootstrap rank %d: %s", rank, text.c_str());
  }
  root.close();

  // Ring: connect to the successor (proving the secret), then accept the predecessor.
  if (nranks > 1) {
    int nextRank = (rank + 1) % nranks;
    SockAddr nextAddr;
    unpackAddr(rep.next, &nextAddr);
    r = Socket::connect(nextAddr, Deadline::after(timeoutS), abortFlag, &im.next);
    PeerHello ph{kPeerMagic, l.secret, rank, kConnRing};
    if (r.ok()) r = im.next.sendAll(&ph, sizeof(ph), Deadline::after(timeoutS), abortFlag);
    if (!r.ok()) {
      CHORUS_FAIL(comm, ioToNccl(r), "bootstrap rank %d: cannot connect to its ring successor rank %d at %s: %s", rank,
                  nextRank, nextAddr.str().c_str(), r.what.c_str());
    }
    im.track(im.next);
    im.addrs.resize(nranks);
    im.addrs[nextRank] = nextAddr;
    Deadline dl = Deadline::after(timeoutS);
    int prevRank = (rank + nranks - 1) % nranks;
    SlowWait slow;
    while (!im.prev.valid()) {
      r = waitFd(im.listen.fd(), POLLIN, dl, abortFlag,
                 "ring predecessor rank " + std::to_string(prevRank) + " to connect to " + im.listen.local().str(),
                 [&]() {
                   slow.check([&]() {
                     return "bootstrap: " + commLabel(comm) + " has waited " + slow.elapsedText() +
                            " s for its ring predecessor rank " + std::to_string(prevRank) + " to connect to " +
                            im.listen.local().str();
                   });
                 });
      if (!r.ok()) {
        CHORUS_FAIL(comm, r.status == IoStatus::kAborted ? ncclInternalError : ncclRemoteError, "bootstrap rank %d: %s",
                    rank, r.what.c_str());
      }
      CHORUS_CHECK(im.acceptOne("waiting for the ring predecessor"));
    }
    if (nranks > 2) im.addrs[prevRank] = im.prev.peer();  // its outgoing address: right host, for messages
  }

  // Exchange PeerInfo (and listen addresses, for point-to-point) over the ring.
  std::vector<PeerWire> all(nranks);
  PeerWire& w = all[rank];
  w.info = mine;
  w.info.rank = rank;
  w.info.version = bootstrapVersion();
  if (w.info.hostHash == 0) w.info.hostHash = localHostHash();
  if (w.info.pid == 0) w.info.pid = static_cast<uint64_t>(getpid());
  if (w.info.hostname[0] == '\0') gethostname(w.info.hostname, sizeof(w.info.hostname) - 1);
  w.info.hostname[sizeof(w.info.hostname) - 1] = '\0';
  w.listen = packAddr(im.listen.local());
  im.addrs.resize(nranks);
  im.hosts.resize(nranks);
  CHORUS_CHECK(b->allGather(all.data(), sizeof(PeerWire)));
  b->peers_.resize(nranks);
  for (int p = 0; p < nranks; p++) {
    all[p].info.hostname[sizeof(all[p].info.hostname) - 1] = '\0';
    b->peers_[p] = all[p].info;
    unpackAddr(all[p].listen, &im.addrs[p]);
    im.hosts[p] = all[p].info.hostname;
  }
  for (int p = 0; p < nranks; p++) {
    if (all[p].info.version != w.info.version) {
      CHORUS_FAIL(comm, ncclInvalidUsage,
                  "bootstrap rank %d: %s runs library version %u but rank %d runs %u; every rank must use the same "
                  "version",
                  rank, im.peerName(p).c_str(), all[p].info.version, rank, w.info.version);
    }
  }
  INFO(kBootstrap, "bootstrap rank %d/%d ready (listening on %s via %s, root %s)", rank, nranks,
       im.listen.local().str().c_str(), ifName.c_str(), rootText.c_str());
  *out = std::move(b);
  return ncclSuccess;
}

ncclResult_t Bootstrap::allGather(void* data, size_t bytesPerRank) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.ringMutex);
  CHORUS_CHECK(im.checkUsable("allGather"));
  if (im.ringErr != ncclSuccess) {
    CHORUS_FAIL(im.comm, im.ringErr, "bootstrap rank %d: allGather on a broken ring (earlier failure: %s)", rank_,
                im.ringErrText.c_str());
  }
  char* base = static_cast<char*>(data);
  SlowWait slow;
  // Step s forwards the block that originated s hops upstream; after n-1 steps every rank has all.
  for (int s = 0; s < nranks_ - 1; s++) {
    int sendIdx = (rank_ - s + nranks_) % nranks_;
    int recvIdx = (rank_ - s - 1 + nranks_) % nranks_;
    CHORUS_CHECK(im.ringStep(s, base + sendIdx * bytesPerRank, base + recvIdx * bytesPerRank, bytesPerRank,
                             "bootstrap allGather", slow));
  }
  return ncclSuccess;
}

ncclResult_t Bootstrap::barrier() {
  std::vector<char> bytes(nranks_, 0);
  return allGather(bytes.data(), 1);
}

ncclResult_t Bootstrap::send(int peer, int tag, const void* data, size_t size) {
  Impl& im = *impl_;
  CHORUS_ARG_CHECK(im.comm, peer >= 0 && peer < nranks_, "bootstrap rank %d: send to invalid peer %d (nranks %d)",
                   rank_, peer, nranks_);
  CHORUS_CHECK(im.checkUsable("send"));
  if (peer == rank_) {
    std::lock_guard<std::mutex> lock(im.recvMutex);
    const char* p = static_cast<const char*>(data);
    im.stash[{peer, tag}].emplace_back(p, p + size);
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(im.sendMutex);
  OutConn& c = im.out[peer];
  if (c.err != ncclSuccess) {
    CHORUS_FAIL(im.comm, c.err, "bootstrap rank %d: send to %s after an earlier failure: %s", rank_,
                im.peerName(peer).c_str(), c.errText.c_str());
  }
  Deadline dl = Deadline::fromEnv();
  IoResult r;
  if (!c.sock.valid()) {
    r = Socket::connect(im.addrs[peer], dl, im.abortFlag, &c.sock);
    PeerHello ph{kPeerMagic, im.secret, rank_, kConnP2p};
    if (r.ok()) {
      im.track(c.sock);
      r = c.sock.sendAll(&ph, sizeof(ph), dl, im.abortFlag);
    }
  }
  FrameHeader h{kFrameMagic, ncclSuccess, tag, 0, size};
  if (r.ok()) r = c.sock.sendAll(&h, sizeof(h), dl, im.abortFlag);
  if (r.ok()) r = c.sock.sendAll(data, size, dl, im.abortFlag);
  if (!r.ok()) {
    // The stream may hold half a message now: later sends to this peer fail with the same cause.
    c.err = ioToNccl(r);
    c.errText = r.what;
    c.sock.shutdown();
    CHORUS_FAIL(im.comm, c.err, "bootstrap rank %d: send of %zu bytes with tag %d: %s%s%s", rank_, size, tag,
                im.peerName(peer).c_str(), lostText(r), r.what.c_str());
  }
  return ncclSuccess;
}

bool Bootstrap::sendQuiet(int peer, int tag, const void* data, size_t size, double seconds, std::string* why,
                          bool abortable) {
  Impl& im = *impl_;
  if (peer < 0 || peer >= nranks_ || peer == rank_ || im.closed.load()) {
    *why = "no bootstrap to rank " + std::to_string(peer);
    return false;
  }
  std::lock_guard<std::mutex> lock(im.sendMutex);
  OutConn& c = im.out[peer];
  if (c.err != ncclSuccess) {
    *why = "an earlier send to " + im.peerName(peer) + " failed: " + c.errText;
    return false;
  }
  Deadline dl = Deadline::after(seconds);
  auto* abort = abortable ? im.abortFlag : nullptr;
  IoResult r;
  if (!c.sock.valid()) {
    r = Socket::connect(im.addrs[peer], dl, abort, &c.sock, [](int err) { return err == ECONNREFUSED; });
    PeerHello ph{kPeerMagic, im.secret, rank_, kConnP2p};
    if (r.ok()) {
      im.track(c.sock);
      r = c.sock.sendAll(&ph, sizeof(ph), dl, abort);
    }
  }
  FrameHeader h{kFrameMagic, ncclSuccess, tag, 0, size};
  if (r.ok()) r = c.sock.sendAll(&h, sizeof(h), dl, abort);
  if (r.ok()) r = c.sock.sendAll(data, size, dl, abort);
  if (!r.ok()) {
    c.err = ioToNccl(r);
    c.errText = r.what;
    c.sock.shutdown();
    *why = "send to " + im.peerName(peer) + lostText(r) + r.what;
    return false;
  }
  return true;
}

ncclResult_t Bootstrap::recv(int peer, int tag, void* data, size_t size) {
  Impl& im = *impl_;
  CHORUS_ARG_CHECK(im.comm, peer >= 0 && peer < nranks_, "bootstrap rank %d: recv from invalid peer %d (nranks %d)",
                   rank_, peer, nranks_);
  CHORUS_CHECK(im.checkUsable("recv"));
  std::lock_guard<std::mutex> lock(im.recvMutex);
  auto deliver = [&](std::vector<char>& msg) -> ncclResult_t {
    if (msg.size() != size) {
      CHORUS_FAIL(im.comm, ncclInvalidUsage,
                  "bootstrap rank %d: %s sent %zu bytes with tag %d but the receive expects %zu (mismatched calls)",
                  rank_, im.peerName(peer).c_str(), msg.size(), tag, size);
    }
    if (size > 0) memcpy(data, msg.data(), size);
    return ncclSuccess;
  };
  auto it = im.stash.find({peer, tag});
  if (it != im.stash.end() && !it->second.empty()) {
    std::vector<char> msg = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) im.stash.erase(it);
    return deliver(msg);
  }
  if (peer == rank_) {
    CHORUS_FAIL(im.comm, ncclInvalidUsage, "bootstrap rank %d: recv from itself with tag %d but nothing was sent",
                rank_, tag);
  }
  Deadline dl = Deadline::fromEnv();
  SlowWait slow;
  for (;;) {
    Socket& s = im.in[peer];
    if (s.valid()) {
      // Messages from one peer arrive in order on one connection: read headers until our tag comes.
      pollfd pf = {s.fd(), POLLIN, 0};
      if (poll(&pf, 1, 0) > 0) {
        std::string why;
        ncclResult_t rr = im.readFrame(peer, "recv of tag " + std::to_string(tag), &why);
        if (rr != ncclSuccess) CHORUS_FAIL(im.comm, rr, "%s", why.c_str());
        auto it = im.stash.find({peer, tag});
        if (it != im.stash.end() && !it->second.empty()) {
          std::vector<char> msg = std::move(it->second.front());
          it->second.pop_front();
          if (it->second.empty()) im.stash.erase(it);
          return deliver(msg);
        }
        continue;
      }
    }
    pollfd fds[2] = {{im.listen.fd(), POLLIN, 0}, {s.valid() ? s.fd() : -1, POLLIN, 0}};
    CHORUS_CHECK(im.checkUsable("recv"));
    if (dl.expired()) {
      CHORUS_FAIL(im.comm, ncclSystemError,
                  "bootstrap rank %d: timed out after %s s waiting for %s to send %zu bytes "
                  "with tag %d%s",
                  rank_, secondsText(dl.seconds()).c_str(), im.peerName(peer).c_str(), size, tag,
                  s.valid() ? "" : " (it never connected)");
    }
    slow.check([&]() {
      return "bootstrap recv on " + commLabel(im.comm) + " has waited " + slow.elapsedText() + " s for " +
             im.peerName(peer) + " to send " + std::to_string(size) + " bytes with tag " + std::to_string(tag) +
             (s.valid() ? "" : " (it has not connected yet)") + " (CHORUS_TIMEOUT_S " + secondsText(dl.seconds()) +
             " s)";
    });
    if (poll(fds, 2, std::min(kPollSliceMs, dl.remainingMs())) < 0 && errno != EINTR) {
      CHORUS_FAIL(im.comm, ncclSystemError, "bootstrap rank %d: poll failed in recv: %s", rank_, strerror(errno));
    }
    CHORUS_CHECK(im.checkUsable("recv"));  // close() wakes the poll through the listen socket
    if (fds[0].revents != 0) CHORUS_CHECK(im.acceptOne("in recv"));
  }
}

ncclResult_t Bootstrap::tryRecv(int peer, int tag, void* data, size_t size, bool* got, std::string* why) {
  Impl& im = *impl_;
  *got = false;
  // Quiet: a progress loop's failure is its caller's to report (it must not replace the communicator's error).
  if (peer < 0 || peer >= nranks_ || peer == rank_) {
    *why = "tryRecv from invalid peer " + std::to_string(peer);
    return ncclInternalError;
  }
  if (im.closed.load() || (im.abortFlag != nullptr && im.abortFlag->load() != 0)) {
    *why = "the bootstrap was closed or aborted";
    return ncclInternalError;
  }
  std::unique_lock<std::mutex> lock(im.recvMutex, std::try_to_lock);
  if (!lock.owns_lock()) return ncclSuccess;
  // Only what is here is read: the stash, then whole frames while the peer's connection is readable (bootstrap
  // frames are small, so a frame once started is read to its end under the usual deadline). Never a wait.
  pollfd lf = {im.listen.fd(), POLLIN, 0};
  if (poll(&lf, 1, 0) > 0 && im.acceptOne("in tryRecv") != ncclSuccess) {
    *why = "cannot accept a bootstrap connection";
    return ncclSystemError;
  }
  for (;;) {
    auto it = im.stash.find({peer, tag});
    if (it != im.stash.end() && !it->second.empty()) {
      std::vector<char> msg = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) im.stash.erase(it);
      if (msg.size() != size) {
        *why = "rank " + std::to_string(peer) + " sent " + std::to_string(msg.size()) + " bytes with tag " +
               std::to_string(tag) + " where " + std::to_string(size) + " were expected";
        return ncclInternalError;
      }
      if (size > 0) memcpy(data, msg.data(), size);
      *got = true;
      return ncclSuccess;
    }
    Socket& s = im.in[peer];
    pollfd pf = {s.valid() ? s.fd() : -1, POLLIN, 0};
    if (!s.valid() || poll(&pf, 1, 0) <= 0) return ncclSuccess;
    ncclResult_t rr = im.readFrame(peer, "recv of tag " + std::to_string(tag), why);
    if (rr != ncclSuccess) return rr;
  }
}

std::string Bootstrap::describePeer(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return "rank " + std::to_string(peer);
  const PeerInfo& p = peers_[peer];
  return "rank " + std::to_string(peer) + " (pid " + std::to_string(p.pid) + " on " + p.hostname + ")";
}

bool Bootstrap::peerGone(int peer, std::string* why) const {
  if (peer < 0 || peer >= nranks_ || peer == rank_ || peers_.empty()) return false;
  const PeerInfo& p = peers_[peer];
  if (p.hostHash == peers_[rank_].hostHash) {
    if (p.pid == static_cast<uint64_t>(getpid()) || !processGone(static_cast<pid_t>(p.pid))) return false;
    *why = describePeer(peer) + " exited";
    return true;
  }
  // Another host: its bootstrap listen socket lives as long as its communicator. One attempt, no retry.
  constexpr double kProbeS = 0.5;
  const SockAddr& addr = impl_->addrs[peer];
  Socket s;
  IoResult r = Socket::connect(addr, Deadline::after(kProbeS), nullptr, &s, [](int) { return true; });
  if (r.ok()) {
    PeerHello ph{kPeerMagic, impl_->secret, rank_, kConnProbe};
    size_t sent = 0;
    s.sendSome(&ph, sizeof(ph), &sent);  // a fresh socket takes 24 bytes at once; a lost probe only costs a log line
    return false;
  }
  if (r.status != IoStatus::kRefused) return false;
  *why = describePeer(peer) + " is gone (its bootstrap port " + addr.str() +
         " refuses connections too: the process exited or destroyed its communicator)";
  return true;
}

void Bootstrap::close() {
  if (!impl_) return;
  impl_->closed.store(true);
  std::lock_guard<std::mutex> lock(impl_->fdMutex);
  for (int fd : impl_->fds) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace chorus
