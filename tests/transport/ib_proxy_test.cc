// chorus's IB net through the net proxy, as communicators use it on a cluster, over the fake verbs
// (tests/transport/ib_fake_net.h): thread ranks on one fake fabric, with NCCL_SHM_DISABLE=1 and NCCL_NET=IB. The
// transport suite runs every collective this way; these tests check what is the IB net's own: how a slot is framed
// on the wire, data split over several queue pairs and ports, a failed RDMA write or a dead HCA ending every rank's
// call, and failure notices (a mismatch's, an aborted rank's).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"
#include "transport/ib_fake_net.h"
#include "transport/transport_env.h"
#include "transports/net/net.h"

namespace chorus_test {
namespace {

constexpr uint32_t kSlotHeaderBytes = 32;  // a FIFO slot's header (transports/net/net_proxy.cc)

class IbProxy : public testing::Test {
 protected:
  /// Over `ports` fake ports (HCAs mlx5_0, mlx5_1...), of one NIC with `oneNic`.
  explicit IbProxy(int ports = 1, bool oneNic = false) : ib_(ports, oneNic) {}
  void SetUp() override {
    if (chorus::ibNet() == nullptr) GTEST_SKIP() << "chorus was built without verbs";
    ASSERT_TRUE(ib_.ok()) << ib_.why();
    env_.select(Transport::kIbFake);
    // The tests count writes and queue pair classes on the fabric: the settings that shape them start at their
    // defaults, whatever the caller's environment says.
    for (const char* name : {"NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_ADAPTIVE_ROUTING",
                             "NCCL_IB_AR_THRESHOLD", "NCCL_IB_USE_INLINE", "NCCL_IB_FIFO_TC", "NCCL_IB_TC",
                             "NCCL_IB_SL", "CHORUS_NET_SLOT_TRAILER", "NCCL_NET_MERGE_LEVEL", "NCCL_NET_FORCE_MERGE"})
      env_.unset(name);
  }
  void TearDown() override {
    if (IsSkipped()) return;
    // Every communicator is gone: their proxies closed every queue pair and released every registration.
    EXPECT_EQ(ib_.fabric().liveQps(), 0);
    EXPECT_EQ(ib_.fabric().liveMrs(), 0);
  }

  // The data messages the fabric carried since the last clearWrites() (RDMA writes with immediate: the net's
  // FIFO descriptors go as writes without).
  std::vector<chorus::FakeIbFabric::WriteRecord> dataWrites() {
    std::vector<chorus::FakeIbFabric::WriteRecord> out;
    for (const auto& w : ib_.fabric().writes())
      if (w.withImm) out.push_back(w);
    return out;
  }

  FakeIbProcessNet ib_;  // before env_: the fake outlives the settings' scope
  ScopedEnv env_;
};

// Runs body(rank, comm) on n thread ranks, each with a communicator aborted after (a failed one included) unless the
// body aborted it and set it null, and waits for all.
void onThreadRanks(int n, const std::function<void(int rank, ncclComm_t& comm)>& body) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRank(&comm, n, id, r), ncclSuccess) << ncclGetLastError(nullptr);
      body(r, comm);
      if (comm != nullptr) ncclCommAbort(comm);
    });
  }
  for (auto& t : threads) t.join();
}

// Waits until all n ranks have called it once more (a barrier of thread ranks; `count` starts at 0).
void meet(std::atomic<int>* count, int n) {
  const int target = (count->fetch_add(1) / n + 1) * n;
  while (count->load() < target) std::this_thread::yield();
}

// What each rank's second allreduce returned (breakBetweenAllreduces).
struct SecondCalls {
  std::vector<ncclResult_t> results;
  std::vector<std::string> texts;  ///< ncclGetLastError after it
  std::vector<double> seconds;     ///< how long it took
};

