#include "core/socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/debug.h"
#include "core/params.h"

namespace chorus {
namespace {

StrParam kSocketIfName{"NCCL_SOCKET_IFNAME", "",
                       "Interfaces for bootstrap and socket traffic: comma-separated name prefixes; a leading ^ "
                       "excludes them, = (after any ^) requires exact names. Unset: every non-loopback interface "
                       "that is up but container bridges (docker*, virbr*), else the bridges, else loopback. The "
                       "bootstrap uses the first; the socket net offers each (up to 16) as a device.",
                       "network"};
StrParam kSocketFamily{"NCCL_SOCKET_FAMILY", "", "Address family for bootstrap and sockets: AF_INET or AF_INET6.",
                       "network"};

std::string errnoText(int err) {
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  return std::string(strerror_r(err, buf, sizeof(buf)));
}

bool aborted(std::atomic<int>* abortFlag) {
  return abortFlag != nullptr && abortFlag->load(std::memory_order_acquire) != 0;
}

IoResult fail(IoStatus status, int err, std::string what) {
  IoResult r;
  r.status = status;
  r.err = err;
  r.what = std::move(what);
  return r;
}

IntParam kSocketSndBuf{"NCCL_SOCKET_SNDBUF", -1,
                       "Above 0: the send buffer (SO_SNDBUF, bytes) of every TCP socket chorus opens (bootstrap, the "
                       "socket net's connections, the IB and UCX nets' setup sockets), set before it connects or "
                       "listens, as NCCL sets it. The kernel doubles it and caps it at net.core.wmem_max, and no "
                       "longer autotunes it. -1: the kernel's default.",
                       "network"};
IntParam kSocketRcvBuf{"NCCL_SOCKET_RCVBUF", -1,
                       "Above 0: the receive buffer (SO_RCVBUF, bytes) of every TCP socket chorus opens, as "
                       "NCCL_SOCKET_SNDBUF; set before connecting or listening, so that the TCP window can scale to "
                       "it. Capped at net.core.rmem_max. -1: the kernel's default.",
                       "network"};

// NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF on a new socket. A size the kernel refuses is not an error (it clamps).
void setBufferSizes(int fd) {
  const int64_t snd = kSocketSndBuf.get(), rcv = kSocketRcvBuf.get();
  if (snd > 0) {
    int v = static_cast<int>(std::min<int64_t>(snd, INT32_MAX));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
  }
  if (rcv > 0) {
    int v = static_cast<int>(std::min<int64_t>(rcv, INT32_MAX));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
  }
}

void setNoDelay(int fd) {
  int one = 1;
  // Bootstrap messages are small request/response exchanges: Nagle would add latency to each.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

// ---- interfaces ----------------------------------------------------------------------------

std::vector<IfAddr> listInterfaces() {
  std::vector<IfAddr> out;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (struct ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6) {
      // Link-local IPv6 needs a scope id on every peer; NCCL users expect routable addresses.
      auto* s6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;
    }
    IfAddr a;
    a.name = it->ifa_name;
    a.flags = it->ifa_flags;
    a.addr.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&a.addr.storage, it->ifa_addr, a.addr.len);
    out.push_back(a);
  }
  freeifaddrs(list);
  return out;
}

// ---- SockAddr -------------------------------------------------------------------------------

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(int p) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(static_cast<uint16_t>(p));
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(static_cast<uint16_t>(p));
}

std::string SockAddr::hostStr() const {
  char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof(host));
  } else if (family() == AF_INET6) {
    auto* s6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
    if (s6->sin6_scope_id != 0) {
      char ifn[IF_NAMESIZE] = {0};
      if (if_indextoname(s6->sin6_scope_id, ifn) != nullptr) {
        strncat(host, "%", sizeof(host) - strlen(host) - 1);
        strncat(host, ifn, sizeof(host) - strlen(host) - 1);
      }
    }
  } else {
    return "(none)";
  }
  return host;
}

std::string SockAddr::str() const {
  if (family() == AF_INET) return hostStr() + ":" + std::to_string(port());
  if (family() == AF_INET6) return "[" + hostStr() + "]:" + std::to_string(port());
  return "(none)";
}

bool SockAddr::isLoopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  return false;
}

bool SockAddr::operator==(const SockAddr& o) const {
  if (family() != o.family() || port() != o.port()) return false;
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&o.storage)->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    return memcmp(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr,
                  &reinterpret_cast<const sockaddr_in6*>(&o.storage)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return len == o.len;
}

