// The socket net (transports/socket/socket_net.*) through its ncclNet_v11_t table, both ends in this process over
// loopback: one socket per connection and striped over data sockets and helper threads (NCCL_SOCKET_NTHREADS x
// NCCL_NSOCKS_PERTHREAD), the chunk layout, what a stranger on the listen port gets, and how failures surface.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/net.h"
#include "core/debug.h"
#include "core/params.h"
#include "transports/net/net.h"
#include "transports/socket/socket_net.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kDeadline{20};

const ncclNet_v11_t* net() { return socketNet(); }

/// Sets the striping for the contexts made in its scope.
struct Striping {
  Striping(int threads, int perThread) {
    setenv("NCCL_SOCKET_NTHREADS", std::to_string(threads).c_str(), 1);
    setenv("NCCL_NSOCKS_PERTHREAD", std::to_string(perThread).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    paramsReload();
  }
  ~Striping() {
    unsetenv("NCCL_SOCKET_NTHREADS");
    unsetenv("NCCL_NSOCKS_PERTHREAD");
    unsetenv("NCCL_SOCKET_IFNAME");
    paramsReload();
  }
};

struct NetCtx {
  void* ctx = nullptr;
  NetCtx() { EXPECT_EQ(net()->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess); }
  ~NetCtx() {
    if (ctx != nullptr) {
      EXPECT_EQ(net()->finalize(ctx), ncclSuccess);
    }
  }
};

struct Conn {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ~Conn() {
    if (send != nullptr) net()->closeSend(send);
    if (recv != nullptr) net()->closeRecv(recv);
    if (listen != nullptr) net()->closeListen(listen);
  }
};

/// Polls connect (from context `from`, to c's handle) and accept (on c's listen comm) until both comms exist.
void finishConnect(void* from, Conn* c) {
  auto end = Clock::now() + kDeadline;
  while ((c->send == nullptr || c->recv == nullptr) && Clock::now() < end) {
    if (c->send == nullptr) {
      ASSERT_EQ(net()->connect(from, 0, c->handle, &c->send, nullptr), ncclSuccess) << threadLastError();
    }
    if (c->recv == nullptr) {
      ASSERT_EQ(net()->accept(c->listen, &c->recv, nullptr), ncclSuccess) << threadLastError();
    }
  }
  ASSERT_NE(c->send, nullptr) << "connect did not finish in time";
  ASSERT_NE(c->recv, nullptr) << "accept did not finish in time";
}

void connectPair(NetCtx& from, NetCtx& to, Conn* c) {
  ASSERT_EQ(net()->listen(to.ctx, 0, c->handle, &c->listen), ncclSuccess);
  finishConnect(from.ctx, c);
}

/// Tests `req` until it is done (true, *size set) or fails (false, *rc set) or the deadline passes (false). A net moves
/// data only when its requests are tested (NCCL's contract): the requests in `others` (the other end's sends) are
/// tested meanwhile too, each set to null once done.
bool waitReq(void* req, int* size, ncclResult_t* rc, std::vector<void*>* others = nullptr) {
  auto end = Clock::now() + kDeadline;
  while (Clock::now() < end) {
    int done = 0;
    *rc = net()->test(req, &done, size);
    if (*rc != ncclSuccess) return false;
    if (done) return true;
    for (size_t i = 0; others != nullptr && i < others->size(); i++) {
      void*& o = (*others)[i];
      if (o == nullptr) continue;
      int oDone = 0, oSize = 0;
      if (net()->test(o, &oDone, &oSize) != ncclSuccess) return false;
      if (oDone) o = nullptr;
    }
    sched_yield();
  }
  return false;
}

/// Posts a receive into *in and a send of `out` on c, and waits for both.
void transfer(const Conn& c, std::vector<char>& out, std::vector<char>* in) {
  void* data = in->data();
  size_t cap = in->size();
  int tag = 0;
  void *rr = nullptr, *sr = nullptr;
  ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
  ASSERT_EQ(net()->isend(c.send, out.data(), out.size(), 0, nullptr, nullptr, &sr), ncclSuccess);
  int size = -1;
  ncclResult_t rc = ncclSuccess;
  ASSERT_TRUE(waitReq(rr, &size, &rc)) << threadLastError();
  ASSERT_TRUE(waitReq(sr, &size, &rc)) << threadLastError();
}

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

TEST(SocketNetLayout, DataSocketsFollowNcclLimits) {
  int threads = -1;
  EXPECT_EQ(socknet::dataSockets(1, 1, &threads), 0);  // one socket, sent inline
  EXPECT_EQ(threads, 0);
  EXPECT_EQ(socknet::dataSockets(0, 0, &threads), 0);  // no threads, or no sockets a thread: one socket, as NCCL
  EXPECT_EQ(socknet::dataSockets(0, 4, &threads), 0);
  EXPECT_EQ(socknet::dataSockets(4, 0, &threads), 0);
  EXPECT_EQ(threads, 0);
  EXPECT_EQ(socknet::dataSockets(2, 2, &threads), 4);
  EXPECT_EQ(threads, 2);
  EXPECT_EQ(socknet::dataSockets(1, 8, &threads), 8);
  EXPECT_EQ(threads, 1);
  EXPECT_EQ(socknet::dataSockets(16, 64, &threads), 64);  // at most 64 sockets
  EXPECT_EQ(threads, 16);
  EXPECT_EQ(socknet::dataSockets(32, 1, &threads), 16);  // at most 16 threads
}

// NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD default to -2, which takes NCCL's choice for the interface's PCI
// vendor: AWS's ENA 2 threads x 8 sockets, Google's gVNIC 4 x 1, any other NIC (or none known) one socket. A value
// that is set wins for its own setting only, as in NCCL.
TEST(SocketNetLayout, StripingFollowsNcclsChoiceForTheNic) {
  struct Case {
    const char* vendor;
    int64_t nThreads, nPerThread;
    int threads, perThread;
    const char* nic;
  };
  for (const Case& k :
       {Case{"0x1d0f", -2, -2, 2, 8, "AWS ENA"}, Case{"0x1ae0", -2, -2, 4, 1, "Google gVNIC"},
        Case{"0x1af4", -2, -2, 0, 1, nullptr}, Case{"", -2, -2, 0, 1, nullptr}, Case{"0x1d0f", 4, -2, 4, 8, "AWS ENA"},
        Case{"0x1d0f", -2, 1, 2, 1, "AWS ENA"}, Case{"0x1d0f", 1, 1, 1, 1, nullptr},
        Case{"0x8086", 2, 2, 2, 2, nullptr}, Case{"0x8086", -2, 4, 0, 4, nullptr}}) {
    SCOPED_TRACE(std::string("vendor '") + k.vendor + "', " + std::to_string(k.nThreads) + " x " +
                 std::to_string(k.nPerThread));
    int threads = -1, perThread = -1;
    const char* nic = socknet::socketStriping(k.vendor, k.nThreads, k.nPerThread, &threads, &perThread);
    EXPECT_EQ(threads, k.threads);
    EXPECT_EQ(perThread, k.perThread);
    EXPECT_EQ(nic == nullptr ? std::string("none") : std::string(nic), k.nic == nullptr ? "none" : k.nic);
  }
  // What a connection then gets: AWS's choice is 16 data sockets moved by 2 helpers; another NIC's, one socket.
  int threads = 0, perThread = 0, helpers = 0;
  socknet::socketStriping("0x1d0f", -2, -2, &threads, &perThread);
  EXPECT_EQ(socknet::dataSockets(threads, perThread, &helpers), 16);
  EXPECT_EQ(helpers, 2);
  socknet::socketStriping("0x1af4", -2, -2, &threads, &perThread);
  EXPECT_EQ(socknet::dataSockets(threads, perThread, &helpers), 0);
  EXPECT_EQ(helpers, 0);
}

TEST(SocketNetLayout, ChunksAreAtLeast64KBAndSplitEvenly) {
  EXPECT_EQ(socknet::chunkBytes(1, 4), socknet::kMinChunk);
  EXPECT_EQ(socknet::chunkBytes(100000, 4), socknet::kMinChunk);
  EXPECT_EQ(socknet::chunkBytes(1 << 20, 4), size_t{1} << 18);
  EXPECT_EQ(socknet::chunkBytes((1 << 20) + 1, 4), (size_t{1} << 18) + 4096);  // rounded up to 4 KB
}

class SocketNetStriping : public testing::TestWithParam<std::pair<int, int>> {};

// Messages of every awkward size, several in flight at once, arrive whole and in order.
TEST_P(SocketNetStriping, MessagesArriveWholeAndInOrder) {
  Striping s(GetParam().first, GetParam().second);
  NetCtx a, b;
  Conn c;
  connectPair(a, b, &c);
  void* mh = nullptr;
  ASSERT_EQ(net()->regMr(c.send, nullptr, 0, NCCL_PTR_HOST, &mh), ncclSuccess);
  const std::vector<size_t> sizes = {0, 1, 4095, 65536, 65537, 1 << 20, 3 * (1 << 20) + 7, 200000, 5};
  constexpr size_t kInFlight = 4;
  std::vector<std::vector<char>> sent, got;
  for (size_t i = 0; i < sizes.size(); i++) {
    sent.push_back(pattern(sizes[i], static_cast<int>(i)));
    got.push_back(std::vector<char>(sizes[i] + 100, 0));  // receives posted larger than the message
  }
  for (size_t base = 0; base < sizes.size(); base += kInFlight) {
    std::vector<void*> sreq, rreq;
    for (size_t i = base; i < std::min(sizes.size(), base + kInFlight); i++) {
      void* r = nullptr;
      void* data = got[i].data();
      size_t cap = got[i].size();
      int tag = 7;
      ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, &mh, nullptr, &r), ncclSuccess);
      ASSERT_NE(r, nullptr);
      rreq.push_back(r);
      ASSERT_EQ(net()->isend(c.send, sent[i].data(), sizes[i], 7, mh, nullptr, &r), ncclSuccess);
      ASSERT_NE(r, nullptr);
      sreq.push_back(r);
    }
    // Receives are tested newest first, as nothing says a net's requests are tested in order.
    for (size_t k = rreq.size(); k-- > 0;) {
      int size = -1;
      ncclResult_t rc = ncclSuccess;
      ASSERT_TRUE(waitReq(rreq[k], &size, &rc, &sreq)) << ncclGetErrorString(rc) << ": " << threadLastError();
      EXPECT_EQ(size, static_cast<int>(sizes[base + k]));
      if (sizes[base + k] > 0) {
        EXPECT_EQ(0, memcmp(got[base + k].data(), sent[base + k].data(), sizes[base + k])) << "message " << base + k;
      }
    }
    for (void* r : sreq) {
      if (r == nullptr) continue;  // completed while the receives were waited for
      int size = -1;
      ncclResult_t rc = ncclSuccess;
      ASSERT_TRUE(waitReq(r, &size, &rc)) << threadLastError();
    }
  }
}

