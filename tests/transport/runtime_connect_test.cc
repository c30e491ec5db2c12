// NCCL_RUNTIME_CONNECT: six processes on three hosts (NCCL_HOSTID; shared memory within a host, the socket net
// across). With 0, init makes the collectives' connections (shm FIFOs and net connections) and returns once the net
// has connected every one, each rank says how many connection ends, and the collectives that follow (allreduce,
// allgather, reduce-scatter, broadcast and reduce from root 0, small and large) make no other and give exact results.
// With the variable unset (NCCL's 1), init makes none: each is made by the first call that needs it.
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

constexpr int kRanks = 6, kHosts = 3;

enum Outcome { kOk = 0, kInitFailed = 10, kCallFailed, kWrong };

int32_t v(int rank, size_t i) { return int32_t(rank * 1009 + int32_t(i % 997)); }

std::string logOf(const std::string& base, int rank) { return base + "." + std::to_string(rank); }

// One rank: init with NCCL_RUNTIME_CONNECT=`setting` ("" unset); with `calls`, every collective of the test at 8 B
// and at 1 MB a rank, each result checked.
int rankMain(int rank, const ncclUniqueId& id, const char* setting, bool calls, const std::string& logBase) {
  setenv("NCCL_HOSTID", ("rc-host-" + std::to_string(rank % kHosts)).c_str(), 1);
  if (setting[0] != 0) setenv("NCCL_RUNTIME_CONNECT", setting, 1);
  logInfoTo(logOf(logBase, rank), "INIT,SHM,NET");
  chorus::paramsReload();
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, kRanks, id, rank) != ncclSuccess) return kInitFailed;
  auto call = [&](ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fprintf(stderr, "rank %d: %s: %s\n", rank, what, ncclGetLastError(comm));
    return r == ncclSuccess;
  };
  auto wrong = [&](const char* what, size_t n, size_t i, long got, long want) {
    fprintf(stderr, "rank %d: %s of %zu: element %zu is %ld, expected %ld\n", rank, what, n, i, got, want);
    return kWrong;
  };
  for (size_t N : {size_t(2), size_t(262144)}) {
    if (!calls) break;
    std::vector<int32_t> in(N * kRanks), out(N * kRanks);
    for (size_t i = 0; i < N * kRanks; i++) in[i] = v(rank, i);
    if (!call(ncclAllReduce(in.data(), out.data(), N, ncclInt32, ncclSum, comm, nullptr), "allreduce"))
      return kCallFailed;
    for (size_t i = 0; i < N; i++) {
      long want = 0;
      for (int q = 0; q < kRanks; q++) want += v(q, i);
      if (out[i] != want) return wrong("allreduce", N, i, out[i], want);
    }
    if (!call(ncclAllGather(in.data(), out.data(), N, ncclInt32, comm, nullptr), "allgather")) return kCallFailed;
    for (int q = 0; q < kRanks; q++)
      for (size_t i = 0; i < N; i++)
        if (out[q * N + i] != v(q, i)) return wrong("allgather", N, q * N + i, out[q * N + i], v(q, i));
    if (!call(ncclReduceScatter(in.data(), out.data(), N, ncclInt32, ncclSum, comm, nullptr), "reduce-scatter"))
      return kCallFailed;
    for (size_t i = 0; i < N; i++) {
      long want = 0;
      for (int q = 0; q < kRanks; q++) want += v(q, rank * N + i);
      if (out[i] != want) return wrong("reduce-scatter", N, i, out[i], want);
    }
    if (!call(ncclBroadcast(in.data(), out.data(), N, ncclInt32, 0, comm, nullptr), "broadcast")) return kCallFailed;
    for (size_t i = 0; i < N; i++)
      if (out[i] != v(0, i)) return wrong("broadcast", N, i, out[i], v(0, i));
    if (!call(ncclReduce(in.data(), out.data(), N, ncclInt32, ncclMax, 0, comm, nullptr), "reduce")) return kCallFailed;
    if (rank == 0)
      for (size_t i = 0; i < N; i++)
        if (out[i] != v(kRanks - 1, i)) return wrong("reduce", N, i, out[i], v(kRanks - 1, i));
  }
  ncclCommDestroy(comm);
  return kOk;
}

struct RankLog {
  int connections = 0;       ///< "via shm" and "via <net>" lines: connection ends made
  int atInit = -1;           ///< the count the rank's init line gave, -1 without one
  bool acrossHosts = false;  ///< some end went over the socket net
  int netEnds = 0;           ///< ends over the net
  int openAtInit = 0;        ///< net connections the proxy said were connected before the init line
};

