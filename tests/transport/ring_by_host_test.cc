// Rings laid host by host on a real communicator: six processes on three hosts (NCCL_HOSTID), placed round-robin
// (rank r on host r % 3, as `srun --distribution=cyclic` does), shared memory within a host and sockets across.
// Every ring collective gives exact results in and out of place, and rank 0's log names the order (0 3 1 4 2 5),
// in which the ring crosses hosts 3 times instead of 6. Over three channels the rings rotate within the hosts, and
// over six the node-aware trees of 2 hosts x 3 ranks do.
// CHORUS_RING_BY_HOST=0 keeps rank order, also exact. The same placement runs allreduce, allgather and
// reduce-scatter hierarchical from CHORUS_HIER_MIN_BYTES (3 hosts x 2 ranks), and when NCCL_ALGO forces it; rank 0's
// schedules (CHORUS_PRINT_SCHEDULE) show which algorithm ran. Forced trees are node-aware over the same hosts.
// NCCL_ALGO=Rail runs allgather and reduce-scatter as rail on 3 hosts x 2 ranks and on 2 hosts x 3, where in-place
// reduce-scatter is not alias safe and runs the ring instead. Ranks that disagree on NCCL_CROSS_NIC are refused.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

enum Outcome { kOk = 0, kInitFailed = 10, kCallFailed, kWrong };

int32_t v(int rank, size_t i) { return int32_t(rank * 100003 + int32_t(i % 9973)); }

// One rank: every ring collective on `n` int32 elements a rank, out of place then in place; the exit code says how
// it went (the first failure's text on stderr).
int ringCollectives(int rank, int nranks, const ncclUniqueId& id, const char* byHost, const std::string& log,
                    const char* algo, int hosts) {
  setenv("NCCL_HOSTID", ("ring-host-" + std::to_string(rank % hosts)).c_str(), 1);
  if (algo[0] != 0) setenv("NCCL_ALGO", algo, 1);
  setenv("CHORUS_HIER_MIN_BYTES", "65536", 1);  // the test's collectives (80 KB a rank) run hierarchical
  setenv("CHORUS_HIER_RING_BAND", "0,0", 1);
  setenv("CHORUS_RING_BY_HOST", byHost, 1);
  if (rank == 0) {
    logInfoTo(log, "INIT,COLL");
    setenv("CHORUS_PRINT_SCHEDULE", "1", 1);
  }
  chorus::paramsReload();
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return kInitFailed;
  const size_t N = 20011;  // per rank; odd, and several FIFO slots a block
  const int n = nranks;
  std::vector<int32_t> in(N * n), out(N * n);
  auto fail = [&](const char* what, size_t i, long got, long want) {
    fprintf(stderr, "rank %d: %s: element %zu is %ld, expected %ld\n", rank, what, i, got, want);
    return kWrong;
  };
  auto call = [&](ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fprintf(stderr, "rank %d: %s: %s\n", rank, what, ncclGetLastError(comm));
    return r == ncclSuccess;
  };
  for (bool inPlace : {false, true}) {
    // allreduce
    for (size_t i = 0; i < N; i++) in[i] = v(rank, i);
    int32_t* arOut = inPlace ? in.data() : out.data();
    if (!call(ncclAllReduce(in.data(), arOut, N, ncclInt32, ncclSum, comm, nullptr), "allreduce")) return kCallFailed;
    for (size_t i = 0; i < N; i++) {
      long want = 0;
      for (int q = 0; q < n; q++) want += v(q, i);
      if (arOut[i] != want) return fail("allreduce", i, arOut[i], want);
    }
    // integer average: the division happens once, at the last reduction
    for (size_t i = 0; i < N; i++) in[i] = v(rank, i);
    if (!call(ncclAllReduce(in.data(), arOut, N, ncclInt32, ncclAvg, comm, nullptr), "allreduce avg"))
      return kCallFailed;
    for (size_t i = 0; i < N; i++) {
      long sum = 0;
      for (int q = 0; q < n; q++) sum += v(q, i);
      if (arOut[i] != sum / n) return fail("allreduce avg", i, arOut[i], sum / n);
    }
    // allgather: in place, the input is block `rank` of the output
    int32_t* agIn = inPlace ? out.data() + rank * N : in.data();
    for (size_t i = 0; i < N; i++) agIn[i] = v(rank, i);
    if (!call(ncclAllGather(agIn, out.data(), N, ncclInt32, comm, nullptr), "allgather")) return kCallFailed;
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++)
        if (out[q * N + i] != v(q, i)) return fail("allgather", q * N + i, out[q * N + i], v(q, i));
    // reduce-scatter: in place, the output is block `rank` of the input
    for (size_t i = 0; i < N * n; i++) in[i] = v(rank, i);
    int32_t* rsOut = inPlace ? in.data() + rank * N : out.data();
    if (!call(ncclReduceScatter(in.data(), rsOut, N, ncclInt32, ncclSum, comm, nullptr), "reduce-scatter"))
      return kCallFailed;
    for (size_t i = 0; i < N; i++) {
      long want = 0;
      for (int q = 0; q < n; q++) want += v(q, rank * N + i);
      if (rsOut[i] != want) return fail("reduce-scatter", i, rsOut[i], want);
    }
    // broadcast and reduce from roots on different hosts
    for (int root : {0, 4}) {
      for (size_t i = 0; i < N; i++) in[i] = v(rank, i);
      int32_t* bcOut = inPlace ? in.data() : out.data();
      if (!call(ncclBroadcast(in.data(), bcOut, N, ncclInt32, root, comm, nullptr), "broadcast")) return kCallFailed;
      for (size_t i = 0; i < N; i++)
        if (bcOut[i] != v(root, i)) return fail("broadcast", i, bcOut[i], v(root, i));
      for (size_t i = 0; i < N; i++) in[i] = v(rank, i);
      int32_t* rdOut = inPlace ? in.data() : out.data();
      if (!call(ncclReduce(in.data(), rdOut, N, ncclInt32, ncclMax, root, comm, nullptr), "reduce")) return kCallFailed;
      if (rank == root)
        for (size_t i = 0; i < N; i++)
          if (rdOut[i] != v(n - 1, i)) return fail("reduce", i, rdOut[i], v(n - 1, i));
    }
  }
  ncclCommDestroy(comm);
  return kOk;
}

