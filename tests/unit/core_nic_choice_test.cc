// Which net devices a rank's connections use (src/topo/nic_choice.h), on the shipped DGX H100-like and MI300X nodes:
// the NICs nearest the rank's GPU, GPUs sharing them starting at different ones, every device when the topology
// cannot tell.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "harness/source_dir.h"
#include "topo/nic_choice.h"

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

TEST(NicChoice, EachDgxGpuStartsOnItsOwnNicUnderItsSwitch) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  const HostTopology t = load("dgx-h100.xml");
  ASSERT_EQ(t.gpus.size(), 8u);
  // Two GPUs and two NICs under each PCI switch (all four PIX): GPU 2s starts at NIC 2s, GPU 2s+1 at NIC 2s+1, and
  // each takes the other NIC of its switch on odd channels. No GPU ever uses a NIC past its switch.
  for (int g = 0; g < 8; g++) {
    const NicChoice c = chooseNics(t, runtimeId(t.gpus[g].busId), hcas());
    const int own = g, other = g ^ 1;
    EXPECT_TRUE(c.byTopology) << c.why;
    EXPECT_EQ(c.order, (std::vector<int>{own, other})) << "GPU " << g;
    EXPECT_EQ(c.classes, (std::vector<PathClass>{PathClass::kPIX, PathClass::kPIX})) << "GPU " << g;
  }
  const NicChoice c1 = chooseNics(t, runtimeId(t.gpus[1].busId), hcas());
  EXPECT_EQ(describeNicChoice(c1, hcas()), "1 (mlx5_1, PIX), 0 (mlx5_0, PIX)");
  EXPECT_NE(c1.why.find("0000:1b:00.0"), std::string::npos) << c1.why;
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
  // GPU4 (0000:99:00.0) is nearest NICs 4 and 5, which this net numbers 3 and 2.
  const NicChoice c = chooseNics(t, runtimeId("0000:99:00.0"), reversed);
  EXPECT_EQ(c.order, (std::vector<int>{3, 2}));
  // A net offering only the other socket's NICs: those, at SYS, are the nearest there are.
  const NicChoice far = chooseNics(t, runtimeId("0000:19:00.0"), {{"mlx5_6", ""}, {"mlx5_7", ""}});
  EXPECT_TRUE(far.byTopology);
  EXPECT_EQ(far.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(far.classes, (std::vector<PathClass>{PathClass::kSYS, PathClass::kSYS}));
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
