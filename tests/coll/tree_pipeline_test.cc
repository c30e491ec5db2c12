// Pipelined tree allreduce on the host path: FIFO slots of 4 KiB make a tile 16 KiB, so a call of a few hundred KB
// runs many tiles a channel, with each rank's down phase its depth in tiles behind its up phase (Schedule::lag) and
// the channels (two or four trees) side by side on the rank's thread (src/core/fibers.h), or taking turns a tile at a
// time (CHORUS_HOST_SIDE_BY_SIDE=0). Exact results, in and out of place, for sums,
// integer averages (the post-op at the root's final step) and premulsum, over threads and processes, Simple and LL,
// flat trees on one host and node-aware trees on three hosts placed round-robin (NCCL_HOSTID). Rings over three
// channels, run the same ways, in every other collective.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <utility>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

int32_t val(int rank, size_t i) { return int32_t((rank + 1) * 1009 + int32_t(i % 7919)); }

// One rank's calls on `comm`: allreduce sum and avg of int32, premulsum of float (factor 2 on every rank), each of
// `count` elements, out of place then in place. Returns "" or what went wrong first.
std::string treeCalls(ncclComm_t comm, int rank, int n, size_t count) {
  std::vector<int32_t> in(count), out(count);
  for (bool inPlace : {false, true}) {
    for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
      for (size_t i = 0; i < count; i++) in[i] = val(rank, i);
      int32_t* dst = inPlace ? in.data() : out.data();
      if (ncclAllReduce(in.data(), dst, count, ncclInt32, op, comm, nullptr) != ncclSuccess)
        return std::string("allreduce: ") + ncclGetLastError(comm);
      for (size_t i = 0; i < count; i++) {
        int64_t sum = 0;
        for (int q = 0; q < n; q++) sum += val(q, i);
        const int64_t want = op == ncclAvg ? sum / n : sum;
        if (dst[i] != want)
          return "op " + std::to_string(op) + (inPlace ? " in place" : " out of place") + ": element " +
                 std::to_string(i) + " is " + std::to_string(dst[i]) + ", expected " + std::to_string(want);
      }
    }
    std::vector<float> fin(count), fout(count);
    for (size_t i = 0; i < count; i++) fin[i] = float(val(rank, i) % 1000);
    ncclRedOp_t pre;
    float two = 2.0f;
    if (ncclRedOpCreatePreMulSum(&pre, &two, ncclFloat32, ncclScalarHostImmediate, comm) != ncclSuccess)
      return std::string("premulsum op: ") + ncclGetLastError(comm);
    float* fdst = inPlace ? fin.data() : fout.data();
    ncclResult_t res = ncclAllReduce(fin.data(), fdst, count, ncclFloat32, pre, comm, nullptr);
    ncclRedOpDestroy(pre, comm);
    if (res != ncclSuccess) return std::string("premulsum: ") + ncclGetLastError(comm);
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int q = 0; q < n; q++) want += 2.0f * float(val(q, i) % 1000);
      if (fdst[i] != want)
        return std::string("premulsum") + (inPlace ? " in place" : " out of place") + ": element " +
               std::to_string(i) + " is " + std::to_string(fdst[i]) + ", expected " + std::to_string(want);
    }
  }
  return "";
}

struct TreeEnv {
  TreeEnv(const char* channels, const char* proto, const char* sideBySide = "1") {
    setenv("CHORUS_HOST_SIDE_BY_SIDE", sideBySide, 1);
    setenv("NCCL_ALGO", "Tree", 1);
    setenv("NCCL_PROTO", proto, 1);
    setenv("CHORUS_FIFO_SLOT_BYTES", "4096", 1);
    setenv("CHORUS_HOST_NCHANNELS", channels, 1);
    ncclResetDebugInit();
  }
  ~TreeEnv() {
    for (const char* v : {"NCCL_ALGO", "NCCL_PROTO", "CHORUS_FIFO_SLOT_BYTES", "CHORUS_HOST_NCHANNELS",
                          "CHORUS_HOST_SIDE_BY_SIDE"})
      unsetenv(v);
    ncclResetDebugInit();
  }
};

class TreePipeline : public ::testing::TestWithParam<Driver> {};