// The receiver's striping decides the data sockets (they travel in the handle); a sender whose own setting differs
// still moves them, with helpers of its own count.
TEST(SocketNet, SenderAndReceiverMayStripeDifferently) {
  void* senderCtx = nullptr;
  {
    Striping s(1, 1);
    ASSERT_EQ(net()->init(&senderCtx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  }
  Striping s(2, 3);
  NetCtx b;
  Conn c;
  ASSERT_EQ(net()->listen(b.ctx, 0, c.handle, &c.listen), ncclSuccess);
  ASSERT_NO_FATAL_FAILURE(finishConnect(senderCtx, &c));
  std::vector<char> out = pattern(2 << 20, 9), in(2 << 20);
  ASSERT_NO_FATAL_FAILURE(transfer(c, out, &in));
  EXPECT_EQ(in, out);
  EXPECT_EQ(net()->closeSend(c.send), ncclSuccess);
  c.send = nullptr;
  EXPECT_EQ(net()->finalize(senderCtx), ncclSuccess);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SocketNetStriping,
                         testing::Values(std::make_pair(1, 1), std::make_pair(2, 2), std::make_pair(1, 3)),
                         [](const testing::TestParamInfo<std::pair<int, int>>& p) {
                           return std::to_string(p.param.first) + "x" + std::to_string(p.param.second);
                         });

// A stranger that connects to the listen port and sends garbage is refused; the real sender still gets through.
TEST(SocketNet, GarbageOnTheListenPortIsRefused) {
  Striping s(1, 1);
  NetCtx a, b;
  Conn c;
  ASSERT_EQ(net()->listen(b.ctx, 0, c.handle, &c.listen), ncclSuccess);
  socknet::Handle h;
  memcpy(&h, c.handle, sizeof(h));
  SockAddr to;
  ASSERT_TRUE(unpackAddr(h.addr, &to));
  int fd = ::socket(to.family(), SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&to.storage), to.len), 0);
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";  // longer than a hello
  static_assert(sizeof(garbage) > sizeof(socknet::Hello), "the listener must have a whole hello to refuse");
  ASSERT_EQ(::send(fd, garbage, sizeof(garbage), 0), static_cast<ssize_t>(sizeof(garbage)));
  // The listener reads the garbage as a hello, refuses it and closes: the stranger sees EOF.
  auto end = Clock::now() + kDeadline;
  char byte;
  ssize_t n = 1;
  int err = 0;
  while (Clock::now() < end) {
    ASSERT_EQ(net()->accept(c.listen, &c.recv, nullptr), ncclSuccess);
    ASSERT_EQ(c.recv, nullptr) << "a stranger's connection became a comm";
    pollfd pf = {fd, POLLIN, 0};
    if (::poll(&pf, 1, 10) == 1) {
      n = ::recv(fd, &byte, 1, 0);
      err = errno;
      break;
    }
  }
  // Closed: EOF, or a reset when the garbage was longer than a hello (the listener closed with bytes unread).
  EXPECT_TRUE(n == 0 || (n < 0 && err == ECONNRESET)) << "the refused stranger's socket was not closed: " << n;
  ::close(fd);
  ASSERT_NO_FATAL_FAILURE(finishConnect(a.ctx, &c));
}

