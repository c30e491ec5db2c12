// Tests of the InfiniBand verbs net (transports/ib): device and GID selection on made-up attributes, the handle, and
// the whole connect/accept/isend/irecv/test state machine over the fake in-process verbs (ib_verbs_fake.h), whose
// RDMA writes are memcpys and whose CQs are queues. Both ends are driven from the test's thread, so every exchange
// is deterministic; waits have deadlines. Asynchronous events, which the net's watcher thread takes, are waited for
// by its count of events taken before a test looks at what they did. GPUDirect RDMA (peer memory, dma-buf, flush) runs
// over the fake too, with host buffers standing in for GPU memory. Nothing here needs an HCA; the last test only checks
// that the real backend behaves on this host (no HCA: zero devices or a failed init, with a reason).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/debug.h"
#include "core/params.h"
#include "harness/ranks.h"
#include "transports/ib/ib_comm.h"
#include "transports/ib/ib_net.h"
#include "transports/ib/ib_select.h"
#include "transports/ib/ib_wire.h"
#include "transports/net/net.h"
#include "unit/ib_verbs_fake.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(5);

// ---- NCCL_IB_HCA -----------------------------------------------------------------------------

TEST(IbHcaFilter, ParsesPrefixesPortsAndFlags) {
  IbHcaFilter f = parseIbHcaFilter("mlx5_0:1,mlx5_1,,bad:x");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  ASSERT_EQ(f.entries.size(), 3u);
  EXPECT_EQ(f.entries[0].name, "mlx5_0");
  EXPECT_EQ(f.entries[0].port, 1);
  EXPECT_EQ(f.entries[1].name, "mlx5_1");
  EXPECT_EQ(f.entries[1].port, -1);
  EXPECT_EQ(f.entries[2].name, "bad");
  EXPECT_EQ(f.entries[2].port, -1);

  IbHcaFilter g = parseIbHcaFilter("^=mlx5_2");
  EXPECT_TRUE(g.exclude);
  EXPECT_TRUE(g.exact);
  ASSERT_EQ(g.entries.size(), 1u);
  EXPECT_EQ(g.entries[0].name, "mlx5_2");
  EXPECT_TRUE(parseIbHcaFilter("").entries.empty());
}

TEST(IbHcaFilter, SelectsByPrefixExactExcludeAndPort) {
  IbHcaFilter all = parseIbHcaFilter("");
  EXPECT_TRUE(ibHcaSelected(all, "anything", 3));

  IbHcaFilter prefix = parseIbHcaFilter("mlx5_1");
  EXPECT_TRUE(ibHcaSelected(prefix, "mlx5_1", 1));
  EXPECT_TRUE(ibHcaSelected(prefix, "mlx5_10", 1));  // a prefix match, as NCCL does
  EXPECT_FALSE(ibHcaSelected(prefix, "mlx5_0", 1));

  IbHcaFilter exact = parseIbHcaFilter("=mlx5_1");
  EXPECT_TRUE(ibHcaSelected(exact, "mlx5_1", 1));
  EXPECT_FALSE(ibHcaSelected(exact, "mlx5_10", 1));

  IbHcaFilter port = parseIbHcaFilter("mlx5_0:2");
  EXPECT_TRUE(ibHcaSelected(port, "mlx5_0", 2));
  EXPECT_FALSE(ibHcaSelected(port, "mlx5_0", 1));

  IbHcaFilter excl = parseIbHcaFilter("^mlx5_0:1");
  EXPECT_FALSE(ibHcaSelected(excl, "mlx5_0", 1));
  EXPECT_TRUE(ibHcaSelected(excl, "mlx5_0", 2));
  EXPECT_TRUE(ibHcaSelected(excl, "mlx4_0", 1));

  IbHcaFilter exclExact = parseIbHcaFilter("^=mlx5_1");
  EXPECT_FALSE(ibHcaSelected(exclExact, "mlx5_1", 1));
  EXPECT_TRUE(ibHcaSelected(exclExact, "mlx5_10", 1));
}

std::vector<IbPortDesc> madeUpHost() {
  std::vector<IbPortDesc> ports;
  ports.push_back(fakeIbPort("mlx5_0", 1, 1));
  ports.push_back(fakeIbPort("mlx5_0", 2, 2));
  ports.push_back(fakeIbPort("mlx5_1", 1, 3));
  ports.push_back(fakeIbPort("mlx5_10", 1, 4));
  ports.push_back(fakeIbPort("mlx4_0", 1, 5));
  ports[3].active = false;  // mlx5_10: cable out
  return ports;
}

std::vector<std::string> namesOf(const std::vector<IbDevice>& devs) {
  std::vector<std::string> out;
  for (const IbDevice& d : devs) out.push_back(d.name + ":" + std::to_string(d.port.port));
  return out;
}

TEST(IbSelectDevices, FiltersMadeUpHost) {
  using V = std::vector<std::string>;
  std::vector<std::string> skipped;
  EXPECT_EQ(namesOf(selectIbDevices(madeUpHost(), "", -1, &skipped)),
            (V{"mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx4_0:1"}));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("mlx5_10:1: port is not active"), std::string::npos) << skipped[0];

  EXPECT_EQ(namesOf(selectIbDevices(madeUpHost(), "mlx5", -1, nullptr)), (V{"mlx5_0:1", "mlx5_0:2", "mlx5_1:1"}));
  EXPECT_EQ(namesOf(selectIbDevices(madeUpHost(), "=mlx5_1", -1, nullptr)), (V{"mlx5_1:1"}));
  EXPECT_EQ(namesOf(selectIbDevices(madeUpHost(), "mlx5_0:2,mlx4_0", -1, nullptr)), (V{"mlx5_0:2", "mlx4_0:1"}));
  EXPECT_EQ(namesOf(selectIbDevices(madeUpHost(), "^mlx5_0", -1, nullptr)), (V{"mlx5_1:1", "mlx4_0:1"}));
  EXPECT_EQ(namesOf(selectIbDevices(madeUpHost(), "^=mlx5_0:1", -1, nullptr)), (V{"mlx5_0:2", "mlx5_1:1", "mlx4_0:1"}));
  EXPECT_TRUE(selectIbDevices(madeUpHost(), "bnxt", -1, nullptr).empty());
}

TEST(IbSelectDevices, FillsSpeedGidAndSkipsUnusablePorts) {
  std::vector<IbPortDesc> ports = {fakeIbPort("mlx5_0", 1, 7), fakeIbPort("mlx5_1", 1, 8)};
  ports[1].gids.clear();  // RoCE without any GID: unusable
  std::vector<std::string> skipped;
  std::vector<IbDevice> devs = selectIbDevices(ports, "", -1, &skipped);
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].speedMbps, 100000);  // EDR x4
  EXPECT_EQ(devs[0].gidIndex, 1);
  EXPECT_EQ(ibGidText(devs[0].gid), "::ffff:10.0.0.7");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("no configured GID"), std::string::npos) << skipped[0];
}

// ---- GIDs and speed -------------------------------------------------------------------------

IbGidEntry gidEntry(const std::string& text, IbGidType type) {
  IbGidEntry e;
  EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), e.gid.raw), 1) << text;
  e.type = type;
  return e;
}

TEST(IbGid, ClassifiesEntries) {
  EXPECT_FALSE(ibGidConfigured(gidEntry("::", IbGidType::kUnknown).gid));
  EXPECT_FALSE(ibGidConfigured(gidEntry("fe80::", IbGidType::kUnknown).gid));
  EXPECT_TRUE(ibGidConfigured(gidEntry("fe80::1", IbGidType::kUnknown).gid));
  EXPECT_TRUE(ibGidIsIpv4(gidEntry("::ffff:192.168.1.2", IbGidType::kRoceV2).gid));
  EXPECT_FALSE(ibGidIsIpv4(gidEntry("fd00::2", IbGidType::kRoceV2).gid));
}

TEST(IbGid, PicksRoceV2Ipv4ThenIpv6ThenAnything) {
  std::string why;
  const auto v1 = IbGidType::kIbRoceV1;
  const auto v2 = IbGidType::kRoceV2;
  // A typical RoCE table: link-local v1/v2, then IPv6 v1/v2, then IPv4 v1/v2.
  std::vector<IbGidEntry> table = {gidEntry("fe80::1", v1),         gidEntry("fe80::1", v2),
                                   gidEntry("fd00::5", v1),         gidEntry("fd00::5", v2),
                                   gidEntry("::ffff:10.1.2.3", v1), gidEntry("::ffff:10.1.2.3", v2)};
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, table, -1, &why), 5);
  // No IPv4 address: the routable RoCE v2 IPv6 GID.
  std::vector<IbGidEntry> v6(table.begin(), table.begin() + 4);
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, v6, -1, &why), 3);
  // Only RoCE v1 entries: the first routable one, then a link-local one.
  std::vector<IbGidEntry> onlyV1 = {gidEntry("fe80::1", v1), gidEntry("fd00::7", v1)};
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, onlyV1, -1, &why), 1);
  std::vector<IbGidEntry> linkOnly = {gidEntry("::", IbGidType::kUnknown), gidEntry("fe80::9", v1)};
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, linkOnly, -1, &why), 1);
  // Nothing configured.
  std::vector<IbGidEntry> empty = {gidEntry("::", IbGidType::kUnknown), gidEntry("fe80::", IbGidType::kUnknown)};
  why.clear();
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, empty, -1, &why), -1);
  EXPECT_FALSE(why.empty());
}

// NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE and NCCL_IB_ROCE_VERSION_NUM choose among a RoCE port's GIDs.
TEST(IbGid, FamilyRangeAndRoceVersionChoose) {
  const auto v1 = IbGidType::kIbRoceV1;
  const auto v2 = IbGidType::kRoceV2;
  // Two IPv4 addresses and an IPv6 one, each as RoCE v1 and v2.
  const std::vector<IbGidEntry> table = {gidEntry("fe80::1", v1),
                                         gidEntry("fe80::1", v2),
                                         gidEntry("fd00::5", v1),
                                         gidEntry("fd00::5", v2),
                                         gidEntry("::ffff:10.1.2.3", v1),
                                         gidEntry("::ffff:10.1.2.3", v2),
                                         gidEntry("::ffff:192.168.7.9", v1),
                                         gidEntry("::ffff:192.168.7.9", v2)};
  std::vector<std::string> notes;
  std::string why;
  auto pick = [&](const char* family, const char* range, int version) {
    notes.clear();
    why.clear();
    return selectIbGidIndex(IbLinkLayer::kEthernet, table, -1, &why, parseIbGidPrefs(family, range, version, &notes));
  };
  EXPECT_EQ(pick("", "", 2), 5);  // NCCL's defaults: AF_INET, RoCE v2
  EXPECT_EQ(pick("AF_INET", "", 1), 4);
  EXPECT_EQ(pick("AF_INET6", "", 2), 3);
  EXPECT_EQ(pick("AF_INET6", "", 1), 2);
  EXPECT_EQ(pick("AF_INET", "192.168.0.0/16", 2), 7);
  EXPECT_EQ(pick("AF_INET", "192.168.7.9/32", 1), 6);
  EXPECT_EQ(pick("AF_INET", "10.0.0.0/8", 2), 5);
  EXPECT_EQ(pick("AF_INET6", "fd00::/8", 2), 3);
  EXPECT_TRUE(notes.empty());
  // A range none of the port's GIDs is in: the port is not used, and why says so.
  EXPECT_EQ(pick("AF_INET", "172.16.0.0/12", 2), -1);
  EXPECT_EQ(why, "no routable IPv4 GID of the port is in NCCL_IB_ADDR_RANGE=172.16.0.0/12");
  // A version the port lacks for the family: the family's other version.
  const std::vector<IbGidEntry> onlyV1 = {gidEntry("fe80::1", v1), gidEntry("::ffff:10.1.2.3", v1)};
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, onlyV1, -1, &why, parseIbGidPrefs("", "", 2, &notes)), 1);
  // Values NCCL ignores are ignored, with a note: an unknown family, a range without a prefix length, one of the
  // other family, a prefix too long.
  for (auto [family, range] : {std::pair{"AF_UNIX", ""}, std::pair{"", "10.0.0.0"}, std::pair{"", "fd00::/8"},
                               std::pair{"", "10.0.0.0/33"}, std::pair{"AF_INET6", "fd00::/129"}}) {
    SCOPED_TRACE(std::string(family) + " " + range);
    notes.clear();
    const IbGidPrefs p = parseIbGidPrefs(family, range, 2, &notes);
    EXPECT_EQ(notes.size(), 1u);
    EXPECT_FALSE(p.hasRange);
  }
  // The devices: a port whose GIDs are all outside the range is skipped, naming it.
  std::vector<std::string> skipped;
  IbPortDesc port = fakeIbPort("mlx5_0", 1, 7);
  port.gids = table;
  EXPECT_EQ(selectIbDevices({port}, "", -1, &skipped, parseIbGidPrefs("", "10.1.0.0/16", 2, &notes)).size(), 1u);
  EXPECT_TRUE(skipped.empty());
  EXPECT_TRUE(selectIbDevices({port}, "", -1, &skipped, parseIbGidPrefs("", "10.2.0.0/16", 2, &notes)).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("mlx5_0:1: no routable IPv4 GID of the port is in NCCL_IB_ADDR_RANGE=10.2.0.0/16"),
            std::string::npos)
      << skipped[0];
}

