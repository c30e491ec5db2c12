// CHORUS_TUNER_MODEL=1: the algorithm is the cost model's cheapest under CHORUS_COST_INTRA / CHORUS_COST_INTER.
// Four process ranks placed round-robin on two NCCL_HOSTID hosts (rank r on host r mod 2) run a 32 KB allgather,
// below CHORUS_HIER_MIN_BYTES, where the thresholds pick recursive doubling (placed host by host they would pick
// hierarchical: CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES); with slow links between hosts the model, which lays
// the ranks host by host, picks hierarchical, which sends the fewest bytes across (2 blocks a host against the
// ring's 3, rail's 2 in more steps, and recursive doubling's 4); with the model off, recursive doubling. Results are
// exact either way.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
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
    setenv("NCCL_HOSTID", rank % 2 == 0 ? "model-host-a" : "model-host-b", 1);
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

// Four process ranks on two NCCL_HOSTID hosts run body(comm, rank) (0 or the failure's code); returns rank 0's
// TUNING log, which names the algorithm of each size.
std::string onTwoHosts(const char* tag, const std::function<int(ncclComm_t, int)>& body) {
  const std::string log = std::string("/tmp/chorus_") + tag + "_" + std::to_string(getpid()) + ".log";
  auto child = [&](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", rank < 2 ? "host-a" : "host-b", 1);
    if (rank == 0) logInfoTo(log, "TUNING");
    ncclResetDebugInit();
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 4, id, rank) != ncclSuccess) return 10;
    const int res = body(comm, rank);
    ncclCommDestroy(comm);
    return res;
  };
  return forkRanksForLog(4, child, log, 60);
}

// Small allgathers across hosts run as a tree allreduce of the output zeroed but for the rank's own block
// (CHORUS_ALLGATHER_TREE_MAX_BYTES, 2 KB): exact for every type, in place and out of place, over an output that held
// other bytes; larger ones keep their algorithm (hierarchical at 32 KB, the ranks placed host by host). Four process
// ranks on two NCCL_HOSTID hosts; rank 0's TUNING log names the algorithm of each size.
template <class T>
bool gatherIsExact(ncclComm_t comm, int rank, size_t count, ncclDataType_t type, bool inPlace) {
  std::vector<T> in(count), out(count * 4);
  std::memset(out.data(), 0x5a, out.size() * sizeof(T));  // what the output held must not show through
  auto val = [](int r, size_t i) { return static_cast<T>((r * 37 + static_cast<int>(i % 89)) % 100 - 50); };
  for (size_t i = 0; i < count; i++) in[i] = val(rank, i);
  if (inPlace) std::memcpy(out.data() + rank * count, in.data(), count * sizeof(T));
  const void* send = inPlace ? static_cast<const void*>(out.data() + rank * count) : in.data();
  if (ncclAllGather(send, out.data(), count, type, comm, nullptr) != ncclSuccess) return false;
  for (int q = 0; q < 4; q++)
    for (size_t i = 0; i < count; i++)
      if (out[q * count + i] != val(q, i)) return false;
  return true;
}

TEST(AllGatherAsTree, SmallGathersAcrossHostsAreExact) {
  const std::string text = onTwoHosts("gather_tree", [](ncclComm_t comm, int rank) {
    for (bool inPlace : {false, true}) {
      for (size_t count : {size_t(1), size_t(3), size_t(64)}) {
        if (!gatherIsExact<int8_t>(comm, rank, count, ncclInt8, inPlace)) return 11;
        if (!gatherIsExact<int32_t>(comm, rank, count, ncclInt32, inPlace)) return 12;
        if (!gatherIsExact<double>(comm, rank, count, ncclFloat64, inPlace)) return 13;
      }
      if (!gatherIsExact<int32_t>(comm, rank, 2048, ncclInt32, inPlace)) return 14;  // 32 KB gathered
    }
    // An allreduce of as many bytes as the 2 KB gathers' allreduce runs the same tree; the log still names it.
    std::vector<int32_t> buf(512, rank);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclSum, comm, nullptr) != ncclSuccess) return 15;
    return buf[511] == 0 + 1 + 2 + 3 ? 0 : 16;
  });
  for (const char* line :
       {"AllGather of 1 bytes a rank on 4 ranks: Tree", "AllGather of 4 bytes a rank on 4 ranks: Tree",
        "AllGather of 512 bytes a rank on 4 ranks: Tree", "zero-padded",
        // Larger: the ranks are placed host by host, so hierarchical (CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES).
        "AllGather of 8192 bytes a rank on 4 ranks: Hierarchical"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_NE(text.find("AllReduce of 2048 bytes a rank on 4 ranks: Tree, Simple, 1 channel(s) (thresholds, in place)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("AllReduce of 4 bytes"), std::string::npos) << "the log names the allgather\n" << text;
}

// Small reduce-scatters across hosts run as a tree allreduce of the input into scratch memory
// (CHORUS_REDUCESCATTER_TREE_MAX_BYTES, 4 KB): exact for sums, averages and maxima of integers and doubles, in place
// and out of place, the input left as it was out of place; larger ones keep their algorithm.
template <class T>
bool scatterIsExact(ncclComm_t comm, int rank, size_t count, ncclDataType_t type, ncclRedOp_t op, bool inPlace) {
  auto val = [](int r, size_t i) { return static_cast<T>((r * 37 + static_cast<int>(i % 89)) % 100 - 50); };
  std::vector<T> in(count * 4), out(count, static_cast<T>(99));
  for (size_t i = 0; i < in.size(); i++) in[i] = val(rank, i);
  const std::vector<T> before = in;
  void* recv = inPlace ? static_cast<void*>(in.data() + rank * count) : out.data();
  if (ncclReduceScatter(in.data(), recv, count, type, op, comm, nullptr) != ncclSuccess) return false;
  const T* got = static_cast<const T*>(recv);
  for (size_t i = 0; i < count; i++) {
    const size_t at = rank * count + i;
    T want = val(0, at);
    for (int q = 1; q < 4; q++) want = op == ncclMax ? std::max(want, val(q, at)) : static_cast<T>(want + val(q, at));
    if (op == ncclAvg) want = static_cast<T>(want / 4);
    if (got[i] != want) return false;
  }
  return inPlace || in == before;
}

TEST(ReduceScatterAsTree, SmallReduceScattersAcrossHostsAreExact) {
  const std::string text = onTwoHosts("scatter_tree", [](ncclComm_t comm, int rank) {
    for (bool inPlace : {false, true}) {
      for (size_t count : {size_t(1), size_t(3), size_t(64)}) {
        for (ncclRedOp_t op : {ncclSum, ncclAvg, ncclMax}) {
          if (!scatterIsExact<int32_t>(comm, rank, count, ncclInt32, op, inPlace)) return 11;
          if (!scatterIsExact<double>(comm, rank, count, ncclFloat64, op, inPlace)) return 12;
        }
      }
      if (!scatterIsExact<int32_t>(comm, rank, 2048, ncclInt32, ncclSum, inPlace)) return 13;  // 32 KB of input
    }
    return 0;
  });
  for (const char* line : {"ReduceScatter of 4 bytes a rank on 4 ranks: Tree",
                           "ReduceScatter of 512 bytes a rank on 4 ranks: Tree", "as a tree allreduce of its input"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(text.find("ReduceScatter of 8192 bytes a rank on 4 ranks: Tree"), std::string::npos) << text;
  EXPECT_EQ(text.find("AllReduce of"), std::string::npos) << "the log names the reduce-scatter\n" << text;
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
