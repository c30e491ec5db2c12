// The cost model: how long a collective takes on a cluster, from the schedules chorus would run there. One model
// serves ncclGroupSimulateEnd and chorus-sim (docs/cost_model.md).
//
// A cluster is H hosts of P ranks each, ranks placed host by host (the order rings are laid in whatever the
// placement), with two classes of link: within a host (shared memory, NVLink, xGMI) and between hosts (the hosts'
// NICs). Each class has a per-step latency and a bandwidth. A collective's time is
//
//   latency:   the critical path through every rank's steps, each costing its class's latency (a step that
//              crosses hosts costs the inter-host latency), a receive waiting for its matching send; where only a
//              few hosts' schedules are built (below), the steps of one rank, the largest over ranks;
//   bandwidth: the busiest resource: a NIC's bytes out or in (a host's ranks share its NICs, local rank l on NIC
//              l mod NICs, or channel c on NIC c mod NICs: ClusterShape::nicPerChannel), or a rank's bytes to or from
//              the other ranks of its host, over the class's bandwidth;
//
// and the sum of the two, as NCCL's model and the alpha-beta model of the literature do: pipelining hides everything
// but the busiest resource, and each step adds its latency once. Steps are those the executor runs: blocks are laid
// out as the planner lays them (whole elements, an allreduce's blocks rounded up to 16 of them), and a step whose
// part of them is empty is skipped. Where ranks outnumber their host's cores, a third term (ClusterShape::cpuIntraUs,
// cpuInterUs, cores; none by default) charges the busiest host the CPU time of every message its ranks send and
// receive.
//
// Pipelining does not hide everything where a step must wait for data another rank has not sent yet: a tree's
// root waits for the leaves' first slot, the leaves for the root's last. Given the FIFO geometry (ClusterShape), the
// model also plays every rank's steps slot by slot over the tiles the executor would cut, each slot taking its
// links (the NICs' and the ranks' within a host) in turn, a send waiting for FIFO room; what that takes beyond the
// busiest resource's time is the pipeline term. Latencies stay in the first term. Bytes come from the schedules themselves (every
// send of every step, block sizes from the collective's layout), so a new algorithm is modelled when it is written.
// Large clusters (over 64 ranks) build the schedules of a few hosts only (the first, second, middle and last),
// which is exact for the symmetric algorithms (ring, hierarchical); trees, a few steps a rank, are built whole.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "algo/schedule.h"