// Runs the six ranks and reads each rank's log.
std::vector<RankLog> run(const char* setting, bool calls) {
  const std::string base = "/tmp/chorus_runtime_connect_" + std::to_string(getpid()) + ".log";
  std::vector<int> status = forkRanks(
      kRanks, [&](int rank, const ncclUniqueId& id) { return rankMain(rank, id, setting, calls, base); }, 120);
  std::vector<RankLog> logs(kRanks);
  const std::regex made("rank (\\d+) channel \\d+ (->|<-) rank \\d+ via (\\S+)");
  const std::regex init("rank (\\d+): NCCL_RUNTIME_CONNECT=0: (\\d+) connection ends made at init");
  for (int r = 0; r < kRanks; r++) {
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " " << describeStatus(status[r]);
    const std::string text = readFile(logOf(base, r));
    unlink(logOf(base, r).c_str());
    EXPECT_NE(text.find("Init COMPLETE"), std::string::npos) << "rank " << r << " wrote no log:\n" << text;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), made); it != std::sregex_iterator(); ++it) {
      EXPECT_EQ(std::stoi((*it)[1]), r) << (*it)[0];
      logs[r].connections++;
      logs[r].acrossHosts |= (*it)[3] != "shm";
      logs[r].netEnds += (*it)[3] != "shm";
    }
    std::smatch m;
    if (std::regex_search(text, m, init)) {
      logs[r].atInit = std::stoi(m[2]);
      const std::string before = m.prefix();
      for (size_t at = before.find(": connected"); at != std::string::npos; at = before.find(": connected", at + 1))
        logs[r].openAtInit++;
    }
  }
  return logs;
}

TEST(RuntimeConnect, ZeroMakesTheCollectivesConnectionsAtInit) {
  std::vector<RankLog> logs = run("0", false);
  for (int r = 0; r < kRanks; r++) {
    // Each rank's ring neighbours at least, one of them on another host (rank r's host is r mod 3).
    EXPECT_GE(logs[r].atInit, 2) << "rank " << r;
    EXPECT_EQ(logs[r].connections, logs[r].atInit) << "rank " << r;
    EXPECT_TRUE(logs[r].acrossHosts) << "rank " << r;
    // Init returned once the proxy had connected every one over the net.
    EXPECT_EQ(logs[r].openAtInit, logs[r].netEnds) << "rank " << r;
  }
}

// The setting joins what ranks must agree on: were one rank to connect at init and wait while its peers do not, it
// would wait for their first call. Every rank's init is refused, naming the variable.
TEST(RuntimeConnect, RanksThatDisagreeAreRefused) {
  std::vector<int> status = forkRanks(
      2,
      [](int rank, const ncclUniqueId& id) {
        if (rank == 0) setenv("NCCL_RUNTIME_CONNECT", "0", 1);
        chorus::paramsReload();
        ncclComm_t comm;
        const ncclResult_t res = ncclCommInitRank(&comm, 2, id, rank);
        const std::string text = ncclGetLastError(nullptr);
        if (res != ncclInvalidUsage || text.find("NCCL_RUNTIME_CONNECT") == std::string::npos) {
          fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
          return 1;
        }
        return 0;
      },
      60);
  for (int r = 0; r < 2; r++)
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " " << describeStatus(status[r]);
}

TEST(RuntimeConnect, ZeroLeavesNothingForTheCollectivesToConnect) {
  std::vector<RankLog> logs = run("0", true);
  for (int r = 0; r < kRanks; r++) {
    EXPECT_GE(logs[r].atInit, 2) << "rank " << r;
    EXPECT_EQ(logs[r].connections, logs[r].atInit) << "rank " << r << ": the collectives made more";
  }
}

TEST(RuntimeConnect, UnsetConnectsOnFirstUse) {
  std::vector<RankLog> idle = run("", false);
  std::vector<RankLog> busy = run("", true);
  for (int r = 0; r < kRanks; r++) {
    EXPECT_EQ(idle[r].atInit, -1) << "rank " << r;
    EXPECT_EQ(idle[r].connections, 0) << "rank " << r;
    EXPECT_GE(busy[r].connections, 2) << "rank " << r;
    EXPECT_TRUE(busy[r].acrossHosts) << "rank " << r;
  }
}

}  // namespace
}  // namespace chorus_test