TEST(SocketNet, HandleOfAnotherNetIsRefused) {
  Striping s(1, 1);
  NetCtx a;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  memset(handle, 0x5a, sizeof(handle));
  void* send = nullptr;
  EXPECT_EQ(net()->connect(a.ctx, 0, handle, &send, nullptr), ncclInvalidArgument);
  EXPECT_EQ(send, nullptr);
  EXPECT_NE(std::string(threadLastError()).find("not a socket-net handle"), std::string::npos) << threadLastError();
}

// A message larger than the receive posted for it fails the receive, naming both sizes.
TEST(SocketNet, MessageLargerThanTheReceiveFails) {
  Striping s(1, 1);
  NetCtx a, b;
  Conn c;
  connectPair(a, b, &c);
  std::vector<char> out(5000, 1), in(4000);
  void *sr = nullptr, *rr = nullptr;
  void* data = in.data();
  size_t cap = in.size();
  int tag = 0;
  ASSERT_EQ(net()->isend(c.send, out.data(), out.size(), 0, nullptr, nullptr, &sr), ncclSuccess);
  ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
  int size = -1;
  ncclResult_t rc = ncclSuccess;
  EXPECT_FALSE(waitReq(rr, &size, &rc));
  EXPECT_EQ(rc, ncclRemoteError);
  std::string why = threadLastError();
  EXPECT_NE(why.find("5000 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("4000 bytes"), std::string::npos) << why;
}

/// Runs body(c) on a fresh connection c, once with one socket a connection and once striped (2 x 1).
template <class Body>
void inEachLayout(Body body) {
  for (auto layout : {std::make_pair(1, 1), std::make_pair(2, 1)}) {
    SCOPED_TRACE(std::to_string(layout.first) + "x" + std::to_string(layout.second));
    Striping s(layout.first, layout.second);
    NetCtx a, b;
    Conn c;
    connectPair(a, b, &c);
    body(c);
  }
}

/// A receive posted on c (whose sender closed) fails, saying the connection was closed.
void expectClosed(const Conn& c, int tag) {
  std::vector<char> in(64);
  void* data = in.data();
  size_t cap = in.size();
  void* rr = nullptr;
  ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
  int size = -1;
  ncclResult_t rc = ncclSuccess;
  EXPECT_FALSE(waitReq(rr, &size, &rc));
  EXPECT_EQ(rc, ncclRemoteError);
  EXPECT_NE(std::string(threadLastError()).find("closed"), std::string::npos) << threadLastError();
}

// A sender that closes after its last message: that message is received whole; the next receive fails, saying the
// connection was closed.
TEST(SocketNet, ReceiveAfterThePeerClosedFails) {
  inEachLayout([](Conn& c) {
    std::vector<char> out = pattern(300000, 3), in(300000);
    void* sr = nullptr;
    ASSERT_EQ(net()->isend(c.send, out.data(), out.size(), 0, nullptr, nullptr, &sr), ncclSuccess);
    int size = -1;
    ncclResult_t rc = ncclSuccess;
    ASSERT_TRUE(waitReq(sr, &size, &rc));
    ASSERT_EQ(net()->closeSend(c.send), ncclSuccess);
    c.send = nullptr;
    void* data = in.data();
    size_t cap = in.size();
    int tag = 0;
    void* rr = nullptr;
    ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
    ASSERT_TRUE(waitReq(rr, &size, &rc)) << threadLastError();
    EXPECT_EQ(size, 300000);
    EXPECT_EQ(in, out);
    expectClosed(c, 0);
  });
}

// Messages sent back to back before any receive is posted (so one read of the control socket brings several, and the
// bytes past the receive being filled wait in the comm's stage) arrive whole and in order: receives posted one at a
// time, each larger than its message, around the stage's size and beyond it; then the sender's close is reported.
TEST(SocketNet, MessagesThatArrivedBeforeTheirReceivesAreTakenInOrder) {
  inEachLayout([](Conn& c) {
    const size_t st = socknet::kStageBytes;
    const std::vector<size_t> sizes = {0, 5, 32, 4096, st - 16, st, st + 1, 12000, 1, 40};
    std::vector<std::vector<char>> sent;
    std::vector<void*> sreq;
    for (size_t i = 0; i < sizes.size(); i++) {
      sent.push_back(pattern(sizes[i], static_cast<int>(i) + 20));
      void* r = nullptr;
      ASSERT_EQ(net()->isend(c.send, sent[i].data(), sizes[i], 3, nullptr, nullptr, &r), ncclSuccess);
      ASSERT_NE(r, nullptr);
      sreq.push_back(r);
    }
    for (void* r : sreq) {  // about 40 KB: the loopback socket's buffers hold it all
      int size = -1;
      ncclResult_t rc = ncclSuccess;
      ASSERT_TRUE(waitReq(r, &size, &rc)) << threadLastError();
    }
    ASSERT_EQ(net()->closeSend(c.send), ncclSuccess);
    c.send = nullptr;
    for (size_t i = 0; i < sizes.size(); i++) {
      std::vector<char> in(sizes[i] + 64, 0);
      void* data = in.data();
      size_t cap = in.size();
      int tag = 3;
      void* rr = nullptr;
      ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
      int size = -1;
      ncclResult_t rc = ncclSuccess;
      ASSERT_TRUE(waitReq(rr, &size, &rc)) << "message " << i << ": " << threadLastError();
      ASSERT_EQ(size, static_cast<int>(sizes[i])) << "message " << i;
      EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), in.begin())) << "message " << i;
      EXPECT_TRUE(std::all_of(in.begin() + sizes[i], in.end(), [](char x) { return x == 0; }))
          << "message " << i << ": bytes written past its end";
    }
    expectClosed(c, 3);
  });
}

