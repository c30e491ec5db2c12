// Bootstrap tests with ranks as threads: rendezvous, allGather, barrier and tagged
// send/recv for several rank counts, plus the id and environment options. Failure cases
// live in bootstrap_fault_test.cc.
#include "core/bootstrap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap_internal.h"
#include "core/debug.h"
#include "core/params.h"
#include "core/socket.h"
#include "harness/ranks.h"

namespace chorus {
namespace {

using chorus_test::secondsSince;

/// What one rank thread observed.
struct RankOutcome {
  ncclResult_t result = ncclInternalError;
  std::string error;     ///< this thread's last error text when result != ncclSuccess
  std::string failedAt;  ///< which step failed
};

/// Body run by a rank after a successful create(); returns the first failure.
using RankBody = std::function<ncclResult_t(Bootstrap& b, std::string* where)>;

/// Runs `nranks` ranks on threads; each creates a bootstrap and runs `body`.
std::vector<RankOutcome> runRanks(const ncclUniqueId& id, int nranks, const RankBody& body) {
  std::vector<RankOutcome> out(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; r++) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> b;
      PeerInfo mine;
      mine.cudaDev = -1;
      out[r].result = Bootstrap::create(nullptr, id, r, nranks, mine, nullptr, &b);
      out[r].failedAt = "create";
      if (out[r].result == ncclSuccess && body) out[r].result = body(*b, &out[r].failedAt);
      if (out[r].result != ncclSuccess) out[r].error = threadLastError();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clearEnv();
    setenv("CHORUS_TIMEOUT_S", "10", 1);
    paramsReload();
  }
  void TearDown() override { clearEnv(); }
  static void clearEnv() {
    for (const char* v : {"CHORUS_TIMEOUT_S", "NCCL_COMM_ID", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY"}) unsetenv(v);
    paramsReload();
  }
};

#define CHECK_OR_RETURN(cond, what) \
  do {                              \
    if (!(cond)) {                  \
      *where = (what);              \
      return ncclInternalError;     \
    }                               \
  } while (0)

#define CALL_OR_RETURN(call, what) \
  do {                             \
    ncclResult_t res_ = (call);    \
    if (res_ != ncclSuccess) {     \
      *where = (what);             \
      return res_;                 \
    }                              \
  } while (0)

// Everything a rank can do after init, with content checks.
ncclResult_t exercise(Bootstrap& b, std::string* where) {
  int n = b.nranks(), me = b.rank();
  const auto& peers = b.peers();
  CHECK_OR_RETURN(static_cast<int>(peers.size()) == n, "peers size");
  for (int p = 0; p < n; p++) {
    CHECK_OR_RETURN(peers[p].rank == p, "peer rank");
    CHECK_OR_RETURN(peers[p].hostHash == localHostHash(), "hostHash");
    CHECK_OR_RETURN(peers[p].pid == static_cast<uint64_t>(getpid()), "pid");
    CHECK_OR_RETURN(peers[p].version == NCCL_VERSION_CODE, "version");
    CHECK_OR_RETURN(peers[p].hostname[0] != '\0', "hostname");
  }
  // Small allGather: rank r's block holds r*1000+i.
  std::vector<uint64_t> small(n * 3, 0);
  for (int i = 0; i < 3; i++) small[me * 3 + i] = me * 1000 + i;
  CALL_OR_RETURN(b.allGather(small.data(), 3 * sizeof(uint64_t)), "allGather small");
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 3; i++) CHECK_OR_RETURN(small[r * 3 + i] == static_cast<uint64_t>(r * 1000 + i), "small data");
  // Blocks larger than socket buffers: both directions of a ring step must progress together.
  size_t big = n <= 5 ? (1u << 20) : (1u << 16);
  std::vector<uint8_t> large(big * n, 0);
  for (size_t i = 0; i < big; i++) large[me * big + i] = static_cast<uint8_t>(me * 31 + i);
  CALL_OR_RETURN(b.allGather(large.data(), big), "allGather large");
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < big; i += 4099)
      CHECK_OR_RETURN(large[r * big + i] == static_cast<uint8_t>(r * 31 + i), "large data");
  CALL_OR_RETURN(b.barrier(), "barrier");
  // Point-to-point: every rank sends two tags to every rank (itself included) and receives them in the
  // opposite order, so tag 1 has to wait in the stash of unexpected messages.
  for (int p = 0; p < n; p++) {
    int v1 = me * 100 + p, v2 = -(me * 100 + p);
    CALL_OR_RETURN(b.send(p, 1, &v1, sizeof(v1)), "send tag 1");
    CALL_OR_RETURN(b.send(p, 2, &v2, sizeof(v2)), "send tag 2");
  }
  for (int k = 0; k < n; k++) {
    int p = (me + k) % n;
    int v1 = 0, v2 = 0;
    CALL_OR_RETURN(b.recv(p, 2, &v2, sizeof(v2)), "recv tag 2");
    CALL_OR_RETURN(b.recv(p, 1, &v1, sizeof(v1)), "recv tag 1");
    CHECK_OR_RETURN(v1 == p * 100 + me && v2 == -(p * 100 + me), "p2p data");
  }
  CALL_OR_RETURN(b.barrier(), "final barrier");
  return ncclSuccess;
}

class BootstrapRanks : public BootstrapTest, public ::testing::WithParamInterface<int> {};

TEST_P(BootstrapRanks, RendezvousAllGatherBarrierSendRecv) {
  int n = GetParam();
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess) << threadLastError();
  auto out = runRanks(id, n, exercise);
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(out[r].result, ncclSuccess) << "rank " << r << " failed at " << out[r].failedAt << ": " << out[r].error;
  }
}

