// chorus-doctor: the phases, in order. Every rank makes the same calls; rank 0 reports. See doctor.h.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "nccl.h"
#include "tools/doctor/doctor.h"

#ifdef CHORUS_PERF_MPI
#include <mpi.h>
#endif

using namespace chorus;
using namespace chorus::doctor;

namespace {

const char* kUsage =
    "usage: chorus-doctor [--json FILE] [--png FILE] [--bytes N] [--timeout S]\n"
    "Run one process per rank, as the perf tools: chorusrun -n 4 chorus-doctor, mpirun ..., srun ..., or with\n"
    "torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).\n"
    "  --json FILE   the report as JSON (default chorus-doctor.json)\n"
    "  --png FILE    the pairwise bandwidth heatmap (default chorus-doctor.png)\n"
    "  --bytes N     bytes each pair exchanges per iteration, and the timed collectives' size (default 1048576)\n"
    "  --timeout S   how long a connection attempt between hosts may take (default 5)\n"
    "Exit status: 0 when nothing is wrong, 1 when the report names a problem, 2 on a usage or launch error.\n";

// Progress on rank 0: one line per step on stderr (so that stdout holds the report alone).
void progress(int rank, const std::string& what) {
  if (rank == 0) fprintf(stderr, "chorus-doctor: %s\n", what.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string jsonPath = "chorus-doctor.json", pngPath = "chorus-doctor.png";
  LinkOptions lo;
  int timeoutS = 5;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    bool more = i + 1 < argc;
    if (a == "--json" && more) {
      jsonPath = argv[++i];
    } else if (a == "--png" && more) {
      pngPath = argv[++i];
    } else if (a == "--bytes" && more) {
      lo.bwBytes = lo.collBytes = std::max<size_t>(1024, std::strtoull(argv[++i], nullptr, 10));
    } else if (a == "--timeout" && more) {
      timeoutS = std::max(1, atoi(argv[++i]));
    } else {
      fprintf(stderr, "%s", kUsage);
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  perf::LaunchInfo launch;
  std::string err;
  if (!perf::detectLaunch(&launch, &err)) {
    fprintf(stderr, "chorus-doctor: %s\n", err.c_str());
    return 2;
  }
  std::unique_ptr<perf::Control> ctl;
#ifdef CHORUS_PERF_MPI
  bool mpiStarted = false;
  if (launch.mpiLaunch) {
    MPI_Init(&argc, &argv);
    mpiStarted = true;
    ctl = perf::makeMpiControl();
  }
#endif
  if (!ctl && launch.nprocs == 1) ctl = perf::makeSingleControl();
  if (!ctl) ctl = perf::makeStoreControl(launch, 120, 900, &err);
  if (!ctl) {
    fprintf(stderr, "chorus-doctor: %s\n", err.c_str());
    return 2;
  }
  const int rank = ctl->proc(), n = ctl->nprocs();
  Report r;

  // 1. Host facts and settings.
  progress(rank, "1/5 host facts and settings of " + std::to_string(n) + " rank(s)");
  std::vector<char> mine(kFactsBytes), all(kFactsBytes * static_cast<size_t>(n));
  encodeFacts(collectFacts(rank), mine.data());
  if (!ctl->allgather(mine.data(), kFactsBytes, all.data())) return 2;
  for (int p = 0; p < n; p++) r.facts.push_back(decodeFacts(all.data() + static_cast<size_t>(p) * kFactsBytes));
  bool commPossible = judgeFacts(&r);

  // 2. Connectivity between hosts, on the interface chorus would use.
  progress(rank, "2/5 connectivity between hosts");
  std::vector<std::string> fails = checkConnectivity(*ctl, r.facts, timeoutS);
  r.unreachable = gatherLines(*ctl, fails);
  for (const std::string& u : r.unreachable) r.findings.push_back({true, u});
  commPossible &= r.unreachable.empty();

  // 3-5. On a communicator of every rank: pairs, collectives, timing.
  if (commPossible) {
    progress(rank, "3/5 communicator of " + std::to_string(n) + " rank(s)");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) r.initError = ncclGetLastError(nullptr);
    std::vector<ncclUniqueId> ids(n);
    if (!ctl->allgather(&id, sizeof(id), ids.data())) return 2;
    ncclComm_t comm = nullptr;
    ncclResult_t res = ncclCommInitRank(&comm, n, ids[0], rank);
    std::vector<double> failed = {res == ncclSuccess ? 0.0 : 1.0};
    if (res != ncclSuccess)
      r.initError = "ncclCommInitRank failed on " + rankName(r.facts[rank]) + ": " + ncclGetLastError(nullptr);
    if (!ctl->allreduce(&failed, perf::Reduce::kMax)) return 2;
    if (failed[0] == 0) {
      r.commPhases = true;
      const double stall0 = cpuStallMicros();
      const auto wall0 = std::chrono::steady_clock::now();
      bool ok =
          measurePairs(*ctl, comm, rank, n, lo, &r.pairs, [&](const std::string& s) { progress(rank, "3/5 " + s); });
      // Outliers are measured again (twice at most) before they are named: every rank has every pair, so all
      // pick the same ones.
      for (int pass = 0; pass < 2 && ok; pass++) {
        std::vector<size_t> again = suspectPairs(r);
        if (again.empty()) break;
        progress(rank, "3/5 pairs: " + std::to_string(again.size()) + " outlier(s) measured again");
        ok = remeasurePairs(*ctl, comm, rank, lo, again, &r.pairs);
      }
      const double stall1 = cpuStallMicros();
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall0).count();
      r.cpuBusy.assign(n, -1.0);
      double busy = stall0 >= 0 && stall1 >= stall0 && us > 0 ? std::min(1.0, (stall1 - stall0) / us) : -1.0;
      if (!ctl->allgather(&busy, sizeof(busy), r.cpuBusy.data())) return 2;
      progress(rank, "4/5 every collective, checked");
      std::vector<std::string> wrong = ok ? checkCollectives(comm, rank, n) : std::vector<std::string>{};
      r.wrongResults = gatherLines(*ctl, wrong);
      progress(rank, "5/5 timed allreduce and allgather");
      r.timedBytes = lo.collBytes;
      if (ok && r.wrongResults.empty() && n > 1)
        ok = timeCollectives(*ctl, comm, n, lo, &r.allreduceBusbw, &r.allgatherBusbw);
      if (!ok && r.wrongResults.empty())
        r.findings.push_back({true, "a measurement failed (a link or rank broke during the run): " +
                                        std::string(ncclGetLastError(comm))});
      // What the ring in rank order can do: its slowest link.
      for (int a = 0; a < n && n > 1; a++) {
        int b = (a + 1) % n;
        for (const PairResult& p : r.pairs) {
          if (!((p.a == a && p.b == b) || (p.a == b && p.b == a))) continue;
          if (r.slowestLink.empty() || p.gbps < r.predictedBusbw) {
            r.predictedBusbw = p.gbps;
            char buf[64];
            snprintf(buf, sizeof(buf), ": %.3f GB/s", p.gbps);
            r.slowestLink = rankName(r.facts[p.a]) + " <-> " + rankName(r.facts[p.b]) + buf;
          }
        }
      }
      ncclCommDestroy(comm);
    } else {
      for (const std::string& e : gatherText(*ctl, r.initError))
        if (!e.empty()) r.findings.push_back({true, e});
    }
  } else {
    r.findings.push_back({false, "no communicator was made: the problems above would stop chorus at init"});
  }
  judgeLinks(&r);

  int problems = 0;
  for (const Finding& f : r.findings) problems += f.problem;
  if (rank == 0) {
    fputs(formatReport(r).c_str(), stdout);
    std::ofstream(jsonPath) << formatJson(r);
    std::string perr;
    if (!r.pairs.empty() && !writeHeatmap(r, pngPath, &perr)) fprintf(stderr, "chorus-doctor: %s\n", perr.c_str());
    printf("\nReport: %s%s\n", jsonPath.c_str(), r.pairs.empty() ? "" : (", heatmap: " + pngPath).c_str());
  }
  std::vector<double> verdict = {problems > 0 ? 1.0 : 0.0};
  ctl->allreduce(&verdict, perf::Reduce::kMax);
#ifdef CHORUS_PERF_MPI
  if (mpiStarted) MPI_Finalize();
#endif
  return verdict[0] > 0 ? 1 : 0;
}