PackedAddr packAddr(const SockAddr& a) {
  PackedAddr p;
  if (a.family() == AF_INET) {
    auto* s = reinterpret_cast<const sockaddr_in*>(&a.storage);
    p.family = 4;
    memcpy(p.addr, &s->sin_addr, 4);
  } else if (a.family() == AF_INET6) {
    auto* s = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    p.family = 6;
    p.scopeId = s->sin6_scope_id;
    memcpy(p.addr, &s->sin6_addr, 16);
  }
  p.port = static_cast<uint16_t>(a.port());
  return p;
}

bool unpackAddr(const PackedAddr& p, SockAddr* out) {
  *out = SockAddr();
  if (p.family == 4) {
    auto* s = reinterpret_cast<sockaddr_in*>(&out->storage);
    s->sin_family = AF_INET;
    memcpy(&s->sin_addr, p.addr, 4);
    out->len = sizeof(sockaddr_in);
  } else if (p.family == 6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&out->storage);
    s->sin6_family = AF_INET6;
    s->sin6_scope_id = p.scopeId;
    memcpy(&s->sin6_addr, p.addr, 16);
    out->len = sizeof(sockaddr_in6);
  } else {
    return false;
  }
  out->setPort(p.port);
  return true;
}

ncclResult_t parseAddress(const std::string& text, SockAddr* out, std::string* why) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *why = "\"" + text + "\" is not of the form [ipv6]:port";
      return ncclInvalidArgument;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || text.find(':') != colon) {
      *why = "\"" + text + "\" is not of the form host:port or [ipv6]:port";
      return ncclInvalidArgument;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    *why = "\"" + text + "\" has an invalid port \"" + port + "\"";
    return ncclInvalidArgument;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    *why = "cannot resolve \"" + host + "\" in \"" + text + "\": " + gai_strerror(rc);
    return ncclInvalidArgument;
  }
  // Prefer IPv4 when a name resolves to both, as most clusters route it.
  struct addrinfo* pick = res;
  for (struct addrinfo* it = res; it != nullptr; it = it->ai_next) {
    if (it->ai_family == AF_INET) {
      pick = it;
      break;
    }
  }
  *out = SockAddr();
  out->len = pick->ai_addrlen;
  memcpy(&out->storage, pick->ai_addr, pick->ai_addrlen);
  out->setPort(static_cast<int>(p));
  freeaddrinfo(res);
  return ncclSuccess;
}

bool ifNameMatches(const std::string& spec, const std::string& name) {
  size_t pos = 0;
  bool exclude = false, exact = false;
  if (pos < spec.size() && spec[pos] == '^') {
    exclude = true;
    pos++;
  }
  if (pos < spec.size() && spec[pos] == '=') {
    exact = true;
    pos++;
  }
  bool listed = false;
  for (std::string tok : splitList(spec.substr(pos))) {
    // NCCL allows "name:port" entries; the port part never matters for interface selection.
    size_t colon = tok.find(':');
    if (colon != std::string::npos) tok.resize(colon);
    if (!tok.empty() && (exact ? name == tok : name.compare(0, tok.size(), tok) == 0)) listed = true;
  }
  return exclude ? !listed : listed;
}

std::vector<IfAddr> selectInterfaces(const std::vector<IfAddr>& all, const std::string& spec, int family,
                                     size_t maxIfs) {
  std::vector<IfAddr> out;
  // One pass of candidates: each interface once, by its first address of the first family that has one (IPv4
  // before IPv6 when no family is forced), in discovery order within a family.
  auto pass = [&](auto accept) {
    for (int fam : {AF_INET, AF_INET6}) {
      if (family != AF_UNSPEC && fam != family) continue;
      for (const IfAddr& a : all) {
        if (out.size() >= maxIfs) return;
        if (a.addr.family() != fam || (a.flags & IFF_UP) == 0 || !accept(a)) continue;
        bool seen = false;
        for (const IfAddr& b : out) seen = seen || b.name == a.name;
        if (seen) continue;
        out.push_back(a);
        out.back().addr.setPort(0);
      }
    }
  };
  if (!spec.empty()) {
    pass([&](const IfAddr& a) { return ifNameMatches(spec, a.name); });
    return out;
  }
  // Like NCCL: real interfaces first, then container bridges, then loopback; the first pass that finds any wins.
  auto bridge = [](const IfAddr& a) { return ifNameMatches("docker,virbr", a.name); };
  pass([&](const IfAddr& a) { return (a.flags & IFF_LOOPBACK) == 0 && !bridge(a); });
  if (out.empty()) pass([&](const IfAddr& a) { return (a.flags & IFF_LOOPBACK) == 0; });
  if (out.empty()) pass([&](const IfAddr& a) { return (a.flags & IFF_LOOPBACK) != 0; });
  return out;
}

