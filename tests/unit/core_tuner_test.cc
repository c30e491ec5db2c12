// The tuner's default choice across hosts: hierarchical from CHORUS_HIER_MIN_BYTES of the collective's full buffer
// (allreduce's buffer, allgather's output, reduce-scatter's input), the ring below it or on one host, and NCCL_ALGO
// still forcing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/params.h"
#include "engine/tuner.h"

namespace chorus {
namespace {

class Tuner : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("NCCL_ALGO");
    unsetenv("CHORUS_HIER_MIN_BYTES");
    paramsReload();
  }
  void TearDown() override { SetUp(); }
};

constexpr size_t kMB = 1 << 20;

TEST_F(Tuner, HierarchicalAcrossHostsFromTheThreshold) {
  const int n = 8;
  const size_t kMin = 256 << 10;  // CHORUS_HIER_MIN_BYTES's default
  // Allreduce: the buffer itself.
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 4 * kMB, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, kMin, n, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, kMin - 1, n, -1, true).algo, Algo::kRing);
  // Small allreduces: one-shot within a host, the ring across hosts (one-shot would send every buffer n-1 times).
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, n, -1, true).algo, Algo::kRing);
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 1024, n, -1, false).algo, Algo::kOneShot);
  // Allgather and reduce-scatter: bytes a rank times the ranks.
  for (Coll coll : {Coll::kAllGather, Coll::kReduceScatter}) {
    EXPECT_EQ(chooseAlgo(coll, kMin / n, n, -1, true).algo, Algo::kHier) << collName(coll);
    EXPECT_EQ(chooseAlgo(coll, kMin / n - 1, n, -1, true).algo, Algo::kRing) << collName(coll);
  }
  // One host, or hosts of unequal size: the ring.
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter})
    EXPECT_EQ(chooseAlgo(coll, 64 * kMB, n, -1, false).algo, Algo::kRing) << collName(coll);
  // Broadcast has no hierarchical form.
  EXPECT_EQ(chooseAlgo(Coll::kBroadcast, 64 * kMB, n, -1, true).algo, Algo::kRing);
}

TEST_F(Tuner, ThresholdAndForcing) {
  setenv("CHORUS_HIER_MIN_BYTES", "65536", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8192, 8, -1, true).algo, Algo::kHier);
  EXPECT_EQ(chooseAlgo(Coll::kAllGather, 8191, 8, -1, true).algo, Algo::kRing);
  setenv("NCCL_ALGO", "Ring", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kAllReduce, 64 * kMB, 8, -1, true).algo, Algo::kRing);
  setenv("NCCL_ALGO", "Hierarchical", 1);
  paramsReload();
  EXPECT_EQ(chooseAlgo(Coll::kReduceScatter, 16, 8, -1, true).algo, Algo::kHier);
  // Forced where it cannot run: the ring.
  EXPECT_EQ(chooseAlgo(Coll::kBroadcast, 64 * kMB, 8, -1, true).algo, Algo::kRing);
}

}  // namespace
}  // namespace chorus
