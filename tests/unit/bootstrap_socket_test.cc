// Unit tests of the TCP helpers under the bootstrap (src/core/socket.h): address parsing and
// formatting, interface selection, and the distinct failure results of connect/send/recv.
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "core/params.h"
#include "core/socket.h"
#include "harness/ranks.h"

namespace chorus {
namespace {

using chorus_test::secondsSince;

SockAddr loopback(int port = 0) {
  SockAddr a;
  std::string why;
  EXPECT_EQ(parseAddress("127.0.0.1:" + std::to_string(port), &a, &why), ncclSuccess) << why;
  return a;
}

// A port on which nothing listens (bound once, then released).
int unusedPort() {
  Socket s;
  EXPECT_TRUE(Socket::listen(loopback(), &s).ok());
  return s.local().port();
}

// A connected pair on loopback: `client` connected to `server`.
void connectedPair(Socket* client, Socket* server) {
  Socket listener;
  ASSERT_TRUE(Socket::listen(loopback(), &listener).ok());
  ASSERT_TRUE(Socket::connect(listener.local(), Deadline::after(5), nullptr, client).ok());
  ASSERT_TRUE(listener.accept(server, Deadline::after(5), nullptr).ok());
}

class SocketEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clearEnv(); }
  void TearDown() override { clearEnv(); }
  static void clearEnv() {
    unsetenv("NCCL_SOCKET_IFNAME");
    unsetenv("NCCL_SOCKET_FAMILY");
    unsetenv("NCCL_SOCKET_SNDBUF");
    unsetenv("NCCL_SOCKET_RCVBUF");
    paramsReload();
  }
};

TEST(BootstrapSocket, ParsesAndFormatsIpv4) {
  SockAddr a;
  std::string why;
  ASSERT_EQ(parseAddress("10.1.2.3:4567", &a, &why), ncclSuccess) << why;
  EXPECT_EQ(a.family(), AF_INET);
  EXPECT_EQ(a.port(), 4567);
  EXPECT_EQ(a.str(), "10.1.2.3:4567");
  EXPECT_EQ(a.hostStr(), "10.1.2.3");
  EXPECT_FALSE(a.isLoopback());
  EXPECT_TRUE(loopback(1).isLoopback());
}

TEST(BootstrapSocket, ParsesAndFormatsIpv6) {
  SockAddr a;
  std::string why;
  ASSERT_EQ(parseAddress("[::1]:8080", &a, &why), ncclSuccess) << why;
  EXPECT_EQ(a.family(), AF_INET6);
  EXPECT_EQ(a.port(), 8080);
  EXPECT_EQ(a.str(), "[::1]:8080");
  EXPECT_TRUE(a.isLoopback());
  ASSERT_EQ(parseAddress("[fd00::2]:1", &a, &why), ncclSuccess) << why;
  EXPECT_EQ(a.str(), "[fd00::2]:1");
}

TEST(BootstrapSocket, ResolvesHostNames) {
  SockAddr a;
  std::string why;
  ASSERT_EQ(parseAddress("localhost:99", &a, &why), ncclSuccess) << why;
  EXPECT_EQ(a.port(), 99);
  EXPECT_TRUE(a.isLoopback());
}

TEST(BootstrapSocket, RejectsMalformedAddresses) {
  SockAddr a;
  for (const char* bad : {"nonsense", "1.2.3.4:99999", "1.2.3.4:", "[::1]80", ":5", "::1:5", "1.2.3.4:x"}) {
    std::string why;
    EXPECT_EQ(parseAddress(bad, &a, &why), ncclInvalidArgument) << bad;
    EXPECT_NE(why.find(bad), std::string::npos) << why;
  }
}

TEST(BootstrapSocket, PackedAddressRoundTrips) {
  for (const char* text : {"192.0.2.7:1234", "[fd00::9]:65535"}) {
    SockAddr a, b;
    std::string why;
    ASSERT_EQ(parseAddress(text, &a, &why), ncclSuccess);
    ASSERT_TRUE(unpackAddr(packAddr(a), &b));
    EXPECT_TRUE(a == b) << text;
    EXPECT_EQ(b.str(), text);
  }
  PackedAddr junk;
  junk.family = 9;
  SockAddr c;
  EXPECT_FALSE(unpackAddr(junk, &c));
}

