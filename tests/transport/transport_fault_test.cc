// Peer failures, for every transport (shm, sockets, and the net proxy over UCX and over a net plugin): one forked rank
// is killed with SIGKILL in the middle of a stream of large allreduces, or aborts its communicator; every other rank
// must return ncclRemoteError naming that rank, well within CHORUS_TIMEOUT_S, instead of hanging.
#include <glob.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "transport/transport_env.h"
#include "transports/net/net.h"

namespace chorus_test {
namespace {

constexpr int kTimeoutS = 10;  // CHORUS_TIMEOUT_S for these runs
constexpr int kKillAfterMs = 50;

// Exit codes of a survivor, so that the parent can say what went wrong.
enum : int {
  kOk = 0,
  kInitFailed = 10,
  kFirstOpFailed = 11,
  kWrongCode = 20,
  kNotNamed = 21,
  kTooSlow = 22,
  kCaseMissed = 23,
  kNeverFailed = 30
};

const char* exitText(int code) {
  switch (code) {
    case kInitFailed:
      return "init failed";
    case kFirstOpFailed:
      return "the allreduce before the failure failed";
    case kWrongCode:
      return "the failing call returned something other than ncclRemoteError";
    case kNotNamed:
      return "ncclGetLastError did not name the dead rank";
    case kTooSlow:
      return "the failure took longer than CHORUS_TIMEOUT_S to surface";
    case kCaseMissed:
      return "the rank's log does not show the path the test is for (its stderr says which step)";
    case kNeverFailed:
      return "no call failed although a peer died";
    default:
      return "?";
  }
}

// Expects rank r to have exited with kOk; `who` names it in the failure ("rank", "survivor rank").
void expectRankOk(const std::vector<int>& status, int r, const char* who = "rank") {
  bool exited = status[r] != -1 && WIFEXITED(status[r]);
  int code = exited ? WEXITSTATUS(status[r]) : -1;
  EXPECT_TRUE(exited && code == kOk) << who << " " << r << " " << describeStatus(status[r])
                                     << (exited ? std::string(": ") + exitText(code) : std::string());
}

// Large allreduces (4 MB), or small ones (4 KB: over a net, the rank's thread drives the connections in its waits
// while the proxy sleeps: CHORUS_NET_RANK_DRIVE_MAX_BYTES).
int rankMain(int rank, const ncclUniqueId& id, int n, int victim, size_t count = (1u << 20) + 3) {
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(nullptr));
    return kInitFailed;
  }
  std::vector<float> in(count, 1.0f), out(count);
  if (rank == victim) {
    // Killed from a second thread so that the main thread is inside an operation when it dies; the clock starts
    // once its first allreduce is through, so every connection to it is up (none of its peers is still accepting
    // one: that is PeerGoneBeforeConnectingIsNamed's case).
    ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    std::thread([]() {
      std::this_thread::sleep_for(std::chrono::milliseconds(kKillAfterMs));
      kill(getpid(), SIGKILL);
    }).detach();
    for (;;) ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
  }
  // Until a call fails, or for twice the timeout: a fixed number of calls could all end before the victim dies (small
  // calls over shared memory take about a microsecond on an idle machine, and the victim dies 50 ms in).
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(2 * kTimeoutS);
  for (int iter = 0; std::chrono::steady_clock::now() < giveUp; iter++) {
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t res = ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    if (res == ncclSuccess) continue;
    double took = secondsSince(t0);
    std::string text = ncclGetLastError(comm);
    fprintf(stderr, "rank %d: allreduce #%d failed after %.3f s with %s: %s\n", rank, iter, took,
            ncclGetErrorString(res), text.c_str());
    ncclCommAbort(comm);
    if (res != ncclRemoteError) return kWrongCode;
    std::string named = "rank " + std::to_string(victim) + " ";
    if (text.find(named + "failed") == std::string::npos && text.find(named + "(pid") == std::string::npos)
      return kNotNamed;
    if (took >= kTimeoutS) return kTooSlow;
    return kOk;
  }
  ncclCommDestroy(comm);
  return kNeverFailed;
}