/// Whether the kernel acknowledges each segment on fd at once (TCP_QUICKACK reads 1) or may hold ACKs back (0).
int quickAcks(int fd) {
  int v = -1;
  socklen_t len = sizeof(v);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &v, &len), 0);
  return v;
}

// The receiving end of a connection never sends data, so no reply can carry its ACKs: it asks the kernel to hold them
// back (CHORUS_SOCKET_DELAYED_ACKS, on by default) when a read first brings bytes. One small message, sent in one
// segment: the first read acknowledges it before delayed ACKs are set, so no held ACK's timer can undo them.
TEST(SocketNet, ReceivingEndHoldsItsAcksBack) {
  const NetProgressHooks* hooks = socketNetHooks();
  ASSERT_NE(hooks, nullptr);
  for (const char* setting : {"1", "0"}) {
    SCOPED_TRACE(std::string("CHORUS_SOCKET_DELAYED_ACKS=") + setting);
    setenv("CHORUS_SOCKET_DELAYED_ACKS", setting, 1);
    Striping s(1, 1);
    NetCtx a, b;
    unsetenv("CHORUS_SOCKET_DELAYED_ACKS");
    paramsReload();
    Conn c;
    connectPair(a, b, &c);
    std::vector<char> in(64), out = pattern(40, 1);
    void* data = in.data();
    size_t cap = in.size();
    int tag = 0;
    void *rr = nullptr, *sr = nullptr;
    ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
    pollfd fds[8];
    ASSERT_EQ(hooks->pollFds(b.ctx, fds, 8), 1);  // the receive comm's control socket
    EXPECT_EQ(quickAcks(fds[0].fd), 1);            // the kernel's default
    ASSERT_EQ(net()->isend(c.send, out.data(), out.size(), 0, nullptr, nullptr, &sr), ncclSuccess);
    int size = -1;
    ncclResult_t rc = ncclSuccess;
    ASSERT_TRUE(waitReq(rr, &size, &rc)) << threadLastError();
    ASSERT_TRUE(waitReq(sr, &size, &rc)) << threadLastError();
    ASSERT_EQ(size, 40);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin()));
    EXPECT_EQ(quickAcks(fds[0].fd), std::string(setting) == "1" ? 0 : 1);
  }
}