// On n thread ranks: an allreduce of `count` floats, then `breakIt` on rank 0 while every rank waits between the
// calls, then a second allreduce, whose results come back.
SecondCalls breakBetweenAllreduces(int n, size_t count, const std::function<void()>& breakIt) {
  std::atomic<int> arrived{0};
  SecondCalls out{std::vector<ncclResult_t>(n, ncclSuccess), std::vector<std::string>(n), std::vector<double>(n, 0)};
  onThreadRanks(n, [&](int r, ncclComm_t& comm) {
    std::vector<float> in(count, 1.0f), res(count);
    EXPECT_EQ(ncclAllReduce(in.data(), res.data(), count, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
        << ncclGetLastError(comm);
    meet(&arrived, n);
    if (r == 0) breakIt();
    meet(&arrived, n);
    auto t0 = std::chrono::steady_clock::now();
    out.results[r] = ncclAllReduce(in.data(), res.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    out.seconds[r] = secondsSince(t0);
    out.texts[r] = ncclGetLastError(comm);
  });
  return out;
}

// Allreduces of 4 B, one full 4 KB slot and 69 slots on 2 thread ranks, each result checked.
void slotAllreduces(RankCtx& ctx) {
  for (size_t count : {size_t(1), size_t(1024), size_t(70001)}) {
    std::vector<float> in(count), out(count, 0.0f);
    for (size_t k = 0; k < count; k++) in[k] = static_cast<float>((k % 1000) * (ctx.rank + 1));
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, ctx.comm, nullptr), ncclSuccess)
        << ncclGetLastError(ctx.comm);
    for (size_t k = 0; k < count; k++) {
      ASSERT_EQ(out[k], static_cast<float>((k % 1000) * 3))
          << "rank " << ctx.rank << ", count " << count << ", element " << k;
    }
  }
}

// CHORUS_NET_SLOT_TRAILER over the IB net: one RDMA write a slot, its header after its payload (1, and by default),
// or a write of the header and one of the payload (0). Told apart on the wire: a full 4 KB slot goes as a 4128-byte
// write in one framing, and a 32-byte header write precedes every payload in the other.
TEST_F(IbProxy, SlotsGoAsOneWriteOrTwo) {
  env_.set("CHORUS_FIFO_SLOT_BYTES", "4096");
  for (const char* setting : {"1", "0", "-1"}) {
    SCOPED_TRACE(std::string("CHORUS_NET_SLOT_TRAILER=") + setting);
    env_.set("CHORUS_NET_SLOT_TRAILER", setting);
    ib_.fabric().clearWrites();
    runRanks(2, Driver::kThreads, slotAllreduces, 60);
    size_t headers = 0, fullSlotWithHeader = 0, longest = 0;
    std::vector<chorus::FakeIbFabric::WriteRecord> writes = dataWrites();
    for (const auto& w : writes) {
      headers += w.length == kSlotHeaderBytes;
      fullSlotWithHeader += w.length == 4096 + kSlotHeaderBytes;
      longest = std::max(longest, w.length);
    }
    ASSERT_FALSE(writes.empty());
    if (setting[0] == '0') {
      EXPECT_EQ(longest, 4096u) << "two messages a slot: none longer than the slot";
      EXPECT_GE(headers * 2, writes.size()) << "two messages a slot: a header before every payload";
    } else {
      EXPECT_GT(fullSlotWithHeader, 0u) << "one message a slot: full slots go with their header";
      EXPECT_EQ(headers, 0u) << "one message a slot: no header alone";
    }
  }
}

// A communicator's config.trafficClass reaches the IB net through its init (ncclNetCommConfig), which sets its queue
// pairs' service level and traffic class from it, as NCCL's does; a communicator without one keeps 0. Two thread
// ranks, an allreduce each time, its result checked; each rank destroys its communicator as soon as its own call
// returns, as training code does (the other's call may still be taking its last data:
// IbFakeNet.ReceivesThatArrivedCompleteAfterTheSenderClosed).
TEST_F(IbProxy, ACommunicatorsTrafficClassReachesItsQueuePairs) {
  for (int trafficClass : {7, NCCL_CONFIG_UNDEF_INT}) {
    SCOPED_TRACE("config.trafficClass " + std::to_string(trafficClass));
    const size_t before = ib_.fabric().rtrs().size();
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; r++) {
      threads.emplace_back([&, r] {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.trafficClass = trafficClass;
        ncclComm_t comm = nullptr;
        ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, r, &config), ncclSuccess) << ncclGetLastError(nullptr);
        std::vector<float> buf(1024, float(r + 1));
        EXPECT_EQ(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
        EXPECT_EQ(buf[1023], 3.0f);
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
      });
    }
    for (auto& t : threads) t.join();
    const std::vector<chorus::FakeIbFabric::RtrRecord> rtrs = ib_.fabric().rtrs();
    ASSERT_GT(rtrs.size(), before) << "the allreduce made no IB connection";
    const int want = trafficClass == NCCL_CONFIG_UNDEF_INT ? 0 : trafficClass;
    for (size_t i = before; i < rtrs.size(); i++) {
      EXPECT_EQ(rtrs[i].sl, want) << "QP " << rtrs[i].qpn;
      EXPECT_EQ(rtrs[i].trafficClass, want) << "QP " << rtrs[i].qpn;
    }
  }
}