ncclResult_t findInterfaces(std::vector<IfAddr>* out, size_t maxIfs, std::string* why) {
  return findInterfaces(listInterfaces(), out, maxIfs, why);
}

ncclResult_t findInterfaces(const std::vector<IfAddr>& all, std::vector<IfAddr>* out, size_t maxIfs,
                            std::string* why) {
  std::string familyText = kSocketFamily.get();
  int family = AF_UNSPEC;
  if (familyText == "AF_INET") {
    family = AF_INET;
  } else if (familyText == "AF_INET6") {
    family = AF_INET6;
  } else if (!familyText.empty()) {
    WARN("NCCL_SOCKET_FAMILY=%s is neither AF_INET nor AF_INET6; ignoring it", familyText.c_str());
  }
  std::string spec = kSocketIfName.get();
  *out = selectInterfaces(all, spec, family, maxIfs);
  if (!out->empty()) return ncclSuccess;
  std::string names;
  for (const IfAddr& a : all) {
    if (names.find(a.name + " ") == std::string::npos && names.find(" " + a.name) == std::string::npos)
      names += (names.empty() ? "" : " ") + a.name;
  }
  *why = "no usable network interface (NCCL_SOCKET_IFNAME=\"" + spec + "\", NCCL_SOCKET_FAMILY=\"" + familyText +
         "\"; interfaces with addresses: " + (names.empty() ? "none" : names) + ")";
  return ncclSystemError;
}

ncclResult_t findInterface(SockAddr* out, std::string* ifName, std::string* why) {
  std::vector<IfAddr> found;
  ncclResult_t res = findInterfaces(&found, 1, why);
  if (res != ncclSuccess) return res;
  *out = found[0].addr;
  if (ifName != nullptr) *ifName = found[0].name;
  return ncclSuccess;
}

ncclResult_t ioToNccl(const IoResult& r) {
  switch (r.status) {
    case IoStatus::kOk:
      return ncclSuccess;
    case IoStatus::kEof:
    case IoStatus::kReset:
      return ncclRemoteError;
    case IoStatus::kAborted:
      return ncclInternalError;
    default:
      return ncclSystemError;
  }
}

const char* ioStatusName(IoStatus s) {
  switch (s) {
    case IoStatus::kOk:
      return "ok";
    case IoStatus::kEof:
      return "EOF";
    case IoStatus::kReset:
      return "reset";
    case IoStatus::kTimeout:
      return "timeout";
    case IoStatus::kAborted:
      return "aborted";
    case IoStatus::kRefused:
      return "refused";
    default:
      return "error";
  }
}

IoResult waitFd(int fd, short events, const Deadline& deadline, std::atomic<int>* abortFlag,
                const std::string& peerText, const std::function<void()>& eachSlice) {
  for (;;) {
    if (aborted(abortFlag)) return fail(IoStatus::kAborted, 0, "aborted while waiting for " + peerText);
    if (deadline.expired()) {
      char secs[32];
      snprintf(secs, sizeof(secs), "%g", deadline.seconds());
      return fail(IoStatus::kTimeout, ETIMEDOUT, "timed out after " + std::string(secs) + " s waiting for " + peerText);
    }
    struct pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, std::min(kPollSliceMs, deadline.remainingMs()));
    if (rc > 0) return IoResult();  // readiness, or an error/hangup the next send/recv reports precisely
    if (rc < 0 && errno != EINTR) return fail(IoStatus::kError, errno, "poll failed: " + errnoText(errno));
    if (eachSlice) eachSlice();
  }
}

// ---- Socket ---------------------------------------------------------------------------------

Socket::Socket(Socket&& o) noexcept : fd_(o.fd_), peer_(o.peer_), local_(o.local_) { o.fd_ = -1; }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = o.peer_;
    local_ = o.local_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::shutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