/// The one socket a context waits on (a single receive pending in it): "local port > peer port".
std::string waitedEnds(void* ctx) {
  pollfd fds[8];
  EXPECT_EQ(socketNetHooks()->pollFds(ctx, fds, 8), 1);
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  EXPECT_EQ(getsockname(fds[0].fd, reinterpret_cast<sockaddr*>(&local), &ll), 0);
  EXPECT_EQ(getpeername(fds[0].fd, reinterpret_cast<sockaddr*>(&peer), &pl), 0);
  auto port = [](const sockaddr_storage& a) {
    return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(a).sin6_port
                                         : reinterpret_cast<const sockaddr_in&>(a).sin_port);
  };
  return std::to_string(port(local)) + ">" + std::to_string(port(peer));
}

// A connection from b back to a, where a already sends to b over one socket, runs over that socket
// (CHORUS_SOCKET_TWO_WAY, on by default): each end then waits on the same TCP connection. Messages go both ways at
// once and arrive whole and in order; b closing its send comm ends a's receives cleanly while a's sends to b go on.
TEST(SocketNet, AConnectionBackToItsSenderSharesItsSocket) {
  for (const char* setting : {"1", "0"}) {
    SCOPED_TRACE(std::string("CHORUS_SOCKET_TWO_WAY=") + setting);
    const bool twoWay = std::string(setting) == "1";
    setenv("CHORUS_SOCKET_TWO_WAY", setting, 1);
    Striping s(1, 1);
    NetCtx a, b;
    unsetenv("CHORUS_SOCKET_TWO_WAY");
    paramsReload();
    Conn ab, ba;
    connectPair(a, b, &ab);  // a sends to b
    connectPair(b, a, &ba);  // b sends to a
    const std::vector<size_t> sizes = {40, 0, socknet::kStageBytes + 1, 5, 100000};
    for (size_t i = 0; i < sizes.size(); i++) {
      std::vector<char> toB = pattern(sizes[i], static_cast<int>(i)), toA = pattern(sizes[i], static_cast<int>(i) + 50);
      std::vector<char> inB(sizes[i] + 8, 0), inA(sizes[i] + 8, 0);
      void *dB = inB.data(), *dA = inA.data();
      size_t capB = inB.size(), capA = inA.size();
      int tag = 1;
      void *rB = nullptr, *rA = nullptr, *sB = nullptr, *sA = nullptr;
      ASSERT_EQ(net()->irecv(ab.recv, 1, &dB, &capB, &tag, nullptr, nullptr, &rB), ncclSuccess);
      ASSERT_EQ(net()->irecv(ba.recv, 1, &dA, &capA, &tag, nullptr, nullptr, &rA), ncclSuccess);
      if (i == 0) {
        const std::string inBEnds = waitedEnds(b.ctx), inAEnds = waitedEnds(a.ctx);
        const std::string flipped = inAEnds.substr(inAEnds.find('>') + 1) + ">" + inAEnds.substr(0, inAEnds.find('>'));
        EXPECT_EQ(inBEnds == flipped, twoWay) << "b receives on " << inBEnds << ", a on " << inAEnds;
      }
      ASSERT_EQ(net()->isend(ab.send, toB.data(), sizes[i], 1, nullptr, nullptr, &sB), ncclSuccess);
      ASSERT_EQ(net()->isend(ba.send, toA.data(), sizes[i], 1, nullptr, nullptr, &sA), ncclSuccess);
      std::vector<void*> sends = {sB, sA, rA};
      int size = -1;
      ncclResult_t rc = ncclSuccess;
      ASSERT_TRUE(waitReq(rB, &size, &rc, &sends)) << "message " << i << ": " << threadLastError();
      EXPECT_EQ(size, static_cast<int>(sizes[i]));
      for (void* r : sends) {
        if (r == nullptr) continue;
        ASSERT_TRUE(waitReq(r, &size, &rc)) << "message " << i << ": " << threadLastError();
      }
      EXPECT_TRUE(std::equal(toB.begin(), toB.end(), inB.begin())) << "message " << i;
      EXPECT_TRUE(std::equal(toA.begin(), toA.end(), inA.begin())) << "message " << i;
    }
    ASSERT_EQ(net()->closeSend(ba.send), ncclSuccess);
    ba.send = nullptr;
    expectClosed(ba, 1);
    std::vector<char> out = pattern(3000, 9), in(3000);
    ASSERT_NO_FATAL_FAILURE(transfer(ab, out, &in));
    EXPECT_EQ(in, out);
  }
}

