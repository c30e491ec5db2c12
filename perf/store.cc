// The perf tools' TCP store: a star of TCP connections around process 0, used for the unique id, barriers and
// result aggregation when MPI is not there. Process 0 listens; every other process connects (retrying until
// a deadline while process 0 is not up yet), proves the job's token and its place, and from then on each
// allgather is one message up to process 0 and the concatenation back. Waits use poll() with deadlines; a
// closed connection is reported at once with the peer's process index.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include "perf/launch.h"

namespace chorus {
namespace perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'C', 'H', 'R', 'S', 'T', 'O', 'R', '1'};
constexpr uint32_t kMaxToken = 256;

struct Hello {
  char magic[8];
  int32_t nprocs;
  int32_t proc;
  uint32_t tokenLen;
};

int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000 * 1000));
}

// Waits for fd to become readable (or writable); false on timeout.
bool waitFd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, msLeft(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// 0 on success, else an errno-like code (ETIMEDOUT, ECONNRESET for EOF).
int recvAll(int fd, void* buf, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    if (!waitFd(fd, POLLIN, deadline)) return ETIMEDOUT;
    ssize_t r = recv(fd, p, n, 0);
    if (r == 0) return ECONNRESET;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return 0;
}

int sendAll(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return 0;
}

std::string errText(int e) { return e == ECONNRESET ? "connection closed" : std::strerror(e); }

class StoreControl : public Control {
 public:
  StoreControl(const LaunchInfo& info, int opTimeoutS) : info_(info), opTimeoutS_(opTimeoutS) {}
  ~StoreControl() override {
    for (int fd : peers_)
      if (fd >= 0) close(fd);
    if (listenFd_ >= 0) close(listenFd_);
  }

  int proc() const override { return info_.proc; }
  int nprocs() const override { return info_.nprocs; }
  std::string describe() const override {
    return "TCP store " + info_.storeHost + ":" + std::to_string(info_.storePort) + " (" + info_.storeOrigin + ")";
  }

  bool serve(int connectTimeoutS, std::string* err);
  bool join(int connectTimeoutS, std::string* err);
  bool allgather(const void* in, size_t len, void* out) override;

 private:
  bool fail(int peer, const char* what, int e) {
    std::fprintf(stderr, "perf store: process %d: %s process %d failed: %s (did that process fail?)\n", info_.proc,
                 what, peer, errText(e).c_str());
    return false;
  }
  Clock::time_point opDeadline() const { return Clock::now() + std::chrono::seconds(opTimeoutS_); }

  LaunchInfo info_;
  int opTimeoutS_;
  int listenFd_ = -1;
  std::vector<int> peers_;  // process 0: one connection per process (index 0 unused); others: [0] = process 0
};

bool StoreControl::serve(int connectTimeoutS, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  // Listen on the wildcard of the address family the others will use to reach us.
  int family = AF_INET;
  if (getaddrinfo(info_.storeHost.c_str(), nullptr, &hints, &res) == 0 && res != nullptr) family = res->ai_family;
  if (res) freeaddrinfo(res);
  listenFd_ = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage addr{};
  socklen_t addrLen;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(static_cast<uint16_t>(info_.storePort));
    addrLen = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(static_cast<uint16_t>(info_.storePort));
    addrLen = sizeof(*a);
  }
  if (listenFd_ < 0 || bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), addrLen) != 0 ||
      listen(listenFd_, info_.nprocs) != 0) {
    *err = "process 0 cannot listen on port " + std::to_string(info_.storePort) + " (" + info_.storeOrigin +
           "): " + std::strerror(errno) + "; pick another with MASTER_PORT or CHORUS_STORE_ADDR";
    return false;
  }
  peers_.assign(static_cast<size_t>(info_.nprocs), -1);
  auto deadline = Clock::now() + std::chrono::seconds(connectTimeoutS);
  int joined = 1;
  while (joined < info_.nprocs) {
    if (!waitFd(listenFd_, POLLIN, deadline)) {
      std::string missing;
      for (int p = 1; p < info_.nprocs; p++)
        if (peers_[p] < 0) missing += (missing.empty() ? "" : ",") + std::to_string(p);
      *err = "process 0: processes " + missing + " did not reach the store at port " + std::to_string(info_.storePort) +
             " within " + std::to_string(connectTimeoutS) + " s";
      return false;
    }
    int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A stranger (port scanner, stale job) is dropped quietly; a wrong job or duplicate gets told why.
    Hello h{};
    auto helloDeadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (recvAll(fd, &h, sizeof(h), helloDeadline) != 0 || std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 ||
        h.tokenLen > kMaxToken) {
      close(fd);
      continue;
    }
    std::string token(h.tokenLen, '\0');
    if (h.tokenLen > 0 && recvAll(fd, &token[0], h.tokenLen, helloDeadline) != 0) {
      close(fd);
      continue;
    }
    std::string why;
    if (token != info_.token) {
      why = "wrong CHORUS_STORE_TOKEN (another job's process?)";
    } else if (h.nprocs != info_.nprocs) {
      why = "it counts " + std::to_string(h.nprocs) + " processes, process 0 counts " + std::to_string(info_.nprocs);
    } else if (h.proc <= 0 || h.proc >= info_.nprocs || peers_[h.proc] >= 0) {
      why = "process index " + std::to_string(h.proc) + " is out of range or already taken";
    }
    int32_t status = why.empty() ? 0 : 1;
    uint32_t whyLen = static_cast<uint32_t>(why.size());
    sendAll(fd, &status, sizeof(status));
    sendAll(fd, &whyLen, sizeof(whyLen));
    sendAll(fd, why.data(), why.size());
    if (status != 0) {
      std::fprintf(stderr, "perf store: process 0 refused a connection: %s\n", why.c_str());
      close(fd);
      continue;
    }
    peers_[h.proc] = fd;
    joined++;
  }
  return true;
}