IoResult Socket::listen(const SockAddr& bindAddr, Socket* out) {
  *out = Socket();
  int fd = ::socket(bindAddr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(IoStatus::kError, errno, "socket() for " + bindAddr.str() + " failed: " + errnoText(errno));
  out->fd_ = fd;
  setBufferSizes(fd);  // accepted sockets inherit them
  int one = 1;
  // A fixed port (NCCL_COMM_ID) must be re-bindable while an earlier run's connections sit in TIME_WAIT.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&bindAddr.storage), bindAddr.len) != 0) {
    int e = errno;
    out->close();
    return fail(IoStatus::kError, e, "cannot bind " + bindAddr.str() + ": " + errnoText(e));
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    out->close();
    return fail(IoStatus::kError, e, "cannot listen on " + bindAddr.str() + ": " + errnoText(e));
  }
  out->local_.len = sizeof(out->local_.storage);
  getsockname(fd, reinterpret_cast<sockaddr*>(&out->local_.storage), &out->local_.len);
  return IoResult();
}

IoResult Socket::connect(const SockAddr& to, const Deadline& deadline, std::atomic<int>* abortFlag, Socket* out,
                         const std::function<bool(int err)>& stopRetrying) {
  *out = Socket();
  int backoffMs = 1;
  int attempts = 0;
  int lastErr = 0;
  for (;;) {
    if (aborted(abortFlag)) return fail(IoStatus::kAborted, 0, "aborted while connecting to " + to.str());
    attempts++;
    int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(IoStatus::kError, errno, "socket() to connect to " + to.str() + ": " + errnoText(errno));
    Socket s;
    s.fd_ = fd;
    s.peer_ = to;
    setBufferSizes(fd);
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&to.storage), to.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      IoResult w = waitFd(fd, POLLOUT, deadline, abortFlag, "the connection to " + to.str());
      if (w.status == IoStatus::kTimeout) {
        err = lastErr != 0 ? lastErr : ETIMEDOUT;  // report why the earlier attempts failed
      } else if (!w.ok()) {
        return w;
      } else {
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      setNoDelay(fd);
      s.local_.len = sizeof(s.local_.storage);
      getsockname(fd, reinterpret_cast<sockaddr*>(&s.local_.storage), &s.local_.len);
      *out = std::move(s);
      return IoResult();
    }
    // Refused: nobody listens yet (the root or peer may still be starting). Timed out / reset: a transient
    // overload. Both are retried; anything else (no route, bad address) will not get better.
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EAGAIN || err == EINTR;
    if (!retry) {
      return fail(IoStatus::kError, err, "cannot connect to " + to.str() + ": " + errnoText(err));
    }
    lastErr = err;
    if (stopRetrying && stopRetrying(err)) {
      return fail(err == ECONNREFUSED ? IoStatus::kRefused : IoStatus::kError, err,
                  "cannot connect to " + to.str() + ": " + errnoText(err));
    }
    if (deadline.expired() || deadline.remainingMs() == 0) {
      char secs[32];
      snprintf(secs, sizeof(secs), "%g", deadline.seconds());
      return fail(err == ECONNREFUSED ? IoStatus::kRefused : IoStatus::kTimeout, err,
                  "could not connect to " + to.str() + " within " + secs + " s (" + errnoText(err) + " after " +
                      std::to_string(attempts) + " attempts; is the process listening there still running?)");
    }
    // Exponential backoff from 1 ms to 100 ms, in slices so that the abort flag stays responsive.
    int sleep = std::min(backoffMs, deadline.remainingMs());
    sleepMs(sleep);
    backoffMs = std::min(backoffMs * 2, kPollSliceMs);
  }
}

IoResult Socket::startConnect(const SockAddr& to, Socket* out) {
  *out = Socket();
  int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(IoStatus::kError, errno, "socket() to connect to " + to.str() + ": " + errnoText(errno));
  out->fd_ = fd;
  out->peer_ = to;
  setBufferSizes(fd);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&to.storage), to.len);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    out->close();
    return fail(err == ECONNREFUSED ? IoStatus::kRefused : IoStatus::kError, err,
                "cannot connect to " + to.str() + ": " + errnoText(err));
  }
  return IoResult();
}

IoResult Socket::connected(bool* done) {
  *done = false;
  pollfd pf = {fd_, POLLOUT, 0};
  int n = ::poll(&pf, 1, 0);
  if (n < 0 && errno != EINTR) return fail(IoStatus::kError, errno, "poll on " + peer_.str() + ": " + errnoText(errno));
  if (n <= 0) return IoResult();
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0)
    return fail(err == ECONNREFUSED ? IoStatus::kRefused : IoStatus::kError, err,
                "cannot connect to " + peer_.str() + ": " + errnoText(err));
  setNoDelay(fd_);
  local_.len = sizeof(local_.storage);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&local_.storage), &local_.len);
  *done = true;
  return IoResult();
}