// NetProgressHooks::recvEmptied, once a receive completed: whether the control socket's last read left it empty and
// nothing staged (the proxy then leaves the next receive's test, a read that would find nothing, to its next step).
// And a read that came back short ends only that test's reading: a message sent after it still arrives.
TEST(SocketNet, SaysWhetherItsLastReadLeftNothing) {
  const NetProgressHooks* hooks = socketNetHooks();
  ASSERT_NE(hooks->recvEmptied, nullptr);
  Striping s(1, 1);
  NetCtx a, b;
  Conn c;
  connectPair(a, b, &c);
  // Three messages of 6000 bytes in the socket (about 18 KB: loopback's buffers hold them) and one receive: its read
  // fills what it asked for and the stage (kStageBytes), so more waits in the socket.
  const size_t n = 6000;
  ASSERT_GT(2 * n, socknet::kStageBytes);
  std::vector<std::vector<char>> sent;
  std::vector<void*> sreq;
  for (int i = 0; i < 3; i++) {
    sent.push_back(pattern(n, i + 40));
    void* r = nullptr;
    ASSERT_EQ(net()->isend(c.send, sent[i].data(), n, 0, nullptr, nullptr, &r), ncclSuccess);
    ASSERT_NE(r, nullptr);
    sreq.push_back(r);
  }
  int size = -1;
  ncclResult_t rc = ncclSuccess;
  for (void* r : sreq) ASSERT_TRUE(waitReq(r, &size, &rc)) << threadLastError();
  auto post = [&](std::vector<char>* in) {
    void* data = in->data();
    size_t cap = in->size();
    int tag = 0;
    void* rr = nullptr;
    EXPECT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
    return rr;
  };
  std::vector<std::vector<char>> in(3, std::vector<char>(n));
  void* r0 = post(&in[0]);
  ASSERT_TRUE(waitReq(r0, &size, &rc)) << threadLastError();
  EXPECT_EQ(in[0], sent[0]);
  EXPECT_EQ(hooks->recvEmptied(c.recv), 0);  // staged bytes, and the socket not read to its end
  // The other two: the read that takes the rest comes back short.
  void* r1 = post(&in[1]);
  void* r2 = post(&in[2]);
  ASSERT_TRUE(waitReq(r1, &size, &rc)) << threadLastError();
  ASSERT_TRUE(waitReq(r2, &size, &rc)) << threadLastError();
  EXPECT_EQ(in[1], sent[1]);
  EXPECT_EQ(in[2], sent[2]);
  EXPECT_EQ(hooks->recvEmptied(c.recv), 1);
  // A receive posted now, tested before its message is sent (the read finds nothing), then after.
  std::vector<char> late(64), out = pattern(40, 3);
  void* rl = post(&late);
  int done = 0;
  ASSERT_EQ(net()->test(rl, &done, &size), ncclSuccess);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(hooks->recvEmptied(c.recv), 1);
  void* sl = nullptr;
  ASSERT_EQ(net()->isend(c.send, out.data(), out.size(), 0, nullptr, nullptr, &sl), ncclSuccess);
  ASSERT_TRUE(waitReq(rl, &size, &rc)) << threadLastError();
  ASSERT_TRUE(waitReq(sl, &size, &rc)) << threadLastError();
  EXPECT_EQ(size, 40);
  EXPECT_TRUE(std::equal(out.begin(), out.end(), late.begin()));
}