// Allreduces and allgathers of an odd count of several MB on 2 thread ranks, each result checked.
void bigCollectives(RankCtx& ctx) {
  const size_t count = (1u << 20) + 3;
  std::vector<float> in(count), out(count * ctx.nranks, -1.0f);
  for (size_t k = 0; k < count; k++) in[k] = static_cast<float>(ctx.rank + 1 + static_cast<int>(k % 97));
  ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, ctx.comm, nullptr), ncclSuccess)
      << ncclGetLastError(ctx.comm);
  for (size_t k = 0; k < count; k++)
    ASSERT_EQ(out[k], static_cast<float>(3 + 2 * static_cast<int>(k % 97))) << "allreduce element " << k;
  ASSERT_EQ(ncclAllGather(in.data(), out.data(), count, ncclFloat32, ctx.comm, nullptr), ncclSuccess)
      << ncclGetLastError(ctx.comm);
  for (size_t k = 0; k < count * ctx.nranks; k++)
    ASSERT_EQ(out[k], static_cast<float>(k / count + 1 + (k % count) % 97)) << "allgather element " << k;
}

// NCCL_IB_QPS_PER_CONNECTION: a connection's messages take that many queue pairs in turn (the default) or are split
// over them (NCCL_IB_SPLIT_DATA_ON_QPS=1), and under adaptive routing (NCCL_IB_ADAPTIVE_ROUTING=1; these fake ports
// are RoCE, where it is off by default) large messages go as a plain write and then the immediate. Each result is
// checked; with 3 queue pairs a connection three times as many queue pairs send data as with 1.
TEST_F(IbProxy, DataTakesEveryQueuePairOfAConnection) {
  for (const char* split : {"0", "1"}) {
    for (const char* ar : {"0", "1"}) {
      if (split[0] == '1' && ar[0] == '1') continue;
      SCOPED_TRACE(std::string("NCCL_IB_SPLIT_DATA_ON_QPS=") + split + ", NCCL_IB_ADAPTIVE_ROUTING=" + ar);
      env_.set("NCCL_IB_SPLIT_DATA_ON_QPS", split);
      env_.set("NCCL_IB_ADAPTIVE_ROUTING", ar);
      std::vector<size_t> senders;
      for (const char* qps : {"1", "3"}) {
        SCOPED_TRACE(std::string("NCCL_IB_QPS_PER_CONNECTION=") + qps);
        env_.set("NCCL_IB_QPS_PER_CONNECTION", qps);
        ib_.fabric().clearWrites();
        runRanks(2, Driver::kThreads, bigCollectives, 60);
        std::set<uint32_t> qpns;
        for (const auto& w : dataWrites()) qpns.insert(w.srcQpn);
        senders.push_back(qpns.size());
        size_t plain = 0;  // data written without an immediate: adaptive routing's bulk writes
        for (const auto& w : ib_.fabric().writes()) plain += !w.withImm && w.length > 8192;
        if (ar[0] == '1') {
          EXPECT_GT(plain, 0u);
        } else {
          EXPECT_EQ(plain, 0u);
        }
      }
      ASSERT_GT(senders[0], 0u);
      EXPECT_EQ(senders[1], 3 * senders[0]) << "queue pairs that sent data, with 1 and with 3 a connection";
    }
  }
}

class IbProxyTwoPorts : public IbProxy {
 protected:
  IbProxyTwoPorts() : IbProxy(2) {}
};

// Two ports (HCAs mlx5_0 and mlx5_1): the host path takes a channel for each device of the net, and each HCA's queue
// pairs carry data, the results intact.
TEST_F(IbProxyTwoPorts, EachPortCarriesAChannel) {
  env_.unset("CHORUS_HOST_NCHANNELS");
  runRanks(2, Driver::kThreads, bigCollectives, 60);
  std::map<std::string, size_t> bytes;
  for (const auto& w : dataWrites()) bytes[w.srcHca] += w.length;
  EXPECT_GT(bytes["mlx5_0"], 1u << 20);
  EXPECT_GT(bytes["mlx5_1"], 1u << 20);
  EXPECT_EQ(bytes.size(), 2u);
}

class IbProxyDualPortNic : public IbProxy {
 protected:
  IbProxyDualPortNic() : IbProxy(2, /*oneNic=*/true) {}
};

