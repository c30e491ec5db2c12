// Planning, shared by the host and device engines: an operation becomes (schedules, block layout, tiling,
// fingerprint, reduction). The host engine runs the plan with the executor on its thread; the device engine
// packs it into a DevWork and launches the kernel. Both paths therefore tile and fingerprint identically.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "core/comm.h"
#include "engine/op.h"
#include "engine/tuner.h"
#include "engine/tuner_plugin.h"
#include "kernels/executor.h"
#include "kernels/fifo.h"
#include "kernels/reduce.h"
#include "topo/cost_model.h"

namespace chorus {

/// One collective, planned.
struct CollPlan {
  Choice choice{};
  int nChannels = 1;
  const std::vector<Schedule>* scheds = nullptr;  ///< one per channel
  BlockMap map;  ///< chanStart/chanEnd left for the runner (channel c: [c * chanElems, ...))
  size_t chanElems = 0;
  size_t nTiles = 0;
  uint32_t sliceBytes = 0;
  bool inPlace = false;
  bool reducing = false;
  Fingerprint fp;
  RedOp red{};
  OpLabel label;
};

/// One batch of sends and receives (at most one per peer and direction), planned.
struct P2PPlan {
  Schedule schedule;
  std::vector<const char*> sendPtrs;
  std::vector<char*> recvPtrs;
  std::vector<size_t> sendBytes, recvBytes;
  std::vector<Fingerprint> sendFps, recvFps;
  size_t maxBytes = 0;
  size_t tileBytes = 0, nTiles = 0;
  uint32_t sliceBytes = 0;
  bool overlap = false;  ///< a send buffer overlaps a receive buffer of the batch
  Fingerprint fp;        ///< of the first operation (for messages)
  OpLabel label;
};

/// NCCL_MAX_P2P_NCHANNELS, at least 1: the most channels a send or receive is spread over (host buffers between hosts,
/// P2PSplit) and the most blocks a launch of sends and receives runs on (GPU buffers, its lanes).
int maxP2PChannelsSetting();

/// How sends and receives with peers on other hosts are spread over channels (Planner::planP2P).
struct P2PSplit {
  int netChannels = 1;      ///< the most parts; 1: none is cut
  size_t minPartBytes = 0;  ///< the smallest part: a send of B bytes is cut into min(netChannels, B / this) parts
};

/// x rounded up to a multiple of a.
inline size_t roundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

/// Whether a collective combines values.
inline bool collReducing(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }

/// What ranks compare to match their calls: the collective's number, count, (coll, dtype, op) and root (-1 where it
/// has none). The FIFO slot headers and the call board carry it.
Fingerprint collFingerprint(uint64_t seq, const OpDesc& op);

/// Most connection ends and step runs one launch may hold (0: no limit). The planner uses fewer channels than asked
/// for when the schedules would not fit (the device path's kernel argument).
struct LaunchLimits {
  int maxFifos = 0;
  int maxRuns = 0;
};

/// One connection end of a launch: (channel, peer, isSend).
using LaunchEnd = std::tuple<int, int, bool>;
/// The connection ends the per-channel schedules scheds[0..nChannels) use, each once, in step order.
std::vector<LaunchEnd> launchEnds(const Schedule* scheds, int nChannels);
/// The ring order a channel's per-rank blocks follow (blockRotation) and its inverse, as packStepRuns takes them.
/// A step's block is looked up by position only where its buffer has n blocks (the schedule's layout).
struct RunBlockOrder {
  const int32_t* order = nullptr;  ///< ring position -> rank (the launch's table, BlockMap::blockOrder)
  const int32_t* pos = nullptr;    ///< rank -> ring position
  int n = 0;                       ///< entries of each
  int inBlocks = 0, outBlocks = 0;
};
/// Appends steps[0, n) to `runs` as runs of steps (kernels/executor.h, StepRun), each as long as its steps stay
/// alike and their peers and blocks keep moving by the same amounts; with `bo`, blocks may move by ring position
/// instead (StepRun::ordered), where that makes the run longer.
void packStepRuns(const Step* steps, size_t n, std::vector<StepRun>* runs, const RunBlockOrder* bo = nullptr);

/// Per-communicator planning state: the schedule cache and the sequence numbers every fingerprint carries.
class Planner {
 public:
  /// The collective's full buffer in bytes (allreduce's, allgather's output, reduce-scatter's input...): the cost
  /// model's size and NCCL's nBytes.
  size_t fullBuffer(const OpDesc& op) const;
  /// The smallest collective (its full buffer) a tree runs as two trees on two channels; SIZE_MAX under a cap of 1.
  size_t dualTreeMinBytes() const;
  /// Whether this allgather or reduce-scatter runs as a tree allreduce (the host path, hosts with as many ranks on
  /// each, CHORUS_ALLGATHER_TREE_MAX_BYTES / CHORUS_REDUCESCATTER_TREE_MAX_BYTES, no tuner plugin or model): the host
  /// engine then prepares the buffers and plans an allreduce whose OpDesc::runsFor is the call.
  bool asTreeAllReduce(const OpDesc& op) const;
  Planner(ncclComm* comm, const FifoGeometry& geo);
  /// Plans a collective (advances the collective sequence number even for count 0, when *empty is set).
  /// `scratch(bytes)` gives memory that stands in for the output where a rank has none (ncclReduce off the
  /// root). `llMaxBytes`: largest message that uses LL by default (-1: the tuner's CHORUS_LL_MAX_BYTES).
  template <class Scratch>
  ncclResult_t planColl(const OpDesc& op, int nChannels, int64_t llMaxBytes, Scratch scratch, CollPlan* out,
                        bool* empty, LaunchLimits limits = {}) {
    char* outStandIn = nullptr;
    size_t bytes = op.count * DType::size(op.dtype);
    if (op.coll == Coll::kReduce && comm_->rank != op.root && op.count > 0) {
      outStandIn = scratch(bytes);
      if (outStandIn == nullptr) return ncclSystemError;
    }
    return plan(op, nChannels, llMaxBytes, outStandIn, out, empty, limits);
  }
  /// Splits a group's sends and receives into batches: batch k holds the k-th operation of each (peer,
  /// direction), so that a schedule never queues two operations behind each other.
  static std::vector<std::vector<const OpDesc*>> p2pBatches(const std::vector<OpDesc>& ops);
  /// Splits a batch of rank `rank` (of n) into launches of at most `most` sends and `most` receives: a send to peer
  /// p goes into launch (p - rank - 1 mod n) / most, a receive from p into (rank - p - 1 mod n) / most. Both ends of
  /// a pair thus put it in the launch of the same index, so each launch meets its peers' launch of that index, and
  /// ranks running their launches in order cannot wait on each other in a cycle. Empty launches are left out.
  static std::vector<std::vector<const OpDesc*>> p2pLaunches(const std::vector<const OpDesc*>& batch, int n, int rank,
                                                             int most);
  /// NCCL_RUNTIME_CONNECT=0: the connection ends of the schedules that collectives would run, by the thresholds (or
  /// NCCL_ALGO), for each channel count in `channelCounts`: allreduce, allgather, reduce-scatter, broadcast and reduce
  /// (root 0) at every power of two from 8 B to 1 GiB a rank, and always their rings (in place, an algorithm may give
  /// way to the ring). Sends and receives are left out, as NCCL leaves them to their first use.
  std::vector<LaunchEnd> initEnds(const std::vector<int>& channelCounts);
  /// The same with the channel counts a collective of each size runs on given by `countsFor` (the device path's,
  /// which follow the bytes).
  std::vector<LaunchEnd> initEnds(const std::function<std::vector<int>(const OpDesc&)>& countsFor);
  /// Plans one batch (advances the per-peer sequence numbers).
  void planP2P(const std::vector<const OpDesc*>& batch, P2PPlan* out);
  /// The same, one plan a channel (out[c], schedule channel c; one with nothing to move has maxBytes 0): a send or
  /// receive of B bytes with a peer on another host is cut into min(netChannels, B / minPartBytes) contiguous parts
  /// (setP2PSplit), as NCCL gives each part at least a minimum across nodes,
  /// part c on channel c, whose connections use the net's device c (mod its devices), as NCCL spreads a peer's sends
  /// over NCCL_NCHANNELS_PER_NET_PEER channels; every other goes whole on channel 0. Both ends cut alike: they see the
  /// same size and the same hosts.
  void planP2P(const std::vector<const OpDesc*>& batch, std::vector<P2PPlan>* out);
  /// How planP2P(batch, out) cuts, and estimateUs counts, sends and receives with peers on other hosts (none is cut
  /// until this is set).
  void setP2PSplit(const P2PSplit& split) { p2pSplit_ = split; }
  const FifoGeometry& geometry() const { return geo_; }
  /// The cost model's time for a group (src/topo/cost_model.h), in microseconds: each operation with the algorithm
  /// the tuner picks, one after another, on this communicator's hosts with CHORUS_COST_INTRA / CHORUS_COST_INTER.
  float estimateUs(const std::vector<OpDesc>& ops, int nChannels) const;
  /// The host path runs a channel a net device (every rank has `n`): the model then puts channel c on NIC c mod n.
  void setNicChannels(int n);
  /// The communicator's channel cap (config.maxCTAs, NCCL_MAX_NCHANNELS; 0: none). At 1 a tree runs one tree, not
  /// the double binary tree's two channels.
  void setChannelCap(int cap);
  ~Planner();
  /// The reduction an operation applies (premulsum factor, average), as the kernels take it.
  RedOp redOpFor(const OpDesc& op) const;
  /// Whether (coll, algo, root) on nch channels fits `limits` on every rank, not only this one: the ranks must agree
  /// on a launch's channels, and their schedules differ in step runs (and, for trees, in connection ends).
  bool fitsEveryRank(Coll coll, Algo algo, int root, int nch, const LaunchLimits& limits);
  /// The ring order schedule `s` (one of this communicator's) names its per-rank blocks in (blockRotation), for
  /// packStepRuns; false when it names them in rank order or has none. out->order points into orderTable().
  bool runBlockOrder(const Schedule& s, RunBlockOrder* out) const;
  /// The ring order under every host rotation a channel may have, rotation r at r x nranks: what a device launch's
  /// step runs look blocks up in (StepRun::ordered).
  const std::vector<int32_t>& orderTable() const { return orderTable_; }
  /// Numbers a collective that runs without a plan (a direct launch), in the same sequence as planned ones.
  uint64_t nextCollSeq() { return ++collSeq_; }