TEST(IbGid, InfinibandUsesZeroAndGidIndexForces) {
  std::string why;
  std::vector<IbGidEntry> ib = {gidEntry("fe80::1234", IbGidType::kIbRoceV1),
                                gidEntry("fd00::1", IbGidType::kIbRoceV1)};
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kInfiniband, ib, -1, &why), 0);
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kInfiniband, {}, -1, &why), 0);
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kInfiniband, ib, 1, &why), 1);
  std::vector<IbGidEntry> roce = {gidEntry("fe80::1", IbGidType::kRoceV2),
                                  gidEntry("::ffff:10.0.0.1", IbGidType::kRoceV2)};
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, roce, 0, &why), 0);  // forced, even though 1 is preferred
  why.clear();
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kEthernet, roce, 4, &why), -1);
  EXPECT_NE(why.find("NCCL_IB_GID_INDEX=4"), std::string::npos) << why;
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kUnknown, roce, -1, &why), -1);
}

// NCCL_IB_MQP_RETRY_*: ibv_modify_qp failing with ETIMEDOUT (or a provider's -ETIMEDOUT) is tried again, the n-th
// retry after n x the sleep, up to the retry count; another error is final unless every error is to be retried.
TEST(IbModifyRetry, RetriesTimeoutsAsNcclDoes) {
  struct Run {
    int result = 0;
    int attempts = 0;
    std::vector<std::pair<int, int>> waits;  // (ms, error) before each retry
  };
  auto run = [](const IbModifyRetry& policy, std::vector<int> results) {
    Run r;
    size_t next = 0;
    r.result = ibRetryModifyQp(
        policy, [&] { return next < results.size() ? results[next++] : 0; },
        [&](int ms, int err) { r.waits.emplace_back(ms, err); }, &r.attempts);
    return r;
  };
  IbModifyRetry three;
  three.retries = 3;
  three.sleepMs = 100;
  Run r = run(three, {ETIMEDOUT, -ETIMEDOUT, 0});
  EXPECT_EQ(r.result, 0);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.waits, (std::vector<std::pair<int, int>>{{100, ETIMEDOUT}, {200, -ETIMEDOUT}}));
  r = run(three, {ETIMEDOUT, ETIMEDOUT, ETIMEDOUT, ETIMEDOUT, 0});
  EXPECT_EQ(r.result, ETIMEDOUT);
  EXPECT_EQ(r.attempts, 4);
  EXPECT_EQ(r.waits.size(), 3u);
  EXPECT_EQ(r.waits.back().first, 300);
  r = run(three, {EINVAL, 0});
  EXPECT_EQ(r.result, EINVAL);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(r.waits.empty());
  IbModifyRetry all = three;
  all.all = true;
  r = run(all, {EINVAL, ENOMEM, 0});
  EXPECT_EQ(r.result, 0);
  EXPECT_EQ(r.attempts, 3);
  IbModifyRetry none = three;
  none.retries = 0;
  r = run(none, {ETIMEDOUT, 0});
  EXPECT_EQ(r.result, ETIMEDOUT);
  EXPECT_EQ(r.attempts, 1);

  // The settings, NCCL's defaults first.
  for (const char* name : {"NCCL_IB_MQP_RETRY_CNT", "NCCL_IB_MQP_RETRY_SLEEP_MSEC", "NCCL_IB_MQP_RETRY_ALL"})
    unsetenv(name);
  paramsReload();
  IbModifyRetry d = ibModifyRetry();
  EXPECT_EQ(d.retries, 34);
  EXPECT_EQ(d.sleepMs, 100);
  EXPECT_FALSE(d.all);
  setenv("NCCL_IB_MQP_RETRY_CNT", "5", 1);
  setenv("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "7", 1);
  setenv("NCCL_IB_MQP_RETRY_ALL", "1", 1);
  paramsReload();
  d = ibModifyRetry();
  EXPECT_EQ(d.retries, 5);
  EXPECT_EQ(d.sleepMs, 7);
  EXPECT_TRUE(d.all);
  for (const char* name : {"NCCL_IB_MQP_RETRY_CNT", "NCCL_IB_MQP_RETRY_SLEEP_MSEC", "NCCL_IB_MQP_RETRY_ALL"})
    unsetenv(name);
  paramsReload();
}

// On InfiniBand the GID at NCCL_IB_ROUTABLE_FLID_GID_INDEX (1 by default) is taken where it carries a FLID, as in
// NCCL, so that routers reach the port from other subnets; otherwise index 0.
TEST(IbGid, InfinibandTakesTheRoutableFlidIndex) {
  std::string why;
  const std::vector<IbGidEntry> flid = {gidEntry("fe80::1234", IbGidType::kIbRoceV1),
                                        gidEntry("fe80:0:101:1::1234", IbGidType::kIbRoceV1)};
  EXPECT_EQ(ibGidFlid(flid[1].gid), 0x101);
  EXPECT_EQ(ibGidLocalSubnet(flid[1].gid), 1);
  EXPECT_EQ(ibGidFlid(flid[0].gid), 0);
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kInfiniband, flid, -1, &why), 1);
  IbGidPrefs prefs;
  prefs.routableFlidIndex = 0;  // index 0's GID has no FLID
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kInfiniband, flid, -1, &why, prefs), 0);
  prefs.routableFlidIndex = 5;  // outside the table
  EXPECT_EQ(selectIbGidIndex(IbLinkLayer::kInfiniband, flid, -1, &why, prefs), 0);
}

TEST(IbSpeed, LaneRateTimesWidth) {
  EXPECT_EQ(ibPortSpeedMbps(1, 1), 2500);      // SDR 1x
  EXPECT_EQ(ibPortSpeedMbps(4, 2), 40000);     // QDR 4x
  EXPECT_EQ(ibPortSpeedMbps(32, 2), 100000);   // EDR 4x
  EXPECT_EQ(ibPortSpeedMbps(64, 2), 200000);   // HDR 4x
  EXPECT_EQ(ibPortSpeedMbps(128, 2), 400000);  // NDR 4x
  EXPECT_EQ(ibPortSpeedMbps(64, 16), 100000);  // HDR 2x
  EXPECT_EQ(ibPortSpeedMbps(0, 0), 2500);      // unknown codes: one slowest lane, never 0
  EXPECT_EQ(ibMtuBytes(5), 4096);
  EXPECT_EQ(ibMtuBytes(1), 256);
  EXPECT_EQ(ibMtuBytes(9), 0);
}

// ---- handle ---------------------------------------------------------------------------------

SockAddr loopbackAddr(int port) {
  SockAddr a;
  std::string why;
  EXPECT_EQ(parseAddress("127.0.0.1:" + std::to_string(port), &a, &why), ncclSuccess) << why;
  return a;
}

TEST(IbHandle, RoundTripsAndRefusesBadMagic) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0x5a, sizeof(handle));
  packIbHandle(loopbackAddr(4321), 3, handle);
  SockAddr back;
  int ports = 0;
  std::string why;
  ASSERT_TRUE(unpackIbHandle(handle, &back, &ports, &why)) << why;
  EXPECT_EQ(back.str(), "127.0.0.1:4321");
  EXPECT_EQ(ports, 3);
  EXPECT_EQ(ibHandleStage(handle).comm, nullptr);
  for (size_t i = sizeof(IbHandle); i < sizeof(handle); ++i) ASSERT_EQ(handle[i], 0) << "byte " << i;

  handle[0] ^= 1;
  EXPECT_FALSE(unpackIbHandle(handle, &back, &ports, &why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;

  packIbHandle(loopbackAddr(4321), kIbMaxDevs + 1, handle);
  EXPECT_FALSE(unpackIbHandle(handle, &back, &ports, &why));
  EXPECT_NE(why.find("ports"), std::string::npos) << why;
}

// ---- the fake-verbs exchange ----------------------------------------------------------------

// Two "hosts" (IbNets over fake verbs) on one fake fabric; connections go from host A to host B over loopback TCP.
class IbFakeNet : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    // The settings the tests count on start at their defaults, whatever the caller's environment says.
    for (const char* name :
         {"NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_SPLIT_DATA_ON_QPS",
          "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_AR_THRESHOLD", "NCCL_IB_USE_INLINE", "NCCL_IB_PCI_RELAXED_ORDERING",
          "NCCL_IB_FIFO_TC", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_MERGE_NICS", "NCCL_IB_ECE_ENABLE"})
      unsetenv(name);
    paramsReload();
    fabric_ = std::make_shared<FakeIbFabric>();
  }
  void TearDown() override {
    unsetenv("NCCL_SOCKET_IFNAME");
    unsetenv("NCCL_IB_QPS_PER_CONNECTION");
    unsetenv("NCCL_IB_SPLIT_DATA_ON_QPS");
    unsetenv("NCCL_IB_ADAPTIVE_ROUTING");
    unsetenv("NCCL_IB_AR_THRESHOLD");
    unsetenv("NCCL_IB_PCI_RELAXED_ORDERING");
    unsetenv("NCCL_IB_USE_INLINE");
    unsetenv("NCCL_IB_FIFO_TC");
    unsetenv("NCCL_IB_TC");
    unsetenv("NCCL_IB_SL");
    unsetenv("NCCL_IB_ECE_ENABLE");
    unsetenv("NCCL_DMABUF_ENABLE");
    unsetenv("NCCL_GDR_FLUSH_DISABLE");
    paramsReload();
  }

  // Hosts made from now on: a peer-memory module "loaded", and HCAs that take dma-buf registrations.
  void gpuDirect(bool peerMemory, bool dmaBuf) {
    peerMemory_ = peerMemory;
    dmaBuf_ = dmaBuf;
  }

  // Ends a test's pair of comms: deregisters what each registered (null: nothing), closes both, and checks that no
  // registration outlives them.
  void closePair(void* send, void* smh, void* recv, void* rmh) {
    const ncclNet_v11_t* t = ibNetTable();
    if (smh != nullptr) {
      EXPECT_EQ(t->deregMr(send, smh), ncclSuccess);
    }
    if (rmh != nullptr) {
      EXPECT_EQ(t->deregMr(recv, rmh), ncclSuccess);
    }
    EXPECT_EQ(t->closeSend(send), ncclSuccess);
    EXPECT_EQ(t->closeRecv(recv), ncclSuccess);
    EXPECT_EQ(fabric_->liveMrs(), 0);
  }

  // Host `n`: `hcas` HCAs of one port each (mlx5_0, mlx5_1, ...; port i's GID is 10.0.0.n, or 10.0.0.(10n + i)
  // where there are several).
  std::unique_ptr<IbNet> makeHost(int n, IbLinkLayer ll = IbLinkLayer::kEthernet, int hcas = 1) {
    std::vector<IbPortDesc> ports;
    for (int i = 0; i < hcas; ++i) {
      IbPortDesc p = fakeIbPort("mlx5_" + std::to_string(i), 1, hcas == 1 ? n : 10 * n + i);
      p.linkLayer = ll;
      if (hcas > 1) p.lid = 10 * n + i;
      ports.push_back(p);
    }
    auto verbs = std::make_unique<FakeIbVerbs>(fabric_, ports);
    verbs->setPeerMemory(peerMemory_);
    verbs->setDmaBuf(dmaBuf_);
    verbs->setRelaxedOrdering(relaxedOrdering_);
    verbs->setEce(ece_, eceOffer_);
    auto net = std::make_unique<IbNet>(std::move(verbs));
    std::string why;
    EXPECT_EQ(net->discover(&why), ncclSuccess) << why;
    EXPECT_EQ(net->ndev(), hcas);
    return net;
  }

  // Connects a sender on `a` to a receiver on `b`, each for a communicator of config.trafficClass `trafficClass`; the
  // results of connect and accept come back.
  // `devA` and `devB` are the net devices of each side.
  void connectPair(IbNet* a, IbNet* b, void** send, void** recv, ncclResult_t* sendRes, ncclResult_t* recvRes,
                   int trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF, int devA = 0, int devB = 0) {
    const ncclNet_v11_t* t = ibNetTable();
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* listen = nullptr;
    IbNetCtx actx{a, trafficClass}, bctx{b, trafficClass};
    ASSERT_EQ(t->listen(&bctx, devB, handle, &listen), ncclSuccess);
    *send = *recv = nullptr;
    *sendRes = *recvRes = ncclSuccess;
    auto end = Clock::now() + kDeadline;
    while ((*send == nullptr && *sendRes == ncclSuccess) || (*recv == nullptr && *recvRes == ncclSuccess)) {
      ASSERT_LT(Clock::now(), end) << "connection setup did not finish";
      if (*send == nullptr && *sendRes == ncclSuccess) *sendRes = t->connect(&actx, devA, handle, send, nullptr);
      if (*recv == nullptr && *recvRes == ncclSuccess) *recvRes = t->accept(listen, recv, nullptr);
      if (*sendRes != ncclSuccess && *recvRes == ncclSuccess && *recv == nullptr) break;  // nobody will connect
    }
    EXPECT_EQ(t->closeListen(listen), ncclSuccess);
  }

  void connect(void** send, void** recv, IbLinkLayer ll = IbLinkLayer::kEthernet) {
    a_ = makeHost(1, ll);
    b_ = makeHost(2, ll);
    ncclResult_t sr, rr;
    connectPair(a_.get(), b_.get(), send, recv, &sr, &rr);
    ASSERT_EQ(sr, ncclSuccess);
    ASSERT_EQ(rr, ncclSuccess);
    ASSERT_NE(*send, nullptr);
    ASSERT_NE(*recv, nullptr);
  }

  // Tests `req` until done or failed (deadline kDeadline); returns the result, *size the reported size.
  static ncclResult_t wait(void* req, int* size) {
    auto end = Clock::now() + kDeadline;
    int done = 0;
    while (Clock::now() < end) {
      ncclResult_t res = ibNetTable()->test(req, &done, size);
      if (res != ncclSuccess || done) return res;
    }
    ADD_FAILURE() << "request did not complete";
    return ncclInternalError;
  }

  // Sends `src` into `dst` (registered as smh and rmh) and waits for both ends; the received size comes back.
  // Message `n` of a test's sequence: `step` x n + 77 bytes (none for n = 4), sent from `send` to `recv`, each side
  // registering its buffer for it; checks that it arrived intact and returns its size and the writes the fabric
  // carried for it.
  static size_t sendNth(FakeIbFabric* fabric, void* send, void* recv, int n, size_t step,
                        std::vector<FakeIbFabric::WriteRecord>* writes);

  static int exchange(void* send, void* recv, std::vector<uint8_t>& src, void* smh, std::vector<uint8_t>& dst,
                      void* rmh);

  // Sends `bytes` bytes of pattern `seed` from `send` to `recv`, each side registering its buffer, checks that they
  // arrived intact, then ends the pair (closePair).
  void exchangeIntactAndClose(void* send, void* recv, size_t bytes, int seed);

  // The request of an iflush of buffer `data` (`size` bytes, registration mh); null when the net needs no flush.
  static void* flush(void* recv, void* data, int size, void* mh) {
    void* req = reinterpret_cast<void*>(1);
    EXPECT_EQ(ibNetTable()->iflush(recv, 1, &data, &size, &mh, &req), ncclSuccess) << threadLastError();
    return req;
  }

  std::shared_ptr<FakeIbFabric> fabric_;
  std::unique_ptr<IbNet> a_, b_;
  bool peerMemory_ = false;
  bool dmaBuf_ = false;
  bool relaxedOrdering_ = false;  // hosts made from now on offer PCIe relaxed ordering
  bool ece_ = false;              // hosts made from now on have ECE, offering eceOffer_
  IbEce eceOffer_;
};

// Sets each variable to its value, or unsets it where the value is null, and reloads the parameters.
void setSettings(std::initializer_list<std::pair<const char*, const char*>> settings) {
  for (const auto& [name, value] : settings) {
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  paramsReload();
}

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed * 7 + (i >> 9));
  return v;
}