// NIC fusion, as NCCL's default (NCCL_NET_MERGE_LEVEL=PORT): the two ports of one NIC are one net device, whose
// connections use both, so one host channel moves data through both HCAs, the results intact. With LOC, or with the
// IB net refusing to merge (NCCL_IB_MERGE_NICS=0), they stay two devices, and one channel uses the first alone.
TEST_F(IbProxyDualPortNic, PortsOfOneNicMergeIntoOneDevice) {
  env_.set("CHORUS_HOST_NCHANNELS", "1");
  // With the net's INFO lines on (written nowhere): the merge is logged as it is made.
  env_.set("NCCL_DEBUG", "INFO");
  env_.set("NCCL_DEBUG_SUBSYS", "INIT,NET");
  env_.set("NCCL_DEBUG_FILE", "/dev/null");
  reloadEnv();
  for (const char* setting : {"PORT", "LOC", "PORT, NCCL_IB_MERGE_NICS=0"}) {
    SCOPED_TRACE(std::string("NCCL_NET_MERGE_LEVEL=") + setting);
    const bool merges = strcmp(setting, "PORT") == 0;
    env_.set("NCCL_NET_MERGE_LEVEL", setting[0] == 'L' ? "LOC" : "PORT");
    env_.set("NCCL_IB_MERGE_NICS", strchr(setting, ',') != nullptr ? "0" : "1");
    ib_.fabric().clearWrites();
    runRanks(2, Driver::kThreads, bigCollectives, 60);
    std::map<std::string, size_t> bytes;
    for (const auto& w : dataWrites()) {
      bytes[w.srcHca] += w.length;
      EXPECT_EQ(w.srcHca, w.dstHca) << "queue pair i is on port i mod 2 at both ends";
    }
    EXPECT_GT(bytes["mlx5_0"], 1u << 20);
    if (merges) {
      EXPECT_GT(bytes["mlx5_1"], 1u << 20);
    } else {
      EXPECT_EQ(bytes.count("mlx5_1"), 0u);
    }
  }
  env_.unset("NCCL_DEBUG");
  reloadEnv();
}

// NCCL_NET_FORCE_MERGE merges what it names, here against the level (LOC); a group that names no device fails the
// communicator's creation on every rank, saying which entry.
TEST_F(IbProxyDualPortNic, ForceMergeMergesWhatItNamesOrFails) {
  env_.set("CHORUS_HOST_NCHANNELS", "1");
  env_.set("NCCL_NET_MERGE_LEVEL", "LOC");
  env_.set("NCCL_NET_FORCE_MERGE", "mlx5_1,mlx5_0");
  ib_.fabric().clearWrites();
  runRanks(2, Driver::kThreads, bigCollectives, 60);
  std::map<std::string, size_t> bytes;
  for (const auto& w : dataWrites()) bytes[w.srcHca] += w.length;
  EXPECT_GT(bytes["mlx5_0"], 1u << 20);
  EXPECT_GT(bytes["mlx5_1"], 1u << 20);

  env_.set("NCCL_NET_FORCE_MERGE", "mlx5_0,mlx5_7");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<ncclResult_t> results(2, ncclSuccess);
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; r++) {
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      results[r] = ncclCommInitRank(&comm, 2, id, r);
      errors[r] = ncclGetLastError(nullptr);
      if (comm != nullptr) ncclCommAbort(comm);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(results[r], ncclInvalidUsage) << "rank " << r;
    EXPECT_NE(errors[r].find("mlx5_7"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

// An RDMA write that fails (the HCA's error completion, here "remote access error": a data write, or a receiver's
// FIFO descriptor, whichever rank posts first) ends the call of every rank with ncclRemoteError within the timeout.
// Each rank's error says what its own net saw: the rank whose write failed names that completion, the other that the
// connection broke. Nothing hangs, and destroying the communicators after releases every queue pair and registration
// (TearDown).
TEST_F(IbProxy, AFailedWriteEndsEveryRanksCall) {
  env_.set("CHORUS_TIMEOUT_S", "4");
  const int n = 2;
  const SecondCalls calls =
      breakBetweenAllreduces(n, 1 << 18, [&] { ib_.fabric().failNextWrite(chorus::kIbWcRemAccessErr); });
  int named = 0;
  for (int r = 0; r < n; r++) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + calls.texts[r]);
    EXPECT_EQ(calls.results[r], ncclRemoteError);
    EXPECT_LT(calls.seconds[r], 4 + 4.0) << "within CHORUS_TIMEOUT_S (and the time to tell the others)";
    // Each rank's error carries what its own net said of the connection that broke.
    EXPECT_NE(calls.texts[r].find("this rank's net said: rank " + std::to_string(r) + ": net IB dev 0 channel 0"),
              std::string::npos);
    named += calls.texts[r].find("failed: remote access error") != std::string::npos;
  }
  EXPECT_EQ(named, 1) << "the rank whose write failed names the failed completion";
}

// The HCA both thread ranks use reports a device fatal error (IBV_EVENT_DEVICE_FATAL) between two allreduces. A dead
// HCA completes nothing, so without the event every rank's call would wait until CHORUS_TIMEOUT_S and end with a
// timeout; with it, the nets fail the connections at their next call and every rank's call ends with ncclRemoteError
// naming the event.
TEST_F(IbProxy, ADeadHcaEndsEveryRanksCallNamingTheEvent) {
  env_.set("CHORUS_TIMEOUT_S", "20");
  const int n = 2;
  const SecondCalls calls = breakBetweenAllreduces(n, 1 << 16, [&] {
    chorus::IbHca* hca = nullptr;
    ASSERT_EQ(ib_.net().openHca(0, &hca), ncclSuccess);
    const uint64_t before = ib_.net().asyncEventsTaken();
    ib_.fabric().raiseHcaEvent(hca, chorus::kIbEventDeviceFatal);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ib_.net().asyncEventsTaken() == before && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GT(ib_.net().asyncEventsTaken(), before) << "the net's watcher took the event";
  });
  for (int r = 0; r < n; r++) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + calls.texts[r]);
    EXPECT_EQ(calls.results[r], ncclRemoteError);
    EXPECT_NE(calls.texts[r].find("HCA mlx5_0 reported a fatal error: local catastrophic error"), std::string::npos);
    EXPECT_LT(calls.seconds[r], 20.0) << "within CHORUS_TIMEOUT_S";
  }
}

