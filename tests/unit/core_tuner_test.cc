// The tuner's default choice across hosts, by the collective's full buffer (allreduce's buffer, allgather's output,
// reduce-scatter's input): hierarchical from CHORUS_HIER_MIN_BYTES; below it, for allreduces, the node-aware tree up
// to CHORUS_TREE_MAX_BYTES but recursive doubling from CHORUS_DOUBLING_MIN_BYTES to CHORUS_DOUBLING_MAX_BYTES (none by
// default); for allgathers and reduce-scatters rail from CHORUS_RAIL_MIN_BYTES to
// CHORUS_RAIL_MAX_BYTES, else the ring; the ring or one-shot on one host; NCCL_ALGO still forcing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <tuple>

#include "core/params.h"
#include "engine/tuner.h"

namespace chorus {
namespace {

class Tuner : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("NCCL_ALGO");
    unsetenv("CHORUS_HIER_MIN_BYTES");
    unsetenv("CHORUS_TREE_MAX_BYTES");
    unsetenv("CHORUS_DOUBLING_MIN_BYTES");
    unsetenv("CHORUS_DOUBLING_MAX_BYTES");
    unsetenv("CHORUS_RAIL_MIN_BYTES");
    unsetenv("CHORUS_RAIL_MAX_BYTES");
    unsetenv("CHORUS_HIER_RING_BAND");
    paramsReload();
  }
  void TearDown() override { SetUp(); }
};

constexpr size_t kMB = 1 << 20;

TEST_F(Tuner, HierarchicalAcrossHostsFromTheThreshold) {
  const int n = 8;
  // Allreduce: the buffer itself. The node-aware tree below 64 KB, hierarchical from 64 KB.
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 4 * kMB, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 2 * kMB - 1, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 256 * 1024 + 1, n, -1, true).algo, Algo::kHier);
  // A ring band (CHORUS_HIER_RING_BAND, none by default): the ring above LOW and below HIGH.
  setenv("CHORUS_HIER_RING_BAND", "262144,2097152", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 2 * kMB, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 2 * kMB - 1, n, -1, true).algo, Algo::kRing);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 256 * 1024 + 1, n, -1, true).algo, Algo::kRing);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 256 * 1024, n, -1, true).algo, Algo::kHier);
  for (Coll coll : {Coll::kAllGather, Coll::kReduceScatter}) {
    EXPECT_EQ(chooseAlgo(coll, 2 * kMB / n, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 2 * kMB / n - 1, n, -1, true).algo, Algo::kRing) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 262144 / n + 1, n, -1, true).algo, Algo::kRing) << collName(coll);
  }
  unsetenv("CHORUS_HIER_RING_BAND");
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 256 * 1024, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 65537, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 65536, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 65535, n, -1, true).algo, Algo::kTree);
  // Small allreduces: one-shot within a host; across hosts (where one-shot would send every buffer n-1 times) the
  // node-aware tree below 64 KB.
  for (size_t bytes : {size_t(8192), size_t(2048), size_t(1024), size_t(512), size_t(128), size_t(8)})
    EXPECT_EQ(chooseAlgo(Coll::kAllReduce, bytes, n, -1, true).algo, Algo::kTree) << bytes;
  // Recursive doubling where CHORUS_DOUBLING_MAX_BYTES asks for it, from CHORUS_DOUBLING_MIN_BYTES.
  setenv("CHORUS_DOUBLING_MAX_BYTES", "1024", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1025, n, -1, true).algo, Algo::kTree);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, n, -1, true).algo, Algo::kDoubling);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 128, n, -1, true).algo, Algo::kDoubling);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 127, n, -1, true).algo, Algo::kTree);
  unsetenv("CHORUS_DOUBLING_MAX_BYTES");
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, n, -1, false).algo, Algo::kOneShot);
  // Allgather and reduce-scatter: bytes a rank times the ranks; the ring below 8 KB, rail to 64 KB, hierarchical
  // above; but allgathers below 64 KB run recursive doubling.
  for (Coll coll : {Coll::kAllGather, Coll::kReduceScatter}) {
    const bool gather = coll == Coll::kAllGather;
    EXPECT_EQ(chooseAlgo(coll, 2 * kMB / n, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 2 * kMB / n - 1, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 262144 / n + 1, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 262144 / n, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 65536 / n + 1, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 65536 / n, n, -1, true).algo, Algo::kRail) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 65536 / n - 1, n, -1, true).algo, gather ? Algo::kDoubling : Algo::kRail)
        << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 8192 / n, n, -1, true).algo, gather ? Algo::kDoubling : Algo::kRail)
        << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 8192 / n - 1, n, -1, true).algo, gather ? Algo::kDoubling : Algo::kRing)
        << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, 1, n, -1, true).algo, gather ? Algo::kDoubling : Algo::kRing) << collName(coll);
  }
  // Without recursive doubling for allgather, the ring and rail take its sizes; within a host, the ring.
  setenv("CHORUS_DOUBLING_ALLGATHER_MAX_BYTES", "0", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8192 / n - 1, n, -1, true).algo, Algo::kRing);
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8192 / n, n, -1, true).algo, Algo::kRail);
  unsetenv("CHORUS_DOUBLING_ALLGATHER_MAX_BYTES");
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 1024, n, -1, false).algo, Algo::kRing);
  // One host, or hosts of unequal size: the ring.
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter})
    EXPECT_EQ(chooseAlgo(coll, 64 * kMB, n, -1, false).algo, Algo::kRing) << collName(coll);
  // Broadcast has no hierarchical form.
  EXPECT_EQ(chooseAlgo(Coll::kBroadcast, 64 * kMB, n, -1, true).algo, Algo::kRing);
}