INSTANTIATE_TEST_SUITE_P(RankCounts, BootstrapRanks, ::testing::Values(1, 2, 5, 16));

TEST_F(BootstrapTest, UniqueIdDescribesItsRoot) {
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  UniqueIdLayout l;
  std::string why;
  ASSERT_TRUE(decodeUniqueId(id, &l, &why)) << why;
  EXPECT_EQ(l.version, static_cast<uint32_t>(NCCL_VERSION_CODE));
  SockAddr root;
  ASSERT_TRUE(unpackAddr(l.root, &root));
  EXPECT_EQ(uniqueIdDescribe(id), root.str());
  EXPECT_NE(root.port(), 0);
  ncclUniqueId other;
  ASSERT_EQ(bootstrapGetUniqueId(&other), ncclSuccess);
  UniqueIdLayout l2;
  ASSERT_TRUE(decodeUniqueId(other, &l2, &why));
  EXPECT_NE(l.secret, l2.secret) << "secrets must be random";
  memset(&other, 0, sizeof(other));
  EXPECT_NE(uniqueIdDescribe(other).find("invalid unique id"), std::string::npos);
  // Finish the first rendezvous so its root thread exits.
  auto out = runRanks(id, 1, nullptr);
  EXPECT_EQ(out[0].result, ncclSuccess) << out[0].error;
}

TEST_F(BootstrapTest, HostHashIncludesNetworkNamespace) {
  uint64_t h = localHostHash();
  EXPECT_NE(h, 0u);
  EXPECT_EQ(h, localHostHash());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  EXPECT_NE(h, fnv1a64(host, strlen(host))) << "the namespace must be part of the hash";
}

TEST_F(BootstrapTest, HostIdOverridesTheHostHash) {
  uint64_t own = localHostHash();
  setenv("NCCL_HOSTID", "rack3-node7", 1);
  paramsReload();
  uint64_t a = localHostHash();
  setenv("NCCL_HOSTID", "rack3-node8", 1);
  paramsReload();
  uint64_t b = localHostHash();
  unsetenv("NCCL_HOSTID");
  paramsReload();
  EXPECT_NE(a, own);
  EXPECT_NE(a, b);
  EXPECT_EQ(localHostHash(), own);
}

TEST_F(BootstrapTest, LoopbackInterfaceByName) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  paramsReload();
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess) << threadLastError();
  EXPECT_EQ(uniqueIdDescribe(id).rfind("127.0.0.1:", 0), 0u) << uniqueIdDescribe(id);
  auto out = runRanks(id, 3, exercise);
  for (int r = 0; r < 3; r++) EXPECT_EQ(out[r].result, ncclSuccess) << out[r].failedAt << ": " << out[r].error;
}

TEST_F(BootstrapTest, Ipv6Family) {
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  paramsReload();
  SockAddr probe;
  std::string why;
  if (findInterface(&probe, nullptr, &why) != ncclSuccess) GTEST_SKIP() << "no IPv6 interface: " << why;
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess) << threadLastError();
  EXPECT_EQ(uniqueIdDescribe(id)[0], '[') << uniqueIdDescribe(id);
  auto out = runRanks(id, 2, exercise);
  for (int r = 0; r < 2; r++) EXPECT_EQ(out[r].result, ncclSuccess) << out[r].failedAt << ": " << out[r].error;
}

