// chorus-sim: what a collective would take on a described cluster, from the schedules chorus would run there and the
// cost model (src/topo/cost_model.h). Prints one row a size and algorithm like the perf tools (time, algbw, busbw),
// the model's bottleneck, and the cheapest algorithm a size. docs/cost_model.md explains the model; docs/perf/sim.md
// holds its predictions and how they compare with measurements.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "engine/tuner.h"
#include "topo/cost_model.h"
#include "topo/topology.h"

namespace {

using namespace chorus;

int usage() {
  std::fprintf(stderr,
               "usage: chorus-sim [options]\n"
               "  --hosts H            hosts (default 4)\n"
               "  --ranks-per-host P   ranks on each host (default 8)\n"
               "  --nics N             NICs a host, shared by its ranks (default 1)\n"
               "  --intra LAT_US,GBPS  latency a step and bandwidth per rank within a host (default 5,5)\n"
               "  --inter LAT_US,GBPS[,BURST]  latency a step and bandwidth per NIC between hosts (default\n"
               "                       20,1.25), and the bytes of a slot a link passes at once when its turn comes\n"
               "                       (a shaper's burst: slots arrive that much sooner; default 0, a wire)\n"
               "  --preset NAME        dgx-h100: 8 ranks and 8 NICs a host, NVLink 2,360 and 400 Gb/s IB 8,46;\n"
               "                       netns-1g: 2 ranks and 1 NIC a host, shm 2,2 and 1 Gbit/s TCP 4,0.116,16384,\n"
               "                       host CPU 1,4,2,shared (4 namespace hosts on 2 cores; docs/perf/sim.md)\n"
               "  --topo FILE          a host's topology file (chorus-topo, NCCL_TOPO_DUMP_FILE): a rank per GPU,\n"
               "                       its PCI NICs at 92%% of their port speed, and NVLink at 20.5 GB/s a link\n"
               "  --coll NAME          allreduce (default), allgather, reducescatter, broadcast, reduce, alltoall\n"
               "  --algo NAME          ring, tree, direct, oneshot, twoshot, hierarchical, rail, recdoubling,\n"
               "                       or all (default); with all, an allgather or reduce-scatter across hosts\n"
               "                       also lists tree-allreduce, how the host path runs small ones\n"
               "  --channels C         channels the data is split over (default 1)\n"
               "  --nic-per-channel    channel c uses NIC c mod N whatever the rank (the host path), instead of\n"
               "                       local rank l using NIC l mod N (a GPU's nearest NIC)\n"
               "  --fifo SLOTS,BYTES   connection FIFOs: slots and bytes a slot (default 16,131072, the host\n"
               "                       path's across a net; dgx-h100: 8,131072); the model plays up to 64 ranks'\n"
               "                       steps slot by slot through them (a tree's fill and drain); 0: it does not\n"
               "  --cpu INTRA,INTER,CORES[,shared]  the host CPU term: us of CPU each message a rank sends or\n"
               "                       receives costs its host, within a host and across, and the cores a host\n"
               "                       has for them; with \"shared\", the cores of the one machine every host runs\n"
               "                       on (network namespaces), which take every host's messages (default none;\n"
               "                       netns-1g: its fit, 1,4,2,shared)\n"
               "  --tree-dual-min B    trees from B bytes run two trees, one a channel (default 16384, as chorus)\n"
               "  -b SIZE -e SIZE -f F sizes as the perf tools (default -b 1M -e 1G -f 4; K, M, G suffixes)\n"
               "Sizes are nccl-tests': allreduce's buffer, allgather's output, reduce-scatter's input.\n");
  return 2;
}

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, end++;
  else if (*end == 'M' || *end == 'm')
    mult = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024 * 1024, end++;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

bool parsePositive(const char* s, int* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > (1 << 20)) return false;
  *out = static_cast<int>(v);
  return true;
}

// "SLOTS,SLOT_BYTES" (at least 2 slots, a positive slot size), or "0" for no pipeline term.
bool parseFifo(const char* s, ClusterShape* shape) {
  if (std::strcmp(s, "0") == 0) {
    shape->fifoSlots = 0, shape->slotBytes = 0;
    return true;
  }
  int slots = 0;
  long long bytes = 0;
  char extra = 0;
  if (std::sscanf(s, "%d,%lld%c", &slots, &bytes, &extra) != 2 || slots < 2 || bytes < 1) return false;
  shape->fifoSlots = slots, shape->slotBytes = static_cast<size_t>(bytes);
  return true;
}