// Ranks placed host by host in rank order: recursive-doubling allgather, which runs in rank order, would cross hosts
// in its last rounds, which carry the most blocks; from CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES to
// CHORUS_DOUBLING_ALLGATHER_MAX_BYTES such allgathers run hierarchical. Placed otherwise (round-robin), recursive
// doubling throughout; rail from 64 KiB either way, and the other collectives as before.
TEST_F(Tuner, AllGatherByHostRunsHierarchicalFromTheByHostBand) {
  const int n = 8;
  for (bool byHost : {false, true}) {
    SCOPED_TRACE(byHost);
    EXPECT_EQ(chooseAlgo(Coll::kAllGather, 4096 / n, n, -1, true, true, byHost).algo, Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8192 / n, n, -1, true, true, byHost).algo,
              byHost ? Algo::kHier : Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllGather, 65536 / n - 1, n, -1, true, true, byHost).algo,
              byHost ? Algo::kHier : Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllGather, 65536 / n, n, -1, true, true, byHost).algo, Algo::kRail);
    EXPECT_EQ(chooseAlgo(Coll::kReduceScatter, 8192 / n, n, -1, true, true, byHost).algo, Algo::kRail);
    for (size_t bytes : {size_t(8), size_t(512), size_t(8192)})
      EXPECT_EQ(chooseAlgo(Coll::kAllReduce, bytes, n, -1, true, true, byHost).algo,
                chooseAlgo(Coll::kAllReduce, bytes, n, -1, true, true, !byHost).algo)
          << bytes;
  }
  // Set to the doubling band's top, host by host runs recursive doubling as placed otherwise.
  setenv("CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES", "65535", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8192 / n, n, -1, true, true, true).algo, Algo::kDoubling);
  unsetenv("CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES");
  paramsReload();
}

// Several hosts without as many ranks on each laid out host by host (one rank a host): recursive doubling for allreduce
// to CHORUS_DOUBLING_SPREAD_MAX_BYTES and allgather below CHORUS_DOUBLING_ALLGATHER_MAX_BYTES, whatever the rank
// count; the ring above and for reduce-scatter; never one-shot, whose n-1 messages a rank all cross hosts.
TEST_F(Tuner, RanksSpreadOverHosts) {
  for (int n : {2, 4, 3}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 8, n, -1, false, true).algo, Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, n, -1, false, true).algo, Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 32768, n, -1, false, true).algo, Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 32769, n, -1, false, true).algo, Algo::kRing);
    EXPECT_EQ(chooseAlgo(Coll::kAllGather, 65535 / n, n, -1, false, true).algo, Algo::kDoubling);
    EXPECT_EQ(chooseAlgo(Coll::kAllGather, 65536 / n + 1, n, -1, false, true).algo, Algo::kRing);
    EXPECT_EQ(chooseAlgo(Coll::kReduceScatter, 1024, n, -1, false, true).algo, Algo::kRing);
  }
  // Within one host, as before: one-shot for small allreduces.
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, 4, -1, false, false).algo, Algo::kOneShot);
  setenv("CHORUS_DOUBLING_SPREAD_MAX_BYTES", "0", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 8, 4, -1, false, true).algo, Algo::kRing);
  unsetenv("CHORUS_DOUBLING_SPREAD_MAX_BYTES");
  paramsReload();
}