void* reg(void* comm, std::vector<uint8_t>& buf) {
  void* mh = nullptr;
  EXPECT_EQ(ibNetTable()->regMr(comm, buf.data(), buf.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  return mh;
}

// Registers `buf` as "GPU memory" exported as dma-buf `fd` at `offset` (regMrDmaBuf); null on failure.
void* regDmaBuf(void* comm, std::vector<uint8_t>& buf, uint64_t offset, int fd) {
  void* mh = nullptr;
  EXPECT_EQ(ibNetTable()->regMrDmaBuf(comm, buf.data(), buf.size(), NCCL_PTR_CUDA, offset, fd, &mh), ncclSuccess)
      << threadLastError();
  return mh;
}

void* postRecv(void* recv, std::vector<uint8_t>& buf, void* mh, int tag) {
  void* data = buf.data();
  size_t size = buf.size();
  void* req = nullptr;
  EXPECT_EQ(ibNetTable()->irecv(recv, 1, &data, &size, &tag, &mh, nullptr, &req), ncclSuccess);
  return req;
}

int IbFakeNet::exchange(void* send, void* recv, std::vector<uint8_t>& src, void* smh, std::vector<uint8_t>& dst,
                        void* rmh) {
  void* rreq = postRecv(recv, dst, rmh, 0);
  void* sreq = nullptr;
  EXPECT_EQ(ibNetTable()->isend(send, src.data(), src.size(), 0, smh, nullptr, &sreq), ncclSuccess);
  if (rreq == nullptr || sreq == nullptr) {
    ADD_FAILURE() << "irecv or isend returned no request";
    return -1;
  }
  int rs = -1, ss = -1;
  EXPECT_EQ(wait(sreq, &ss), ncclSuccess);
  EXPECT_EQ(wait(rreq, &rs), ncclSuccess);
  return rs;
}

void IbFakeNet::exchangeIntactAndClose(void* send, void* recv, size_t bytes, int seed) {
  std::vector<uint8_t> src = pattern(bytes, seed), dst(bytes, 0);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), static_cast<int>(bytes));
  EXPECT_TRUE(src == dst);
  closePair(send, smh, recv, rmh);
}

TEST_F(IbFakeNet, ExchangesSizesZeroOneSixtyFourKAndOneMega) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  const size_t sizes[] = {0, 1, 65536, 1 << 20};
  for (size_t size : sizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::vector<uint8_t> src = pattern(size, static_cast<int>(size & 0xff) + 1);
    std::vector<uint8_t> dst(size, 0xee);
    void* smh = size > 0 ? reg(send, src) : nullptr;
    void* rmh = size > 0 ? reg(recv, dst) : nullptr;
    void* rreq = postRecv(recv, dst, rmh, 9);
    ASSERT_NE(rreq, nullptr);
    void* sreq = nullptr;
    ASSERT_EQ(t->isend(send, src.data(), size, 9, smh, nullptr, &sreq), ncclSuccess);
    ASSERT_NE(sreq, nullptr);
    int ssize = -1, rsize = -1;
    ASSERT_EQ(wait(sreq, &ssize), ncclSuccess);
    ASSERT_EQ(wait(rreq, &rsize), ncclSuccess);
    EXPECT_EQ(ssize, static_cast<int>(size));
    EXPECT_EQ(rsize, static_cast<int>(size));
    EXPECT_TRUE(src == dst);
    EXPECT_EQ(t->deregMr(send, smh), ncclSuccess);
    EXPECT_EQ(t->deregMr(recv, rmh), ncclSuccess);
  }
  EXPECT_EQ(t->closeSend(send), ncclSuccess);
  EXPECT_EQ(t->closeRecv(recv), ncclSuccess);
  EXPECT_EQ(fabric_->liveQps(), 0);
  EXPECT_EQ(fabric_->liveMrs(), 0);
}

TEST_F(IbFakeNet, SendWaitsForTheReceiveDescriptor) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(4096, 3), dst(4096, 0);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  void* sreq = nullptr;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(t->isend(send, src.data(), src.size(), 1, smh, nullptr, &sreq), ncclSuccess);
    EXPECT_EQ(sreq, nullptr) << "isend must wait for the receiver's descriptor";
  }
  EXPECT_TRUE(fabric_->writes().empty());
  void* rreq = postRecv(recv, dst, rmh, 1);
  ASSERT_EQ(t->isend(send, src.data(), src.size(), 1, smh, nullptr, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  int n = 0;
  ASSERT_EQ(wait(rreq, &n), ncclSuccess);
  ASSERT_EQ(wait(sreq, &n), ncclSuccess);
  EXPECT_TRUE(src == dst);
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
}

TEST_F(IbFakeNet, SeveralInFlightMatchInPostingOrder) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  constexpr int kN = 8;
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<void*> smh, rmh, sreq(kN), rreq(kN);
  for (int i = 0; i < kN; ++i) {
    src.push_back(pattern(1000 + 100 * i, 40 + i));
    dst.push_back(std::vector<uint8_t>(4096, 0));
  }
  for (int i = 0; i < kN; ++i) {
    smh.push_back(reg(send, src[i]));
    rmh.push_back(reg(recv, dst[i]));
  }
  for (int i = 0; i < kN; ++i) ASSERT_NE(rreq[i] = postRecv(recv, dst[i], rmh[i], 5), nullptr);
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(t->isend(send, src[i].data(), src[i].size(), 5, smh[i], nullptr, &sreq[i]), ncclSuccess);
    ASSERT_NE(sreq[i], nullptr);
  }
  // Completed in reverse order: each request stands alone.
  for (int i = kN - 1; i >= 0; --i) {
    int rs = -1, ss = -1;
    ASSERT_EQ(wait(rreq[i], &rs), ncclSuccess);
    ASSERT_EQ(wait(sreq[i], &ss), ncclSuccess);
    EXPECT_EQ(rs, static_cast<int>(src[i].size()));
    EXPECT_EQ(ss, static_cast<int>(src[i].size()));
    EXPECT_EQ(memcmp(dst[i].data(), src[i].data(), src[i].size()), 0) << "message " << i;
    EXPECT_EQ(dst[i][src[i].size()], 0) << "message " << i << " wrote past its size";
  }
  for (int i = 0; i < kN; ++i) {
    t->deregMr(send, smh[i]);
    t->deregMr(recv, rmh[i]);
  }
  t->closeSend(send);
  t->closeRecv(recv);
  EXPECT_EQ(fabric_->liveMrs(), 0);
}

TEST_F(IbFakeNet, ManyMessagesCycleTheFifo) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  // Eight outstanding at a time, as the proxy does, over several laps of the 32-slot FIFO.
  constexpr int kMsgs = 200, kWindow = 8, kBytes = 256;
  std::vector<uint8_t> src(kMsgs * kBytes), dst(kMsgs * kBytes, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i / kBytes + i);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  std::vector<void*> sreq(kMsgs, nullptr), rreq(kMsgs, nullptr);
  int posted = 0, sent = 0, done = 0;
  auto end = Clock::now() + kDeadline;
  while (done < kMsgs) {
    ASSERT_LT(Clock::now(), end);
    if (posted < kMsgs && posted - done < kWindow) {
      void* data = dst.data() + posted * kBytes;
      size_t size = kBytes;
      int tag = posted;
      ASSERT_EQ(t->irecv(recv, 1, &data, &size, &tag, &rmh, nullptr, &rreq[posted]), ncclSuccess);
      if (rreq[posted] != nullptr) posted++;
    }
    if (sent < posted) {
      ASSERT_EQ(t->isend(send, src.data() + sent * kBytes, kBytes, sent, smh, nullptr, &sreq[sent]), ncclSuccess);
      if (sreq[sent] != nullptr) sent++;
    }
    if (done < sent) {
      int rs = 0, ss = 0;
      ASSERT_EQ(wait(sreq[done], &ss), ncclSuccess);
      ASSERT_EQ(wait(rreq[done], &rs), ncclSuccess);
      ASSERT_EQ(rs, kBytes);
      done++;
    }
  }
  EXPECT_TRUE(src == dst);
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
}

TEST_F(IbFakeNet, LargerReceiveReportsTheTrueSize) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(100, 11), dst(4096, 0x77);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  void* rreq = postRecv(recv, dst, rmh, 2);
  void* sreq = nullptr;
  ASSERT_EQ(t->isend(send, src.data(), src.size(), 2, smh, nullptr, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  int rs = -1, ss = -1;
  ASSERT_EQ(wait(rreq, &rs), ncclSuccess);
  ASSERT_EQ(wait(sreq, &ss), ncclSuccess);
  EXPECT_EQ(rs, 100);
  EXPECT_EQ(memcmp(dst.data(), src.data(), 100), 0);
  EXPECT_EQ(dst[100], 0x77);
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
}

// NCCL_IB_SPLIT_DATA_ON_QPS=1: every message is split over the connection's queue pairs.
TEST_F(IbFakeNet, SeveralQueuePairsSplitTheData) {
  setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
  setenv("NCCL_IB_SPLIT_DATA_ON_QPS", "1", 1);
  paramsReload();
  void *send, *recv;
  connect(&send, &recv);
  EXPECT_EQ(static_cast<IbComm*>(send)->qps.size(), 4u);
  EXPECT_EQ(static_cast<IbComm*>(recv)->qps.size(), 4u);  // the acceptor follows the connector
  EXPECT_TRUE(static_cast<IbComm*>(recv)->splitData);     // in this too
  const ncclNet_v11_t* t = ibNetTable();
  for (size_t size : {size_t(1) << 20, size_t(1000), size_t(0)}) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::vector<uint8_t> src = pattern(size, 21), dst(size, 0);
    void* smh = size > 0 ? reg(send, src) : nullptr;
    void* rmh = size > 0 ? reg(recv, dst) : nullptr;
    fabric_->clearWrites();
    void* rreq = postRecv(recv, dst, rmh, 0);
    void* sreq = nullptr;
    ASSERT_EQ(t->isend(send, src.data(), size, 0, smh, nullptr, &sreq), ncclSuccess);
    ASSERT_NE(sreq, nullptr);
    int rs = -1, ss = -1;
    ASSERT_EQ(wait(rreq, &rs), ncclSuccess);
    ASSERT_EQ(wait(sreq, &ss), ncclSuccess);
    EXPECT_EQ(rs, static_cast<int>(size));
    EXPECT_TRUE(src == dst);
    // One write with immediate per queue pair, each carrying the whole size; the shares add up to the message.
    std::vector<FakeIbFabric::WriteRecord> data;
    for (const auto& w : fabric_->writes()) {
      if (w.withImm) data.push_back(w);
    }
    ASSERT_EQ(data.size(), 4u);
    size_t total = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      EXPECT_EQ(data[i].imm, size);
      total += data[i].length;
      for (size_t j = 0; j < i; ++j) EXPECT_NE(data[i].srcQpn, data[j].srcQpn);
    }
    EXPECT_EQ(total, size);
    if (size == (1u << 20)) {
      for (const auto& w : data) EXPECT_EQ(w.length, size / 4);
    }
    t->deregMr(send, smh);
    t->deregMr(recv, rmh);
  }
  t->closeSend(send);
  t->closeRecv(recv);
}

