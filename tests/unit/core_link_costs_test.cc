// The cost model's link figures (src/engine/link_costs.h) without a communicator: NIC speeds from topologies, the
// figures every rank derives from its peers, fitting a ping-pong, and CHORUS_CALIBRATE's cache lines.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/link_costs.h"
#include "harness/source_dir.h"
#include "topo/topology.h"

namespace chorus {
namespace {

using chorus_test::sourceDir;

TEST(LinkCosts, NicSpeedFromTopology) {
  HostTopology t;
  EXPECT_EQ(topologyNicMbps(t), 0);  // nothing known
  TopoNic veth;
  veth.isVirtual = true;
  veth.speedMbps = 10000;
  t.nics.push_back(veth);
  EXPECT_EQ(topologyNicMbps(t), 10000);  // a namespace host: only its veth
  TopoNic a, b, unknown;
  a.speedMbps = 400000;
  b.speedMbps = 200000;
  t.nics.insert(t.nics.begin(), {a, b, unknown});
  EXPECT_EQ(topologyNicMbps(t), 200000);  // the slowest PCI NIC that says; virtual ones no longer count
}

TEST(LinkCosts, NicSpeedAndNvlinkOfTheShippedNodes) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  HostTopology dgx, cpu;
  std::string err;
  ASSERT_TRUE(loadHostTopology(sourceDir() + "/topo/dgx-h100.xml", &dgx, &err)) << err;
  ASSERT_TRUE(loadHostTopology(sourceDir() + "/topo/cpu-2socket.xml", &cpu, &err)) << err;
  EXPECT_EQ(topologyNicMbps(dgx), 400000);
  EXPECT_GT(topologyNvlinkBytesPerUs(dgx), 0);
  EXPECT_EQ(topologyNicMbps(cpu), 10000);  // eno1 at 10 Gb/s and a 100 Gb/s port: the slower bounds the host
  EXPECT_EQ(topologyNvlinkBytesPerUs(cpu), 0);
}

TEST(LinkCosts, EveryRankDerivesTheSameFromItsPeers) {
  std::vector<PeerInfo> peers(4);
  for (int r = 0; r < 4; r++) peers[r].hostHash = r / 2, peers[r].nicMbps = r < 2 ? 10000 : 1000;
  LinkCosts c = linkCostsAtInit(peers);
  EXPECT_DOUBLE_EQ(c.inter.bytesPerUs, 1000 / 8.0 * 0.92);  // the slowest host's NIC
  EXPECT_EQ(c.interFrom, "NIC speed 1000 Mbit/s");
  EXPECT_DOUBLE_EQ(c.intra.bytesPerUs, 5000);
  EXPECT_EQ(c.intraFrom, "default");
  peers[3].nicMbps = 0;  // one host that does not know: the default, not a guess from the others
  c = linkCostsAtInit(peers);
  EXPECT_DOUBLE_EQ(c.inter.bytesPerUs, 1250);
  EXPECT_EQ(c.interFrom, "default");
}

TEST(LinkCosts, FitsAPingPong) {
  LinkCost c;
  // Small round trips around 20 us (one slow outlier; the fastest 18), 4 MB ones of 2 x 4009 us at best.
  ASSERT_TRUE(fitLinkCost({22, 19, 20, 400, 21, 18, 20}, {8100, 8018, 8900}, 4000000, &c));
  EXPECT_DOUBLE_EQ(c.latencyUs, 10);                 // the median's half: the outlier does not move it
  EXPECT_DOUBLE_EQ(c.bytesPerUs, 4000000 / 4000.0);  // the fastest large trip less the fastest small one, halved
  // A busy host: no small trip faster than the large one. The whole half trip bounds the bandwidth from below.
  ASSERT_TRUE(fitLinkCost({20}, {18}, 4000000, &c));
  EXPECT_DOUBLE_EQ(c.bytesPerUs, 4000000 / 9.0);
  EXPECT_FALSE(fitLinkCost({}, {8000}, 4000000, &c));
  EXPECT_FALSE(fitLinkCost({20}, {}, 4000000, &c));
}

TEST(LinkCosts, CacheLinesRoundTripAndTheLastWins) {
  LinkCost intra, inter;
  intra.latencyUs = 3.25, intra.bytesPerUs = 6200;
  inter.latencyUs = 61, inter.bytesPerUs = 116.5;
  const std::string both = calibrationLine(0xabc, &intra, &inter, 1700000000);
  EXPECT_EQ(both, "chorus-links 1 0000000000000abc 3.25,6.2 61,0.1165 1700000000");
  LinkCost i2, e2;
  bool hi = false, he = false;
  ASSERT_TRUE(findCalibration(both + "\n", 0xabc, &i2, &hi, &e2, &he));
  EXPECT_TRUE(hi && he);
  EXPECT_DOUBLE_EQ(i2.latencyUs, 3.25);
  EXPECT_DOUBLE_EQ(i2.bytesPerUs, 6200);
  EXPECT_DOUBLE_EQ(e2.bytesPerUs, 116.5);
  EXPECT_FALSE(findCalibration(both, 0xabd, &i2, &hi, &e2, &he));  // another cluster
  // Garbage and other versions are skipped; a later line for the key replaces an earlier one, classes and all.
  inter.bytesPerUs = 1000;
  const std::string file = both + "\nnot a line\nchorus-links 2 0000000000000abc 1,1 1,1 0\n" +
                           calibrationLine(0xabc, nullptr, &inter, 1700000001) + "\n";
  ASSERT_TRUE(findCalibration(file, 0xabc, &i2, &hi, &e2, &he));
  EXPECT_FALSE(hi);
  EXPECT_TRUE(he);
  EXPECT_DOUBLE_EQ(e2.bytesPerUs, 1000);
  EXPECT_FALSE(findCalibration("chorus-links 1 0000000000000abc x,y - 0\n", 0xabc, &i2, &hi, &e2, &he));
}

TEST(LinkCosts, TheCacheKeyNamesThePlacement) {
  std::vector<PeerInfo> peers(4);
  for (int r = 0; r < 4; r++) peers[r].hostHash = r / 2;
  const uint64_t k = calibrationKey(peers, 7);
  EXPECT_EQ(calibrationKey(peers, 7), k);
  EXPECT_NE(calibrationKey(peers, 8), k);  // other shared settings (transports, FIFOs)
  std::vector<PeerInfo> cyclic = peers;
  for (int r = 0; r < 4; r++) cyclic[r].hostHash = r % 2;
  EXPECT_NE(calibrationKey(cyclic, 7), k);
  std::vector<PeerInfo> gpus = peers;
  gpus[1].cudaDev = 0;
  EXPECT_NE(calibrationKey(gpus, 7), k);
}

}  // namespace
}  // namespace chorus