TEST_F(BootstrapTest, CommIdFixesTheRootAddress) {
  int port;
  {
    Socket probe;
    SockAddr lo;
    std::string why;
    ASSERT_EQ(parseAddress("127.0.0.1:0", &lo, &why), ncclSuccess);
    ASSERT_TRUE(Socket::listen(lo, &probe).ok());
    port = probe.local().port();
  }
  std::string addr = "127.0.0.1:" + std::to_string(port);
  setenv("NCCL_COMM_ID", addr.c_str(), 1);
  paramsReload();
  ncclUniqueId id, again;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess) << threadLastError();
  ASSERT_EQ(bootstrapGetUniqueId(&again), ncclSuccess);
  EXPECT_EQ(uniqueIdDescribe(id), addr);
  EXPECT_EQ(memcmp(&id, &again, sizeof(id)), 0) << "an NCCL_COMM_ID id is the same in every process";
  // Rank 0 hosts the root; run twice to show the fixed port can be bound again.
  for (int round = 0; round < 2; round++) {
    auto out = runRanks(id, 3, exercise);
    for (int r = 0; r < 3; r++) EXPECT_EQ(out[r].result, ncclSuccess) << out[r].failedAt << ": " << out[r].error;
  }
  // Ranks may also pass an all-zero id and take the address from NCCL_COMM_ID.
  ncclUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  auto out = runRanks(zero, 2, exercise);
  for (int r = 0; r < 2; r++) EXPECT_EQ(out[r].result, ncclSuccess) << out[r].failedAt << ": " << out[r].error;
}

TEST_F(BootstrapTest, TimedOutRecvNamesThePeer) {
  setenv("CHORUS_TIMEOUT_S", "1", 1);
  paramsReload();
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  std::atomic<int> doneRecv{0};
  auto out = runRanks(id, 2, [&](Bootstrap& b, std::string* where) -> ncclResult_t {
    if (b.rank() == 0) {
      while (doneRecv.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return ncclSuccess;
    }
    int v;
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t res = b.recv(0, 9, &v, sizeof(v));
    double took = secondsSince(t0);
    doneRecv.store(1);
    *where = "recv took " + std::to_string(took) + " s";
    return took < 3.0 ? res : ncclInternalError;
  });
  EXPECT_EQ(out[0].result, ncclSuccess);
  EXPECT_EQ(out[1].result, ncclSystemError) << out[1].failedAt;
  EXPECT_NE(out[1].error.find("timed out"), std::string::npos) << out[1].error;
  EXPECT_NE(out[1].error.find("rank 0"), std::string::npos) << out[1].error;
  EXPECT_NE(out[1].error.find("tag 9"), std::string::npos) << out[1].error;
}

TEST_F(BootstrapTest, MismatchedSizesFailClearly) {
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  std::vector<std::string> p2pErr(2), agErr(2);
  std::vector<ncclResult_t> p2pRes(2, ncclSuccess), agRes(2, ncclSuccess);
  auto out = runRanks(id, 2, [&](Bootstrap& b, std::string* where) -> ncclResult_t {
    int me = b.rank();
    if (me == 0) {
      uint64_t v = 7;
      p2pRes[0] = b.send(1, 3, &v, sizeof(v));
    } else {
      uint32_t v;
      p2pRes[1] = b.recv(0, 3, &v, sizeof(v));
      p2pErr[1] = threadLastError();
    }
    std::vector<char> buf(2 * (me + 1) * 8);
    agRes[me] = b.allGather(buf.data(), (me + 1) * 8);
    agErr[me] = threadLastError();
    return ncclSuccess;
  });
  EXPECT_EQ(p2pRes[0], ncclSuccess);
  EXPECT_EQ(p2pRes[1], ncclInvalidUsage);
  EXPECT_NE(p2pErr[1].find("sent 8 bytes with tag 3"), std::string::npos) << p2pErr[1];
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(agRes[r], ncclInvalidUsage) << "rank " << r << ": " << agErr[r];
    EXPECT_NE(agErr[r].find("mismatched bootstrap calls"), std::string::npos) << agErr[r];
  }
}

TEST_F(BootstrapTest, CloseWakesABlockedRecv) {
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  std::atomic<int> released{0};
  auto out = runRanks(id, 2, [&](Bootstrap& b, std::string* where) -> ncclResult_t {
    if (b.rank() == 0) {
      while (released.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return ncclSuccess;
    }
    std::thread closer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      b.close();
    });
    int v;
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t res = b.recv(0, 1, &v, sizeof(v));
    double took = secondsSince(t0);
    closer.join();
    released.store(1);
    *where = "recv after close took " + std::to_string(took) + " s";
    if (res == ncclSuccess || took > 1.5) return ncclInternalError;
    return b.barrier() == ncclSuccess ? ncclInternalError : res;  // later calls fail too
  });
  EXPECT_EQ(out[0].result, ncclSuccess);
  EXPECT_EQ(out[1].result, ncclInvalidUsage) << out[1].failedAt << ": " << out[1].error;
  EXPECT_NE(out[1].error.find("closed"), std::string::npos) << out[1].error;
}

}  // namespace
}  // namespace chorus