TEST(BootstrapSocket, IfNameSyntaxFollowsNccl) {
  struct Case {
    const char* spec;
    const char* name;
    bool match;
  } cases[] = {
      {"eth", "eth0", true},        {"eth", "ib0", false},     {"^eth", "eth0", false},     {"^eth", "ib0", true},
      {"=eth0", "eth0", true},      {"=eth0", "eth01", false}, {"eth,ib", "ib1", true},     {"eth,ib", "lo", false},
      {"^=eth0", "eth0", false},    {"^=eth0", "eth01", true}, {"eth0:1234", "eth0", true}, {"^docker,lo", "lo", false},
      {"^docker,lo", "eth0", true}, {"", "eth0", false},       {"lo, eth", "eth0", true},   {"^lo,,", "lo", false},
  };
  for (const Case& c : cases) EXPECT_EQ(ifNameMatches(c.spec, c.name), c.match) << c.spec << " vs " << c.name;
}

// An interface address as getifaddrs would list it.
IfAddr ifAddr(const std::string& name, const std::string& addr, unsigned flags = IFF_UP) {
  IfAddr a;
  a.name = name;
  a.flags = flags;
  std::string why;
  EXPECT_EQ(parseAddress(addr, &a.addr, &why), ncclSuccess) << why;
  return a;
}

std::string names(const std::vector<IfAddr>& v) {
  std::string out;
  for (const IfAddr& a : v) out += (out.empty() ? "" : " ") + a.name + "=" + a.addr.str();
  return out;
}

// The socket net offers every interface selectInterfaces returns as a device, as NCCL's does.
TEST(BootstrapSocket, SelectsEveryInterfaceOnceAsNcclFindsThem) {
  const std::vector<IfAddr> host = {
      ifAddr("lo", "127.0.0.1:0", IFF_UP | IFF_LOOPBACK),
      ifAddr("eth0", "10.0.0.5:0"),
      ifAddr("docker0", "172.17.0.1:0"),
      ifAddr("eth0", "[fd00::5]:0"),    // a second address of eth0: eth0 stays one device, by its IPv4 address
      ifAddr("ib0", "[fd01::7]:0"),     // IPv6 only: after the IPv4 interfaces
      ifAddr("eth1", "10.1.0.5:0"),
      ifAddr("eth2", "10.2.0.5:0", 0),  // down
  };
  EXPECT_EQ(names(selectInterfaces(host, "", AF_UNSPEC, 16)),
            "eth0=10.0.0.5:0 eth1=10.1.0.5:0 ib0=[fd01::7]:0");
  EXPECT_EQ(names(selectInterfaces(host, "", AF_UNSPEC, 2)), "eth0=10.0.0.5:0 eth1=10.1.0.5:0");
  EXPECT_EQ(names(selectInterfaces(host, "", AF_UNSPEC, 1)), "eth0=10.0.0.5:0");
  EXPECT_EQ(names(selectInterfaces(host, "", AF_INET6, 16)), "eth0=[fd00::5]:0 ib0=[fd01::7]:0");
  EXPECT_EQ(names(selectInterfaces(host, "eth", AF_UNSPEC, 16)), "eth0=10.0.0.5:0 eth1=10.1.0.5:0");
  EXPECT_EQ(names(selectInterfaces(host, "=eth1,ib0", AF_UNSPEC, 16)), "eth1=10.1.0.5:0 ib0=[fd01::7]:0");
  // Set, the list is the only filter, loopback and bridges included (NCCL's "^" lists do the same).
  EXPECT_EQ(names(selectInterfaces(host, "^eth", AF_UNSPEC, 16)),
            "lo=127.0.0.1:0 docker0=172.17.0.1:0 ib0=[fd01::7]:0");
  EXPECT_TRUE(selectInterfaces(host, "=eth2", AF_UNSPEC, 16).empty());
  // Unset, bridges only when nothing else is up, then loopback.
  const std::vector<IfAddr> bridged = {ifAddr("lo", "127.0.0.1:0", IFF_UP | IFF_LOOPBACK),
                                       ifAddr("virbr0", "192.168.122.1:0"), ifAddr("docker0", "172.17.0.1:0")};
  EXPECT_EQ(names(selectInterfaces(bridged, "", AF_UNSPEC, 16)), "virbr0=192.168.122.1:0 docker0=172.17.0.1:0");
  EXPECT_EQ(names(selectInterfaces({bridged[0]}, "", AF_UNSPEC, 16)), "lo=127.0.0.1:0");
}

