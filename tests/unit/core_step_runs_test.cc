// Schedules as runs of steps (kernels/executor.h StepRun, engine/plan.h packStepRuns): how a device launch holds
// them. Packing must give back every step exactly, for every generator, rank count, rank, root and ring order; and a
// ring in rank order must stay a few runs however many ranks it has, which is what lets the device path run rings
// over hundreds of ranks (a launch holds kDevMaxRuns runs).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algo/generators.h"
#include "core/comm.h"
#include "core/params.h"
#include "engine/plan.h"
#include "topo/ring_order.h"

namespace chorus {
namespace {

std::vector<Step> unpack(const std::vector<StepRun>& runs) {
  std::vector<Step> steps;
  for (const StepRun& r : runs) {
    EXPECT_GE(r.repeat, 1);
    for (uint32_t k = 0; k < r.repeat; k++) steps.push_back(r.at(k));
  }
  return steps;
}

std::string show(const Step& s) {
  return "op " + std::to_string(int(s.op)) + " send " + std::to_string(s.sendPeer) + " recv " +
         std::to_string(s.recvPeer) + " src " + std::to_string(int(s.src.buf)) + ":" + std::to_string(s.src.block) +
         " dst " + std::to_string(int(s.dst.buf)) + ":" + std::to_string(s.dst.block) + " final " +
         std::to_string(int(s.final));
}

// Packs s and checks that unpacking gives back its steps exactly; returns the number of runs.
size_t roundTrip(const Schedule& s, const std::string& what) {
  std::vector<StepRun> runs;
  packStepRuns(s.steps.data(), s.steps.size(), &runs);
  std::vector<Step> back = unpack(runs);
  EXPECT_EQ(back.size(), s.steps.size()) << what;
  for (size_t i = 0; i < std::min(back.size(), s.steps.size()); i++)
    EXPECT_EQ(show(back[i]), show(s.steps[i])) << what << " step " << i;
  return runs.size();
}

TEST(StepRuns, EveryGeneratorsStepsComeBackExactly) {
  const Coll colls[] = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kAllToAll,  Coll::kGather,        Coll::kScatter};
  int checked = 0;
  for (int n : {1, 2, 3, 4, 5, 7, 8, 12, 16, 33}) {
    // Rank order, and ranks placed round-robin over hosts of 4 (a ring laid host by host is then a permutation).
    std::vector<uint64_t> hostOf(n);
    for (int r = 0; r < n; r++) hostOf[r] = static_cast<uint64_t>(r % std::max(1, n / 4));
    const std::vector<int> byHost = ringOrderByHost(hostOf);
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &byHost}) {
      for (Coll coll : colls) {
        for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++) {
          const Algo algo = static_cast<Algo>(a);
          if (!algoSupported(coll, algo, n)) continue;
          for (int rank : {0, 1, n / 2, n - 1}) {
            if (rank >= n) continue;
            for (int channel : {0, 1}) {
              for (int root : {0, n - 1}) {
                ScheduleRequest req{coll, algo, n, rank, channel, 2, root};
                req.ringOrder = order;
                req.localRanks = n % 4 == 0 && n > 4 ? 4 : 0;
                Schedule s;
                std::string err;
                if (!buildSchedule(req, &s, &err)) continue;  // e.g. a family that needs whole hosts
                roundTrip(s, std::string("coll ") + std::to_string(int(coll)) + " algo " + std::to_string(a) + " n " +
                                 std::to_string(n) + " rank " + std::to_string(rank));
                checked++;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000) << "too few schedules were built to prove anything";
}

TEST(StepRuns, ARingInRankOrderIsAFewRunsWhateverTheRanks) {
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast, Coll::kReduce}) {
    for (int n : {2, 3, 8, 64, 161, 1024}) {
      for (int rank : {0, 1, n / 2, n - 1}) {
        Schedule s;
        std::string err;
        ASSERT_TRUE(buildSchedule(ScheduleRequest{coll, Algo::kRing, n, rank, 0, 1, 0}, &s, &err)) << err;
        const size_t runs = roundTrip(s, "ring n " + std::to_string(n));
        // Allreduce: send, two runs of recvReduceSend (the block index wraps once), the final step, two runs of
        // recvCopySend, the last receive.
        EXPECT_LE(runs, 7u) << "coll " << int(coll) << " n " << n << " rank " << rank << ": " << s.steps.size()
                            << " steps";
      }
    }
  }
}

// An allreduce ring in another order (ranks placed round-robin) or rotated within hosts (ring channels over hosts)
// keeps its blocks by position, so it stays as few runs as in rank order on every channel.
TEST(StepRuns, AnAllReduceRingInAnyOrderIsAFewRunsOnEveryChannel) {
  const int hosts = 8, P = 6, n = hosts * P;
  std::vector<uint64_t> hostOf(n);
  for (int r = 0; r < n; r++) hostOf[r] = static_cast<uint64_t>(r % hosts);  // round-robin
  const std::vector<int> order = ringOrderByHost(hostOf);
  ASSERT_FALSE(order.empty());
  for (int ch = 0; ch < P; ch++) {
    for (int rank : {0, 1, n / 2, n - 1}) {
      Schedule s;
      std::string err;
      ScheduleRequest req{Coll::kAllReduce, Algo::kRing, n, rank, ch, P, 0, &order, P};
      ASSERT_TRUE(buildSchedule(req, &s, &err)) << err;
      EXPECT_LE(roundTrip(s, "rotated ring channel " + std::to_string(ch)), 7u) << "channel " << ch << " rank " << rank;
    }
  }
}

TEST(StepRuns, StepsThatDoNotMoveEvenlyStartNewRuns) {
  Step a;
  a.op = StepOp::kRecvCopySend;
  a.sendPeer = 1, a.recvPeer = 3, a.dst = {Buf::kOutput, 5};
  std::vector<Step> steps(5, a);
  steps[1].dst.block = 4, steps[2].dst.block = 3;  // 5, 4, 3: one run
  steps[3].dst.block = 1;                          // a jump of 2: a new run
  steps[4].dst.block = 0;
  steps[4].final = true;  // the same move, but a step of another kind
  std::vector<StepRun> runs;
  packStepRuns(steps.data(), steps.size(), &runs);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].repeat, 3);
  EXPECT_EQ(runs[0].dDstBlock, -1);
  EXPECT_EQ(runs[1].repeat, 1);
  EXPECT_EQ(runs[2].repeat, 1);
  std::vector<Step> back = unpack(runs);
  for (size_t i = 0; i < steps.size(); i++) EXPECT_EQ(show(back[i]), show(steps[i])) << i;
  // A move too large for a run's delta is two runs, not a wrong one.
  steps.assign(3, a);
  steps[1].dst.block = 40000, steps[2].dst.block = 80000;
  runs.clear();
  packStepRuns(steps.data(), steps.size(), &runs);
  back = unpack(runs);
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < steps.size(); i++) EXPECT_EQ(show(back[i]), show(steps[i])) << i;
}