namespace chorus {

/// One class of link: latency a step, and bandwidth in bytes a microsecond (= MB/s).
struct LinkCost {
  double latencyUs = 0;
  double bytesPerUs = 0;
  /// Bytes of a slot a link passes at once when the slot's turn comes, paying for them after: a token-bucket shaper in
  /// front of a fast wire, as Linux's HTB passes a whole offloaded TCP segment (up to 64 KB) once its tokens are not
  /// negative. The pipeline term's slots then arrive that much sooner; the link stays taken for their bytes over its
  /// bandwidth. 0 (a wire, where every byte waits for the ones before it) unless given.
  double burstBytes = 0;
};

/// A communicator's two link classes, and where each came from, for its INIT log ("default", "NIC speed 10000
/// Mbit/s", "calibrated", "calibrated, cached in FILE"): src/engine/link_costs.h.
struct LinkCosts {
  LinkCost intra;
  LinkCost inter;
  std::string intraFrom;
  std::string interFrom;
};

/// Clusters of up to this many ranks get the pipeline term (ClusterShape::fifoSlots).
constexpr int kPipelineMaxRanks = 64;

/// Tree collectives of at least this many bytes (their full buffer) run both trees of the double binary tree, one a
/// channel; smaller ones run one tree on one channel (CHORUS_TREE_DUAL_MIN_BYTES's default).
constexpr size_t kTreeDualMinBytes = 16384;

/// A cluster: hosts x ranks a host, and its two link classes.
struct ClusterShape {
  int hosts = 1;
  int ranksPerHost = 1;
  int nicsPerHost = 1;  ///< NICs a host's ranks share (local rank l uses NIC l mod nicsPerHost)
  /// Channel c of every rank uses NIC c mod nicsPerHost instead (the host path's net devices, taken by channel
  /// whatever the rank: docs/net.md), so one rank's channels can fill several NICs.
  bool nicPerChannel = false;
  LinkCost intra;       ///< between ranks of one host, per rank each way
  LinkCost inter;       ///< between hosts, per NIC each way
  /// The connection FIFOs the schedules run through: slots each, and bytes a slot (CHORUS_FIFO_SLOTS,
  /// CHORUS_FIFO_SLOT_BYTES). With both set, clusters of up to 64 ranks also get the pipeline term (below); 0: none.
  int fifoSlots = 0;
  size_t slotBytes = 0;
  /// Bytes an element. The planner's blocks are whole elements, an allreduce's rounded up to 16 of them, and the
  /// executor skips a step whose part of its blocks is empty: small collectives run fewer steps. 4 (float, the perf
  /// tools' default) unless the caller knows the type.
  size_t elemBytes = 4;
  /// Tree collectives from this size (full buffer, bytes) run two trees, one a channel; smaller ones one.
  size_t treeDualMinBytes = kTreeDualMinBytes;
  /// The host CPU term (0: none). Every message a rank sends or receives costs its host this much CPU time, within a
  /// host and across hosts, and a host has `cores` cores for it (a fraction where hosts share cores, as network
  /// namespaces on one machine do). Where ranks outnumber cores their messages queue for them: small collectives
  /// then take time by how many messages they make, not only by their longest chain of steps.
  double cpuIntraUs = 0;
  double cpuInterUs = 0;
  double cores = 1;
  /// The hosts are one machine's (network namespaces) and `cores` are that machine's, shared by all of them: the CPU
  /// term is then every host's messages over those cores, not the busiest host's over its own. A host that sends
  /// less leaves the others its share, as a tree's leaves leave theirs to the hosts that forward.
  bool coresShared = false;
  int nranks() const { return hosts * ranksPerHost; }
};

/// What the model says of one collective.
struct CostEstimate {
  double timeUs = 0;       ///< latencyUs + cpuUs + bandwidthUs + pipelineUs
  double latencyUs = 0;    ///< the steps' latencies on the slowest rank
  double bandwidthUs = 0;  ///< the busiest resource's bytes over its bandwidth
  /// What the links idle beyond that while data climbs and descends the schedule's steps slot by slot (a tree's
  /// fill and drain; a phase waiting for the one before it): the pipeline term below. 0 without FIFO geometry.
  double pipelineUs = 0;
  /// The busiest host's messages (every send and receive of its ranks) at ClusterShape's CPU cost, over its cores;
  /// with ClusterShape::coresShared, every host's over the machine's cores.
  double cpuUs = 0;
  int steps = 0;           ///< steps of that rank, all channels
  double nicBytes = 0;     ///< bytes through the busiest NIC in its busier direction
  double intraBytes = 0;   ///< bytes of the busiest rank to or from its host's other ranks
  /// The largest of latencyUs, cpuUs and bandwidthUs: "latency", "host CPU", "NIC" or "intra-host".
  std::string bottleneck;
  std::string bandwidthBound;  ///< which of "NIC" and "intra-host" bounds bandwidthUs, whatever the size
};

/// Estimates `coll` run with `algo` on `size` bytes (nccl-tests' size: allreduce's buffer, allgather's and gather's
/// output, reduce-scatter's and scatter's input, the others' buffer) split over nChannels channels, placed host by
/// host. False + *err when the algorithm cannot run the collective there.
bool estimateCollective(Coll coll, Algo algo, size_t size, int nChannels, const ClusterShape& shape, CostEstimate* out,
                        std::string* err);

/// The cheapest of the algorithms allowed[] marks (indexed by Algo) that can run `coll` there; kNumAlgos if none.
Algo cheapestAlgo(Coll coll, size_t size, int nChannels, const ClusterShape& shape, const bool* allowed,
                  CostEstimate* best);
/// The same over any estimator (one that caches, for instance): estimate(algo, &e) is false where algo cannot run.
Algo cheapestAlgo(const bool* allowed, const std::function<bool(Algo, CostEstimate*)>& estimate, CostEstimate* best);

/// nccl-tests' bus bandwidth factor of a collective on n ranks (busbw = algbw x factor).
double busBwFactor(Coll coll, int nranks);

/// nccl-tests' size of a collective whose API count is `countBytes` a rank: the buffer itself for allreduce,
/// broadcast and reduce, n times it for the others (allgather's output, reduce-scatter's input...).
size_t fullBufferBytes(Coll coll, size_t countBytes, int nranks);

/// Parses "latency a step in us,bandwidth in GB/s[,burst bytes]" (e.g. "5,1.25" or "4,0.116,65536"); false when it
/// is not two or three numbers, the latency or burst negative or the bandwidth not positive.
bool parseLinkCost(const std::string& text, LinkCost* out);

/// The estimate for `size` bytes from one made for `refSize`: without the pipeline term, and where both sizes give
/// every step something to move, the model is linear in size (its latency and CPU terms do not depend on it, every
/// byte count is proportional to it), so schedules need not be built again for every size. The pipeline term is not
/// linear (a tree's fill is a few slots whatever the size); it is scaled as the rest, which is exact only without it,
/// and close from a reference size at most twice `size` (the planner's). Small sizes, whose blocks may be empty, are
/// not linear: the planner estimates them as they are.
CostEstimate scaleEstimate(const CostEstimate& ref, size_t refSize, size_t size);

}  // namespace chorus