TEST_F(SocketEnvTest, FindsAnInterfaceByDefault) {
  SockAddr a;
  std::string name, why;
  ASSERT_EQ(findInterface(&a, &name, &why), ncclSuccess) << why;
  EXPECT_TRUE(a.family() == AF_INET || a.family() == AF_INET6);
  EXPECT_FALSE(name.empty());
  EXPECT_EQ(a.port(), 0);
}

TEST_F(SocketEnvTest, HonoursIfNameAndFamily) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_SOCKET_FAMILY", "AF_INET", 1);
  paramsReload();
  SockAddr a;
  std::string name, why;
  ASSERT_EQ(findInterface(&a, &name, &why), ncclSuccess) << why;
  EXPECT_EQ(name, "lo");
  EXPECT_EQ(a.str(), "127.0.0.1:0");

  setenv("NCCL_SOCKET_IFNAME", "=nosuchif0", 1);
  paramsReload();
  EXPECT_EQ(findInterface(&a, &name, &why), ncclSystemError);
  EXPECT_NE(why.find("=nosuchif0"), std::string::npos) << why;
}

// The socket buffer sizes of a connected socket, as getsockopt reports them (the kernel's doubled value).
std::pair<int, int> bufferSizes(const Socket& s) {
  int snd = 0, rcv = 0;
  socklen_t len = sizeof(int);
  EXPECT_EQ(getsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &snd, &len), 0);
  len = sizeof(int);
  EXPECT_EQ(getsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &rcv, &len), 0);
  return {snd, rcv};
}

// NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF size both ends of a connection, the connecting one (blocking and
// non-blocking connects) and the accepted one; unset, the kernel's defaults stay. Linux reports twice what was set.
TEST_F(SocketEnvTest, SocketBufferSizesFollowSndbufAndRcvbuf) {
  Socket a, b;
  connectedPair(&a, &b);
  const std::pair<int, int> defaults = bufferSizes(a);
  setenv("NCCL_SOCKET_SNDBUF", "65536", 1);
  setenv("NCCL_SOCKET_RCVBUF", "98304", 1);
  paramsReload();
  Socket c, d;
  connectedPair(&c, &d);
  for (const Socket* s : {&c, &d}) {
    EXPECT_EQ(bufferSizes(*s), std::make_pair(2 * 65536, 2 * 98304));
  }
  Socket listener, e, f;
  ASSERT_TRUE(Socket::listen(loopback(), &listener).ok());
  ASSERT_TRUE(Socket::startConnect(listener.local(), &e).ok());
  ASSERT_TRUE(listener.accept(&f, Deadline::after(5), nullptr).ok());
  EXPECT_EQ(bufferSizes(e), std::make_pair(2 * 65536, 2 * 98304));
  EXPECT_EQ(bufferSizes(f), std::make_pair(2 * 65536, 2 * 98304));
  EXPECT_NE(defaults, std::make_pair(2 * 65536, 2 * 98304));
}