// Index of the queue pair numbered `qpn` in `comm`, or -1.
int qpIndex(void* comm, uint32_t qpn) {
  const auto& qps = static_cast<IbComm*>(comm)->qps;
  for (size_t i = 0; i < qps.size(); ++i)
    if (qps[i]->qpn() == qpn) return static_cast<int>(i);
  return -1;
}

size_t IbFakeNet::sendNth(FakeIbFabric* fabric, void* send, void* recv, int n, size_t step,
                          std::vector<FakeIbFabric::WriteRecord>* writes) {
  const size_t size = n == 4 ? 0 : step * n + 77;
  std::vector<uint8_t> src = pattern(size, n), dst(size + 64, 0);
  void* smh = size > 0 ? reg(send, src) : nullptr;
  void* rmh = reg(recv, dst);
  fabric->clearWrites();
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), static_cast<int>(size));
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin()));
  *writes = fabric->writes();
  EXPECT_EQ(ibNetTable()->deregMr(send, smh), ncclSuccess);  // null: nothing to release
  EXPECT_EQ(ibNetTable()->deregMr(recv, rmh), ncclSuccess);
  return size;
}

// By default (NCCL_IB_SPLIT_DATA_ON_QPS=0, as NCCL) each message goes whole on one queue pair, message n on pair
// n mod nqps, from the sender's pair to the receiver's of the same index; 9 messages over 4 pairs, each intact.
TEST_F(IbFakeNet, MessagesTakeTheQueuePairsInTurn) {
  setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
  paramsReload();
  void *send, *recv;
  connect(&send, &recv);
  EXPECT_FALSE(static_cast<IbComm*>(send)->splitData);
  EXPECT_FALSE(static_cast<IbComm*>(recv)->splitData);
  for (int n = 0; n < 9; ++n) {
    SCOPED_TRACE("message " + std::to_string(n));
    std::vector<FakeIbFabric::WriteRecord> writes, data;
    const size_t size = sendNth(fabric_.get(), send, recv, n, 1000, &writes);
    for (const auto& w : writes)
      if (w.withImm) data.push_back(w);
    ASSERT_EQ(data.size(), 1u) << "one write a message";
    EXPECT_EQ(data[0].length, size);
    EXPECT_EQ(qpIndex(send, data[0].srcQpn), n % 4);
    EXPECT_EQ(qpIndex(recv, data[0].dstQpn), n % 4);
  }
  closePair(send, nullptr, recv, nullptr);
}

// The net device spanning every port of `net` (makeVDevice), or its one port.
int mergeAll(IbNet* net) {
  ncclNetVDeviceProps_v11_t props{};
  for (int p = 0; p < net->nports(); ++p) props.devs[props.ndevs++] = p;
  int dev = -1;
  EXPECT_EQ(net->makeVDevice(props, &dev), ncclSuccess) << threadLastError();
  return dev;
}

// Merged devices (NCCL's virtual NICs): a connection has NCCL_IB_QPS_PER_CONNECTION queue pairs for each port of the
// side with more, queue pair i on each side's port i mod ports, each addressed to its peer's port; as in NCCL, message
// n is split over the n-th group of consecutive pairs, one a port of the side with more, so it goes out of and into
// every port, with each port's keys (the fake refuses a key of another HCA).
TEST_F(IbFakeNet, MergedDevicesSpreadMessagesOverTheirPorts) {
  struct Case {
    int aPorts, bPorts;
    const char* qpsPerConn;
    const char* split;
  };
  for (const Case& k : {Case{2, 2, nullptr, nullptr}, Case{2, 1, nullptr, nullptr}, Case{1, 2, nullptr, nullptr},
                        Case{4, 3, "2", nullptr}, Case{3, 2, nullptr, "1"}}) {
    SCOPED_TRACE(std::to_string(k.aPorts) + " ports to " + std::to_string(k.bPorts) +
                 ", NCCL_IB_QPS_PER_CONNECTION=" + (k.qpsPerConn ? k.qpsPerConn : "(unset)") +
                 ", NCCL_IB_SPLIT_DATA_ON_QPS=" + (k.split ? k.split : "(unset)"));
    setSettings({{"NCCL_IB_QPS_PER_CONNECTION", k.qpsPerConn}, {"NCCL_IB_SPLIT_DATA_ON_QPS", k.split}});
    a_ = makeHost(1, IbLinkLayer::kEthernet, k.aPorts);
    b_ = makeHost(2, IbLinkLayer::kEthernet, k.bPorts);
    const int devA = mergeAll(a_.get()), devB = mergeAll(b_.get());
    EXPECT_EQ(devA, k.aPorts > 1 ? k.aPorts : 0);
    const size_t rtrsBefore = fabric_->rtrs().size();
    void *send, *recv;
    ncclResult_t sr, rr;
    connectPair(a_.get(), b_.get(), &send, &recv, &sr, &rr, NCCL_NET_TRAFFIC_CLASS_UNDEF, devA, devB);
    ASSERT_EQ(sr, ncclSuccess) << threadLastError();
    ASSERT_EQ(rr, ncclSuccess) << threadLastError();
    const size_t group = static_cast<size_t>(std::max(k.aPorts, k.bPorts));
    const size_t nqps = (k.qpsPerConn ? 2 : 1) * group;
    ASSERT_EQ(static_cast<IbComm*>(send)->qps.size(), nqps);
    ASSERT_EQ(static_cast<IbComm*>(recv)->qps.size(), nqps);
    // Each queue pair is addressed to the port its peer queue pair is on.
    const std::vector<FakeIbFabric::RtrRecord> rtrs = fabric_->rtrs();
    for (size_t i = rtrsBefore; i < rtrs.size(); ++i) {
      const int si = qpIndex(send, rtrs[i].qpn), ri = qpIndex(recv, rtrs[i].qpn);
      ASSERT_TRUE(si >= 0 || ri >= 0);
      const IbDevice& peer = si >= 0 ? b_->device(si % k.bPorts) : a_->device(ri % k.aPorts);
      EXPECT_EQ(memcmp(rtrs[i].remoteGid.raw, peer.gid.raw, 16), 0) << "queue pair " << (si >= 0 ? si : ri);
      EXPECT_EQ(rtrs[i].remoteLid, peer.port.lid);
    }
    std::set<std::string> srcHcas, dstHcas;
    for (int n = 0; n < 9; ++n) {
      SCOPED_TRACE("message " + std::to_string(n));
      std::vector<FakeIbFabric::WriteRecord> writes;
      const size_t size = sendNth(fabric_.get(), send, recv, n, 5000, &writes);
      size_t imms = 0;
      std::set<std::string> msgHcas;
      for (const auto& w : writes) {
        const int si = qpIndex(send, w.srcQpn);
        if (si < 0) continue;  // a receive descriptor
        imms += w.withImm ? 1 : 0;
        EXPECT_EQ(w.srcHca, "mlx5_" + std::to_string(si % k.aPorts));
        EXPECT_EQ(w.dstHca, "mlx5_" + std::to_string(qpIndex(recv, w.dstQpn) % k.bPorts));
        EXPECT_EQ(qpIndex(recv, w.dstQpn), si);
        if (!k.split) {
          EXPECT_GE(static_cast<size_t>(si), n * group % nqps);
          EXPECT_LT(static_cast<size_t>(si), n * group % nqps + group);
        }
        if (w.length > 0) srcHcas.insert(w.srcHca), dstHcas.insert(w.dstHca);
        if (w.length > 0) msgHcas.insert(w.srcHca);
      }
      EXPECT_EQ(imms, k.split ? nqps : group);
      if (size >= 128 * group) {
        EXPECT_EQ(msgHcas.size(), static_cast<size_t>(k.aPorts)) << "the message left from every port";
      }
    }
    EXPECT_EQ(srcHcas.size(), static_cast<size_t>(k.aPorts)) << "data left every port of the sender";
    EXPECT_EQ(dstHcas.size(), static_cast<size_t>(k.bPorts)) << "data reached every port of the receiver";
    closePair(send, nullptr, recv, nullptr);
    EXPECT_EQ(fabric_->liveQps(), 0);
  }
}

// makeVDevice as NCCL's IB net takes it: one port is itself; several make a merged device after the ports, named by
// its HCAs, as fast as its ports together, the same device for the same list; bad lists are refused.
TEST_F(IbFakeNet, MakeVDeviceMergesPortsOfOneLinkLayer) {
  std::vector<IbPortDesc> ports = {fakeIbPort("mlx5_0", 1, 1), fakeIbPort("mlx5_1", 1, 2), fakeIbPort("mlx5_2", 1, 3)};
  ports[2].linkLayer = IbLinkLayer::kInfiniband;
  IbNet net(std::make_unique<FakeIbVerbs>(fabric_, ports));
  std::string why;
  ASSERT_EQ(net.discover(&why), ncclSuccess) << why;
  ASSERT_EQ(net.ndev(), 3);
  auto make = [&](std::vector<int> devs, int* dev) {
    ncclNetVDeviceProps_v11_t props{};
    props.ndevs = static_cast<int>(devs.size());
    for (size_t i = 0; i < devs.size() && i < NCCL_NET_MAX_DEVS_PER_NIC_V11; ++i) props.devs[i] = devs[i];
    return net.makeVDevice(props, dev);
  };
  int dev = -1;
  ASSERT_EQ(make({1}, &dev), ncclSuccess);
  EXPECT_EQ(dev, 1);
  ASSERT_EQ(make({0, 1}, &dev), ncclSuccess);
  EXPECT_EQ(dev, 3);
  EXPECT_EQ(net.ndev(), 4);
  ASSERT_EQ(make({0, 1}, &dev), ncclSuccess);
  EXPECT_EQ(dev, 3) << "the same ports make the same device";
  EXPECT_EQ(net.ndev(), 4);
  ncclNetProperties_v11_t props, one;
  ASSERT_EQ(net.getProperties(3, &props), ncclSuccess);
  ASSERT_EQ(net.getProperties(0, &one), ncclSuccess);
  EXPECT_STREQ(props.name, "mlx5_0+mlx5_1");
  EXPECT_EQ(props.speed, 2 * one.speed);
  EXPECT_EQ(props.vProps.ndevs, 2);
  EXPECT_EQ(props.vProps.devs[0], 0);
  EXPECT_EQ(props.vProps.devs[1], 1);
  EXPECT_EQ(net.deviceText(3), "mlx5_0:1+mlx5_1:1");
  EXPECT_EQ(net.ports(3), (std::vector<int>{0, 1}));
  for (const auto& bad : std::vector<std::pair<std::vector<int>, const char*>>{{{0, 0}, "twice"},
                                                                               {{0, 7}, "does not exist"},
                                                                               {{0, 2}, "link layer"},
                                                                               {{}, "spans 1 to 4"},
                                                                               {{0, 1, 2, 0, 1}, "spans 1 to 4"}}) {
    SCOPED_TRACE(bad.second);
    dev = 99;
    setThreadLastError("");
    EXPECT_EQ(make(bad.first, &dev), ncclInvalidArgument);
    EXPECT_EQ(dev, -1);
    EXPECT_NE(std::string(threadLastError()).find(bad.second), std::string::npos) << threadLastError();
  }
  EXPECT_EQ(net.getProperties(4, &props), ncclInvalidArgument);
  // NCCL_IB_MERGE_NICS=0, as NCCL: no merging, one port still itself.
  setSettings({{"NCCL_IB_MERGE_NICS", "0"}});
  setThreadLastError("");
  EXPECT_EQ(make({0, 1}, &dev), ncclInvalidUsage);
  EXPECT_NE(std::string(threadLastError()).find("NCCL_IB_MERGE_NICS=0"), std::string::npos) << threadLastError();
  ASSERT_EQ(make({1}, &dev), ncclSuccess);
  EXPECT_EQ(dev, 1);
  setSettings({{"NCCL_IB_MERGE_NICS", nullptr}});
}