// "INTRA_US,INTER_US,CORES[,shared]": CPU time a message within a host and across hosts, and cores a host (positive);
// with ",shared", the cores of the one machine every host runs on (ClusterShape::coresShared).
bool parseCpu(const char* s, ClusterShape* shape) {
  double intra = 0, inter = 0, cores = 0;
  int used = 0;
  if (std::sscanf(s, "%lf,%lf,%lf%n", &intra, &inter, &cores, &used) != 3 || intra < 0 || inter < 0 || cores <= 0)
    return false;
  const std::string rest = s + used;
  if (!rest.empty() && rest != ",shared") return false;
  shape->cpuIntraUs = intra, shape->cpuInterUs = inter, shape->cores = cores;
  shape->coresShared = !rest.empty();
  return true;
}

std::string human(double bytes) {
  char buf[32];
  if (bytes >= 1 << 30)
    std::snprintf(buf, sizeof buf, "%.0fG", bytes / (1 << 30));
  else if (bytes >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.0fM", bytes / (1 << 20));
  else if (bytes >= 1 << 10)
    std::snprintf(buf, sizeof buf, "%.0fK", bytes / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%.0f", bytes);
  return buf;
}

// A host from its topology file: a rank per GPU, the PCI NICs, and their slowest known port speed at 92% (what TCP
// or RDMA reach of a port's rate) as the inter-host bandwidth. Latencies stay as given.
bool applyTopology(const char* path, ClusterShape* shape) {
  HostTopology t;
  std::string err;
  if (!loadHostTopology(path, &t, &err)) {
    std::fprintf(stderr, "chorus-sim: %s\n", err.c_str());
    return false;
  }
  if (t.gpus.empty() || t.pciNics() == 0) {
    std::fprintf(stderr, "chorus-sim: %s has %zu GPUs and %d PCI NICs; it needs both\n", path, t.gpus.size(),
                 t.pciNics());
    return false;
  }
  shape->ranksPerHost = static_cast<int>(t.gpus.size());
  shape->nicsPerHost = t.pciNics();
  const int64_t mbps = topologyNicMbps(t);
  if (mbps > 0) shape->inter.bytesPerUs = mbps / 8.0 * 0.92;  // Mb/s -> bytes a us
  // Other GPU links (xGMI) keep the given intra-host figure.
  if (const double nvlink = topologyNvlinkBytesPerUs(t); nvlink > 0) shape->intra.bytesPerUs = nvlink;
  std::printf("# %s: %s\n", path, t.summary().c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ClusterShape shape;
  shape.hosts = 4;
  shape.ranksPerHost = 8;
  parseLinkCost("5,5", &shape.intra);
  parseLinkCost("20,1.25", &shape.inter);
  // The host path's FIFOs across a net (CHORUS_FIFO_SLOTS, CHORUS_FIFO_SLOT_BYTES); a GPU's are 8 slots.
  shape.fifoSlots = 16;
  shape.slotBytes = 131072;
  Coll coll = Coll::kAllReduce;
  bool allAlgos = true;
  Algo only = Algo::kRing;
  int channels = 1;
  size_t minB = 1 << 20, maxB = size_t(1) << 30;
  double factor = 4;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "--hosts")
      ok = ok && parsePositive(v, &shape.hosts);
    else if (a == "--ranks-per-host")
      ok = ok && parsePositive(v, &shape.ranksPerHost);
    else if (a == "--nics")
      ok = ok && parsePositive(v, &shape.nicsPerHost);
    else if (a == "--intra")
      ok = ok && parseLinkCost(v, &shape.intra);
    else if (a == "--inter")
      ok = ok && parseLinkCost(v, &shape.inter);
    else if (a == "--fifo")
      ok = ok && parseFifo(v, &shape);
    else if (a == "--cpu")
      ok = ok && parseCpu(v, &shape);
    else if (a == "--tree-dual-min")
      ok = ok && parseSize(v, &shape.treeDualMinBytes);
    else if (a == "--channels")
      ok = ok && parsePositive(v, &channels);
    else if (a == "--nic-per-channel") {
      shape.nicPerChannel = true;
      continue;  // a flag: no value to skip
    }
    else if (a == "--coll")
      ok = ok && parseColl(v, &coll) && coll != Coll::kSendRecv;
    else if (a == "--algo") {
      allAlgos = ok && std::strcmp(v, "all") == 0;
      ok = ok && (allAlgos || parseAlgo(v, &only));
    } else if (a == "-b")
      ok = ok && parseSize(v, &minB);
    else if (a == "-e")
      ok = ok && parseSize(v, &maxB);
    else if (a == "-f")
      ok = ok && (factor = std::atof(v)) > 1;
    else if (a == "--preset" && ok && std::strcmp(v, "dgx-h100") == 0) {
      shape.ranksPerHost = 8, shape.nicsPerHost = 8, shape.fifoSlots = 8;
      parseLinkCost("2,360", &shape.intra);
      parseLinkCost("8,46", &shape.inter);
    } else if (a == "--topo" && ok) {
      if (!applyTopology(v, &shape)) return 2;
    } else if (a == "--preset" && ok && std::strcmp(v, "netns-1g") == 0) {
      shape.ranksPerHost = 2, shape.nicsPerHost = 1;
      parseLinkCost("2,2", &shape.intra);
      parseLinkCost("4,0.116,16384", &shape.inter);
      parseCpu("1,4,2,shared", &shape);
    } else {
      ok = false;
    }
    if (!ok) return usage();
    i++;
  }
  if (minB < 1 || maxB < minB) return usage();
  const int n = shape.nranks();
  const std::string fifo = shape.fifoSlots > 0 && n <= 64
                               ? "FIFOs of " + std::to_string(shape.fifoSlots) + " x " +
                                     std::to_string(shape.slotBytes) + " B (pipeline term)"
                               : "no pipeline term";
  std::printf(
      "# %d hosts x %d ranks (%d), %d NIC(s) a host%s; intra %.1f us %.3g GB/s; inter %.1f us %.3g GB/s; %s; "
      "%d channel(s); %s\n",
      shape.hosts, shape.ranksPerHost, n, shape.nicsPerHost, shape.nicPerChannel ? " (by channel)" : "",
      shape.intra.latencyUs, shape.intra.bytesPerUs / 1000, shape.inter.latencyUs, shape.inter.bytesPerUs / 1000,
      collName(coll), channels, fifo.c_str());
  if (shape.cpuIntraUs > 0 || shape.cpuInterUs > 0)
    std::printf("# host CPU: %.2f us a message within a host, %.2f across, %.3g core(s) %s\n", shape.cpuIntraUs,
                shape.cpuInterUs, shape.cores, shape.coresShared ? "shared by every host" : "a host");
  std::printf("# %10s  %-14s  %12s  %9s  %9s  %-10s  %s\n", "size", "algorithm", "time (us)", "algbw", "busbw",
              "bound by", "cheapest");
  bool allowed[static_cast<int>(Algo::kNumAlgos)];
  for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++) allowed[a] = allAlgos || static_cast<Algo>(a) == only;
  int printed = 0;
  for (double size = static_cast<double>(minB); size <= static_cast<double>(maxB) * 1.0001; size *= factor) {
    const size_t bytes = static_cast<size_t>(size);
    // Each algorithm's estimate, made once: for the cheapest and for its row.
    CostEstimate est[static_cast<int>(Algo::kNumAlgos)];
    bool can[static_cast<int>(Algo::kNumAlgos)] = {};
    CostEstimate best;
    const Algo pick = cheapestAlgo(
        allowed,
        [&](Algo a, CostEstimate* e) {
          const int i = static_cast<int>(a);
          can[i] = estimateCollective(coll, a, bytes, channels, shape, &est[i], nullptr);
          *e = est[i];
          return can[i];
        },
        &best);
    // A small allgather or reduce-scatter across hosts runs on the host path as a tree allreduce of its full buffer
    // (CHORUS_ALLGATHER_TREE_MAX_BYTES, CHORUS_REDUCESCATTER_TREE_MAX_BYTES; docs/algorithms.md): "tree-allreduce",
    // the tree allreduce of that many bytes, an allgather's as bytes (its zero-padded output summed byte by byte).
    CostEstimate asTree;
    bool hasAsTree = false;
    if (allAlgos && shape.hosts > 1 && (coll == Coll::kAllGather || coll == Coll::kReduceScatter)) {
      ClusterShape s = shape;
      s.elemBytes = asTreeElemBytes(coll, s.elemBytes);
      hasAsTree = estimateCollective(Coll::kAllReduce, Algo::kTree, bytes, channels, s, &asTree, nullptr);
    }
    const bool asTreeCheapest = hasAsTree && (pick == Algo::kNumAlgos || asTree.timeUs < best.timeUs);
    auto row = [&](const char* name, const CostEstimate& e, bool cheapest) {
      const double algbw = bytes / e.timeUs / 1000;  // GB/s
      std::printf("  %10s  %-14s  %12.1f  %9.3f  %9.3f  %-10s  %s\n", human(size).c_str(), name, e.timeUs, algbw,
                  algbw * busBwFactor(coll, n), e.bottleneck.c_str(), cheapest ? "*" : "");
      printed++;
    };
    for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++)
      if (can[a]) row(algoName(static_cast<Algo>(a)), est[a], static_cast<Algo>(a) == pick && !asTreeCheapest);
    if (hasAsTree) row("tree-allreduce", asTree, asTreeCheapest);
  }
  if (printed == 0) {
    std::fprintf(stderr, "chorus-sim: no allowed algorithm implements %s\n", collName(coll));
    return 1;
  }
  return 0;
}
