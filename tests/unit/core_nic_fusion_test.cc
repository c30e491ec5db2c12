// NIC fusion (src/topo/nic_fusion.h): which of a net's devices NCCL_NET_MERGE_LEVEL and NCCL_NET_FORCE_MERGE merge
// into one, on made-up device lists and on the shipped DGX H100-like node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/params.h"
#include "harness/source_dir.h"
#include "topo/nic_fusion.h"

namespace chorus {
namespace {

using Groups = std::vector<std::vector<int>>;

NetDeviceDesc dev(const std::string& name, const std::string& busId, int port = 1) {
  return NetDeviceDesc{name, busId.empty() ? "" : "/sys/devices/pci0000:00/0000:00:01.0/" + busId, port};
}

// Two dual-port NICs (a PCI function a port) and a single-port one.
std::vector<NetDeviceDesc> twoDualPortNics() {
  return {dev("mlx5_0", "0000:3b:00.0"), dev("mlx5_1", "0000:3b:00.1"), dev("mlx5_2", "0000:5e:00.0"),
          dev("mlx5_3", "0000:5e:00.1"), dev("mlx5_4", "0000:86:00.0")};
}

TEST(NicFusion, PortsOfOneNicMergeByDefault) {
  const NicFusion f = fuseNics(HostTopology{}, twoDualPortNics(), MergeLevel::kPort, "", 4);
  EXPECT_EQ(f.error, "");
  EXPECT_EQ(f.groups, (Groups{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(f.forced, (std::vector<bool>{false, false, false}));
  // Two ports of one PCI function (one HCA) are one NIC too.
  const NicFusion g = fuseNics(HostTopology{}, {dev("mlx4_0", "0000:3b:00.0", 1), dev("mlx4_0", "0000:3b:00.0", 2)},
                               MergeLevel::kPort, "", 4);
  EXPECT_EQ(g.groups, (Groups{{0, 1}}));
  // Unknown paths never merge.
  EXPECT_EQ(fuseNics(HostTopology{}, {dev("a", ""), dev("b", "")}, MergeLevel::kSys, "", 4).groups, (Groups{{0}, {1}}));
}

TEST(NicFusion, LocMergesNothingAndGroupsStopAtTheLimit) {
  EXPECT_EQ(fuseNics(HostTopology{}, twoDualPortNics(), MergeLevel::kLoc, "", 4).groups,
            (Groups{{0}, {1}, {2}, {3}, {4}}));
  std::vector<NetDeviceDesc> six;
  for (int i = 0; i < 6; i++) six.push_back(dev("mlx5_" + std::to_string(i), "0000:3b:00." + std::to_string(i)));
  EXPECT_EQ(fuseNics(HostTopology{}, six, MergeLevel::kPort, "", 4).groups, (Groups{{0, 1, 2, 3}, {4, 5}}));
}

TEST(NicFusion, ForceMergeComesFirstAndMustMatch) {
  NicFusion f = fuseNics(HostTopology{}, twoDualPortNics(), MergeLevel::kPort, "mlx5_2,mlx5_0", 4);
  EXPECT_EQ(f.error, "");
  // The forced group keeps its order; mlx5_1 and mlx5_3 are then the only ports of their NICs left. Groups go in the
  // order of their first members.
  EXPECT_EQ(f.groups, (Groups{{1}, {2, 0}, {3}, {4}}));
  EXPECT_EQ(f.forced, (std::vector<bool>{false, true, false, false}));
  f = fuseNics(HostTopology{}, twoDualPortNics(), MergeLevel::kLoc, "mlx5_0,mlx5_1;mlx5_3:1,mlx5_4", 4);
  EXPECT_EQ(f.groups, (Groups{{0, 1}, {2}, {3, 4}}));
  for (const char* bad :
       {"mlx5_0,mlx5_9", "mlx5_0,mlx5_0", "mlx5_0:2,mlx5_1", "mlx5", "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4"}) {
    SCOPED_TRACE(bad);
    f = fuseNics(HostTopology{}, twoDualPortNics(), MergeLevel::kPort, bad, 4);
    EXPECT_NE(f.error.find("NCCL_NET_FORCE_MERGE="), std::string::npos) << f.error;
    EXPECT_TRUE(f.groups.empty());
  }
}

TEST(NicFusion, LevelsParseAsNcclNamesThem) {
  MergeLevel l = MergeLevel::kSys;
  EXPECT_TRUE(parseMergeLevel("port", &l));
  EXPECT_EQ(l, MergeLevel::kPort);
  EXPECT_TRUE(parseMergeLevel("PXN", &l));
  EXPECT_EQ(l, MergeLevel::kPxb);
  EXPECT_TRUE(parseMergeLevel("LOC", &l));
  EXPECT_EQ(l, MergeLevel::kLoc);
  EXPECT_FALSE(parseMergeLevel("NEAR", &l));
  EXPECT_FALSE(parseMergeLevel("", &l));
}

// Levels beyond PORT go by the PCI distance the topology gives between two NICs: on the DGX H100-like node (a NIC per
// GPU, each under its GPU's switch, four a socket) PHB merges the NICs of a socket, SYS any four.
TEST(NicFusion, WiderLevelsFollowTheTopology) {
  HostTopology t;
  std::string err;
  ASSERT_TRUE(loadHostTopology(chorus_test::sourceDir() + "/topo/dgx-h100.xml", &t, &err)) << err;
  std::vector<NetDeviceDesc> nics;
  for (const TopoNic& n : t.nics) nics.push_back(NetDeviceDesc{n.name, "", 1});
  ASSERT_EQ(nics.size(), 8u);
  EXPECT_EQ(fuseNics(t, nics, MergeLevel::kPort, "", 4).groups.size(), 8u);
  const Groups phb = fuseNics(t, nics, MergeLevel::kPhb, "", 4).groups;
  ASSERT_EQ(phb.size(), 2u);
  for (const auto& g : phb) {
    for (int n : g) EXPECT_NE(t.nicNic(g[0], n), PathClass::kSYS) << t.nics[static_cast<size_t>(n)].name;
  }
  EXPECT_EQ(fuseNics(t, nics, MergeLevel::kSys, "", 4).groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// chorus-topo's section: the node's NICs as NCCL_NET_MERGE_LEVEL merges them, one line a device.
TEST(NicFusion, ChorusTopoPrintsTheMergedNics) {
  HostTopology t;
  std::string err;
  ASSERT_TRUE(loadHostTopology(chorus_test::sourceDir() + "/topo/dgx-h100.xml", &t, &err)) << err;
  unsetenv("NCCL_NET_FORCE_MERGE");
  unsetenv("NCCL_NET_MERGE_LEVEL");
  paramsReload();
  std::string out = formatNicFusion(t);
  EXPECT_NE(out.find("NCCL_NET_MERGE_LEVEL=PORT"), std::string::npos) << out;
  EXPECT_NE(out.find("\n  mlx5_7\n"), std::string::npos) << out;
  EXPECT_EQ(out.find(" + "), std::string::npos) << "a NIC a PCI device: nothing merges\n" << out;
  setenv("NCCL_NET_MERGE_LEVEL", "SYS", 1);
  paramsReload();
  out = formatNicFusion(t);
  EXPECT_NE(out.find("\n  mlx5_0 + mlx5_1 + mlx5_2 + mlx5_3\n  mlx5_4 + mlx5_5 + mlx5_6 + mlx5_7\n"), std::string::npos)
      << out;
  setenv("NCCL_NET_FORCE_MERGE", "mlx5_0,mlx5_9", 1);
  paramsReload();
  out = formatNicFusion(t);
  EXPECT_NE(out.find("mlx5_9 matches no device"), std::string::npos) << out;
  unsetenv("NCCL_NET_FORCE_MERGE");
  unsetenv("NCCL_NET_MERGE_LEVEL");
  paramsReload();
  EXPECT_EQ(formatNicFusion(HostTopology{}), "");
}

}  // namespace
}  // namespace chorus
