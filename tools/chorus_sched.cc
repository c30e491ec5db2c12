// chorus-sched: prints the schedules a generator emits and the symbolic verifier's verdict.
//
//   chorus-sched <coll> <algo> <nranks> [rank|all] [channel] [root]
//
// Prints one rank's schedule (all ranks' when `rank` is "all" or absent and nranks <= 16), then verifies every rank
// of the channel out of place and in place. sendrecv prints the ring shift group (rank r sends to r+1, receives from
// r-1). Exit status: 0 verified, 1 a verifier problem, 2 bad arguments.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "algo/schedule.h"
#include "algo/verify.h"
#include "topo/ring_order.h"

namespace {

using namespace chorus;

int usage() {
  std::fprintf(
      stderr,
      "usage: chorus-sched [--local-ranks P] <coll> <algo> <nranks> [rank|all] [channel] [root]\n"
      "  coll: allreduce allgather reducescatter broadcast reduce alltoall gather scatter sendrecv\n"
      "  algo: ring tree direct oneshot twoshot hierarchical rail recdoubling\n"
      "  --local-ranks P: hierarchical, rail, tree and ring over hosts of P consecutive ranks (default: one host);\n"
      "    rings rail-aligned unless NCCL_CROSS_NIC=1, as the library lays them\n");
  return 2;
}

bool parseInt(const char* s, int* v) {
  char* end = nullptr;
  const long x = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || x < 0 || x > (1 << 20)) return false;
  *v = static_cast<int>(x);
  return true;
}

}  // namespace

// Markdown table of which algorithm implements which collective (docs/algorithms.md).
int printTable() {
  static const char* const kHeads[] = {"ring",     "tree",         "direct", "one-shot",
                                       "two-shot", "hierarchical", "rail",   "recursive doubling"};
  static_assert(sizeof(kHeads) / sizeof(kHeads[0]) == static_cast<size_t>(Algo::kNumAlgos));
  std::printf("| collective |");
  for (const char* h : kHeads) std::printf(" %s |", h);
  std::printf("\n|---|");
  for (size_t a = 0; a < sizeof(kHeads) / sizeof(kHeads[0]); ++a) std::printf("---|");
  std::printf("\n");
  for (int c = 0; c < static_cast<int>(Coll::kSendRecv); ++c) {
    std::printf("| %s |", collName(static_cast<Coll>(c)));
    for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); ++a) {
      bool ok = algoSupported(static_cast<Coll>(c), static_cast<Algo>(a), 8);
      bool alias = ok && algoAliasSafe(static_cast<Coll>(c), static_cast<Algo>(a), 8);
      // 8 ranks as 2 hosts of 4: what only hosts of several ranks rule out.
      bool aliasHosts = ok && algoAliasSafe(static_cast<Coll>(c), static_cast<Algo>(a), 8, 4);
      std::printf(" %s |", !ok           ? "-"
                           : !alias      ? "yes (not in place from 3 ranks)"
                           : !aliasHosts ? "yes (not in place over hosts of 3+ ranks)"
                                         : "yes");
    }
    std::printf("\n");
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--table") return printTable();
  int localRanks = 0;
  if (argc > 2 && std::string(argv[1]) == "--local-ranks") {
    if (!parseInt(argv[2], &localRanks) || localRanks < 1) return usage();
    argc -= 2;
    argv += 2;
  }
  if (argc < 4 || argc > 7) return usage();
  Coll coll;
  Algo algo;
  int nranks = 0, rank = -1, channel = 0, root = 0;
  if (!parseColl(argv[1], &coll)) return usage();
  if (!parseAlgo(argv[2], &algo)) return usage();
  if (!parseInt(argv[3], &nranks) || nranks < 1) return usage();
  if (argc > 4 && std::string(argv[4]) != "all" && (!parseInt(argv[4], &rank) || rank >= nranks)) return usage();
  if (argc > 5 && !parseInt(argv[5], &channel)) return usage();
  if (argc > 6 && (!parseInt(argv[6], &root) || root >= nranks)) return usage();

  const bool railAligned = railAlignedRingsSetting();
  std::vector<Schedule> schedules(nranks);
  VerifyOptions opt;
  for (int r = 0; r < nranks; ++r) {
    if (coll == Coll::kSendRecv) {
      const int next = (r + 1) % nranks, prev = (r + nranks - 1) % nranks;
      schedules[r] = buildSendRecvSchedule(nranks, r, {next}, {prev});
      opt.sendRecvPairs.emplace_back(r, next);
      continue;
    }
    std::string err;
    ScheduleRequest req{coll, algo, nranks, r, channel, channel + 1, root, nullptr, localRanks, railAligned};
    if (!buildSchedule(req, &schedules[r], &err)) {
      std::fprintf(stderr, "chorus-sched: %s\n", err.c_str());
      return 2;
    }
  }
  for (int r = 0; r < nranks; ++r) {
    if (r == rank || (rank < 0 && nranks <= 16)) std::printf("%s\n", formatSchedule(schedules[r]).c_str());
  }

  int status = 0;
  for (bool inPlace : {false, true}) {
    opt.inPlace = inPlace;
    const std::string verdict = verifySchedules(schedules, opt);
    const bool expectedUnsafe = inPlace && !algoAliasSafe(coll, algo, nranks, localRanks);
    std::printf("verify %s (fifoDepth %d, tiles %d): %s%s\n", inPlace ? "in place" : "out of place", opt.fifoDepth,
                opt.tiles, verdict.empty() ? "ok" : verdict.c_str(),
                expectedUnsafe ? " [expected: not alias safe, run out of place only]" : "");
    if (!verdict.empty() && !expectedUnsafe) status = 1;
  }
  return status;
}