using Param = std::tuple<Transport, int>;

// Selects transport t. The plugin runs here with one message a slot (CHORUS_NET_SLOT_TRAILER=1, as the IB net does by
// default), so that its failure notices go as such a slot does, calls and header in one message; the collective
// suite runs the plugin's default, two messages a slot.
void selectForFaults(ScopedEnv& env, Transport t) {
  env.select(t);
  if (t == Transport::kPlugin) env.set("CHORUS_NET_SLOT_TRAILER", "1");
}

class TransportFault : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    Transport t = std::get<0>(GetParam());
    if (t == Transport::kUcx && chorus::ucxNet() == nullptr) GTEST_SKIP() << "chorus was built without UCX";
    if (t == Transport::kPlugin && kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  }
};

void killedPeerIsNamed(Transport t, int n, size_t count) {
  const int victim = n - 1;
  ScopedEnv env;
  selectForFaults(env, t);
  env.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int> status = forkRanks(
      n, [&](int rank, const ncclUniqueId& id) { return rankMain(rank, id, n, victim, count); }, 3.0 * kTimeoutS);
  double took = secondsSince(t0);
  for (int r = 0; r < n; r++) {
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL)
          << "victim rank " << r << " " << describeStatus(status[r]);
      continue;
    }
    expectRankOk(status, r, "survivor rank");
  }
  EXPECT_LT(took, 2.0 * kTimeoutS) << "the run took " << took << " s";
}

TEST_P(TransportFault, KilledPeerIsNamed) {
  killedPeerIsNamed(std::get<0>(GetParam()), std::get<1>(GetParam()), (1u << 20) + 3);
}

TEST_P(TransportFault, KilledPeerIsNamedInSmallCalls) {
  killedPeerIsNamed(std::get<0>(GetParam()), std::get<1>(GetParam()), 1024);
}

// Rank 1 aborts after one good allreduce while the others start the next: the abort must reach
// them as a failure of rank 1 (passed on by the transport, or seen as its connection closing).
TEST_P(TransportFault, AbortedPeerIsNamed) {
  const Transport t = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  ScopedEnv env;
  selectForFaults(env, t);
  env.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
  std::vector<int> status = forkRanks(
      n,
      [&](int rank, const ncclUniqueId& id) {
        ncclComm_t comm;
        if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return static_cast<int>(kInitFailed);
        std::vector<float> in(4099, 1.0f), out(4099);
        if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
          return static_cast<int>(kFirstOpFailed);
        if (rank == 1) {
          // Abort drops what the transport has not delivered yet: give the others time to finish
          // the first allreduce (milliseconds) so that only the second one is cut short.
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          ncclCommAbort(comm);
          return static_cast<int>(kOk);
        }
        auto t0 = std::chrono::steady_clock::now();
        ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr);
        double took = secondsSince(t0);
        std::string text = ncclGetLastError(comm);
        fprintf(stderr, "rank %d: allreduce after the abort returned %s after %.3f s: %s\n", rank,
                ncclGetErrorString(res), took, text.c_str());
        ncclCommAbort(comm);
        if (res == ncclSuccess) return static_cast<int>(kNeverFailed);
        if (res != ncclRemoteError) return static_cast<int>(kWrongCode);
        if (text.find("rank 1 failed") == std::string::npos) return static_cast<int>(kNotNamed);
        return static_cast<int>(took < kTimeoutS ? kOk : kTooSlow);
      },
      3.0 * kTimeoutS);
  for (int r = 0; r < n; r++) expectRankOk(status, r);
}

