// CHORUS_TUNER_MODEL=1: the algorithm is the cost model's cheapest under CHORUS_COST_INTRA / CHORUS_COST_INTER.
// Four process ranks on two NCCL_HOSTID hosts run a 32 KB allgather, below CHORUS_HIER_MIN_BYTES, where the
// thresholds pick recursive doubling; with slow links between hosts the model picks hierarchical, which sends the
// fewest bytes across (2 blocks a host against the ring's 3, rail's 2 in more steps, and recursive doubling's 4);
// with the model off, recursive doubling. Results are exact either way.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit: re-reads the parameters

namespace chorus_test {
namespace {

std::string allGatherLog(const char* model) {
  const std::string log = "/tmp/chorus_tuner_model_" + std::to_string(getpid()) + ".log";
  auto child = [&](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", rank < 2 ? "model-host-a" : "model-host-b", 1);
    setenv("CHORUS_TUNER_MODEL", model, 1);
    setenv("CHORUS_COST_INTRA", "1,100", 1);    // 1 us, 100 GB/s
    setenv("CHORUS_COST_INTER", "1,0.001", 1);  // 1 us, 1 MB/s: bytes across hosts dominate
    if (rank == 0) {
      logInfoTo(log, "COLL");
      setenv("CHORUS_PRINT_SCHEDULE", "1", 1);
    }
    ncclResetDebugInit();
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 4, id, rank) != ncclSuccess) return 10;
    const size_t count = 2048;  // int32 a rank: 32 KB gathered
    std::vector<int32_t> in(count), out(count * 4);
    for (size_t i = 0; i < count; i++) in[i] = int32_t(rank * 100000 + i);
    if (ncclAllGather(in.data(), out.data(), count, ncclInt32, comm, nullptr) != ncclSuccess) return 11;
    for (int q = 0; q < 4; q++)
      for (size_t i = 0; i < count; i++)
        if (out[q * count + i] != int32_t(q * 100000 + i)) return 12;
    ncclCommDestroy(comm);
    return 0;
  };
  return forkRanksForLog(4, child, log, 60);
}

TEST(TunerModel, SlowLinksBetweenHostsPickHierarchical) {
  const std::string on = allGatherLog("1");
  EXPECT_NE(on.find("AllGather Hierarchical nranks=4"), std::string::npos) << on;
  EXPECT_EQ(on.find("AllGather Ring"), std::string::npos) << on;
  EXPECT_EQ(on.find("AllGather Rail"), std::string::npos) << on;
  EXPECT_EQ(on.find("AllGather RecDoubling"), std::string::npos) << on;
  const std::string off = allGatherLog("0");
  EXPECT_NE(off.find("AllGather RecDoubling nranks=4"), std::string::npos) << off;
  EXPECT_EQ(off.find("AllGather Hierarchical"), std::string::npos) << off;
}

// CHORUS_TREE_DUAL_MIN_BYTES sets how many channels a tree runs: ranks that disagree would wait on channels their
// peers never run, so init refuses them on every rank.
TEST(TunerSettings, RanksThatDisagreeOnTheTreesChannelsAreRefused) {
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    if (rank == 1) setenv("CHORUS_TREE_DUAL_MIN_BYTES", "1", 1);
    ncclResetDebugInit();
    ncclComm_t comm = nullptr;
    const ncclResult_t res = ncclCommInitRank(&comm, 2, id, rank);
    const std::string err = ncclGetLastError(nullptr);
    if (res == ncclSuccess) ncclCommDestroy(comm);
    return res == ncclInvalidUsage && err.find("different settings") != std::string::npos ? 0 : 1;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

}  // namespace
}  // namespace chorus_test