// Rank 2 calls with a different count: every rank's call fails with ncclInvalidUsage naming both calls, the failure
// notices that carry them to rank 1 (which compares with neither) going over the IB net in either slot framing.
// Each rank keeps its communicator until every rank has its answer (as TransportFault's test of the same).
TEST_F(IbProxy, MismatchedCountsReachEveryRank) {
  env_.set("CHORUS_TIMEOUT_S", "10");
  for (const char* setting : {"1", "0"}) {
    SCOPED_TRACE(std::string("CHORUS_NET_SLOT_TRAILER=") + setting);
    env_.set("CHORUS_NET_SLOT_TRAILER", setting);
    const int n = 3;
    std::atomic<int> answered{0};
    std::vector<ncclResult_t> results(n, ncclSuccess);
    std::vector<std::string> texts(n);
    onThreadRanks(n, [&](int r, ncclComm_t& comm) {
      std::vector<int> buf(4096, 1);
      results[r] = ncclAllReduce(buf.data(), buf.data(), r == 2 ? 4000 : 4096, ncclInt32, ncclSum, comm, nullptr);
      texts[r] = ncclGetLastError(comm);
      meet(&answered, n);
    });
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(results[r], ncclInvalidUsage) << "rank " << r << ": " << texts[r];
      EXPECT_NE(texts[r].find("count 4000"), std::string::npos) << "rank " << r << ": " << texts[r];
      EXPECT_NE(texts[r].find("count 4096"), std::string::npos) << "rank " << r << ": " << texts[r];
    }
  }
}

// Rank 1 of 3 aborts its communicator after one good allreduce while the others start the next: its proxy's failure
// notice crosses the IB net, and the others' call fails with ncclRemoteError naming rank 1, within the timeout.
TEST_F(IbProxy, AnAbortedPeerIsNamed) {
  env_.set("CHORUS_TIMEOUT_S", "6");
  const int n = 3;
  std::vector<ncclResult_t> results(n, ncclSuccess);
  std::vector<std::string> texts(n);
  std::vector<double> seconds(n, 0);
  onThreadRanks(n, [&](int r, ncclComm_t& comm) {
    std::vector<float> in(4099, 1.0f), out(4099);
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
        << ncclGetLastError(comm);
    if (r == 1) {
      // Abort drops what the net has not delivered: the others finish the first allreduce meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ncclCommAbort(comm);
      comm = nullptr;
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    results[r] = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr);
    seconds[r] = secondsSince(t0);
    texts[r] = ncclGetLastError(comm);
  });
  for (int r : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + texts[r]);
    EXPECT_EQ(results[r], ncclRemoteError);
    EXPECT_NE(texts[r].find("rank 1 failed"), std::string::npos);
    EXPECT_LT(seconds[r], 6.0) << "within CHORUS_TIMEOUT_S";
  }
}

}  // namespace
}  // namespace chorus_test