TEST_F(Tuner, ThresholdAndForcing) {
  // No band, no rail, no tree, no recursive doubling: hierarchical from its threshold, the ring below.
  setenv("CHORUS_HIER_MIN_BYTES", "65536", 1);
  setenv("CHORUS_HIER_RING_BAND", "0,0", 1);
  setenv("CHORUS_RAIL_MAX_BYTES", "0", 1);
  setenv("CHORUS_TREE_MAX_BYTES", "0", 1);
  setenv("CHORUS_DOUBLING_MAX_BYTES", "0", 1);
  setenv("CHORUS_DOUBLING_ALLGATHER_MAX_BYTES", "0", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8192, 8, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8191, 8, -1, true).algo, Algo::kRing);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1 << 20, 8, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, 8, -1, true).algo, Algo::kRing);
  unsetenv("CHORUS_HIER_RING_BAND");
  unsetenv("CHORUS_RAIL_MAX_BYTES");
  unsetenv("CHORUS_TREE_MAX_BYTES");
  unsetenv("CHORUS_DOUBLING_MAX_BYTES");
  unsetenv("CHORUS_DOUBLING_ALLGATHER_MAX_BYTES");
  setenv("NCCL_ALGO", "Ring", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 64 * kMB, 8, -1, true).algo, Algo::kRing);
  setenv("NCCL_ALGO", "Hierarchical", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kReduceScatter, 16, 8, -1, true).algo, Algo::kHier);
  // Forced where it cannot run: the ring.
  EXPECT_EQ(chooseAlgo(Coll::kBroadcast, 64 * kMB, 8, -1, true).algo, Algo::kRing);
}

// NCCL 2.28's per-collective syntax: a first list for every collective, COLLECTIVE:LIST entries replacing it for
// one, ^ excluding; NCCL_PROTO alike. Only the collectives an entry names are forced. NCCL's own algorithm names are
// accepted; an unknown algorithm, protocol or collective, or a second entry without a prefix, is an error the init
// reports (tuningSettingsError).
TEST_F(Tuner, PerCollectiveLists) {
  setenv("NCCL_ALGO", "allreduce:tree;ALLGATHER:ring", 1);
  paramsReload();
  EXPECT_EQ(tuningSettingsError(), "");
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 64 * kMB, 8, -1, true).algo, Algo::kTree);
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 64 * kMB, 8, -1, true).algo, Algo::kRing);
  EXPECT_TRUE(tuningForced(Coll::kAllReduce));
  EXPECT_FALSE(tuningForced(Coll::kReduceScatter));
  EXPECT_EQ(chooseAlgo(Coll::kReduceScatter, 64 * kMB, 8, -1, true).algo, Algo::kHier) << "not forced: the default";

  setenv("NCCL_ALGO", "ring,NVLS;allreduce:^ring,tree", 1);  // every collective the ring, allreduce neither
  paramsReload();
  EXPECT_EQ(tuningSettingsError(), "");
  EXPECT_EQ(chooseAlgo(Coll::kReduceScatter, 64 * kMB, 8, -1, true).algo, Algo::kRing);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 64 * kMB, 8, -1, true).algo, Algo::kHier);
  EXPECT_TRUE(tuningForced(Coll::kBroadcast));

  setenv("NCCL_ALGO", "Ring", 1);
  setenv("NCCL_PROTO", "Simple;allreduce:LL", 1);
  paramsReload();
  EXPECT_EQ(tuningSettingsError(), "");
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 64 * kMB, 8, -1, true).proto, Proto::kLL);
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 1024, 8, 1 << 20, true).proto, Proto::kSimple) << "LL default, Simple forced";

  for (auto [algo, proto, says] :
       {std::tuple{"Rnig", "", "NCCL_ALGO=\"Rnig\": unknown name \"Rnig\""},
        std::tuple{"allreduse:ring", "", "NCCL_ALGO=\"allreduse:ring\": unknown collective \"allreduse\""},
        std::tuple{"ring;tree", "", "every entry after the first needs a COLLECTIVE: prefix (\"tree\")"},
        std::tuple{"", "LL256", "NCCL_PROTO=\"LL256\": unknown name \"LL256\""}}) {
    setenv("NCCL_ALGO", algo, 1);
    setenv("NCCL_PROTO", proto, 1);
    paramsReload();
    EXPECT_NE(tuningSettingsError().find(says), std::string::npos) << tuningSettingsError();
  }
  unsetenv("NCCL_PROTO");
}

}  // namespace
}  // namespace chorus