// A merged receiver flushes through each of its ports: one read a port, on that port's flush queue pair, with that
// port's keys; the request completes once every read has.
TEST_F(IbFakeNet, MergedReceiverFlushesThroughEveryPort) {
  gpuDirect(/*peerMemory=*/true, /*dmaBuf=*/false);
  a_ = makeHost(1, IbLinkLayer::kEthernet, 1);
  b_ = makeHost(2, IbLinkLayer::kEthernet, 2);
  const int devB = mergeAll(b_.get());
  void *send, *recv;
  ncclResult_t sr, rr;
  connectPair(a_.get(), b_.get(), &send, &recv, &sr, &rr, NCCL_NET_TRAFFIC_CLASS_UNDEF, 0, devB);
  ASSERT_EQ(sr, ncclSuccess);
  ASSERT_EQ(rr, ncclSuccess);
  auto* rc = static_cast<IbComm*>(recv);
  ASSERT_TRUE(rc->flushes());
  ASSERT_EQ(rc->ports.size(), 2u);
  std::vector<uint8_t> src = pattern(4096, 5), dst(4096, 0);
  void* smh = reg(send, src);
  void* rmh = nullptr;
  ASSERT_EQ(ibNetTable()->regMr(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, &rmh), ncclSuccess);
  ASSERT_EQ(exchange(send, recv, src, smh, dst, rmh), 4096);
  void* req = flush(recv, dst.data(), 4096, rmh);
  ASSERT_NE(req, nullptr);
  std::vector<FakeIbFabric::ReadRecord> reads = fabric_->reads();
  ASSERT_EQ(reads.size(), 2u);
  for (size_t p = 0; p < 2; ++p) {
    EXPECT_EQ(reads[p].srcQpn, rc->ports[p].flushQp->qpn());
    EXPECT_EQ(reads[p].dstQpn, rc->ports[p].flushQp->qpn());
  }
  int size = -1;
  EXPECT_EQ(wait(req, &size), ncclSuccess);
  closePair(send, smh, recv, rmh);
}

// NCCL_IB_FIFO_TC, as NCCL: on RoCE a receiver's queue pairs (which send its receive descriptors) take it, the sender's
// keep NCCL_IB_TC; on InfiniBand it is not used; unset, both sides take NCCL_IB_TC.
TEST_F(IbFakeNet, FifoTrafficClassIsTheReceiversOnRoce) {
  struct Case {
    IbLinkLayer ll;
    const char* fifoTc;
    int sendTc, recvTc;
  };
  setenv("NCCL_IB_TC", "41", 1);
  for (const Case& k : {Case{IbLinkLayer::kEthernet, "106", 41, 106}, Case{IbLinkLayer::kEthernet, nullptr, 41, 41},
                        Case{IbLinkLayer::kInfiniband, "106", 41, 41}}) {
    SCOPED_TRACE(std::string(k.ll == IbLinkLayer::kEthernet ? "RoCE" : "InfiniBand") +
                 ", NCCL_IB_FIFO_TC=" + (k.fifoTc ? k.fifoTc : "(unset)"));
    setSettings({{"NCCL_IB_FIFO_TC", k.fifoTc}});
    const size_t before = fabric_->rtrs().size();
    void *send, *recv;
    connect(&send, &recv, k.ll);
    const std::vector<FakeIbFabric::RtrRecord> rtrs = fabric_->rtrs();
    size_t sendQps = 0, recvQps = 0;
    for (size_t i = before; i < rtrs.size(); ++i) {
      if (qpIndex(send, rtrs[i].qpn) >= 0) {
        EXPECT_EQ(rtrs[i].trafficClass, k.sendTc);
        sendQps++;
      } else if (qpIndex(recv, rtrs[i].qpn) >= 0) {
        EXPECT_EQ(rtrs[i].trafficClass, k.recvTc);
        recvQps++;
      }
    }
    EXPECT_EQ(sendQps, 1u);
    EXPECT_EQ(recvQps, 1u);
    closePair(send, nullptr, recv, nullptr);
  }
  unsetenv("NCCL_IB_TC");
  unsetenv("NCCL_IB_FIFO_TC");
  paramsReload();
}

// NCCL_IB_USE_INLINE=1: a receiver's 32-byte receive descriptors go as inline writes (its queue pairs created to take
// them); data writes never. By default nothing is inline. Messages arrive intact either way.
TEST_F(IbFakeNet, UseInlineSendsReceiveDescriptorsInline) {
  for (const char* setting : {"1", "0"}) {
    SCOPED_TRACE(std::string("NCCL_IB_USE_INLINE=") + setting);
    setenv("NCCL_IB_USE_INLINE", setting, 1);
    paramsReload();
    void *send, *recv;
    connect(&send, &recv);
    std::vector<uint8_t> src = pattern(3000, 4), dst(4096, 0);
    void* smh = reg(send, src);
    void* rmh = reg(recv, dst);
    fabric_->clearWrites();
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 3000);
      EXPECT_EQ(memcmp(dst.data(), src.data(), src.size()), 0);
    }
    size_t descs = 0, inlined = 0;
    for (const auto& w : fabric_->writes()) {
      const bool desc = qpIndex(recv, w.srcQpn) >= 0;
      descs += desc;
      inlined += w.inlined;
      if (w.inlined) {
        EXPECT_TRUE(desc) << "only receive descriptors go inline";
      }
    }
    EXPECT_EQ(descs, 3u);
    EXPECT_EQ(inlined, setting[0] == '1' ? 3u : 0u);
    closePair(send, smh, recv, rmh);
  }
  unsetenv("NCCL_IB_USE_INLINE");
}

// Adaptive routing, as NCCL's IB net: on InfiniBand ports by default, a message above NCCL_IB_AR_THRESHOLD (8192)
// goes as a plain RDMA write of its data and then a zero-length write with immediate on the same queue pair; at or
// below it, and on RoCE ports unless NCCL_IB_ADAPTIVE_ROUTING=1, one write with immediate. Data and sizes intact.
TEST_F(IbFakeNet, AdaptiveRoutingSendsTheImmediateAfterTheData) {
  struct Case {
    IbLinkLayer ll;
    const char* ar;         // NCCL_IB_ADAPTIVE_ROUTING, or null
    const char* threshold;  // NCCL_IB_AR_THRESHOLD, or null
    size_t size;
    bool apart;
  };
  const Case cases[] = {
      {IbLinkLayer::kInfiniband, nullptr, nullptr, 8192, false},
      {IbLinkLayer::kInfiniband, nullptr, nullptr, 8193, true},
      {IbLinkLayer::kInfiniband, nullptr, "65536", 65536, false},
      {IbLinkLayer::kInfiniband, nullptr, "65536", 65537, true},
      {IbLinkLayer::kInfiniband, nullptr, "-2", 8192, false},
      {IbLinkLayer::kInfiniband, nullptr, "-2", 8193, true},
      {IbLinkLayer::kInfiniband, "0", nullptr, 1 << 20, false},
      {IbLinkLayer::kEthernet, nullptr, nullptr, 1 << 20, false},
      {IbLinkLayer::kEthernet, "1", nullptr, 1 << 20, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.ll == IbLinkLayer::kInfiniband ? "InfiniBand" : "RoCE") + ", NCCL_IB_ADAPTIVE_ROUTING=" +
                 (k.ar ? k.ar : "(unset)") + ", NCCL_IB_AR_THRESHOLD=" + (k.threshold ? k.threshold : "(unset)") +
                 ", " + std::to_string(k.size) + " bytes");
    setSettings({{"NCCL_IB_ADAPTIVE_ROUTING", k.ar}, {"NCCL_IB_AR_THRESHOLD", k.threshold}});
    void *send, *recv;
    connect(&send, &recv, k.ll);
    std::vector<uint8_t> src = pattern(k.size, 5), dst(k.size, 0);
    void* smh = reg(send, src);
    void* rmh = reg(recv, dst);
    fabric_->clearWrites();
    EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), static_cast<int>(k.size));
    EXPECT_TRUE(src == dst);
    std::vector<FakeIbFabric::WriteRecord> sent;
    for (const auto& w : fabric_->writes())
      if (qpIndex(send, w.srcQpn) >= 0) sent.push_back(w);  // the sender's writes (not the receive descriptor)
    if (k.apart) {
      ASSERT_EQ(sent.size(), 2u);
      EXPECT_FALSE(sent[0].withImm);
      EXPECT_EQ(sent[0].length, k.size);
      EXPECT_TRUE(sent[1].withImm);
      EXPECT_EQ(sent[1].length, 0u);
      EXPECT_EQ(sent[1].imm, k.size);
      EXPECT_EQ(sent[1].srcQpn, sent[0].srcQpn);
    } else {
      ASSERT_EQ(sent.size(), 1u);
      EXPECT_TRUE(sent[0].withImm);
      EXPECT_EQ(sent[0].length, k.size);
    }
    closePair(send, smh, recv, rmh);
  }
}

// The queue pairs' service level and traffic class, as NCCL 2.28's IB net sets them: NCCL_IB_SL and NCCL_IB_TC where
// set, else the communicator's config.trafficClass (ncclNetCommConfig) where set, else 0; both ends alike.
TEST_F(IbFakeNet, ServiceLevelAndTrafficClassFollowTheConfigUnlessSet) {
  struct Case {
    int configClass;
    const char* sl;  // NCCL_IB_SL, null: unset
    const char* tc;  // NCCL_IB_TC
    int wantSl, wantTc;
  };
  const Case cases[] = {
      {NCCL_NET_TRAFFIC_CLASS_UNDEF, nullptr, nullptr, 0, 0},
      {5, nullptr, nullptr, 5, 5},
      {106, nullptr, nullptr, 15, 106},  // a service level is 4 bits
      {5, "3", nullptr, 3, 5},
      {5, nullptr, "96", 5, 96},
      {NCCL_NET_TRAFFIC_CLASS_UNDEF, "2", "64", 2, 64},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("config.trafficClass " + std::to_string(k.configClass) + ", NCCL_IB_SL " + (k.sl ? k.sl : "-") +
                 ", NCCL_IB_TC " + (k.tc ? k.tc : "-"));
    setSettings({{"NCCL_IB_SL", k.sl}, {"NCCL_IB_TC", k.tc}});
    a_ = makeHost(1);
    b_ = makeHost(2);
    void *send = nullptr, *recv = nullptr;
    ncclResult_t sr, rr;
    const size_t before = fabric_->rtrs().size();
    connectPair(a_.get(), b_.get(), &send, &recv, &sr, &rr, k.configClass);
    ASSERT_EQ(sr, ncclSuccess);
    ASSERT_EQ(rr, ncclSuccess);
    const std::vector<FakeIbFabric::RtrRecord> rtrs = fabric_->rtrs();
    ASSERT_GE(rtrs.size(), before + 2) << "both ends' queue pairs";
    for (size_t i = before; i < rtrs.size(); i++) {
      EXPECT_EQ(rtrs[i].sl, k.wantSl) << "QP " << rtrs[i].qpn;
      EXPECT_EQ(rtrs[i].trafficClass, k.wantTc) << "QP " << rtrs[i].qpn;
    }
    closePair(send, nullptr, recv, nullptr);
  }
  unsetenv("NCCL_IB_SL");
  unsetenv("NCCL_IB_TC");
  paramsReload();
}

// NCCL_IB_PKEY: the partition key index of every queue pair of both ends (0 by default), as in NCCL.
TEST_F(IbFakeNet, PkeyIndexIsTheQueuePairsPartition) {
  for (const char* pkey : {static_cast<const char*>(nullptr), "3"}) {
    SCOPED_TRACE(std::string("NCCL_IB_PKEY=") + (pkey ? pkey : "(unset)"));
    if (pkey != nullptr) setenv("NCCL_IB_PKEY", pkey, 1);
    paramsReload();
    const size_t before = fabric_->rtrs().size();
    void *send, *recv;
    connect(&send, &recv);
    const std::vector<FakeIbFabric::RtrRecord> rtrs = fabric_->rtrs();
    ASSERT_GE(rtrs.size(), before + 2);
    for (size_t i = before; i < rtrs.size(); i++) EXPECT_EQ(rtrs[i].pkeyIndex, pkey ? 3 : 0) << "QP " << rtrs[i].qpn;
    closePair(send, nullptr, recv, nullptr);
  }
  unsetenv("NCCL_IB_PKEY");
  paramsReload();
}