TEST(BootstrapSocket, RefusedConnectRetriesUntilDeadline) {
  SockAddr to = loopback(unusedPort());
  Socket s;
  auto t0 = std::chrono::steady_clock::now();
  IoResult r = Socket::connect(to, Deadline::after(0.4), nullptr, &s);
  double took = secondsSince(t0);
  EXPECT_EQ(r.status, IoStatus::kRefused) << r.what;
  EXPECT_NE(r.what.find(to.str()), std::string::npos) << r.what;
  EXPECT_GE(took, 0.35);
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(ioToNccl(r), ncclSystemError);
}

TEST(BootstrapSocket, ConnectHonoursAbortFlag) {
  std::atomic<int> abortFlag{1};
  Socket s;
  IoResult r = Socket::connect(loopback(unusedPort()), Deadline::after(10), &abortFlag, &s);
  EXPECT_EQ(r.status, IoStatus::kAborted);
  EXPECT_EQ(ioToNccl(r), ncclInternalError);
}

TEST(BootstrapSocket, MovesLargeBuffersBothWays) {
  Socket a, b;
  connectedPair(&a, &b);
  std::vector<char> out(8 << 20), in(out.size());
  for (size_t i = 0; i < out.size(); i++) out[i] = static_cast<char>(i * 7 + 3);
  IoResult sent;
  std::thread t([&] { sent = a.sendAll(out.data(), out.size(), Deadline::after(10), nullptr); });
  IoResult got = b.recvAll(in.data(), in.size(), Deadline::after(10), nullptr);
  t.join();
  EXPECT_TRUE(sent.ok()) << sent.what;
  EXPECT_TRUE(got.ok()) << got.what;
  EXPECT_TRUE(in == out);
}

TEST(BootstrapSocket, EofResetTimeoutAndAbortAreDistinct) {
  {
    Socket a, b;
    connectedPair(&a, &b);
    std::string peer = b.peer().str();
    a.close();
    char buf[4];
    IoResult r = b.recvAll(buf, sizeof(buf), Deadline::after(5), nullptr);
    EXPECT_EQ(r.status, IoStatus::kEof) << r.what;
    EXPECT_NE(r.what.find(peer), std::string::npos) << r.what;
    EXPECT_EQ(ioToNccl(r), ncclRemoteError);
  }
  {
    Socket a, b;
    connectedPair(&a, &b);
    struct linger lg = {1, 0};  // close() then sends RST instead of FIN
    setsockopt(a.fd(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    a.close();
    char buf[4];
    IoResult r = b.recvAll(buf, sizeof(buf), Deadline::after(5), nullptr);
    EXPECT_EQ(r.status, IoStatus::kReset) << r.what;
    EXPECT_EQ(ioToNccl(r), ncclRemoteError);
  }
  {
    Socket a, b;
    connectedPair(&a, &b);
    char buf[4];
    auto t0 = std::chrono::steady_clock::now();
    IoResult r = b.recvAll(buf, sizeof(buf), Deadline::after(0.3), nullptr);
    EXPECT_EQ(r.status, IoStatus::kTimeout) << r.what;
    EXPECT_NE(r.what.find(b.peer().str()), std::string::npos) << r.what;
    EXPECT_LT(secondsSince(t0), 1.5);
  }
  {
    Socket a, b;
    connectedPair(&a, &b);
    std::atomic<int> abortFlag{0};
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      abortFlag.store(1);
    });
    char buf[4];
    auto t0 = std::chrono::steady_clock::now();
    IoResult r = b.recvAll(buf, sizeof(buf), Deadline::after(30), &abortFlag);
    t.join();
    EXPECT_EQ(r.status, IoStatus::kAborted) << r.what;
    EXPECT_LT(secondsSince(t0), 1.0);
  }
}

TEST(BootstrapSocket, ShutdownWakesABlockedReceiver) {
  Socket a, b;
  connectedPair(&a, &b);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b.shutdown();
  });
  char buf[4];
  auto t0 = std::chrono::steady_clock::now();
  IoResult r = b.recvAll(buf, sizeof(buf), Deadline::after(30), nullptr);
  t.join();
  EXPECT_FALSE(r.ok());
  EXPECT_LT(secondsSince(t0), 1.0);
}

}  // namespace
}  // namespace chorus
