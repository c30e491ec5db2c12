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

std::vector<Step> unpack(const std::vector<StepRun>& runs, const int32_t* order = nullptr) {
  std::vector<Step> steps;
  for (const StepRun& r : runs) {
    EXPECT_GE(r.repeat, 1);
    EXPECT_TRUE(r.ordered == 0 || order != nullptr) << "a run by ring position without a ring order";
    for (uint32_t k = 0; k < r.repeat; k++) steps.push_back(r.at(k, order));
  }
  return steps;
}

// The ring order (and inverse) a schedule names its per-rank blocks in, as the planner's table holds it.
struct BlockOrderOf {
  std::vector<int32_t> order, pos;
  RunBlockOrder bo;
  bool ordered = false;
  BlockOrderOf(const ScheduleRequest& req, const Schedule& s) {
    const int rot = blockRotation(req);
    if (rot < 0) return;
    const std::vector<int> o = hostRotatedOrder(req.ringOrder, req.nranks, req.localRanks, rot);
    order.assign(o.begin(), o.end());
    pos.resize(order.size());
    for (size_t p = 0; p < order.size(); p++) pos[order[p]] = static_cast<int32_t>(p);
    bo = RunBlockOrder{order.data(), pos.data(), req.nranks, s.inBlocks, s.outBlocks};
    ordered = true;
  }
  const RunBlockOrder* get() const { return ordered ? &bo : nullptr; }
};

std::string show(const Step& s) {
  return "op " + std::to_string(int(s.op)) + " send " + std::to_string(s.sendPeer) + " recv " +
         std::to_string(s.recvPeer) + " src " + std::to_string(int(s.src.buf)) + ":" + std::to_string(s.src.block) +
         " dst " + std::to_string(int(s.dst.buf)) + ":" + std::to_string(s.dst.block) + " final " +
         std::to_string(int(s.final));
}

// Packs s (with per-rank blocks by ring position where `bo` says, as device launches do) and checks that unpacking
// gives back its steps exactly; returns the number of runs.
size_t roundTrip(const Schedule& s, const std::string& what, const RunBlockOrder* bo = nullptr) {
  std::vector<StepRun> runs;
  packStepRuns(s.steps.data(), s.steps.size(), &runs, bo);
  std::vector<Step> back = unpack(runs, bo != nullptr ? bo->order : nullptr);
  EXPECT_EQ(back.size(), s.steps.size()) << what;
  for (size_t i = 0; i < std::min(back.size(), s.steps.size()); i++)
    EXPECT_EQ(show(back[i]), show(s.steps[i])) << what << " step " << i;
  return runs.size();
}

TEST(StepRuns, EveryGeneratorsStepsComeBackExactly) {
  const Coll colls[] = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kAllToAll,  Coll::kGather,        Coll::kScatter};
  int checked = 0, orderedChecked = 0;
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
                const std::string what = std::string("coll ") + std::to_string(int(coll)) + " algo " +
                                         std::to_string(a) + " n " + std::to_string(n) + " rank " +
                                         std::to_string(rank) + " channel " + std::to_string(channel);
                const size_t plain = roundTrip(s, what);
                const BlockOrderOf byPosition(req, s);
                if (byPosition.ordered) {
                  EXPECT_LE(roundTrip(s, what + " by position", byPosition.get()), plain) << what;
                  orderedChecked++;
                }
                checked++;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000) << "too few schedules were built to prove anything";
  EXPECT_GT(orderedChecked, 200) << "too few schedules named blocks through a ring order";
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