TEST_F(IbFakeNet, ErrorCompletionFailsTheRequest) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(512, 1), dst(512, 0);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  void* rreq = postRecv(recv, dst, rmh, 0);
  ASSERT_NE(rreq, nullptr);
  fabric_->failNextWrite(kIbWcRemAccessErr);
  void* sreq = nullptr;
  ASSERT_EQ(t->isend(send, src.data(), src.size(), 0, smh, nullptr, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  int done = 0, size = 0;
  EXPECT_EQ(t->test(sreq, &done, &size), ncclSystemError);
  EXPECT_EQ(done, 0);
  std::string err = threadLastError();
  EXPECT_NE(err.find("remote access error"), std::string::npos) << err;
  EXPECT_NE(err.find("data write"), std::string::npos) << err;
  // The connection stays failed.
  EXPECT_EQ(t->isend(send, src.data(), src.size(), 0, smh, nullptr, &sreq), ncclSystemError);
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
}

TEST_F(IbFakeNet, MessageLargerThanItsReceiveIsRefused) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(2048, 1), dst(1024, 0);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  postRecv(recv, dst, rmh, 0);
  void* sreq = nullptr;
  EXPECT_EQ(t->isend(send, src.data(), src.size(), 0, smh, nullptr, &sreq), ncclInvalidUsage);
  EXPECT_EQ(sreq, nullptr);
  EXPECT_NE(std::string(threadLastError()).find("larger than the receive"), std::string::npos) << threadLastError();
  EXPECT_TRUE(fabric_->writes().size() == 1u) << "only the receive descriptor was written";
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
}

TEST_F(IbFakeNet, ReceiverNoticesAPeerThatClosed) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> dst(64, 0);
  void* rmh = reg(recv, dst);
  void* rreq = postRecv(recv, dst, rmh, 0);
  ASSERT_NE(rreq, nullptr);
  ASSERT_EQ(t->closeSend(send), ncclSuccess);
  int size = 0;
  EXPECT_EQ(wait(rreq, &size), ncclRemoteError);
  EXPECT_NE(std::string(threadLastError()).find("closed the connection"), std::string::npos) << threadLastError();
  t->deregMr(recv, rmh);
  t->closeRecv(recv);
}

// A sender that sent its last message and closed: the receiver's next receive, posted ahead of need, cannot write its
// descriptor (the sender's queue pairs are gone, an error completion on the receiver's CQ). The receives that
// already arrived are still reported done, with their data and size, whichever order they are tested in; only the
// receive that can never be matched fails, and the comm stays failed for new requests.
TEST_F(IbFakeNet, ReceivesThatArrivedCompleteAfterTheSenderClosed) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src1 = pattern(300, 1), src2 = pattern(200, 2), dst1(512, 0), dst2(512, 0), dst3(512, 0);
  void* smh1 = reg(send, src1);
  void* smh2 = reg(send, src2);
  void* rmh1 = reg(recv, dst1);
  void* rmh2 = reg(recv, dst2);
  void* rmh3 = reg(recv, dst3);
  void* r1 = postRecv(recv, dst1, rmh1, 0);
  void* r2 = postRecv(recv, dst2, rmh2, 0);
  ASSERT_NE(r1, nullptr);
  ASSERT_NE(r2, nullptr);
  void *s1 = nullptr, *s2 = nullptr;
  ASSERT_EQ(t->isend(send, src1.data(), src1.size(), 0, smh1, nullptr, &s1), ncclSuccess);
  ASSERT_EQ(t->isend(send, src2.data(), src2.size(), 0, smh2, nullptr, &s2), ncclSuccess);
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  int size = -1;
  ASSERT_EQ(wait(s1, &size), ncclSuccess);
  ASSERT_EQ(wait(s2, &size), ncclSuccess);
  EXPECT_EQ(t->deregMr(send, smh1), ncclSuccess);
  EXPECT_EQ(t->deregMr(send, smh2), ncclSuccess);
  ASSERT_EQ(t->closeSend(send), ncclSuccess);

  void* r3 = postRecv(recv, dst3, rmh3, 0);  // its descriptor write fails on the receiver's CQ
  ASSERT_NE(r3, nullptr);
  int done = 0;
  size = -1;
  EXPECT_EQ(t->test(r2, &done, &size), ncclSuccess) << threadLastError();  // polls every completion, the error too
  EXPECT_EQ(done, 1);
  EXPECT_EQ(size, 200);
  done = 0;
  size = -1;
  EXPECT_EQ(t->test(r1, &done, &size), ncclSuccess) << threadLastError();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(size, 300);
  EXPECT_TRUE(std::equal(src1.begin(), src1.end(), dst1.begin()));
  EXPECT_TRUE(std::equal(src2.begin(), src2.end(), dst2.begin()));
  done = 0;
  EXPECT_EQ(t->test(r3, &done, &size), ncclSystemError);
  EXPECT_EQ(done, 0);
  EXPECT_NE(std::string(threadLastError()).find("receive descriptor write"), std::string::npos) << threadLastError();
  void* r4 = reinterpret_cast<void*>(1);
  void* data = dst1.data();
  size_t bytes = dst1.size();
  int tag = 0;
  EXPECT_EQ(t->irecv(recv, 1, &data, &bytes, &tag, &rmh1, nullptr, &r4), ncclSystemError);
  EXPECT_EQ(r4, nullptr);
  for (void* mh : {rmh1, rmh2, rmh3}) EXPECT_EQ(t->deregMr(recv, mh), ncclSuccess);
  EXPECT_EQ(t->closeRecv(recv), ncclSuccess);
  EXPECT_EQ(fabric_->liveMrs(), 0);
}