// The hooks that let an idle proxy sleep: a pending receive names its socket, which becomes readable when data comes;
// a striped message's last chunk calls the waker.
TEST(SocketNet, HooksWakeAnIdleProxy) {
  const NetProgressHooks* hooks = socketNetHooks();
  ASSERT_NE(hooks, nullptr);
  {
    Striping s(1, 1);
    NetCtx a, b;
    Conn c;
    connectPair(a, b, &c);
    pollfd fds[8];
    EXPECT_EQ(hooks->pollFds(b.ctx, fds, 8), 0);  // nothing pending
    std::vector<char> in(1000), out(1000, 9);
    void* data = in.data();
    size_t cap = in.size();
    int tag = 0;
    void *rr = nullptr, *sr = nullptr;
    ASSERT_EQ(net()->irecv(c.recv, 1, &data, &cap, &tag, nullptr, nullptr, &rr), ncclSuccess);
    ASSERT_EQ(hooks->pollFds(b.ctx, fds, 8), 1);
    EXPECT_EQ(fds[0].events, POLLIN);
    EXPECT_EQ(::poll(fds, 1, 0), 0);  // nothing sent yet
    ASSERT_EQ(net()->isend(c.send, out.data(), out.size(), 0, nullptr, nullptr, &sr), ncclSuccess);
    EXPECT_EQ(::poll(fds, 1, 5000), 1);
    int size = -1;
    ncclResult_t rc = ncclSuccess;
    ASSERT_TRUE(waitReq(rr, &size, &rc));
    ASSERT_TRUE(waitReq(sr, &size, &rc));
    EXPECT_EQ(hooks->pollFds(b.ctx, fds, 8), 0);
  }
  {
    Striping s(2, 1);
    NetCtx a, b;
    static std::atomic<int> wakes{0};
    wakes = 0;
    hooks->setWaker(
        b.ctx, [](void*) { wakes++; }, nullptr);
    Conn c;
    connectPair(a, b, &c);
    std::vector<char> in(1 << 20), out = pattern(1 << 20, 5);
    ASSERT_NO_FATAL_FAILURE(transfer(c, out, &in));
    EXPECT_EQ(in, out);
    EXPECT_GE(wakes.load(), 1);
  }
}

}  // namespace
}  // namespace chorus