// Six ranks placed round-robin on `hosts` hosts; returns rank 0's log (each rank must exit 0, kOk).
std::string runPlacement(const char* byHost, const std::string& log, const char* algo = "ring", int hosts = 3) {
  return forkRanksForLog(
      6, [&](int rank, const ncclUniqueId& id) { return ringCollectives(rank, 6, id, byHost, log, algo, hosts); }, log,
      120);
}

TEST(RingByHost, RoundRobinPlacementRingsHostByHost) {
  std::string log = "/tmp/chorus_ring_by_host_" + std::to_string(getpid()) + ".log";
  std::string text = runPlacement("1", log);
  EXPECT_NE(text.find("rings host by host (CHORUS_RING_BY_HOST): 0 3 1 4 2 5"), std::string::npos) << text;
  for (const char* coll : {"AllReduce", "AllGather", "ReduceScatter"}) {
    EXPECT_NE(text.find(std::string(coll) + " Ring nranks=6"), std::string::npos) << coll << "\n" << text;
    EXPECT_EQ(text.find(std::string(coll) + " Hierarchical"), std::string::npos) << coll << "\n" << text;
  }
}

// Three ring channels over the same hosts: channel c rotates each host's ranks by c mod 2 (src/algo/generators.h),
// so channel 1 enters and leaves every host on the ranks channel 0 does not, and rail-aligned (NCCL_CROSS_NIC unset,
// 2) the second host is walked backwards, entered at the local rank where the first was left. Every collective stays
// exact, and rank 0's ring neighbours show it: channel 0 runs 0 3 4 1 2 5 (from 5, to 3), channel 1 runs 3 0 1 4 5 2
// (from 3, to 1), channel 2 channel 0's ring again. With NCCL_CROSS_NIC=1 every host is walked forwards: channel 0
// runs 0 3 1 4 2 5 (from 5, to 3), channel 1 runs 3 0 4 1 5 2 (from 3, to 4).
// Rank 0's printed schedule of `what` (as "AllGather Ring") on `channel` in the log, or "".
std::string rank0Schedule(const std::string& text, const std::string& what, int channel) {
  const std::string head = what + " nranks=6 rank=0 channel=" + std::to_string(channel) + " ";
  const size_t at = text.find(head);
  if (at == std::string::npos) return std::string();
  const size_t end = text.find("\n\n", at);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST(RingByHost, ChannelsRotateWithinHosts) {
  for (bool railAligned : {true, false}) {
    setenv("CHORUS_HOST_NCHANNELS", "3", 1);
    if (!railAligned) setenv("NCCL_CROSS_NIC", "1", 1);
    std::string log = "/tmp/chorus_ring_rotate_" + std::to_string(getpid()) + ".log";
    std::string text = runPlacement("1", log);
    unsetenv("CHORUS_HOST_NCHANNELS");
    unsetenv("NCCL_CROSS_NIC");
    EXPECT_NE(text.find(railAligned ? "ring channels over 3 hosts cross between the same local rank of two hosts, but "
                                      "for the last host's crossing back to the first"
                                    : "ring channels over 3 hosts cross from local rank c-1 of a host to local rank c"),
              std::string::npos)
        << text;
    for (int channel : {0, 1, 2}) {
      const std::string s = rank0Schedule(text, "AllGather Ring", channel);
      ASSERT_FALSE(s.empty()) << "no schedule for channel " << channel << "\n" << text;
      const bool rotated = channel == 1;
      EXPECT_NE(s.find(rotated ? "from 3" : "from 5"), std::string::npos) << s;
      EXPECT_NE(s.find(!rotated ? "to 3" : railAligned ? "to 1" : "to 4"), std::string::npos) << s;
      EXPECT_EQ(s.find(rotated ? "from 5" : "from 3"), std::string::npos) << s;
    }
  }
}

// Node-aware trees over 2 hosts x 3 ranks (rank r on host r % 2: ring order 0 2 4 1 3 5) on six channels, the
// six trees channelKinds counts for 3 ranks a host: tree A (even channels) crosses hosts at local rank c mod 3 and
// tree B (odd) at 3 - c mod 3 (src/algo/generators.cc). Rank 0 is local rank 0 of its host, so only channels 0 and
// 3 have it talk to another host (ranks 1, 3, 5); every tree collective stays exact in and out of place.
TEST(RingByHost, NodeAwareTreeChannelsRotateWithinHosts) {
  setenv("CHORUS_HOST_NCHANNELS", "6", 1);
  std::string log = "/tmp/chorus_tree_rotate_" + std::to_string(getpid()) + ".log";
  std::string text = runPlacement("1", log, "Tree", 2);
  unsetenv("CHORUS_HOST_NCHANNELS");
  for (int channel = 0; channel < 6; channel++) {
    const std::string s = rank0Schedule(text, "AllReduce Tree", channel);
    ASSERT_FALSE(s.empty()) << "no schedule for channel " << channel << "\n" << text;
    const bool crosses = std::regex_search(s, std::regex("(from|to) [135]\\b"));
    EXPECT_EQ(crosses, channel == 0 || channel == 3) << "channel " << channel << "\n" << s;
  }
}

TEST(RingByHost, RankOrderWhenTurnedOff) {
  std::string log = "/tmp/chorus_ring_rank_order_" + std::to_string(getpid()) + ".log";
  std::string text = runPlacement("0", log);
  EXPECT_EQ(text.find("rings host by host"), std::string::npos) << text;
  EXPECT_NE(text.find("Init COMPLETE"), std::string::npos) << "rank 0 wrote no log: " << text;
}

TEST(RingByHost, HierarchicalBySizeAndForced) {
  for (const char* algo : {"", "Hierarchical"}) {
    std::string log = "/tmp/chorus_hier_" + std::to_string(getpid()) + ".log";
    std::string text = runPlacement("1", log, algo);
    EXPECT_NE(text.find("hierarchical allreduce, allgather and reduce-scatter from 65536 bytes: 3 hosts x 2 ranks"),
              std::string::npos)
        << text;
    for (const char* coll : {"AllReduce", "AllGather", "ReduceScatter"})
      EXPECT_NE(text.find(std::string(coll) + " Hierarchical nranks=6"), std::string::npos) << coll << "\n" << text;
  }
}

// Trees over the same placement are node-aware (3 hosts x 2 ranks): every tree collective exact in and out of place,
// roots on two hosts, and a host's chain runs within the host: rank 0's allreduce tree on channel 0 (position 0,
// its host's entry) has its chain child, rank 3, among its neighbours.
TEST(RingByHost, NodeAwareTreesForced) {
  std::string log = "/tmp/chorus_tree_hosts_" + std::to_string(getpid()) + ".log";
  std::string text = runPlacement("1", log, "Tree");
  for (const char* coll : {"AllReduce", "Broadcast", "Reduce"})
    EXPECT_NE(text.find(std::string(coll) + " Tree nranks=6"), std::string::npos) << coll << "\n" << text;
  const size_t at = text.find("AllReduce Tree nranks=6");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string sched =
      text.substr(at, text.find("\n\n", at) == std::string::npos ? 400 : text.find("\n\n", at) - at);
  EXPECT_NE(sched.find("from 3"), std::string::npos) << sched;
}

TEST(RingByHost, RailForced) {
  for (int hosts : {3, 2}) {
    std::string log = "/tmp/chorus_rail_" + std::to_string(getpid()) + ".log";
    std::string text = runPlacement("1", log, "Rail", hosts);
    for (const char* coll : {"AllGather", "ReduceScatter"})
      EXPECT_NE(text.find(std::string(coll) + " Rail nranks=6"), std::string::npos)
          << coll << " " << hosts << " hosts\n"
          << text;
    // Rail has no allreduce: the default (hierarchical at this size) runs.
    EXPECT_EQ(text.find("AllReduce Rail"), std::string::npos) << text;
    // 3 ranks a host: in-place reduce-scatter is not alias safe under rail, and runs the ring.
    if (hosts == 2) {
      EXPECT_NE(text.find("ReduceScatter Ring nranks=6"), std::string::npos) << text;
    }
  }
}

// NCCL_CROSS_NIC decides which way every second host's ranks are walked: ranks that disagree would wait on neighbours
// that send elsewhere, so init refuses them on every rank, naming the variable.
TEST(RingByHost, RanksThatDisagreeOnCrossNicAreRefused) {
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    if (rank == 1) setenv("NCCL_CROSS_NIC", "1", 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    const ncclResult_t res = ncclCommInitRank(&comm, 2, id, rank);
    const std::string err = ncclGetLastError(nullptr);
    if (res == ncclSuccess) ncclCommDestroy(comm);
    if (res != ncclInvalidUsage || err.find("NCCL_CROSS_NIC") == std::string::npos) {
      fprintf(stderr, "rank %d: init gave %d: %s\n", rank, static_cast<int>(res), err.c_str());
      return 1;
    }
    return 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

}  // namespace
}  // namespace chorus_test
