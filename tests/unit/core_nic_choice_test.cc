// Which net devices a rank's connections use (src/topo/nic_choice.h), on the shipped DGX H100-like and MI300X nodes:
// the NICs nearest the rank's GPU, as many as NCCL_NETDEVS_POLICY says, GPUs sharing them starting at different ones,
// every device when the topology cannot tell.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "algo/generators.h"
#include "harness/source_dir.h"
#include "topo/nic_choice.h"
#include "topo/ring_order.h"

namespace chorus {
namespace {

using chorus_test::sourceDir;
using Devices = std::vector<std::pair<std::string, std::string>>;

HostTopology load(const char* file) {
  HostTopology t;
  std::string err;
  EXPECT_TRUE(loadHostTopology(sourceDir() + "/topo/" + file, &t, &err)) << err;
  return t;
}

// GpuRuntime::busId's number for "dddd:bb:dd.f".
int64_t runtimeId(const std::string& busId) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  EXPECT_EQ(sscanf(busId.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn), 4) << busId;
  return static_cast<int64_t>(dom) << 32 | static_cast<int64_t>(bus) << 8 | dev;
}

// An IB-like net listing the node's eight HCAs by name, in order.
Devices hcas() {
  Devices d;
  for (int i = 0; i < 8; i++) d.emplace_back("mlx5_" + std::to_string(i), "");
  return d;
}

// NCCL_NETDEVS_POLICY, as NCCL 2.28 parses it: AUTO, ALL, MAX:N (N > 0), any case; anything else is AUTO, noted.
TEST(NicChoice, NetDevsPolicyParsesAsNcclDoes) {
  EXPECT_EQ(parseNetDevsPolicy("").name(), "AUTO");
  EXPECT_EQ(parseNetDevsPolicy("auto").name(), "AUTO");
  EXPECT_EQ(parseNetDevsPolicy("All").name(), "ALL");
  EXPECT_EQ(parseNetDevsPolicy("MAX:3").name(), "MAX:3");
  EXPECT_EQ(parseNetDevsPolicy("max:1").max, 1);
  for (const char* bad : {"MAX:0", "MAX:-2", "MAX:", "some", "ALLX"}) {
    const NetDevsPolicy p = parseNetDevsPolicy(bad);
    EXPECT_EQ(p.name(), "AUTO") << bad;
    EXPECT_NE(p.note.find("not recognized"), std::string::npos) << bad;
  }
  EXPECT_TRUE(parseNetDevsPolicy("ALL").note.empty());
}

TEST(NicChoice, EachDgxGpuTakesItsOwnNicUnderItsSwitch) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const HostTopology t = load("dgx-h100.xml");
  ASSERT_EQ(t.gpus.size(), 8u);
  // Two GPUs and two NICs under each PCI switch (all four PIX). AUTO, as NCCL: the two NICs divided between the two
  // GPUs, GPU 2s taking NIC 2s and GPU 2s+1 NIC 2s+1. ALL: both, each GPU's own first (so its channels alternate).
  // MAX:1 is AUTO's choice here, MAX:3 ALL's. No GPU ever uses a NIC past its switch.
  const NetDevsPolicy autoPolicy = parseNetDevsPolicy("AUTO"), all = parseNetDevsPolicy("ALL"),
                      max1 = parseNetDevsPolicy("MAX:1"), max3 = parseNetDevsPolicy("MAX:3");
  for (int g = 0; g < 8; g++) {
    const int own = g, other = g ^ 1;
    const int64_t id = runtimeId(t.gpus[g].busId);
    const NicChoice a = chooseNics(t, id, hcas(), autoPolicy);
    EXPECT_TRUE(a.byTopology) << a.why;
    EXPECT_EQ(a.order, std::vector<int>{own}) << "GPU " << g;
    EXPECT_EQ(a.classes, std::vector<PathClass>{PathClass::kPIX}) << "GPU " << g;
    EXPECT_EQ(chooseNics(t, id, hcas(), all).order, (std::vector<int>{own, other})) << "GPU " << g;
    EXPECT_EQ(chooseNics(t, id, hcas(), max1).order, std::vector<int>{own}) << "GPU " << g;
    EXPECT_EQ(chooseNics(t, id, hcas(), max3).order, (std::vector<int>{own, other})) << "GPU " << g;
    EXPECT_EQ(chooseNics(t, id, hcas(), all).classes, (std::vector<PathClass>{PathClass::kPIX, PathClass::kPIX}));
  }
  const NicChoice c1 = chooseNics(t, runtimeId(t.gpus[1].busId), hcas(), all);
  EXPECT_EQ(describeNicChoice(c1, hcas()), "1 (mlx5_1, PIX), 0 (mlx5_0, PIX)");
  EXPECT_NE(c1.why.find("0000:1b:00.0"), std::string::npos) << c1.why;
  EXPECT_NE(c1.why.find("2 of 2, NCCL_NETDEVS_POLICY=ALL"), std::string::npos) << c1.why;
  const NicChoice a1 = chooseNics(t, runtimeId(t.gpus[1].busId), hcas(), autoPolicy);
  EXPECT_EQ(describeNicChoice(a1, hcas()), "1 (mlx5_1, PIX)");
  EXPECT_NE(a1.why.find("1 of 2, NCCL_NETDEVS_POLICY=AUTO with 2 GPUs nearest them"), std::string::npos) << a1.why;
  const NicChoice noted = chooseNics(t, runtimeId(t.gpus[1].busId), hcas(), parseNetDevsPolicy("MAX:0"));
  EXPECT_EQ(noted.order, std::vector<int>{1});
  EXPECT_NE(noted.why.find("\"MAX:0\" not recognized, so AUTO"), std::string::npos) << noted.why;
}