// Says that this rank has its answer and waits (bounded) until `expected` ranks have theirs: a rank that keeps its
// communicator until then still passes the failure on to a peer that reaches it late, and no peer is left setting up
// a connection to a process that is gone. `answered` lives in memory shared with the forked ranks.
void answerAndWait(std::atomic<int>* answered, int expected) {
  answered->fetch_add(1);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2 * kTimeoutS);
  while (answered->load() < expected && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Whether process `pid` has exited (a zombie its parent has not reaped counts).
bool exited(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

// Shared with the forked ranks of a test whose last rank exits right after init.
struct GoneShared {
  std::atomic<pid_t> victimPid{0};
  std::atomic<int> answered{0};  // survivors that have their answer
  std::atomic<int> sent{0};      // ANoticeTakenEarlierFailsALaterConnection: rank 1's send is through
};

// What a survivor's call returned, and how long the call that must fail took.
struct SurvivorResult {
  ncclResult_t res = ncclSuccess;
  double took = 0;
  bool earlierFailed = false;  // a call before it, which must succeed, failed
  bool caseMissed = false;     // the run did not take the path the test is for
};

// n ranks, the last of which exits right after init. Each survivor, once that process is gone, runs `call`, which
// must fail with ncclRemoteError naming the dead rank within half of CHORUS_TIMEOUT_S.
void runWithVictimGone(int n, bool separateHosts,
                       const std::function<SurvivorResult(int rank, ncclComm_t comm, GoneShared* shared)>& call) {
  const int victim = n - 1;
  auto* shared = static_cast<GoneShared*>(
      mmap(nullptr, sizeof(GoneShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shared, MAP_FAILED);
  new (shared) GoneShared();
  std::vector<int> status = forkRanks(
      n,
      [&](int rank, const ncclUniqueId& id) {
        if (separateHosts) {
          setenv("NCCL_HOSTID", ("host-" + std::to_string(rank)).c_str(), 1);
          chorus::paramsReload();
        }
        ncclComm_t comm;
        if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return static_cast<int>(kInitFailed);
        if (rank == victim) {
          shared->victimPid.store(getpid());
          _exit(kOk);  // no destroy: as a crash right after init
        }
        pid_t pid;
        while ((pid = shared->victimPid.load()) == 0 || !exited(pid))
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const SurvivorResult r = call(rank, comm, shared);
        std::string text = ncclGetLastError(comm);
        fprintf(stderr, "rank %d: with rank %d gone, the call returned %s after %.3f s: %s\n", rank, victim,
                ncclGetErrorString(r.res), r.took, text.c_str());
        answerAndWait(&shared->answered, n - 1);
        ncclCommAbort(comm);
        if (r.earlierFailed) return static_cast<int>(kFirstOpFailed);
        if (r.caseMissed) return static_cast<int>(kCaseMissed);
        if (r.res == ncclSuccess) return static_cast<int>(kNeverFailed);
        if (r.res != ncclRemoteError) return static_cast<int>(kWrongCode);
        std::string named = "rank " + std::to_string(victim) + " ";
        if (text.find(named + "failed") == std::string::npos && text.find(named + "(pid") == std::string::npos)
          return static_cast<int>(kNotNamed);
        return static_cast<int>(r.took < kTimeoutS / 2.0 ? kOk : kTooSlow);
      },
      3.0 * kTimeoutS);
  munmap(shared, sizeof(GoneShared));
  for (int r = 0; r < n; r++) expectRankOk(status, r);
}

// The last rank exits right after init, before any connection to it exists (no operation has run). Every other
// rank's first allreduce must fail with ncclRemoteError naming it, long before CHORUS_TIMEOUT_S: a sender finds
// its port refused, a receiver waits for a connection that will never come. The survivors start only once the
// process is gone, and each keeps its communicator until all have their answer: a survivor that failed first still
// tells the others the cause when they reach it late (it names the victim), so the outcome does not depend on how
// loaded the machine is. With `separateHosts` every rank names its own host (NCCL_HOSTID): no pid can be checked
// then, and the dead rank is found through its ports.
void peerGoneBeforeConnecting(int n, bool separateHosts) {
  runWithVictimGone(n, separateHosts, [](int, ncclComm_t comm, GoneShared*) {
    std::vector<float> in(4099, 1.0f), out(4099);
    SurvivorResult r;
    auto t0 = std::chrono::steady_clock::now();
    r.res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr);
    r.took = secondsSince(t0);
    return r;
  });
}

// Rank 2 calls with a different count. The ranks that compare fingerprints with it (0 and 2, its ring neighbours)
// name both calls; rank 1 learns it through its peers. Shared memory and the nets carry both calls to it, so its
// error names them too. Each rank keeps its communicator until every rank has its answer: rank 1 may still be
// accepting rank 0's connection when rank 0 has its answer, and a rank that left then would test how the net
// survives a peer gone mid-setup (PeerGoneBeforeConnectingIsNamed's subject), not how a mismatch travels.
TEST_P(TransportFault, MismatchedCountsReachEveryRank) {
  const Transport t = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  if (n != 3) GTEST_SKIP() << "needs a rank that compares with neither of the others' neighbours";
  ScopedEnv env;
  selectForFaults(env, t);
  env.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
  auto* answered = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(answered, MAP_FAILED);
  new (answered) std::atomic<int>(0);
  std::vector<int> status = forkRanks(
      n,
      [&](int rank, const ncclUniqueId& id) {
        ncclComm_t comm;
        if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return static_cast<int>(kInitFailed);
        std::vector<int> buf(4096, 1);
        size_t count = rank == 2 ? 4000 : 4096;
        ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), count, ncclInt32, ncclSum, comm, nullptr);
        std::string text = ncclGetLastError(comm);
        fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
        answerAndWait(answered, n);
        ncclCommAbort(comm);
        if (res != ncclInvalidUsage) return static_cast<int>(kWrongCode);
        bool both = text.find("count 4000") != std::string::npos && text.find("count 4096") != std::string::npos;
        return both ? static_cast<int>(kOk) : static_cast<int>(kNotNamed);
      },
      3.0 * kTimeoutS);
  munmap(answered, sizeof(std::atomic<int>));
  for (int r = 0; r < n; r++) expectRankOk(status, r);
}

TEST_P(TransportFault, PeerGoneBeforeConnectingIsNamed) {
  ScopedEnv env;
  selectForFaults(env, std::get<0>(GetParam()));
  env.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
  peerGoneBeforeConnecting(std::get<1>(GetParam()), false);
}

TEST(TransportFaultHosts, PeerOnAnotherHostGoneBeforeConnectingIsNamed) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
  peerGoneBeforeConnecting(3, true);
}