IoResult Socket::tryAccept(Socket* out) {
  *out = Socket();
  SockAddr from;
  from.len = sizeof(from.storage);
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&from.storage), &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return IoResult();
    return fail(IoStatus::kError, errno, "accept on " + local_.str() + " failed: " + errnoText(errno));
  }
  setNoDelay(fd);
  out->fd_ = fd;
  out->peer_ = from;
  out->local_ = local_;
  return IoResult();
}

IoResult Socket::accept(Socket* out, const Deadline& deadline, std::atomic<int>* abortFlag) {
  for (;;) {
    IoResult r = tryAccept(out);
    if (!r.ok() || out->valid()) return r;
    r = waitFd(fd_, POLLIN, deadline, abortFlag, "a connection on " + local_.str());
    if (!r.ok()) return r;
  }
}

IoResult Socket::sendv(const iovec* iov, int n, size_t* moved) {
  *moved = 0;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  for (;;) {
    ssize_t k = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      *moved = static_cast<size_t>(k);
      return IoResult();
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return IoResult();
    if (k < 0 && errno == EINTR) continue;
    int e = k < 0 ? errno : EPIPE;
    if (e == EPIPE || e == ECONNRESET) {
      return fail(IoStatus::kReset, e, "connection to " + peer_.str() + " was reset (" + errnoText(e) + ")");
    }
    return fail(IoStatus::kError, e, "send to " + peer_.str() + " failed: " + errnoText(e));
  }
}

IoResult Socket::recvv(const iovec* iov, int n, size_t* moved) {
  *moved = 0;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  for (;;) {
    ssize_t k = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (k > 0) {
      *moved = static_cast<size_t>(k);
      return IoResult();
    }
    if (k == 0) return fail(IoStatus::kEof, 0, "connection closed by " + peer_.str());
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult();
    if (errno == EINTR) continue;
    int e = errno;
    if (e == ECONNRESET || e == EPIPE) {
      return fail(IoStatus::kReset, e, "connection reset by " + peer_.str() + " (" + errnoText(e) + ")");
    }
    return fail(IoStatus::kError, e, "recv from " + peer_.str() + " failed: " + errnoText(e));
  }
}

void Socket::delayAcks() {
#ifdef TCP_QUICKACK
  int zero = 0;
  setsockopt(fd_, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof(zero));
#endif
}

IoResult Socket::sendSome(const void* data, size_t len, size_t* done) {
  while (*done < len) {
    iovec v = {const_cast<char*>(static_cast<const char*>(data)) + *done, len - *done};
    size_t k = 0;
    IoResult r = sendv(&v, 1, &k);
    if (!r.ok() || k == 0) return r;
    *done += k;
  }
  return IoResult();
}

IoResult Socket::recvSome(void* data, size_t len, size_t* done) {
  while (*done < len) {
    iovec v = {static_cast<char*>(data) + *done, len - *done};
    size_t k = 0;
    IoResult r = recvv(&v, 1, &k);
    if (r.status == IoStatus::kEof)
      r.what += " (EOF after " + std::to_string(*done) + " of " + std::to_string(len) + " bytes)";
    if (!r.ok() || k == 0) return r;
    *done += k;
  }
  return IoResult();
}

IoResult Socket::sendAll(const void* data, size_t len, const Deadline& deadline, std::atomic<int>* abortFlag) {
  size_t done = 0;
  for (;;) {
    IoResult r = sendSome(data, len, &done);
    if (!r.ok() || done == len) return r;
    r = waitFd(fd_, POLLOUT, deadline, abortFlag, "room to send to " + peer_.str());
    if (!r.ok()) return r;
  }
}

IoResult Socket::recvAll(void* data, size_t len, const Deadline& deadline, std::atomic<int>* abortFlag) {
  size_t done = 0;
  for (;;) {
    IoResult r = recvSome(data, len, &done);
    if (!r.ok() || done == len) return r;
    r = waitFd(fd_, POLLIN, deadline, abortFlag, "data from " + peer_.str());
    if (!r.ok()) return r;
  }
}

}  // namespace chorus