TEST(NicChoice, Mi300xGpusUseTheirOwnNicOnly) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const HostTopology t = load("mi300x.xml");
  ASSERT_EQ(t.gpus.size(), 8u);
  for (int g = 0; g < 8; g++) {
    const NicChoice c = chooseNics(t, runtimeId(t.gpus[g].busId), hcas());
    EXPECT_EQ(c.order, std::vector<int>{g}) << "GPU " << g << ": " << describeNicChoice(c, hcas());
    EXPECT_EQ(c.classes, std::vector<PathClass>{PathClass::kPIX});
  }
}

// A net's own order and naming: indices are the net's, and a device may be named by PCI path alone.
TEST(NicChoice, IndicesAreTheNetsWhateverItsOrderAndNaming) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const HostTopology t = load("dgx-h100.xml");
  Devices reversed;
  for (int i = 7; i >= 0; i--)
    reversed.emplace_back("", "/sys/devices/pci0000:00/0000:00:01.0/" + t.nics[static_cast<size_t>(i)].busId);
  // GPU4 (0000:99:00.0) is nearest NICs 4 and 5, which this net numbers 3 and 2; it takes NIC 4 (AUTO), or both.
  const NetDevsPolicy all = parseNetDevsPolicy("ALL");
  EXPECT_EQ(chooseNics(t, runtimeId("0000:99:00.0"), reversed, all).order, (std::vector<int>{3, 2}));
  EXPECT_EQ(chooseNics(t, runtimeId("0000:99:00.0"), reversed, parseNetDevsPolicy("")).order, std::vector<int>{3});
  // A net offering only the other socket's NICs: those, at SYS, are the nearest there are. Under AUTO, as NCCL, they
  // are divided among the GPUs nearest them (GPU6 and GPU7, under their switch): GPU0 takes one.
  const Devices farNics{{"mlx5_6", ""}, {"mlx5_7", ""}};
  const NicChoice far = chooseNics(t, runtimeId("0000:19:00.0"), farNics, all);
  EXPECT_TRUE(far.byTopology);
  EXPECT_EQ(far.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(far.classes, (std::vector<PathClass>{PathClass::kSYS, PathClass::kSYS}));
  EXPECT_EQ(chooseNics(t, runtimeId("0000:19:00.0"), farNics, parseNetDevsPolicy("AUTO")).order, std::vector<int>{0});
  // Devices the topology does not place are left out while placed ones are nearer.
  const NicChoice mixed = chooseNics(t, runtimeId("0000:45:00.0"), {{"veth0", ""}, {"mlx5_2", ""}, {"mlx5_5", ""}});
  EXPECT_EQ(mixed.order, std::vector<int>{1});
}

TEST(NicChoice, EveryDeviceWhenTheTopologyCannotTell) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const HostTopology t = load("dgx-h100.xml");
  const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  const NicChoice noGpu = chooseNics(t, -1, hcas());
  EXPECT_FALSE(noGpu.byTopology);
  EXPECT_EQ(noGpu.order, all);
  EXPECT_EQ(noGpu.why, "no GPU");
  const NicChoice unknownGpu = chooseNics(t, runtimeId("0000:18:00.0"), hcas());  // a NIC's bus id, not a GPU's
  EXPECT_FALSE(unknownGpu.byTopology);
  EXPECT_EQ(unknownGpu.order, all);
  EXPECT_NE(unknownGpu.why.find("not in the host topology"), std::string::npos) << unknownGpu.why;
  const NicChoice unplaced = chooseNics(t, runtimeId("0000:19:00.0"), {{"eth0", ""}, {"eth1", ""}});
  EXPECT_FALSE(unplaced.byTopology);
  EXPECT_EQ(unplaced.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(describeNicChoice(unplaced, {{"eth0", ""}, {"eth1", ""}}), "0 (eth0), 1 (eth1)");
  const NicChoice empty = chooseNics(HostTopology{}, runtimeId("0000:19:00.0"), hcas());
  EXPECT_FALSE(empty.byTopology);
  EXPECT_EQ(empty.order, all);
}