// Allgather and reduce-scatter name blocks by rank (out[r], in[r]): over ranks placed round-robin, or with each
// host's ranks rotated (ring channels over hosts), their blocks move by no fixed amount, and a channel was some two
// runs a host (260 at 1,024 ranks on hosts of 8: a launch of 320 held one channel). By ring position, looked up in
// the channel's order, they are as few runs as in rank order.
TEST(StepRuns, PerRankBlocksInAnyOrderAreAFewRunsByPosition) {
  for (int n : {48, 1024}) {
    const int P = n == 48 ? 6 : 8, hosts = n / P;
    std::vector<uint64_t> cyclic(n);
    for (int r = 0; r < n; r++) cyclic[r] = static_cast<uint64_t>(r % hosts);
    const std::vector<int> roundRobin = ringOrderByHost(cyclic);
    ASSERT_FALSE(roundRobin.empty());
    for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &roundRobin}) {
      for (Coll coll : {Coll::kAllGather, Coll::kReduceScatter}) {
        size_t mostPlain = 0;
        for (int ch = 0; ch < P; ch++) {
          for (int rank : {0, 1, n / 2, n - 1})
            for (bool railAligned : {true, false}) {
              ScheduleRequest req{coll, Algo::kRing, n, rank, ch, P, 0, order, P, railAligned};
              Schedule s;
              std::string err;
              ASSERT_TRUE(buildSchedule(req, &s, &err)) << err;
              const std::string what = std::string(collName(coll)) + " n " + std::to_string(n) + " channel " +
                                       std::to_string(ch) + " rank " + std::to_string(rank) +
                                       (order ? " round-robin" : " host order") + (railAligned ? " rail-aligned" : "");
              const BlockOrderOf byPosition(req, s);
              // Only channel 0 of a ring in rank order, not rail-aligned, names its blocks as they are.
              ASSERT_EQ(byPosition.ordered, order != nullptr || ch != 0 || railAligned) << what;
              mostPlain = std::max(mostPlain, roundTrip(s, what));
              if (byPosition.ordered) {
                EXPECT_LE(roundTrip(s, what + " by position", byPosition.get()), 5u) << what;
              }
            }
        }
        EXPECT_GT(mostPlain, static_cast<size_t>(hosts)) << "the plain runs were already few: the test proves nothing";
      }
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

// Step runs of a plan's channels, as a launch holds them (per-rank blocks by ring position where that packs them
// better, as the device engine packs them).
size_t runsOf(const Planner& planner, const std::vector<Schedule>& scheds) {
  std::vector<StepRun> runs;
  for (const Schedule& s : scheds) {
    RunBlockOrder bo;
    const bool ordered = planner.runBlockOrder(s, &bo);
    packStepRuns(s.steps.data(), s.steps.size(), &runs, ordered ? &bo : nullptr);
  }
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
    out.push_back({plan.nChannels, plan.choice.algo, runsOf(planner, *plan.scheds)});
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
          if (p[r].algo != Algo::kRing || p[r].channels > 1) {
            EXPECT_LE(p[r].runs, static_cast<size_t>(maxRuns)) << "rank " << r;
          }
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

// The planner counts a ring channel that names no block through its ring order (allreduce, broadcast, reduce) as
// channel 0: its ranks sit at other positions, but every step talks to the same two ring neighbours. Counted the
// long way here, for every channel kind, hosts of 2 to 6, both placements and several roots.
TEST_F(StepRunsPlanner, RingKindsWithoutRenamedBlocksLoadAlike) {
  int compared = 0;
  for (int P : {2, 3, 4, 6}) {
    for (int hosts : {2, 3, 5}) {
      const int n = P * hosts;
      std::vector<uint64_t> cyclic(n);
      for (int r = 0; r < n; r++) cyclic[r] = static_cast<uint64_t>(r % hosts);
      const std::vector<int> roundRobin = ringOrderByHost(cyclic);
      for (const std::vector<int>* order : {static_cast<const std::vector<int>*>(nullptr), &roundRobin}) {
        for (Coll coll : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce}) {
          for (int root : {0, n / 2, n - 1}) {
            if (coll == Coll::kAllReduce && root != 0) continue;
            const int kinds = channelKinds(Algo::kRing, n, P);
            std::vector<size_t> runsOf(kinds, 0), endsOf(kinds, 0);
            for (int kind = 0; kind < kinds; kind++) {
              ScheduleRequest req{coll, Algo::kRing, n, 0, kind, kinds, root, order, P};
              ASSERT_LT(blockRotation(req), 0) << "a ring " << collName(coll) << " names blocks through its order";
              std::string err;
              ASSERT_TRUE(forEachRankSchedule(req, [&](const Schedule& s) {
                std::vector<StepRun> runs;
                packStepRuns(s.steps.data(), s.steps.size(), &runs);
                runsOf[kind] = std::max(runsOf[kind], runs.size());
                endsOf[kind] = std::max(endsOf[kind], launchEnds(&s, 1).size());
              }, &err)) << err;
              EXPECT_EQ(runsOf[kind], runsOf[0]) << collName(coll) << " n " << n << " P " << P << " kind " << kind;
              EXPECT_EQ(endsOf[kind], endsOf[0]) << collName(coll) << " n " << n << " P " << P << " kind " << kind;
              compared++;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 300);
}

// What the planner lets a device launch hold at 1,024 ranks on hosts of 8 (a launch of 320 runs, as CUDA 12.1+
// builds have): every ring collective keeps the 16 channels asked for.
TEST_F(StepRunsPlanner, RingsOverManyHostsKeepTheirChannels) {
  setenv("NCCL_ALGO", "Ring", 1);
  chorus::paramsReload();
  const int n = 1024;
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter}) {
    for (int placement = 0; placement < 2; placement++) {
      auto comm = placement == 0 ? fakeComm(n, 5, [](int r) { return r / 8; })
                                 : fakeComm(n, 5, [](int r) { return r % 128; });
      Planner planner(comm.get(), FifoGeometry{});
      std::vector<char> buf(16);
      OpDesc op;
      op.coll = coll;
      op.sendbuff = buf.data();
      op.recvbuff = buf.data() + 8;
      op.count = 1 << 20;
      CollPlan plan;
      bool empty = false;
      ASSERT_EQ(planner.planColl(
                    op, 16, -1, [&](size_t) { return buf.data(); }, &plan, &empty, LaunchLimits{128, 320}),
                ncclSuccess);
      EXPECT_EQ(plan.choice.algo, Algo::kRing);
      EXPECT_EQ(plan.nChannels, 16) << collName(coll) << (placement ? " round-robin" : " host by host");
      EXPECT_LE(runsOf(planner, *plan.scheds), 320u);
    }
  }
}

}  // namespace
}  // namespace chorus