// A peer's failure notice comes once over the bootstrap, and the proxy takes it through a connection with that peer
// that is already open. A connection with the peer that the executor opens afterwards must fail with it at once: the
// peer will never set it up. Hosts apart, rank 2 exits after init. Rank 1 sends one slot to rank 0 (handed to the
// net's FIFO: the send returns with its connection still being set up); then rank 0's receive from rank 2 fails, and
// rank 0's notice reaches rank 1's proxy through that send connection. Once rank 1's log (INFO NET) says its proxy
// took the notice, rank 1 receives from rank 0: a new connection, which must fail naming rank 2 within half the
// timeout rather than wait the whole timeout for rank 0, and which its log must show failed by the notice kept.
TEST(TransportFaultHosts, ANoticeTakenEarlierFailsALaterConnection) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
  const std::string logs = "/tmp/chorus-notice-test-" + std::to_string(getpid()) + "-";
  env.set("NCCL_DEBUG", "INFO");
  env.set("NCCL_DEBUG_SUBSYS", "NET");
  env.set("NCCL_DEBUG_FILE", (logs + "%p.log").c_str());
  runWithVictimGone(3, true, [&logs](int rank, ncclComm_t comm, GoneShared* shared) {
    std::vector<float> buf(1024, 1.0f);
    SurvivorResult r;
    if (rank == 0) {
      // Only once rank 1's send is through, so that no notice can fail it.
      while (shared->sent.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      auto t0 = std::chrono::steady_clock::now();
      r.res = ncclRecv(buf.data(), buf.size(), ncclFloat32, 2, comm, nullptr);
      r.took = secondsSince(t0);
      return r;
    }
    r.res = ncclSend(buf.data(), buf.size(), ncclFloat32, 0, comm, nullptr);
    shared->sent.store(1);
    if (r.res != ncclSuccess) {
      r.earlierFailed = true;
      return r;
    }
    const std::string log = logs + std::to_string(getpid()) + ".log";
    const char* taken = "rank 0 reports a failure";  // the proxy's INFO NET line as it takes the notice
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(2 * kTimeoutS);
    while (readFile(log).find(taken) == std::string::npos &&
           std::chrono::steady_clock::now() < giveUp)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto t0 = std::chrono::steady_clock::now();
    r.res = ncclRecv(buf.data(), buf.size(), ncclFloat32, 0, comm, nullptr);
    r.took = secondsSince(t0);
    const std::string text = readFile(log);
    if (text.find(taken) == std::string::npos) {
      fprintf(stderr, "rank 1: its proxy did not take rank 0's failure notice in %d s\n", 2 * kTimeoutS);
      r.caseMissed = true;
    } else if (text.find("rank 0 reported a failure before this connection was opened") == std::string::npos) {
      fprintf(stderr, "rank 1: the connection from rank 0 was not failed by the notice taken before it\n");
      r.caseMissed = true;
    }
    return r;
  });
  // Each rank's log, the victim's too.
  glob_t found{};
  if (glob((logs + "*.log").c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; i++) unlink(found.gl_pathv[i]);
  globfree(&found);
}

// A peer on another host that stops calling with its connections open: the waiting rank's error at the deadline says
// what went through the connection it waits on (what the net completed, what is still pending in it), so that a net
// that lost data can be told from a peer that sent none.
TEST(TransportFaultHosts, AStalledOpenConnectionSaysWhatWentThrough) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT_S", "2");
  std::vector<int> status = forkRanks(
      2,
      [&](int rank, const ncclUniqueId& id) {
        setenv("NCCL_HOSTID", ("host-" + std::to_string(rank)).c_str(), 1);
        chorus::paramsReload();
        ncclComm_t comm;
        if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return static_cast<int>(kInitFailed);
        std::vector<float> buf(4096, 1.0f);
        if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
          return static_cast<int>(kFirstOpFailed);
        if (rank == 1) {  // stops calling, connections open, until rank 0 has its answer
          std::this_thread::sleep_for(std::chrono::seconds(6));
          ncclCommAbort(comm);
          return static_cast<int>(kOk);
        }
        ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
        std::string text = ncclGetLastError(comm);
        fprintf(stderr, "rank 0: %s: %s\n", ncclGetErrorString(res), text.c_str());
        ncclCommAbort(comm);
        if (res != ncclRemoteError) return static_cast<int>(kWrongCode);
        const bool named = text.find("rank 1 made no progress") != std::string::npos;
        const bool state = text.find("(its connection over net Socket (dev 0, channel 0, ") != std::string::npos &&
                           text.find(" rank 1) is open; slots received ") != std::string::npos;
        return named && state ? static_cast<int>(kOk) : static_cast<int>(kNotNamed);
      },
      30);
  for (int r = 0; r < 2; r++) expectRankOk(status, r);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportFault,
                         testing::Combine(testing::Values(Transport::kShm, Transport::kSocket,
                                                          Transport::kSocketStriped, Transport::kUcx,
                                                          Transport::kPlugin),
                                          testing::Values(2, 3)),
                         [](const testing::TestParamInfo<Param>& info) {
                           return std::string(transportName(std::get<0>(info.param))) + "_r" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace chorus_test