// Ring channels over DGX H100-like hosts, GPU i of every host run by its local rank i, each rank's channel c on the NIC
// its choice gives channel c (as NetProxy's connections take them): rail-aligned (NCCL_CROSS_NIC 0 or 2, the default)
// every crossing between hosts leaves on NIC k of one host and arrives on NIC k of the other, one rail, over an even
// number of hosts; with NCCL_CROSS_NIC=1 none does under AUTO (each GPU has its own NIC). Trees' crossings are on one
// rail either way. Ranks placed host by host and round-robin.
TEST(NicChoice, RailAlignedRingsCrossOnOneRail) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const HostTopology t = load("dgx-h100.xml");
  ASSERT_EQ(t.gpus.size(), 8u);
  const int P = 8;
  for (const char* policyName : {"AUTO", "ALL"}) {
    const NetDevsPolicy policy = parseNetDevsPolicy(policyName);
    std::vector<NicChoice> gpuNics;
    for (int g = 0; g < P; g++) gpuNics.push_back(chooseNics(t, runtimeId(t.gpus[g].busId), hcas(), policy));
    for (int H : {2, 3, 4})
      for (bool roundRobin : {false, true}) {
        const int n = H * P;
        std::vector<uint64_t> hostOf(n);
        std::vector<int> localOf(n);
        for (int r = 0; r < n; r++) {
          hostOf[r] = roundRobin ? r % H : r / P;
          localOf[r] = roundRobin ? r / H : r % P;
        }
        const std::vector<int> order = ringOrderByHost(hostOf);
        auto nicOf = [&](int rank, int channel) {
          const std::vector<int>& o = gpuNics[static_cast<size_t>(localOf[rank])].order;
          return o[static_cast<size_t>(channel) % o.size()];
        };
        // The crossings between hosts in every rank's schedule on channel ch (a ring rank's one, each of a tree's),
        // and how many of them join NICs of different index.
        int crossings = 0, railsJoined = 0;
        auto count = [&](Coll coll, Algo algo, int ch, bool railAligned) {
          crossings = railsJoined = 0;
          for (int r = 0; r < n; r++) {
            ScheduleRequest req{coll, algo, n, r, ch, P, 0, &order, P, railAligned};
            Schedule s;
            std::string err;
            ASSERT_TRUE(buildSchedule(req, &s, &err)) << err;
            for (const Step& st : s.steps)
              if (stepSends(st.op) && hostOf[st.sendPeer] != hostOf[r]) {
                crossings++;
                railsJoined += nicOf(r, ch) != nicOf(st.sendPeer, ch);
                if (algo == Algo::kRing) break;  // a ring rank sends to one peer
              }
          }
        };
        for (bool railAligned : {true, false})
          for (int ch = 0; ch < P; ch++) {
            count(Coll::kAllGather, Algo::kRing, ch, railAligned);
            const std::string where = std::string(policyName) + ", " + std::to_string(H) + " hosts" +
                                      (roundRobin ? " round-robin" : "") + ", channel " + std::to_string(ch);
            ASSERT_EQ(crossings, H) << where;
            if (railAligned) {
              EXPECT_EQ(railsJoined, H % 2) << where;  // odd: the last host's crossing back to the first
            } else if (policy.kind == NetDevsPolicy::Kind::kAuto) {
              EXPECT_EQ(railsJoined, H) << where;
            }
          }
        // Node-aware trees enter every host at the same rank of the channel's order: every edge between hosts, up
        // and down, on one rail, whatever the number of hosts.
        for (int ch = 0; ch < P; ch++) {
          count(Coll::kAllReduce, Algo::kTree, ch, true);
          EXPECT_GE(crossings, 2 * (H - 1)) << "tree, " << H << " hosts, channel " << ch;
          EXPECT_EQ(railsJoined, 0) << "tree, " << policyName << ", " << H << " hosts, channel " << ch;
        }
      }
  }
}

// chorus-topo's section: a line a GPU, nothing for a host without GPUs.
TEST(NicChoice, ChorusTopoListsEachGpusNics) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const std::string mi = formatNicChoices(load("mi300x.xml"));
  EXPECT_NE(mi.find("  GPU7   0000:a9:00.0  mlx5_7 (PIX)\n"), std::string::npos) << mi;
  EXPECT_EQ(formatNicChoices(load("cpu-2socket.xml")), "");
  EXPECT_EQ(formatNicChoices(HostTopology{}), "");
}

}  // namespace
}  // namespace chorus