bool StoreControl::join(int connectTimeoutS, std::string* err) {
  auto deadline = Clock::now() + std::chrono::seconds(connectTimeoutS);
  std::string port = std::to_string(info_.storePort);
  std::string last = "no attempt";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int g = getaddrinfo(info_.storeHost.c_str(), port.c_str(), &hints, &res);
    if (g != 0) {
      last = std::string("cannot resolve ") + info_.storeHost + ": " + gai_strerror(g);
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        int e = r == 0 ? 0 : errno;
        if (e == EINPROGRESS) {
          // Bounded wait so an unreachable host cannot hold us past the deadline.
          auto step = std::min(deadline, Clock::now() + std::chrono::seconds(2));
          e = ETIMEDOUT;
          if (waitFd(fd, POLLOUT, step)) {
            socklen_t len = sizeof(e);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
          }
        }
        if (e != 0) {
          last = std::string("connect: ") + std::strerror(e);
          close(fd);
          continue;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        Hello h{};
        std::memcpy(h.magic, kMagic, sizeof(kMagic));
        h.nprocs = info_.nprocs;
        h.proc = info_.proc;
        h.tokenLen = static_cast<uint32_t>(std::min<size_t>(info_.token.size(), kMaxToken));
        int32_t status = -1;
        uint32_t whyLen = 0;
        auto replyDeadline = Clock::now() + std::chrono::seconds(std::max(connectTimeoutS, 30));
        if (sendAll(fd, &h, sizeof(h)) != 0 || sendAll(fd, info_.token.data(), h.tokenLen) != 0 ||
            recvAll(fd, &status, sizeof(status), replyDeadline) != 0 ||
            recvAll(fd, &whyLen, sizeof(whyLen), replyDeadline) != 0 || whyLen > 4096) {
          last = "the listener at that port did not answer as a perf store";
          close(fd);
          continue;
        }
        std::string why(whyLen, '\0');
        if (whyLen > 0) recvAll(fd, &why[0], whyLen, replyDeadline);
        if (status != 0) {
          close(fd);
          *err = "process " + std::to_string(info_.proc) + ": the store refused us: " + why;
          freeaddrinfo(res);
          return false;
        }
        freeaddrinfo(res);
        peers_.assign(1, fd);
        return true;
      }
      freeaddrinfo(res);
    }
    if (Clock::now() >= deadline) break;
    // Process 0 may not listen yet: retry a few times a second, sleeping in between.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *err = "process " + std::to_string(info_.proc) + " could not reach the store at " + info_.storeHost + ":" + port +
         " (" + info_.storeOrigin + ") within " + std::to_string(connectTimeoutS) + " s: " + last;
  return false;
}

bool StoreControl::allgather(const void* in, size_t len, void* out) {
  auto deadline = opDeadline();
  uint64_t len64 = len;
  if (info_.proc != 0) {
    int e = sendAll(peers_[0], &len64, sizeof(len64));
    if (e == 0) e = sendAll(peers_[0], in, len);
    if (e != 0) return fail(0, "sending to", e);
    e = recvAll(peers_[0], out, len * static_cast<size_t>(info_.nprocs), deadline);
    return e == 0 ? true : fail(0, "receiving from", e);
  }
  char* o = static_cast<char*>(out);
  std::memcpy(o, in, len);
  for (int p = 1; p < info_.nprocs; p++) {
    uint64_t theirs = 0;
    int e = recvAll(peers_[p], &theirs, sizeof(theirs), deadline);
    if (e == 0 && theirs != len64) {
      std::fprintf(stderr, "perf store: process %d sent %llu bytes where process 0 expected %llu (mismatched calls)\n",
                   p, static_cast<unsigned long long>(theirs), static_cast<unsigned long long>(len64));
      return false;
    }
    if (e == 0) e = recvAll(peers_[p], o + static_cast<size_t>(p) * len, len, deadline);
    if (e != 0) return fail(p, "receiving from", e);
  }
  for (int p = 1; p < info_.nprocs; p++) {
    int e = sendAll(peers_[p], o, len * static_cast<size_t>(info_.nprocs));
    if (e != 0) return fail(p, "sending to", e);
  }
  return true;
}

}  // namespace

std::unique_ptr<Control> makeStoreControl(const LaunchInfo& info, int connectTimeoutS, int opTimeoutS,
                                          std::string* err) {
  auto c = std::make_unique<StoreControl>(info, opTimeoutS);
  bool ok = info.proc == 0 ? c->serve(connectTimeoutS, err) : c->join(connectTimeoutS, err);
  if (!ok) return nullptr;
  return c;
}

}  // namespace perf
}  // namespace chorus