 private:
  /// Parts a send or receive of `bytes` with `peer` is cut into (planP2P).
  int p2pParts(const P2PSplit& split, int peer, size_t bytes) const;
  /// planP2P with `split`.
  void planP2P(const std::vector<const OpDesc*>& batch, const P2PSplit& split, std::vector<P2PPlan>* out);
  ncclResult_t plan(const OpDesc& op, int nChannels, int64_t llMaxBytes, char* outStandIn, CollPlan* out, bool* empty,
                    LaunchLimits limits);
  const std::vector<Schedule>& schedules(Coll coll, Algo algo, int root, int nch);
  bool isInPlaceOffset(const OpDesc& op) const;

  ncclComm* comm_;
  FifoGeometry geo_;
  std::map<std::tuple<int, int, int, int>, std::vector<Schedule>> cache_;
  /// Per (coll, algo, root), for fitsEveryRank: the most step runs and connection ends any rank's schedule has on
  /// channel k, for each kind k of channel (channelKinds: channel c runs as channel c mod the kinds).
  struct ChannelLoad {
    std::vector<size_t> runs, ends;
  };
  std::map<std::tuple<int, int, int>, ChannelLoad> loads_;
  uint64_t collSeq_ = 0;
  /// (coll, bytes, algo, proto, channels) whose choice NCCL_DEBUG_SUBSYS=TUNING has logged (once each).
  std::set<std::tuple<int, size_t, int, int, int>> loggedChoices_;
  std::vector<int> ringOrder_;  ///< ranks in ring order (topo/ring_order.h); empty: rank order
  std::vector<int32_t> orderTable_, posTable_;  ///< orderTable(), and each rotation's inverse
  /// The cost model's view of this communicator (hosts, ranks a host, CHORUS_COST_* links).
  ClusterShape modelShape() const;
  /// The cost model's estimate of (coll, algo) on nChannels for `size` bytes of elemBytes elements; false where algo
  /// cannot run it.
  bool modelEstimate(Coll coll, Algo algo, size_t size, size_t elemBytes, int nChannels, CostEstimate* out) const;
  /// CHORUS_TUNER_MODEL: the cost model's cheapest algorithm that can run the collective.
  void modelChoice(const OpDesc& op, int nChannels, Choice* choice) const;
  /// Lets the tuner plugin change a choice and lower the channel count (engine/tuner_plugin.h).
  void consultTuner(const OpDesc& op, int* nChannels, Choice* choice) const;

  std::unique_ptr<TunerPlugin> tuner_;  ///< NCCL_TUNER_PLUGIN's context for this communicator, or null
  /// modelEstimate's estimates by (collective, algorithm, channels, element size, reference size), for the parameter
  /// generation modelCacheGen_ (the link costs are parameters); the bool says whether the algorithm can run it.
  mutable std::map<std::tuple<int, int, int, size_t, size_t>, std::pair<bool, CostEstimate>> modelCache_;
  mutable uint64_t modelCacheGen_ = 0;
  int hosts_ = 1;                       ///< distinct hosts among the ranks
  int localRanks_ = 0;          ///< ranks a host when hierarchical applies (every host alike), else 0
  bool rankOrderByHost_ = false;  ///< with localRanks_: rank order lists each host's ranks together
  bool railAligned_ = true;       ///< ring channels over hosts rail-aligned (NCCL_CROSS_NIC, ScheduleRequest)
  P2PSplit p2pSplit_;             ///< setP2PSplit
  int nicChannels_ = 0;         ///< setNicChannels's device count, 0 when channels do not follow NICs
  int channelCap_ = 0;          ///< setChannelCap's cap, 0 when none
  std::vector<uint64_t> sendSeq_, recvSeq_;
};

}  // namespace chorus