// A communicator of n ranks on n / perHost hosts, rank r on host hostOf(r), as the planner of rank `rank` sees it.
template <class HostOf>
std::unique_ptr<ncclComm> fakeComm(int n, int rank, HostOf hostOf) {
  auto c = std::make_unique<ncclComm>();
  c->nranks = n;
  c->rank = rank;
  c->commHash = 42;
  c->peers.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; r++) c->peers[r].rank = r, c->peers[r].hostHash = 1000 + hostOf(r);
  return c;
}

// Step runs of a plan's channels, as a launch holds them.
size_t runsOf(const std::vector<Schedule>& scheds) {
  std::vector<StepRun> runs;
  for (const Schedule& s : scheds) packStepRuns(s.steps.data(), s.steps.size(), &runs);
  return runs.size();
}

struct Planned {
  int channels;
  Algo algo;
  size_t runs;
};

// Every rank's plan of `coll` over 16 channels asked for, under a launch's limits.
template <class HostOf>
std::vector<Planned> planEveryRank(int n, HostOf hostOf, Coll coll, LaunchLimits limits) {
  std::vector<Planned> out;
  std::vector<char> buf(16);
  for (int r = 0; r < n; r++) {
    auto comm = fakeComm(n, r, hostOf);
    Planner planner(comm.get(), FifoGeometry{});
    OpDesc op;
    op.coll = coll;
    op.sendbuff = buf.data();
    op.recvbuff = buf.data() + 8;  // never dereferenced: planning only lays out blocks
    op.count = 1 << 20;
    CollPlan plan;
    bool empty = false;
    EXPECT_EQ(planner.planColl(
                  op, 16, -1, [&](size_t) { return buf.data(); }, &plan, &empty, limits),
              ncclSuccess);
    out.push_back({plan.nChannels, plan.choice.algo, runsOf(*plan.scheds)});
  }
  return out;
}

