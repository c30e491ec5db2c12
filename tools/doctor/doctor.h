// chorus-doctor: a preflight check of a cluster, run like the perf tools (one process per rank under chorusrun,
// mpirun, srun or torchrun). It finds what would make a job hang at init or run slow, and names the host or rank:
// host facts and settings, connectivity between hosts, pairwise latency and bandwidth (chorus send/recv, in O(n)
// rounds of disjoint pairs), a checked pass over every collective and a timed allreduce and allgather compared
// with what the links allow. Rank 0 prints the report, writes JSON and a PNG heatmap; the exit status is nonzero
// when something is wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "perf/launch.h"

namespace chorus {
namespace doctor {

/// What one rank found about its host and environment (gathered on every rank).
struct Facts {
  int rank = 0;
  std::string hostname;
  uint64_t hostHash = 0;  ///< chorus's notion of a host (host name, network namespace, NCCL_HOSTID)
  int pid = 0;
  std::string version;                  ///< chorus and NCCL API versions
  std::string ifName;                   ///< the interface chorus would use ("" when none)
  std::string ifAddr;                   ///< its address
  std::string ifWhy;                    ///< why there is none
  std::string ifChoice;                 ///< how it was chosen
  std::vector<std::string> interfaces;  ///< "name=address", all of this host's
  int gpus = 0;
  std::string topo;                        ///< the host topology's summary (topo/topology.h), or why there is none
  std::string farGpus;                     ///< GPUs ("0,3") whose nearest PCI NIC is across sockets (SYS); "" when none
  int64_t shmFree = -1, shmNeed = 0;       ///< bytes in /dev/shm, and what this rank's FIFOs need
  int64_t memlock = -1, memlockNeed = 0;   ///< RLIMIT_MEMLOCK (-1 unlimited), and what pinning needs
  uint64_t settingsHash = 0;               ///< the settings the bootstrap requires to agree
  std::map<std::string, std::string> env;  ///< NCCL_* and CHORUS_* variables as set
};

/// Collects this rank's facts.
Facts collectFacts(int rank);
/// Microseconds some task of this host waited for a CPU core since boot (/proc/pressure/cpu, "some" total);
/// negative where the kernel does not report CPU pressure.
double cpuStallMicros();
/// Fixed-size wire form for Control::allgather.
constexpr size_t kFactsBytes = 16384;
void encodeFacts(const Facts& f, char* out);
Facts decodeFacts(const char* in);

/// "node7 (10.0.0.7)": how the report names a host (host names repeat across namespaces and containers).
std::string hostName(const Facts& f);
/// "rank 3 on node7 (10.0.0.7)".
std::string rankName(const Facts& f);

/// A measured pair of ranks.
struct PairResult {
  int a = -1, b = -1;
  double latencyUs = 0;  ///< one way: half the fastest round trip
  double gbps = 0;       ///< GB/s each way, both ways at once (best of three windows)
};

/// One thing the report says. Problems make the exit status nonzero.
struct Finding {
  bool problem = true;
  std::string what;
};

/// Everything rank 0 reports.
struct Report {
  std::vector<Facts> facts;
  std::vector<std::string> unreachable;  ///< "rank 2 on h (a) cannot reach rank 0 on ... at addr: error"
  bool commPhases = false;               ///< the communicator phases ran
  std::string initError;
  std::vector<PairResult> pairs;
  /// Per rank: the share of the pair measurements during which some task of its host waited for a CPU core
  /// (CPU pressure); negative: unknown. A busy CPU delays every wakeup, so latency there is not the link's.
  std::vector<double> cpuBusy;
  std::vector<std::string> wrongResults;  ///< collectives whose values were wrong
  double allreduceBusbw = 0, allgatherBusbw = 0, predictedBusbw = 0;
  size_t timedBytes = 0;
  std::string slowestLink;
  std::vector<Finding> findings;
};

/// Settings and host checks: findings about facts alone. Returns false when a communicator cannot be made
/// (no interface, or settings the bootstrap refuses), so the later phases are skipped.
bool judgeFacts(Report* r);
/// Pairwise outliers against the median of their class (within a host, between hosts), by index in Report::pairs.
struct LinkVerdict {
  std::map<uint64_t, std::pair<double, double>> slowHosts;   ///< host hash -> {median GB/s of its pairs, of the rest}
  std::map<uint64_t, std::pair<double, double>> laggyHosts;  ///< host hash -> {median latency (us) of its pairs, rest}
  std::set<size_t> slowPairs;                                ///< below a third of the median bandwidth
  std::set<size_t> laggyPairs;                               ///< latency over 3x the median and 50 us more
  double medianGbpsSame = 0, medianGbpsOther = 0, medianUsSame = 0, medianUsOther = 0;
};
LinkVerdict classifyLinks(const Report& r);
/// The pairs an outlier rule names (or whose host it names): measured again before the verdict.
std::vector<size_t> suspectPairs(const Report& r);
/// Findings about pairwise links (classifyLinks) and the collectives.
void judgeLinks(Report* r);

/// Every rank's strings (up to 4 KB a rank): the text of rank 0's first, then rank 1's...; every rank gets all.
std::vector<std::string> gatherText(perf::Control& ctl, const std::string& mine);
/// Every rank's lines, in rank order.
std::vector<std::string> gatherLines(perf::Control& ctl, const std::vector<std::string>& mine);

/// Every rank connects to one rank of every other host on the interface chorus would use. Returns this rank's
/// failures; `facts` are every rank's.
std::vector<std::string> checkConnectivity(perf::Control& ctl, const std::vector<Facts>& facts, int timeoutS);

/// Measured on a communicator of every rank.
struct LinkOptions {
  size_t bwBytes = 1 << 20;  ///< per exchange
  int bwIters = 4;
  int latIters = 50;
  size_t collBytes = 1 << 20;  ///< timed allreduce and allgather
  int collIters = 5;
};
/// Pairwise latency and bandwidth in rounds of disjoint pairs; every rank returns every pair.
bool measurePairs(perf::Control& ctl, void* comm, int rank, int nranks, const LinkOptions& o,
                  std::vector<PairResult>* out, const std::function<void(const std::string&)>& progress);
/// Measures pairs[i], i in `which`, again, one pair at a time, keeping the better latency and bandwidth of the two
/// measurements: a busy CPU slows some measurements, a slow link every one. Every rank passes the same arguments.
bool remeasurePairs(perf::Control& ctl, void* comm, int rank, const LinkOptions& o, const std::vector<size_t>& which,
                    std::vector<PairResult>* pairs);
/// A checked pass over every collective; returns the failures this rank saw.
std::vector<std::string> checkCollectives(void* comm, int rank, int nranks);
/// Timed allreduce and allgather busbw (GB/s), the same on every rank.
bool timeCollectives(perf::Control& ctl, void* comm, int nranks, const LinkOptions& o, double* allreduce,
                     double* allgather);

/// The terminal report.
std::string formatReport(const Report& r);
/// The JSON document.
std::string formatJson(const Report& r);
/// A PNG heatmap of pairwise bandwidth (ranks x ranks); false with *err on failure.
bool writeHeatmap(const Report& r, const std::string& path, std::string* err);

}  // namespace doctor
}  // namespace chorus