// Flat trees over 7 ranks (depth up to 3): two and four channels side by side, and two taking turns; 200003 elements
// are about 50 tiles a channel at two channels. LL (slots of 4 KiB hold about 2 KiB of data) with a smaller count.
TEST_P(TreePipeline, FlatTreesManyTiles) {
  using Setting = std::pair<const char*, const char*>;  // channels, CHORUS_HOST_SIDE_BY_SIDE
  for (auto [channels, sideBySide] : std::vector<Setting>{{"2", "1"}, {"4", "1"}, {"2", "0"}}) {
    TreeEnv env(channels, "Simple", sideBySide);
    runRanks(7, GetParam(), [](RankCtx& c) {
      const std::string why = treeCalls(c.comm, c.rank, c.nranks, 200003);
      EXPECT_EQ(why, "") << "rank " << c.rank;
    });
  }
  TreeEnv env("2", "LL");
  runRanks(5, GetParam(), [](RankCtx& c) {
    const std::string why = treeCalls(c.comm, c.rank, c.nranks, 30011);
    EXPECT_EQ(why, "") << "rank " << c.rank;
  });
}

// The other collectives with three channels side by side (16 KiB tiles, about 10 a channel): the ring, in and out of
// place, and broadcast from a moving root.
TEST_P(TreePipeline, ChannelsSideBySideInEveryCollective) {
  TreeEnv env("3", "Simple");
  setenv("NCCL_ALGO", "Ring", 1);
  ncclResetDebugInit();
  runRanks(4, GetParam(), [](RankCtx& c) {
    const int n = c.nranks, r = c.rank;
    const size_t N = 40009;  // per rank
    std::vector<int32_t> in(N * n), out(N * n);
    auto check = [&](const char* what, const int32_t* got, size_t count, auto want) {
      for (size_t i = 0; i < count; i++)
        if (got[i] != want(i)) {
          ADD_FAILURE() << what << " rank " << r << " element " << i << ": " << got[i] << " != " << want(i);
          return;
        }
    };
    for (bool inPlace : {false, true}) {
      // allgather: in place, the input is block r of the output
      int32_t* agIn = inPlace ? out.data() + r * N : in.data();
      for (size_t i = 0; i < N; i++) agIn[i] = val(r, i);
      ASSERT_EQ(ncclAllGather(agIn, out.data(), N, ncclInt32, c.comm, nullptr), ncclSuccess);
      check("allgather", out.data(), N * n, [&](size_t i) { return val(static_cast<int>(i / N), i % N); });
      // reduce-scatter: in place, the output is block r of the input
      for (size_t i = 0; i < N * n; i++) in[i] = val(r, i);
      int32_t* rsOut = inPlace ? in.data() + r * N : out.data();
      ASSERT_EQ(ncclReduceScatter(in.data(), rsOut, N, ncclInt32, ncclSum, c.comm, nullptr), ncclSuccess);
      check("reduce-scatter", rsOut, N, [&](size_t i) {
        int32_t sum = 0;
        for (int q = 0; q < n; q++) sum += val(q, r * N + i);
        return sum;
      });
      // alltoall: block q of rank p's input goes to block p of rank q's output
      for (size_t i = 0; i < N * n; i++) in[i] = val(r, i);
      ASSERT_EQ(ncclAlltoAll(in.data(), inPlace ? in.data() : out.data(), N, ncclInt32, c.comm, nullptr), ncclSuccess);
      check("alltoall", inPlace ? in.data() : out.data(), N * n,
            [&](size_t i) { return val(static_cast<int>(i / N), r * N + i % N); });
      // broadcast from root 1, then 3
      for (int root : {1, 3}) {
        for (size_t i = 0; i < N; i++) in[i] = r == root ? val(root, i) : -1;
        ASSERT_EQ(ncclBroadcast(in.data(), inPlace ? in.data() : out.data(), N, ncclInt32, root, c.comm, nullptr),
                  ncclSuccess);
        check("broadcast", inPlace ? in.data() : out.data(), N, [&](size_t i) { return val(root, i); });
      }
    }
    EXPECT_EQ(treeCalls(c.comm, r, n, 100003), "") << "allreduce, rank " << r;
  });
}

INSTANTIATE_TEST_SUITE_P(Drivers, TreePipeline, ::testing::Values(Driver::kThreads, Driver::kProcesses),
                         [](const auto& info) { return std::string(driverName(info.param)); });

// Node-aware trees: 6 processes on 3 hosts, rank r on host r % 3 (shared memory within a host, sockets across),
// so the chains within hosts and the host trees add up to depths of 3 and more.
TEST(TreePipelineHosts, NodeAwareTreesRoundRobin) {
  TreeEnv env("2", "Simple");
  std::vector<int> st = forkRanks(6, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", ("tree-host-" + std::to_string(rank % 3)).c_str(), 1);
    ncclResetDebugInit();
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 6, id, rank) != ncclSuccess) return 10;
    const std::string why = treeCalls(comm, rank, 6, 120011);
    if (!why.empty()) fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
    ncclCommDestroy(comm);
    return why.empty() ? 0 : 11;
  });
  for (int r = 0; r < 6; r++) EXPECT_EQ(describeStatus(st[r]), "exited with 0") << "rank " << r;
}

}  // namespace
}  // namespace chorus_test