class StepRunsPlanner : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("NCCL_ALGO");
    chorus::paramsReload();
  }
};

// The ranks' schedules differ in runs (where a block index wraps, a rank's position in the host), so a channel count
// that fits one rank's runs may not fit another's. Every rank must pick the same channels, or a launch waits for a
// channel its peer never runs.
TEST_F(StepRunsPlanner, EveryRankPicksTheSameChannels) {
  setenv("NCCL_ALGO", "Hierarchical", 1);
  chorus::paramsReload();
  const int n = 48;
  auto byHost = [](int r) { return r / 6; };  // 8 hosts x 6, host by host
  auto cyclic = [](int r) { return r % 8; };  // the same, round-robin
  int agreedWithLimit = 0;
  for (int maxRuns : {20, 40, 70, 110, 160, 230, 320}) {
    for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter}) {
      for (int placement = 0; placement < 2; placement++) {
        std::vector<Planned> p = placement == 0 ? planEveryRank(n, byHost, coll, LaunchLimits{128, maxRuns})
                                                : planEveryRank(n, cyclic, coll, LaunchLimits{128, maxRuns});
        bool bound = false;
        for (int r = 0; r < n; r++) {
          EXPECT_EQ(p[r].channels, p[0].channels) << "maxRuns " << maxRuns << " coll " << int(coll) << " rank " << r;
          EXPECT_EQ(p[r].algo, p[0].algo) << "maxRuns " << maxRuns << " rank " << r;
          // Unless not even the ring fits one channel (the engine then refuses the launch, saying why).
          if (p[r].algo != Algo::kRing || p[r].channels > 1)
            EXPECT_LE(p[r].runs, static_cast<size_t>(maxRuns)) << "rank " << r;
          bound |= p[r].channels < 16;
        }
        agreedWithLimit += bound ? 1 : 0;
      }
    }
  }
  EXPECT_GT(agreedWithLimit, 10) << "the limits never bound: the test proves nothing";
}

// A hierarchical ring over 48 ranks is some 37 runs a channel; a launch of 20 holds none of it, so the ring (7 runs a
// channel) runs the collective instead of the launch being refused.
TEST_F(StepRunsPlanner, TooLongASchedulePlansTheRing) {
  setenv("NCCL_ALGO", "Hierarchical", 1);
  chorus::paramsReload();
  std::vector<Planned> p = planEveryRank(
      48, [](int r) { return r / 6; }, Coll::kAllReduce, LaunchLimits{128, 20});
  for (const Planned& q : p) {
    EXPECT_EQ(q.algo, Algo::kRing);
    EXPECT_EQ(q.channels, 2);  // 7 runs a channel at most
    EXPECT_LE(q.runs, 20u);
  }
  p = planEveryRank(
      48, [](int r) { return r / 6; }, Coll::kAllReduce, LaunchLimits{128, 320});
  for (const Planned& q : p) EXPECT_EQ(q.algo, Algo::kHier);
}

}  // namespace
}  // namespace chorus