// A connect the proxy gives up on mid-setup (its communicator failed or was aborted): the connector's comm lives in
// the handle between calls, with its queue pairs and control registration; finalize of the communicator's context
// releases them.
TEST_F(IbFakeNet, FinalizeReleasesAConnectGivenUpMidSetup) {
  a_ = makeHost(1);
  b_ = makeHost(2);
  const ncclNet_v11_t* t = ibNetTable();
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  IbNetCtx bctx{b_.get(), NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(t->listen(&bctx, 0, handle, &listen), ncclSuccess);
  auto* actx = new IbNetCtx{a_.get(), NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void* send = nullptr;
  ASSERT_EQ(t->connect(actx, 0, handle, &send, nullptr), ncclSuccess) << threadLastError();
  ASSERT_EQ(send, nullptr) << "the acceptor has not answered: the connect is mid-setup";
  EXPECT_GT(fabric_->liveQps(), 0);
  EXPECT_GT(fabric_->liveMrs(), 0);
  EXPECT_EQ(t->finalize(actx), ncclSuccess);
  EXPECT_EQ(t->closeListen(listen), ncclSuccess);
  EXPECT_EQ(fabric_->liveQps(), 0);
  EXPECT_EQ(fabric_->liveMrs(), 0);
}

TEST_F(IbFakeNet, LinkLayersMustMatch) {
  auto roce = makeHost(1, IbLinkLayer::kEthernet);
  auto ib = makeHost(2, IbLinkLayer::kInfiniband);
  void *send, *recv;
  ncclResult_t sr, rr;
  connectPair(roce.get(), ib.get(), &send, &recv, &sr, &rr);
  EXPECT_EQ(rr, ncclRemoteError);
  EXPECT_EQ(recv, nullptr);
  EXPECT_NE(sr, ncclSuccess);  // the acceptor hung up
  EXPECT_EQ(send, nullptr);
  EXPECT_EQ(fabric_->liveQps(), 0);
}

TEST_F(IbFakeNet, ConnectRefusesAForeignHandle) {
  a_ = makeHost(1);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  packIbHandle(loopbackAddr(1), 1, handle);
  handle[3] ^= 0x40;
  void* send = nullptr;
  IbNetCtx ctx{a_.get(), NCCL_NET_TRAFFIC_CLASS_UNDEF};
  EXPECT_EQ(ibNetTable()->connect(&ctx, 0, handle, &send, nullptr), ncclInvalidArgument);
  EXPECT_EQ(send, nullptr);
  EXPECT_NE(std::string(threadLastError()).find("magic"), std::string::npos) << threadLastError();
}

TEST_F(IbFakeNet, PropertiesDescribeTheFakePort) {
  auto net = makeHost(3);
  ncclNetProperties_v11_t p;
  ASSERT_EQ(net->getProperties(0, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "mlx5_0");
  EXPECT_EQ(p.port, 1);
  EXPECT_EQ(p.speed, 100000);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_EQ(p.guid, 0x1003u);
  ASSERT_NE(p.pciPath, nullptr);
  EXPECT_EQ(net->getProperties(1, &p), ncclInvalidArgument);
}

// ---- GPUDirect RDMA (host buffers stand in for GPU memory) ----------------------------------

TEST_F(IbFakeNet, PropertiesOfferGpuMemoryWithPeerMemory) {
  gpuDirect(/*peerMemory=*/true, /*dmaBuf=*/false);
  auto net = makeHost(3);
  EXPECT_TRUE(net->device(0).peerMemory);
  EXPECT_FALSE(net->device(0).dmaBuf);
  ncclNetProperties_v11_t p;
  ASSERT_EQ(net->getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST | NCCL_PTR_CUDA);
}

TEST_F(IbFakeNet, PropertiesOfferDmaBufUnlessDisabled) {
  gpuDirect(/*peerMemory=*/false, /*dmaBuf=*/true);
  auto net = makeHost(3);
  EXPECT_FALSE(net->device(0).peerMemory);
  EXPECT_TRUE(net->device(0).dmaBuf);
  ncclNetProperties_v11_t p;
  ASSERT_EQ(net->getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF);
  setenv("NCCL_DMABUF_ENABLE", "0", 1);
  paramsReload();
  ASSERT_EQ(net->getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
  EXPECT_FALSE(net->dmaBuf(0));
}

TEST_F(IbFakeNet, GpuMemoryIsRefusedWithoutPeerMemory) {
  gpuDirect(/*peerMemory=*/false, /*dmaBuf=*/false);
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> buf(4096);
  void* mh = nullptr;
  EXPECT_EQ(t->regMr(recv, buf.data(), buf.size(), NCCL_PTR_CUDA, &mh), ncclInternalError);
  EXPECT_EQ(mh, nullptr);
  std::string err = threadLastError();
  EXPECT_NE(err.find("no GPUDirect RDMA peer-memory module"), std::string::npos) << err;
  EXPECT_NE(err.find("dma-buf"), std::string::npos) << err;
  // Nor through a dma-buf, which this HCA does not take.
  int fd = memfd_create("chorus-ib-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(t->regMrDmaBuf(recv, buf.data(), buf.size(), NCCL_PTR_CUDA, 0, fd, &mh), ncclInternalError);
  err = threadLastError();
  EXPECT_NE(err.find("does not support dma-buf"), std::string::npos) << err;
  close(fd);
  // No GPUDirect RDMA: no flush queue pair, and iflush has nothing to wait for.
  EXPECT_EQ(static_cast<IbComm*>(recv)->flushes(), false);
  mh = reg(recv, buf);
  EXPECT_EQ(flush(recv, buf.data(), 4096, mh), nullptr);
  EXPECT_TRUE(fabric_->reads().empty());
  closePair(send, nullptr, recv, mh);
}

TEST_F(IbFakeNet, GpuMemoryIsRegisteredWithPeerMemory) {
  gpuDirect(/*peerMemory=*/true, /*dmaBuf=*/false);
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(3000, 5), dst(4096, 0);
  void* smh = reg(send, src);
  void* rmh = nullptr;
  ASSERT_EQ(t->regMr(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, &rmh), ncclSuccess) << threadLastError();
  ASSERT_NE(rmh, nullptr);
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 3000);
  EXPECT_EQ(memcmp(dst.data(), src.data(), src.size()), 0);
  closePair(send, smh, recv, rmh);
}

// PCIe relaxed ordering, as NCCL decides it: data registrations (regMr and regMrDmaBuf) ask for it where the verbs
// offer it (ibv_reg_mr_iova2) and NCCL_IB_PCI_RELAXED_ORDERING is 2 (the default) or 1; with 0, or verbs without
// it, never. The comms' control memory never does (a receive descriptor's sequence word must land last). Data
// still arrives intact.
TEST_F(IbFakeNet, DataRegistrationsAskForRelaxedOrderingWhereOffered) {
  struct Case {
    bool offered;
    const char* setting;
    bool want;
  };
  gpuDirect(/*peerMemory=*/false, /*dmaBuf=*/true);
  for (const Case& k : {Case{true, nullptr, true}, Case{true, "1", true}, Case{true, "0", false},
                        Case{false, nullptr, false}, Case{false, "1", false}}) {
    SCOPED_TRACE(std::string(k.offered ? "offered" : "not offered") +
                 ", NCCL_IB_PCI_RELAXED_ORDERING=" + (k.setting ? k.setting : "(unset)"));
    setSettings({{"NCCL_IB_PCI_RELAXED_ORDERING", k.setting}});
    relaxedOrdering_ = k.offered;
    void *send, *recv;
    connect(&send, &recv);
    EXPECT_EQ(a_->relaxedOrdering(), k.want);
    int fd = memfd_create("chorus-ib-test", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> src = pattern(5000, 3), dst(8192, 0);
    void* smh = reg(send, src);
    void* rmh = regDmaBuf(recv, dst, 0, fd);
    ASSERT_NE(rmh, nullptr);
    close(fd);  // the registration holds the memory
    EXPECT_EQ(fabric_->mrRelaxed(static_cast<IbMhandle*>(smh)->mr[0].lkey), k.want ? 1 : 0);
    EXPECT_EQ(fabric_->mrRelaxed(static_cast<IbMhandle*>(rmh)->mr[0].lkey), k.want ? 1 : 0);
    EXPECT_EQ(fabric_->mrRelaxed(static_cast<IbComm*>(send)->ports[0].ctrlMr.lkey), 0);
    EXPECT_EQ(fabric_->mrRelaxed(static_cast<IbComm*>(recv)->ports[0].ctrlMr.lkey), 0);
    EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 5000);
    EXPECT_EQ(memcmp(dst.data(), src.data(), src.size()), 0);
    closePair(send, smh, recv, rmh);
  }
}

TEST_F(IbFakeNet, DmaBufRegistrationRecordsItsFdAndCarriesData) {
  gpuDirect(/*peerMemory=*/false, /*dmaBuf=*/true);
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  int fd = memfd_create("chorus-ib-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> src = pattern(6000, 9), dst(8192, 0);
  void* smh = reg(send, src);
  void* rmh = regDmaBuf(recv, dst, 4096, fd);
  ASSERT_NE(rmh, nullptr);
  std::vector<FakeIbFabric::DmaBufRecord> bufs = fabric_->dmaBufs();
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0].fd, fd);
  EXPECT_EQ(bufs[0].offset, 4096u);
  EXPECT_EQ(bufs[0].iova, reinterpret_cast<uintptr_t>(dst.data()));
  EXPECT_EQ(bufs[0].size, dst.size());
  EXPECT_EQ(bufs[0].key, static_cast<IbMhandle*>(rmh)->mr[0].rkey);
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 6000);
  EXPECT_EQ(memcmp(dst.data(), src.data(), src.size()), 0);
  // dma-buf alone makes GPUDirect RDMA possible, so the receiver flushes, through the dma-buf registration.
  void* freq = flush(recv, dst.data(), 6000, rmh);
  ASSERT_NE(freq, nullptr);
  ASSERT_EQ(fabric_->reads().size(), 1u);
  int n = -1;
  EXPECT_EQ(wait(freq, &n), ncclSuccess);
  // A closed fd is refused by the "driver"; NCCL_DMABUF_ENABLE=0 by the net.
  void* mh = nullptr;
  close(fd);
  EXPECT_NE(t->regMrDmaBuf(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, 0, fd, &mh), ncclSuccess);
  EXPECT_NE(std::string(threadLastError()).find("not open"), std::string::npos) << threadLastError();
  setenv("NCCL_DMABUF_ENABLE", "0", 1);
  paramsReload();
  fd = memfd_create("chorus-ib-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(t->regMrDmaBuf(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, 0, fd, &mh), ncclInternalError);
  EXPECT_NE(std::string(threadLastError()).find("NCCL_DMABUF_ENABLE=0"), std::string::npos) << threadLastError();
  EXPECT_EQ(mh, nullptr);
  close(fd);
  EXPECT_EQ(fabric_->dmaBufs().size(), 1u);
  closePair(send, smh, recv, rmh);
  EXPECT_EQ(fabric_->liveQps(), 0);
}

TEST_F(IbFakeNet, IflushReadsTheReceivedBufferOnALoopbackQueuePair) {
  gpuDirect(/*peerMemory=*/true, /*dmaBuf=*/false);
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  auto* rc = static_cast<IbComm*>(recv);
  ASSERT_TRUE(rc->flushes());
  EXPECT_FALSE(static_cast<IbComm*>(send)->flushes()) << "only receivers flush";
  const uint32_t flushQpn = rc->ports[0].flushQp->qpn();
  for (const auto& qp : rc->qps) EXPECT_NE(qp->qpn(), flushQpn);
  std::vector<uint8_t> src = pattern(4096, 13), dst(4096, 0);
  void* smh = reg(send, src);
  void* rmh = nullptr;
  ASSERT_EQ(t->regMr(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, &rmh), ncclSuccess);
  ASSERT_EQ(exchange(send, recv, src, smh, dst, rmh), 4096);
  fabric_->clearWrites();
  void* req = flush(recv, dst.data(), 4096, rmh);
  ASSERT_NE(req, nullptr);
  std::vector<FakeIbFabric::ReadRecord> reads = fabric_->reads();
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].srcQpn, flushQpn);
  EXPECT_EQ(reads[0].dstQpn, flushQpn) << "the flush queue pair reads from itself";
  EXPECT_EQ(reads[0].remoteAddr, reinterpret_cast<uintptr_t>(dst.data()));
  EXPECT_EQ(reads[0].length, 1u);
  EXPECT_TRUE(fabric_->writes().empty());
  EXPECT_EQ(rc->flushSink & 0xff, dst[0]) << "the read landed in the flush buffer";
  int size = -12345;
  ASSERT_EQ(wait(req, &size), ncclSuccess);
  EXPECT_EQ(size, -12345) << "a flush reports no size";

  // Several buffers: the last one that received data is read.
  void* data[3] = {dst.data(), dst.data() + 1024, dst.data() + 2048};
  int sizes[3] = {16, 8, 0};
  void* mhs[3] = {rmh, rmh, rmh};
  ASSERT_EQ(t->iflush(recv, 3, data, sizes, mhs, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  reads = fabric_->reads();
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[1].remoteAddr, reinterpret_cast<uintptr_t>(dst.data() + 1024));
  ASSERT_EQ(wait(req, &size), ncclSuccess);

  // Nothing received: nothing to flush.
  sizes[0] = sizes[1] = 0;
  req = reinterpret_cast<void*>(1);
  ASSERT_EQ(t->iflush(recv, 3, data, sizes, mhs, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(fabric_->reads().size(), 2u);

  // The connection still carries data after flushes shared its request slots.
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 4096);
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
  EXPECT_EQ(fabric_->liveQps(), 0) << "the flush queue pair is gone";
  EXPECT_EQ(fabric_->liveMrs(), 0) << "the flush buffer is deregistered";
}

TEST_F(IbFakeNet, GdrFlushDisableTurnsFlushesOff) {
  setenv("NCCL_GDR_FLUSH_DISABLE", "1", 1);
  paramsReload();
  gpuDirect(/*peerMemory=*/true, /*dmaBuf=*/true);
  void *send, *recv;
  connect(&send, &recv);
  EXPECT_EQ(static_cast<IbComm*>(recv)->flushes(), false);
  std::vector<uint8_t> dst(1024, 0);
  void* rmh = nullptr;
  ASSERT_EQ(ibNetTable()->regMr(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, &rmh), ncclSuccess);
  EXPECT_EQ(flush(recv, dst.data(), 1024, rmh), nullptr);
  EXPECT_TRUE(fabric_->reads().empty());
  ibNetTable()->deregMr(recv, rmh);
  ibNetTable()->closeSend(send);
  ibNetTable()->closeRecv(recv);
}

TEST_F(IbFakeNet, FlushErrorCompletionFailsTheRequest) {
  gpuDirect(/*peerMemory=*/true, /*dmaBuf=*/false);
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(256, 2), dst(256, 0);
  void* smh = reg(send, src);
  void* rmh = nullptr;
  ASSERT_EQ(t->regMr(recv, dst.data(), dst.size(), NCCL_PTR_CUDA, &rmh), ncclSuccess);
  ASSERT_EQ(exchange(send, recv, src, smh, dst, rmh), 256);
  fabric_->failNextRead(kIbWcRemAccessErr);
  void* req = flush(recv, dst.data(), 256, rmh);
  ASSERT_NE(req, nullptr);
  int done = 0, size = 0;
  EXPECT_EQ(t->test(req, &done, &size), ncclSystemError);
  EXPECT_EQ(done, 0);
  std::string err = threadLastError();
  EXPECT_NE(err.find("flush read"), std::string::npos) << err;
  EXPECT_NE(err.find("remote access error"), std::string::npos) << err;
  EXPECT_TRUE(fabric_->reads().empty());
  // The connection stays failed.
  void* rreq = nullptr;
  void* data = dst.data();
  size_t bytes = dst.size();
  int tag = 0;
  EXPECT_EQ(t->irecv(recv, 1, &data, &bytes, &tag, &rmh, nullptr, &rreq), ncclSystemError);
  EXPECT_EQ(t->iflush(recv, 1, &data, &size, &rmh, &rreq), ncclSystemError);
  t->deregMr(send, smh);
  t->deregMr(recv, rmh);
  t->closeSend(send);
  t->closeRecv(recv);
}

// ---- the real backend on this host ----------------------------------------------------------

// InfiniBand ports address each other by LID within a subnet, and through the routers otherwise, as NCCL: with a GRH
// to the peer's GID from the local routable GID, and the peer's FLID as the LID (its LID, with a WARN, where its GID
// has no FLID). Subnets are told apart by the low 16 bits of the GIDs' subnet prefixes.
TEST_F(IbFakeNet, InfinibandPortsOnAnotherSubnetGoThroughRouters) {
  // Host n: one InfiniBand port of LID 10 + n, GID 0 fe80::(subnet):0:n, and GID 1 with FLID `flid` where it is not 0.
  auto ibHost = [&](int n, int subnet, int flid) {
    IbPortDesc p = fakeIbPort("mlx5_0", 1, n);
    p.linkLayer = IbLinkLayer::kInfiniband;
    p.lid = 10 + n;
    IbGidEntry g0;
    g0.gid.raw[0] = 0xfe;
    g0.gid.raw[1] = 0x80;
    g0.gid.raw[6] = static_cast<uint8_t>(subnet >> 8);
    g0.gid.raw[7] = static_cast<uint8_t>(subnet);
    g0.gid.raw[15] = static_cast<uint8_t>(n);
    g0.type = IbGidType::kIbRoceV1;
    IbGidEntry g1 = g0;
    g1.gid.raw[4] = static_cast<uint8_t>(flid >> 8);
    g1.gid.raw[5] = static_cast<uint8_t>(flid);
    p.gids = flid != 0 ? std::vector<IbGidEntry>{g0, g1} : std::vector<IbGidEntry>{g0};
    auto net = std::make_unique<IbNet>(std::make_unique<FakeIbVerbs>(fabric_, std::vector<IbPortDesc>{p}));
    std::string why;
    EXPECT_EQ(net->discover(&why), ncclSuccess) << why;
    return net;
  };
  struct Case {
    int subnetA, subnetB, flidA, flidB;
    bool global;
    int lidSeenByA, lidSeenByB;  // the destination LID each side's queue pairs use
    int gidIndex;
  };
  for (const Case& k : {Case{1, 1, 0x101, 0x202, false, 12, 11, 1}, Case{1, 2, 0x101, 0x202, true, 0x202, 0x101, 1},
                        Case{1, 2, 0, 0, true, 12, 11, 0}}) {
    SCOPED_TRACE("subnets " + std::to_string(k.subnetA) + " and " + std::to_string(k.subnetB) + ", FLIDs " +
                 std::to_string(k.flidA) + " and " + std::to_string(k.flidB));
    fabric_ = std::make_shared<FakeIbFabric>();
    a_ = ibHost(1, k.subnetA, k.flidA);
    b_ = ibHost(2, k.subnetB, k.flidB);
    EXPECT_EQ(a_->device(0).gidIndex, k.gidIndex);
    void *send, *recv;
    ncclResult_t sr, rr;
    connectPair(a_.get(), b_.get(), &send, &recv, &sr, &rr);
    ASSERT_EQ(sr, ncclSuccess) << threadLastError();
    ASSERT_EQ(rr, ncclSuccess) << threadLastError();
    const uint32_t qpA = static_cast<IbComm*>(send)->qps[0]->qpn();
    const uint32_t qpB = static_cast<IbComm*>(recv)->qps[0]->qpn();
    int seen = 0;
    for (const auto& r : fabric_->rtrs()) {
      if (r.qpn != qpA && r.qpn != qpB) continue;
      const bool onA = r.qpn == qpA;
      const IbDevice& peer = onA ? b_->device(0) : a_->device(0);
      seen++;
      EXPECT_EQ(r.global, k.global);
      EXPECT_EQ(r.remoteLid, onA ? k.lidSeenByA : k.lidSeenByB);
      if (k.global) {
        EXPECT_EQ(0, memcmp(r.remoteGid.raw, peer.gid.raw, 16)) << "to the peer's routable GID";
        EXPECT_EQ(r.localGidIndex, k.gidIndex);
      }
    }
    EXPECT_EQ(seen, 2);
    exchangeIntactAndClose(send, recv, 5000, 4);
    a_.reset();
    b_.reset();
  }
}

// ---- ECE --------------------------------------------------------------------------------------

// Enhanced connection establishment as NCCL negotiates it, over 2 queue pairs: the acceptor sets the connector's
// offer on each of its queue pairs before RTR (the fake refuses it later) and keeps what its own provider offers of
// it; the connector then sets that agreement on its own. Nothing is set with NCCL_IB_ECE_ENABLE=0 on the connector,
// nor when either side's provider has no ECE; data moves in every case.
TEST_F(IbFakeNet, EceIsAgreedAsNcclDoes) {
  setSettings({{"NCCL_IB_QPS_PER_CONNECTION", "2"}});
  const IbEce offerA{0x02c9, 0xb, 0x3}, offerB{0x02c9, 0x6, 0x1}, agreed{0x02c9, 0x2, 0x1};
  struct Case {
    bool eceA, eceB;
    const char* enable;  // the connector's NCCL_IB_ECE_ENABLE
    bool agrees;
  };
  for (const Case& k : {Case{true, true, nullptr, true}, Case{true, true, "0", false},
                        Case{true, false, nullptr, false}, Case{false, true, nullptr, false}}) {
    SCOPED_TRACE(std::string("connector ECE ") + (k.eceA ? "yes" : "no") + ", acceptor ECE " + (k.eceB ? "yes" : "no") +
                 ", NCCL_IB_ECE_ENABLE " + (k.enable != nullptr ? k.enable : "unset"));
    fabric_ = std::make_shared<FakeIbFabric>();
    setSettings({{"NCCL_IB_ECE_ENABLE", k.enable}});
    ece_ = k.eceA;
    eceOffer_ = offerA;
    a_ = makeHost(1);
    ece_ = k.eceB;
    eceOffer_ = offerB;
    b_ = makeHost(2);
    void *send, *recv;
    ncclResult_t sr, rr;
    connectPair(a_.get(), b_.get(), &send, &recv, &sr, &rr);
    ASSERT_EQ(sr, ncclSuccess) << threadLastError();
    ASSERT_EQ(rr, ncclSuccess) << threadLastError();
    const auto sets = fabric_->eceSets();
    if (!k.agrees) {
      EXPECT_TRUE(sets.empty()) << sets.size() << " ibv_set_ece calls";
    } else {
      ASSERT_EQ(sets.size(), 4u);
      for (size_t i = 0; i < 2; ++i) {
        // The acceptor's first, asked for the connector's offer; then the connector's, asked for the agreement.
        const auto& acc = sets[i];
        const auto& con = sets[2 + i];
        EXPECT_EQ(acc.qpn, static_cast<IbComm*>(recv)->qps[i]->qpn());
        EXPECT_EQ(con.qpn, static_cast<IbComm*>(send)->qps[i]->qpn());
        EXPECT_TRUE(acc.asked.vendorId == offerA.vendorId && acc.asked.options == offerA.options &&
                    acc.asked.compMask == offerA.compMask);
        EXPECT_TRUE(acc.kept.vendorId == agreed.vendorId && acc.kept.options == agreed.options &&
                    acc.kept.compMask == agreed.compMask);
        EXPECT_TRUE(con.asked.vendorId == agreed.vendorId && con.asked.options == agreed.options &&
                    con.asked.compMask == agreed.compMask);
      }
    }
    exchangeIntactAndClose(send, recv, 70000, 3);
    a_.reset();
    b_.reset();
  }
}

// ---- asynchronous events ------------------------------------------------------------------------

// Waits until `net`'s watcher has taken `n` asynchronous events in all (they are handled on its thread).
void waitForEvents(IbNet* net, uint64_t n) {
  auto end = Clock::now() + kDeadline;
  while (net->asyncEventsTaken() < n) {
    ASSERT_LT(Clock::now(), end) << "the watcher took " << net->asyncEventsTaken() << " of " << n << " events";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// IBV_EVENT_DEVICE_FATAL on host 1's HCA. A dead HCA carries nothing and completes nothing, so its sender, waiting for
// a receive descriptor that cannot arrive, would wait for ever; after the event its next call fails, naming it. The
// receiver on host 2, whose descriptor write to the dead HCA fails, reports that error completion, not the event
// (its HCA is fine). A new connection from the dead HCA is refused at setup.
TEST_F(IbFakeNet, DeviceFatalEventFailsTheConnectionsOfItsHca) {
  void *send, *recv;
  connect(&send, &recv);
  const ncclNet_v11_t* t = ibNetTable();
  std::vector<uint8_t> src = pattern(4096, 1), dst(4096, 0);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  ASSERT_EQ(exchange(send, recv, src, smh, dst, rmh), 4096);
  IbHca* hca = nullptr;
  ASSERT_EQ(a_->openHca(0, &hca), ncclSuccess);
  fabric_->raiseHcaEvent(hca, kIbEventDeviceFatal);
  waitForEvents(a_.get(), 1);
  void* rreq = postRecv(recv, dst, rmh, 0);
  ASSERT_NE(rreq, nullptr);
  void* sreq = nullptr;
  EXPECT_EQ(t->isend(send, src.data(), src.size(), 0, smh, nullptr, &sreq), ncclSystemError);
  EXPECT_EQ(sreq, nullptr);
  std::string err = threadLastError();
  EXPECT_NE(err.find("NET/IB: sender on mlx5_0:1 to "), std::string::npos) << err;
  EXPECT_NE(err.find("HCA mlx5_0 reported a fatal error: local catastrophic error (asynchronous event 8)"),
            std::string::npos)
      << err;
  // The comm stays failed.
  EXPECT_EQ(t->isend(send, src.data(), src.size(), 0, smh, nullptr, &sreq), ncclSystemError);
  int size = 0;
  EXPECT_EQ(wait(rreq, &size), ncclSystemError);
  err = threadLastError();
  EXPECT_NE(err.find("receive descriptor write"), std::string::npos) << err;
  EXPECT_NE(err.find("transport retry counter exceeded"), std::string::npos) << err;
  EXPECT_EQ(err.find("catastrophic"), std::string::npos) << err;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  IbNetCtx actx{a_.get(), NCCL_NET_TRAFFIC_CLASS_UNDEF}, bctx{b_.get(), NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(t->listen(&bctx, 0, handle, &listen), ncclSuccess);
  void* send2 = nullptr;
  EXPECT_EQ(t->connect(&actx, 0, handle, &send2, nullptr), ncclSystemError);
  EXPECT_EQ(send2, nullptr);
  EXPECT_NE(std::string(threadLastError()).find("NET/IB: HCA mlx5_0 reported a fatal error: local catastrophic error"),
            std::string::npos)
      << threadLastError();
  EXPECT_EQ(t->closeListen(listen), ncclSuccess);
  closePair(send, smh, recv, rmh);
  EXPECT_EQ(fabric_->liveQps(), 0);
}

// A queue pair's fatal event fails the connection that owns the queue pair, and a CQ's the one that owns the CQ; the
// other connection between the same HCAs goes on.
TEST_F(IbFakeNet, QueuePairAndCqFatalEventsFailTheirConnectionOnly) {
  a_ = makeHost(1);
  b_ = makeHost(2);
  const ncclNet_v11_t* t = ibNetTable();
  void *send1, *recv1, *send2, *recv2;
  ncclResult_t sr, rr;
  connectPair(a_.get(), b_.get(), &send1, &recv1, &sr, &rr);
  ASSERT_TRUE(sr == ncclSuccess && rr == ncclSuccess);
  connectPair(a_.get(), b_.get(), &send2, &recv2, &sr, &rr);
  ASSERT_TRUE(sr == ncclSuccess && rr == ncclSuccess);
  std::vector<uint8_t> src1 = pattern(1000, 1), dst1(1000, 0), src2 = pattern(3000, 2), dst2(3000, 0);
  void* smh1 = reg(send1, src1);
  void* rmh1 = reg(recv1, dst1);
  void* smh2 = reg(send2, src2);
  void* rmh2 = reg(recv2, dst2);

  const uint32_t qpn = static_cast<IbComm*>(send1)->qps[0]->qpn();
  ASSERT_TRUE(fabric_->raiseQpEvent(qpn, kIbEventQpFatal));
  waitForEvents(a_.get(), 1);
  EXPECT_EQ(exchange(send2, recv2, src2, smh2, dst2, rmh2), 3000);
  EXPECT_TRUE(src2 == dst2);
  ASSERT_NE(postRecv(recv1, dst1, rmh1, 0), nullptr);
  void* sreq = nullptr;
  EXPECT_EQ(t->isend(send1, src1.data(), src1.size(), 0, smh1, nullptr, &sreq), ncclSystemError);
  std::string err = threadLastError();
  EXPECT_NE(err.find("HCA mlx5_0 reported a fatal error on queue pair " + std::to_string(qpn) +
                     ": local work queue catastrophic error (asynchronous event 1)"),
            std::string::npos)
      << err;

  ASSERT_TRUE(fabric_->raiseQpEvent(static_cast<IbComm*>(recv2)->qps[0]->qpn(), kIbEventCqErr));
  waitForEvents(b_.get(), 1);
  void* data = dst2.data();
  size_t bytes = dst2.size();
  int tag = 0;
  void* rreq = nullptr;
  EXPECT_EQ(t->irecv(recv2, 1, &data, &bytes, &tag, &rmh2, nullptr, &rreq), ncclSystemError);
  EXPECT_EQ(rreq, nullptr);
  err = threadLastError();
  EXPECT_NE(err.find("NET/IB: receiver on mlx5_0:1 from "), std::string::npos) << err;
  EXPECT_NE(err.find("HCA mlx5_0 reported a fatal error on a completion queue: CQ error"), std::string::npos) << err;
  for (auto [comm, mh] : {std::pair{send1, smh1}, {recv1, rmh1}, {send2, smh2}, {recv2, rmh2}})
    EXPECT_EQ(t->deregMr(comm, mh), ncclSuccess);
  for (void* comm : {send1, recv1, send2, recv2}) EXPECT_EQ(t->closeSend(comm), ncclSuccess);
  EXPECT_EQ(fabric_->liveMrs(), 0);
  EXPECT_EQ(fabric_->liveQps(), 0);
}

// Events that are not fatal (a port that went down) are logged and change nothing, as in NCCL; with
// NCCL_IB_RETURN_ASYNC_EVENTS=0 a fatal one is only logged too.
TEST_F(IbFakeNet, OtherEventsAndReturnAsyncEventsZeroOnlyLog) {
  const std::string log = "/tmp/chorus-ibasync-" + std::to_string(getpid()) + ".log";
  setSettings({{"NCCL_DEBUG", "WARN"}, {"NCCL_DEBUG_FILE", log.c_str()}});
  void *send, *recv;
  connect(&send, &recv);
  std::vector<uint8_t> src = pattern(2048, 1), dst(2048, 0);
  void* smh = reg(send, src);
  void* rmh = reg(recv, dst);
  IbHca* hca = nullptr;
  ASSERT_EQ(a_->openHca(0, &hca), ncclSuccess);
  fabric_->raiseHcaEvent(hca, kIbEventPortErr, 1);
  waitForEvents(a_.get(), 1);
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 2048);
  std::string text = chorus_test::readFile(log);  // before a reload opens the log anew
  EXPECT_NE(text.find("NET/IB: HCA mlx5_0 port 1: asynchronous event: port error (10), not fatal"), std::string::npos)
      << text;
  setSettings({{"NCCL_IB_RETURN_ASYNC_EVENTS", "0"}});
  const uint32_t qpn = static_cast<IbComm*>(send)->qps[0]->qpn();
  ASSERT_TRUE(fabric_->raiseQpEvent(qpn, kIbEventQpFatal));
  waitForEvents(a_.get(), 2);
  std::fill(dst.begin(), dst.end(), 0);
  EXPECT_EQ(exchange(send, recv, src, smh, dst, rmh), 2048);
  EXPECT_TRUE(src == dst);
  closePair(send, smh, recv, rmh);
  setSettings({{"NCCL_IB_RETURN_ASYNC_EVENTS", nullptr}, {"NCCL_DEBUG", nullptr}, {"NCCL_DEBUG_FILE", nullptr}});
  text = chorus_test::readFile(log);
  unlink(log.c_str());
  EXPECT_NE(text.find("NET/IB: HCA mlx5_0 reported a fatal error on queue pair " + std::to_string(qpn) +
                      ": local work queue catastrophic error (asynchronous event 1) (NCCL_IB_RETURN_ASYNC_EVENTS=0: "
                      "connections go on)"),
            std::string::npos)
      << text;
}

TEST(IbRealNet, ThisHostReportsWhatItHas) {
  const ncclNet_v11_t* net = ibNet();
  if (net == nullptr) {
    std::string why;
    EXPECT_EQ(makeRealIbVerbs(&why), nullptr);
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "built without verbs: " << why;
  }
  EXPECT_STREQ(net->name, "IB");
  void* ctx = nullptr;
  ncclResult_t res = net->init(&ctx, 0, nullptr, pluginLog, nullptr);
  std::string summary = ibProcessNetSummary();
  EXPECT_NE(summary.find("NET/IB"), std::string::npos) << summary;
  if (res != ncclSuccess) {
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(std::string(threadLastError()).find("NET/IB: unavailable"), std::string::npos) << threadLastError();
    return;
  }
  int ndev = -1;
  ASSERT_EQ(net->devices(&ndev), ncclSuccess);
  ASSERT_GE(ndev, 0);
  if (ndev == 0) {
    EXPECT_NE(summary.find("no usable port"), std::string::npos) << summary;
  } else {
    ncclNetProperties_v11_t p;
    ASSERT_EQ(net->getProperties(0, &p), ncclSuccess);
    EXPECT_NE(p.name, nullptr);
    EXPECT_GT(p.speed, 0);
  }
  EXPECT_EQ(net->finalize(ctx), ncclSuccess);
}

}  // namespace
}  // namespace chorus
