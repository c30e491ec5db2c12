#include "engine/plan.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "algo/generators.h"
#include "core/debug.h"
#include "core/params.h"
#include "engine/host_platform.h"
#include "engine/link_costs.h"
#include "engine/tuner_plugin.h"
#include "kernels/dtypes.h"
#include "topo/cost_model.h"
#include "topo/ring_order.h"

namespace chorus {
namespace {

IntParam kPrintSchedule{"CHORUS_PRINT_SCHEDULE", 0, "1: log every schedule the first time it is built (INFO, COLL).",
                        "debugging"};

IntParam kMaxP2PChannels{"NCCL_MAX_P2P_NCHANNELS", 64,
                         "As in NCCL: the most channels sends and receives use. Host buffers: the most parts a send "
                         "or receive with a peer on another host is cut into (NCCL_NCHANNELS_PER_NET_PEER, or one a "
                         "NIC); GPU buffers: the most blocks (lanes) a launch of sends and receives runs on. Values "
                         "below 1 count as 1. Every rank must set the same.",
                         "performance"};

}  // namespace

int maxP2PChannelsSetting() {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(64, kMaxP2PChannels.get())));
}

ClusterShape Planner::modelShape() const {
  ClusterShape shape;
  shape.hosts = hosts_;
  // Uneven hosts are modelled as hosts of the largest count (a few ranks more than there are).
  shape.ranksPerHost = localRanks_ > 0 ? localRanks_ : (comm_->nranks + hosts_ - 1) / hosts_;
  const LinkCosts links = modelLinkCosts(comm_);
  shape.intra = links.intra;
  shape.inter = links.inter;
  shape.fifoSlots = static_cast<int>(geo_.nSlots);
  shape.slotBytes = geo_.slotBytes;
  shape.treeDualMinBytes = dualTreeMinBytes();
  if (nicChannels_ > 1) {
    shape.nicsPerHost = nicChannels_;
    shape.nicPerChannel = true;
  }
  return shape;
}

void Planner::setNicChannels(int n) {
  nicChannels_ = n;
  modelCache_.clear();
}

void Planner::setChannelCap(int cap) {
  channelCap_ = cap;
  modelCache_.clear();
}

size_t Planner::dualTreeMinBytes() const { return channelCap_ == 1 ? SIZE_MAX : treeDualMinBytes(); }

bool Planner::asTreeAllReduce(const OpDesc& op) const {
  return (op.coll == Coll::kAllGather || op.coll == Coll::kReduceScatter) && !op.device && op.runsFor == nullptr &&
         localRanks_ > 0 && hosts_ > 1 && !tunerByModel() && !tuner_ &&
         chorus::asTreeAllReduce(op.coll, fullBuffer(op));
}

size_t Planner::fullBuffer(const OpDesc& op) const {
  return fullBufferBytes(op.coll, op.count * DType::size(op.dtype), comm_->nranks);
}

bool Planner::modelEstimate(Coll coll, Algo algo, size_t size, size_t elemBytes, int nChannels,
                            CostEstimate* out) const {
  // Built once at a reference size per (collective, algorithm, channels, element size) and link settings, then
  // scaled: building every rank's schedules and their critical path on each call would put that work on the call
  // path. Without the pipeline term (over kPipelineMaxRanks ranks) the model is linear in size where every block has
  // data, and one reference serves every size; with it, one at each power of two, scaled down to the sizes above the
  // one below (the pipeline term is not linear: within that factor of two, scaling it down underestimates it). Below
  // 64 KB, where blocks may be empty and steps skipped, each size is estimated as it is.
  const size_t es = std::max<size_t>(1, elemBytes);
  size_t refBytes = std::max<size_t>(size_t(1) << 20, size_t(32) * comm_->nranks * std::max(1, nChannels) * es);
  if (comm_->nranks <= kPipelineMaxRanks) {
    refBytes = 4096;
    while (refBytes < size && refBytes < (size_t(1) << 62)) refBytes <<= 1;
  }
  if (size < 65536) refBytes = size;
  if (modelCacheGen_ != paramsGeneration()) {
    modelCache_.clear();
    modelCacheGen_ = paramsGeneration();
  }
  auto key = std::make_tuple(static_cast<int>(coll), static_cast<int>(algo), nChannels, es, refBytes);
  auto it = modelCache_.find(key);
  if (it == modelCache_.end()) {
    CostEstimate ref;
    ClusterShape shape = modelShape();
    shape.elemBytes = es;
    const bool ok = estimateCollective(coll, algo, refBytes, nChannels, shape, &ref, nullptr);
    it = modelCache_.emplace(key, std::make_pair(ok, ref)).first;
  }
  if (!it->second.first) return false;
  *out = refBytes == size ? it->second.second : scaleEstimate(it->second.second, refBytes, size);
  return true;
}

void Planner::modelChoice(const OpDesc& op, int nChannels, Choice* choice) const {
  bool allowed[static_cast<int>(Algo::kNumAlgos)];
  for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++)
    allowed[a] = algoSupported(op.coll, static_cast<Algo>(a), comm_->nranks);
  // Without hosts of equal size hierarchical is the plain ring (rail the direct allgather); the model would price them
  // as hosts they do not have.
  if (localRanks_ == 0) allowed[static_cast<int>(Algo::kHier)] = allowed[static_cast<int>(Algo::kRail)] = false;
  const size_t size = fullBuffer(op);
  CostEstimate best;
  const size_t es = DType::size(op.dtype);
  const Algo a = cheapestAlgo(
      allowed, [&](Algo algo, CostEstimate* e) { return modelEstimate(op.coll, algo, size, es, nChannels, e); }, &best);
  if (a != Algo::kNumAlgos) choice->algo = a;
}

void Planner::consultTuner(const OpDesc& op, int* nChannels, Choice* choice) const {
  const int n = comm_->nranks;
  const size_t size = fullBuffer(op);  // the model's size, and NCCL's nBytes
  const Algo ringFamily = choice->algo == Algo::kTree ? Algo::kRing : choice->algo;
  TunerPlugin::CostTable table;
  for (auto& row : table)
    for (float& c : row) c = -1;
  CostEstimate e;
  const size_t es = DType::size(op.dtype);
  if (modelEstimate(op.coll, ringFamily, size, es, *nChannels, &e))
    table[TunerPlugin::kRing][TunerPlugin::kLL] = table[TunerPlugin::kRing][TunerPlugin::kSimple] = e.timeUs;
  if (algoSupported(op.coll, Algo::kTree, n) && modelEstimate(op.coll, Algo::kTree, size, es, *nChannels, &e))
    table[TunerPlugin::kTree][TunerPlugin::kLL] = table[TunerPlugin::kTree][TunerPlugin::kSimple] = e.timeUs;
  TunerPlugin::CostTable before;
  std::memcpy(before, table, sizeof(table));
  int pluginChannels = 0;
  if (!tuner_->getCollInfo(op.coll, size, 1, table, &pluginChannels)) return;
  // A table left as it was leaves chorus's choice: the model's costs are not what chorus's thresholds pick by.
  if (std::memcmp(before, table, sizeof(table)) != 0) {
    Choice c = *choice;
    if (choiceFromTable(table, ringFamily, &c) && algoSupported(op.coll, c.algo, n)) *choice = c;
  }
  if (pluginChannels > 0) *nChannels = std::min(*nChannels, pluginChannels);  // fewer channels only
}

float Planner::estimateUs(const std::vector<OpDesc>& ops, int nChannels) const {
  const int n = comm_->nranks;
  const ClusterShape shape = modelShape();
  double us = 0;
  for (const OpDesc& op : ops) {
    const size_t bytes = op.count * DType::size(op.dtype);
    if (op.coll == Coll::kSendRecv) {
      const bool across =
          op.root >= 0 && op.root < n && comm_->peers[op.root].hostHash != comm_->peers[comm_->rank].hostHash;
      const LinkCost& link = across ? shape.inter : shape.intra;
      // Cut into parts (planP2P; only across hosts), one a NIC: as many links at once as there are parts and NICs.
      const int links = std::min(p2pParts(p2pSplit_, op.root, bytes), std::max(1, nicChannels_));
      us += link.latencyUs + bytes / (links * link.bytesPerUs);
      continue;
    }
    const size_t size = fullBuffer(op);
    CostEstimate e;
    if (asTreeAllReduce(op)) {  // a tree allreduce of the full buffer
      const size_t es = asTreeElemBytes(op.coll, DType::size(op.dtype));
      if (modelEstimate(Coll::kAllReduce, Algo::kTree, size, es, nChannels, &e)) us += e.timeUs;
      continue;
    }
    Choice c = chooseAlgo(op.coll, bytes, n, -1, localRanks_ > 0, hosts_ > 1, rankOrderByHost_);
    if (!tuningForced(op.coll) && tunerByModel()) modelChoice(op, nChannels, &c);
    const size_t es = DType::size(op.dtype);
    if (modelEstimate(op.coll, c.algo, size, es, nChannels, &e) ||
        modelEstimate(op.coll, Algo::kRing, size, es, nChannels, &e))
      us += e.timeUs;
  }
  return static_cast<float>(us);
}

Planner::Planner(ncclComm* comm, const FifoGeometry& geo) : comm_(comm), geo_(geo) {
  sendSeq_.assign(comm->nranks, 0);
  recvSeq_.assign(comm->nranks, 0);
  railAligned_ = railAlignedRingsSetting();
  if (ringByHostSetting()) {
    std::vector<uint64_t> hostOf(comm->nranks);
    std::vector<int> numaOf(comm->nranks);
    for (int r = 0; r < comm->nranks; r++) hostOf[r] = comm->peers[r].hostHash, numaOf[r] = comm->peers[r].gpuNuma;
    ringOrder_ = ringOrderByHost(hostOf, numaOf);
  }
  // Hierarchical allreduce, allgather and reduce-scatter: several hosts, the same number (2 or more) of ranks on each,
  // laid out host by host in the ring order.
  std::map<uint64_t, int> perHost;
  for (int r = 0; r < comm->nranks; r++) perHost[comm->peers[r].hostHash]++;
  int P = perHost.begin()->second;
  bool even = perHost.size() >= 2 && P >= 2;
  for (const auto& [host, count] : perHost) even &= count == P;
  // Whether rank order lists each host's ranks together. It must when rings are not laid by host; and recursive-doubling
  // allgather, which runs in rank order, then crosses hosts in its last rounds (chooseAlgo's byHost).
  bool byHost = even;
  for (int r = 0; byHost && r + 1 < comm->nranks; r++)
    byHost = (r + 1) % P == 0 || comm->peers[r].hostHash == comm->peers[r + 1].hostHash;
  if (ringOrder_.empty()) even = byHost;
  localRanks_ = even ? P : 0;
  rankOrderByHost_ = byHost;  // implies even: it starts from it
  hosts_ = static_cast<int>(perHost.size());
  // The ring order under each host rotation a channel may have (blockRotation), and each one's inverse.
  const int n = comm->nranks;
  const int rotations = hostOrderCount(n, localRanks_);  // every rotation a ring or tree channel has
  orderTable_.resize(static_cast<size_t>(rotations) * n);
  posTable_.resize(orderTable_.size());
  for (int rot = 0; rot < rotations; rot++) {
    const std::vector<int> order = hostRotatedOrder(&ringOrder_, n, localRanks_, rot);
    for (int p = 0; p < n; p++) {
      orderTable_[static_cast<size_t>(rot) * n + p] = order[p];
      posTable_[static_cast<size_t>(rot) * n + order[p]] = p;
    }
  }
  tuner_ = TunerPlugin::open(comm->commHash, comm->nranks, perHost.size());
  if (comm->rank == 0 && localRanks_ > 0)
    INFO(kInit, "comm %p: hierarchical allreduce, allgather and reduce-scatter from %ld bytes: %zu hosts x %d ranks",
         static_cast<void*>(comm), static_cast<long>(hierMinBytes()), perHost.size(), localRanks_);
  if (comm->rank == 0 && localRanks_ > 0)
    INFO(kInit, "comm %p: ring channels over %zu hosts %s (NCCL_CROSS_NIC)", static_cast<void*>(comm), perHost.size(),
         !railAligned_        ? "cross from local rank c-1 of a host to local rank c of the next"
         : perHost.size() % 2 ? "cross between the same local rank of two hosts, but for the last host's crossing back "
                                "to the first (an odd number of hosts)"
                              : "cross between the same local rank of two hosts");
  if (comm->rank == 0 && !ringOrder_.empty()) {
    std::string order;
    for (int r : ringOrder_) order += " " + std::to_string(r);
    INFO(kInit, "comm %p: rings host by host (CHORUS_RING_BY_HOST):%s", static_cast<void*>(comm), order.c_str());
  }
}

Planner::~Planner() = default;

const std::vector<Schedule>& Planner::schedules(Coll coll, Algo algo, int root, int nch) {
  if (!collRooted(coll)) root = 0;  // ignored: one cache entry, whatever root the caller passed
  auto key = std::make_tuple(static_cast<int>(coll), static_cast<int>(algo), root, nch);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  std::vector<Schedule> list(nch);
  for (int ch = 0; ch < nch; ch++) {
    ScheduleRequest req{coll, algo, comm_->nranks, comm_->rank, ch, nch, root, &ringOrder_, localRanks_, railAligned_};
    std::string err;
    if (!buildSchedule(req, &list[ch], &err)) list[ch].steps.clear(), list[ch].nranks = -1;
    if (kPrintSchedule.get()) INFO(kColl, "schedule:\n%s", formatSchedule(list[ch]).c_str());
  }
  return cache_.emplace(key, std::move(list)).first->second;
}

bool Planner::fitsEveryRank(Coll coll, Algo algo, int root, int nch, const LaunchLimits& limits) {
  if (!collRooted(coll)) root = 0;
  auto key = std::make_tuple(static_cast<int>(coll), static_cast<int>(algo), root);
  auto it = loads_.find(key);
  if (it == loads_.end()) {
    const int kinds = channelKinds(algo, comm_->nranks, localRanks_);
    ChannelLoad most{std::vector<size_t>(kinds, 0), std::vector<size_t>(kinds, 0)};
    std::vector<StepRun> runs;
    bool built = true;
    for (int kind = 0; kind < kinds && built; kind++) {
      ScheduleRequest req{coll, algo, comm_->nranks, 0, kind, kinds, root, &ringOrder_, localRanks_, railAligned_};
      if (kind > 0 && algo == Algo::kRing && blockRotation(req) < 0) {
        // A ring channel that names no block through its order is channel 0's ring with other ranks at its
        // positions: every step talks to the same two neighbours, so its runs and ends are channel 0's
        // (StepRunsPlanner.RingKindsWithoutRenamedBlocksLoadAlike). This keeps a ring allreduce's count at 1/P.
        most.runs[kind] = most.runs[0];
        most.ends[kind] = most.ends[0];
        continue;
      }
      std::string err;
      RunBlockOrder bo;
      bool ordered = false;
      built = forEachRankSchedule(req, [&](const Schedule& s) {
        if (s.rank == 0) ordered = runBlockOrder(s, &bo);  // the same for every rank of the channel
        runs.clear();
        packStepRuns(s.steps.data(), s.steps.size(), &runs, ordered ? &bo : nullptr);
        most.runs[kind] = std::max(most.runs[kind], runs.size());
        most.ends[kind] = std::max(most.ends[kind], launchEnds(&s, 1).size());
      }, &err);
    }
    if (!built) most.runs.assign(kinds, SIZE_MAX / 1024);  // never fits
    it = loads_.emplace(key, most).first;
  }
  // The most of any rank on each channel, summed over the channels: what no rank exceeds, the same on every rank.
  const ChannelLoad& l = it->second;
  size_t runs = 0, ends = 0;
  for (int c = 0; c < nch; c++) runs += l.runs[c % l.runs.size()], ends += l.ends[c % l.ends.size()];
  if (limits.maxRuns != 0 && runs > static_cast<size_t>(limits.maxRuns)) return false;
  return limits.maxFifos == 0 || ends <= static_cast<size_t>(limits.maxFifos);
}

bool Planner::runBlockOrder(const Schedule& s, RunBlockOrder* out) const {
  ScheduleRequest req{s.coll, s.algo, s.nranks, s.rank, s.channel, 0, s.root, &ringOrder_, localRanks_, railAligned_};
  const int rot = s.nranks == comm_->nranks ? blockRotation(req) : -1;
  if (rot < 0 || static_cast<size_t>(rot + 1) * s.nranks > orderTable_.size()) return false;
  out->order = orderTable_.data() + static_cast<size_t>(rot) * s.nranks;
  out->pos = posTable_.data() + static_cast<size_t>(rot) * s.nranks;
  out->n = s.nranks;
  out->inBlocks = s.inBlocks;
  out->outBlocks = s.outBlocks;
  return true;
}

RedOp Planner::redOpFor(const OpDesc& op) const {
  if (op.userOp) {
    // A ncclScalarDevice scalar in host memory is read now, when the operation starts; one in GPU memory is read
    // by the kernel (DevWork::scalarDev), so the plan carries a placeholder.
    static const uint64_t kPlaceholder = 0;
    const void* scalar = op.scalarOnDevice ? &kPlaceholder : op.scalarPtr ? op.scalarPtr : &op.scalarBits;
    return makePreMulSum(op.dtype, scalar, comm_->nranks);
  }
  return makeRedOp(collReducing(op.coll) ? op.op : ncclSum, op.dtype, comm_->nranks);
}

bool Planner::isInPlaceOffset(const OpDesc& op) const {
  size_t bytes = op.count * DType::size(op.dtype);
  auto s = reinterpret_cast<uintptr_t>(op.sendbuff);
  auto r = reinterpret_cast<uintptr_t>(op.recvbuff);
  switch (op.coll) {
    case Coll::kAllGather:
      return s == r + bytes * comm_->rank;
    case Coll::kReduceScatter:
      return r == s + bytes * comm_->rank;
    case Coll::kGather:
      return s == r + bytes * op.root;
    case Coll::kScatter:
      return r == s + bytes * op.root;
    default:
      return false;
  }
}

std::vector<LaunchEnd> launchEnds(const Schedule* scheds, int nChannels) {
  std::vector<LaunchEnd> ends;
  auto use = [&ends](int ch, int peer, bool isSend) {
    LaunchEnd key{ch, peer, isSend};
    if (std::find(ends.begin(), ends.end(), key) == ends.end()) ends.push_back(key);
  };
  for (int ch = 0; ch < nChannels; ch++) {
    for (const Step& st : scheds[ch].steps) {
      if (execRecvs(st.op)) use(ch, st.recvPeer, false);
      if (execSends(st.op)) use(ch, st.sendPeer, true);
    }
  }
  return ends;
}

std::vector<LaunchEnd> Planner::initEnds(const std::vector<int>& channelCounts) {
  return initEnds([&channelCounts](const OpDesc&) { return channelCounts; });
}

std::vector<LaunchEnd> Planner::initEnds(const std::function<std::vector<int>(const OpDesc&)>& countsFor) {
  const int n = comm_->nranks;
  std::set<std::tuple<Coll, Algo, int>> runs;  // (collective, algorithm, channels)
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast, Coll::kReduce}) {
    for (size_t bytes = 8; bytes <= (size_t(1) << 30); bytes *= 2) {
      OpDesc op;
      op.coll = coll;
      op.count = bytes;
      op.dtype = ncclInt8;
      Coll runsAs = coll;
      Algo algo = chooseAlgo(coll, bytes, n, -1, localRanks_ > 0, hosts_ > 1, rankOrderByHost_).algo;
      if (asTreeAllReduce(op)) runsAs = Coll::kAllReduce, algo = Algo::kTree;
      const int minCh = algo == Algo::kTree && fullBuffer(op) >= dualTreeMinBytes() ? 2 : 1;
      for (int nch : countsFor(op)) {
        runs.emplace(runsAs, algo, std::max(nch, minCh));
        if (algoSupported(coll, Algo::kRing, n)) runs.emplace(coll, Algo::kRing, nch);
      }
    }
  }
  std::vector<LaunchEnd> ends;
  for (const auto& [coll, algo, nch] : runs) {
    const std::vector<Schedule>& scheds = schedules(coll, algo, 0, nch);
    if (scheds.empty() || scheds[0].nranks < 0) continue;  // not built for this communicator: never run either
    for (const LaunchEnd& e : launchEnds(scheds.data(), nch))
      if (std::find(ends.begin(), ends.end(), e) == ends.end()) ends.push_back(e);
  }
  return ends;
}

namespace {

bool sameStepExactly(const Step& a, const Step& b) {
  return a.op == b.op && a.sendPeer == b.sendPeer && a.recvPeer == b.recvPeer && a.src.buf == b.src.buf &&
         a.src.block == b.src.block && a.dst.buf == b.dst.buf && a.dst.block == b.dst.block && a.final == b.final &&
         a.span == b.span;
}

// The amount a field moves by from step a to step b, when it fits a run's delta.
bool deltaOf(int32_t a, int32_t b, int16_t* d) {
  const int64_t v = static_cast<int64_t>(b) - a;
  if (v < INT16_MIN || v > INT16_MAX) return false;
  *d = static_cast<int16_t>(v);
  return true;
}

/// The longest run starting at steps[i] in one encoding: `ordered` (StepRunOrdered bits) says which blocks are kept as
/// ring positions (bo->pos) and looked up again (bo->order); the run ends where a step is not what it decodes to.
StepRun runAt(const Step* steps, size_t n, size_t i, uint16_t ordered, const RunBlockOrder* bo) {
  // A block with no position (out of range) gets one no delta reaches, so that the run ends before it.
  auto block = [&](const BufRef& b, uint16_t bit) -> int32_t {
    if (!(ordered & bit)) return b.block;
    return b.block >= 0 && b.block < bo->n ? bo->pos[b.block] : INT32_MIN / 2;
  };
  const Step& a = steps[i];
  StepRun r{};
  r.op = a.op;
  r.srcBuf = a.src.buf;
  r.dstBuf = a.dst.buf;
  r.final = a.final ? 1 : 0;
  r.sendPeer = a.sendPeer;
  r.recvPeer = a.recvPeer;
  r.srcBlock = block(a.src, kStepRunSrcOrdered);
  r.dstBlock = block(a.dst, kStepRunDstOrdered);
  r.ordered = ordered;
  r.span = a.span;
  r.repeat = 1;
  const int32_t* order = ordered != 0 ? bo->order : nullptr;
  if (i + 1 < n) {
    const Step& b = steps[i + 1];
    if (deltaOf(a.sendPeer, b.sendPeer, &r.dSendPeer) && deltaOf(a.recvPeer, b.recvPeer, &r.dRecvPeer) &&
        deltaOf(r.srcBlock, block(b.src, kStepRunSrcOrdered), &r.dSrcBlock) &&
        deltaOf(r.dstBlock, block(b.dst, kStepRunDstOrdered), &r.dDstBlock)) {
      // Each further step must be exactly what the run decodes to (the op, buffers and final flag included); a
      // position past the order's end is no step of it.
      auto inRange = [&](const StepRun& run, uint32_t k) {
        const int32_t s = run.srcBlock + static_cast<int32_t>(k) * run.dSrcBlock;
        const int32_t d = run.dstBlock + static_cast<int32_t>(k) * run.dDstBlock;
        return (!(ordered & kStepRunSrcOrdered) || (s >= 0 && s < bo->n)) &&
               (!(ordered & kStepRunDstOrdered) || (d >= 0 && d < bo->n));
      };
      while (i + r.repeat < n && r.repeat < UINT16_MAX && inRange(r, r.repeat) &&
             sameStepExactly(r.at(r.repeat, order), steps[i + r.repeat]))
        r.repeat++;
    }
    if (r.repeat == 1) r.dSendPeer = r.dRecvPeer = r.dSrcBlock = r.dDstBlock = 0;
  }
  return r;
}

/// The StepRunOrdered bits step `st` may use: a side whose buffer has one block a rank (and a block in range).
uint16_t orderableSides(const Step& st, const RunBlockOrder& bo) {
  auto perRank = [&](const BufRef& b) {
    const int blocks = b.buf == Buf::kInput ? bo.inBlocks : b.buf == Buf::kOutput ? bo.outBlocks : 0;
    return blocks == bo.n && b.block >= 0 && b.block < bo.n;
  };
  return static_cast<uint16_t>((perRank(st.src) ? kStepRunSrcOrdered : 0) |
                               (perRank(st.dst) ? kStepRunDstOrdered : 0));
}

}  // namespace

void packStepRuns(const Step* steps, size_t n, std::vector<StepRun>* runs, const RunBlockOrder* bo) {
  for (size_t i = 0; i < n;) {
    StepRun r = runAt(steps, n, i, 0, nullptr);
    const uint16_t sides = bo != nullptr && bo->order != nullptr ? orderableSides(steps[i], *bo) : 0;
    if (sides != 0) {
      // By ring position: taken where it runs longer (a rotated or scattered ring order breaks the blocks' steps).
      StepRun byPos = runAt(steps, n, i, sides, bo);
      if (byPos.repeat > r.repeat) r = byPos;
    }
    runs->push_back(r);
    i += r.repeat;
  }
}

Fingerprint collFingerprint(uint64_t seq, const OpDesc& op) {
  return Fingerprint{seq, op.count, packDesc(op.coll, op.dtype, collReducing(op.coll) ? op.op : 0),
                     collRooted(op.coll) ? op.root : -1};
}

ncclResult_t Planner::plan(const OpDesc& op, int nChannels, int64_t llMaxBytes, char* outStandIn, CollPlan* out,
                           bool* empty, LaunchLimits limits) {
  uint64_t seq = ++collSeq_;
  *empty = op.count == 0;
  if (*empty) return ncclSuccess;
  CollPlan& p = *out;
  int n = comm_->nranks;
  size_t es = DType::size(op.dtype);
  const OpDesc& call = op.runsFor != nullptr ? *op.runsFor : op;  // what logs and errors name
  const char* by;
  if (op.runsFor != nullptr) {  // an allgather or reduce-scatter run as a tree allreduce (asTreeAllReduce)
    p.choice = Choice{Algo::kTree, Proto::kSimple};
    by = op.runsFor->coll == Coll::kAllGather ? "thresholds, as a tree allreduce of its zero-padded output"
                                              : "thresholds, as a tree allreduce of its input";
  } else {
    p.choice = chooseAlgo(op.coll, op.count * es, n, llMaxBytes, localRanks_ > 0, hosts_ > 1, rankOrderByHost_);
    by = tuningForced(op.coll) ? "NCCL_ALGO/NCCL_PROTO" : "thresholds";
    if (!tuningForced(op.coll)) {
      const Choice before = p.choice;
      if (tunerByModel()) modelChoice(op, nChannels, &p.choice), by = "the cost model";
      if (tuner_) {
        consultTuner(op, &nChannels, &p.choice);
        if (p.choice.algo != before.algo || p.choice.proto != before.proto) by = "the tuner plugin";
      }
    }
  }
  p.inPlace = op.sendbuff == op.recvbuff || isInPlaceOffset(op);
  if (p.inPlace && !algoAliasSafe(op.coll, p.choice.algo, n, localRanks_)) p.choice.algo = Algo::kRing;
  const bool dualTree = fullBuffer(op) >= dualTreeMinBytes();
  const int minCh = p.choice.algo == Algo::kTree && dualTree ? 2 : 1;  // double binary tree: one tree per channel
  int nch = std::max(nChannels, minCh);
  p.scheds = &schedules(op.coll, p.choice.algo, op.root, nch);
  if ((*p.scheds)[0].nranks < 0) return ncclInternalError;
  // Channels repeat a few kinds (channelKinds), so fewer channels mean fewer ends and step runs.
  if (limits.maxFifos != 0 || limits.maxRuns != 0) {
    while (nch > minCh && !fitsEveryRank(op.coll, p.choice.algo, op.root, nch, limits)) nch--;
    // A schedule too long even on the fewest channels (a hierarchical or rail ring over hundreds of ranks is a run
    // or two a host): the ring, which is a few runs a channel in rank order.
    if (!fitsEveryRank(op.coll, p.choice.algo, op.root, nch, limits) && p.choice.algo != Algo::kRing &&
        algoSupported(op.coll, Algo::kRing, n)) {
      INFO(kColl, "%s %s over %d ranks does not fit one device launch; the ring runs it", collName(op.coll),
           algoName(p.choice.algo), n);
      p.choice.algo = Algo::kRing;
      nch = std::max(nChannels, 1);
      while (nch > 1 && !fitsEveryRank(op.coll, Algo::kRing, op.root, nch, limits)) nch--;
    }
    p.scheds = &schedules(op.coll, p.choice.algo, op.root, nch);
  }
  p.nChannels = nch;
  if (logEnabled(LogLevel::kInfo, kTune) &&
      loggedChoices_
          .emplace(static_cast<int>(call.coll), call.count * DType::size(call.dtype), static_cast<int>(p.choice.algo),
                   static_cast<int>(p.choice.proto), nch)
          .second) {
    // Once per size and outcome: what NCCL_DEBUG_SUBSYS=TUNING shows of NCCL's choices, and what perf/tuner_check.py
    // reads to set the tuner's choice beside the measured algorithms.
    INFO(kTune, "tuner: %s of %zu bytes a rank on %d ranks: %s, %s, %d channel(s) (%s%s)", collName(call.coll),
         call.count * DType::size(call.dtype), n, algoName(p.choice.algo),
         p.choice.proto == Proto::kLL ? "LL" : "Simple", nch, by, p.inPlace ? ", in place" : "");
  }

  BlockMap& map = p.map;
  map = BlockMap();
  map.in = static_cast<const char*>(op.sendbuff);
  map.out = static_cast<char*>(op.recvbuff);
  map.esize = es;
  size_t N = op.count;
  switch (op.coll) {
    case Coll::kAllGather:
      map.inTotal = N, map.outTotal = N * n;
      break;
    case Coll::kReduceScatter:
      map.inTotal = N * n, map.outTotal = N;
      break;
    case Coll::kAllToAll:
      map.inTotal = map.outTotal = N * n;
      break;
    case Coll::kGather:
      map.inTotal = N, map.outTotal = comm_->rank == op.root ? N * n : 0;
      break;
    case Coll::kScatter:
      map.inTotal = comm_->rank == op.root ? N * n : 0, map.outTotal = N;
      break;
    case Coll::kBroadcast:
      map.inTotal = comm_->rank == op.root ? N : 0, map.outTotal = N;
      break;
    case Coll::kReduce:
      // Non-root ranks may pass no recvbuff, but tree schedules accumulate in the output.
      map.inTotal = map.outTotal = N;
      if (comm_->rank != op.root) map.out = outStandIn;
      break;
    default:
      map.inTotal = map.outTotal = N;
      break;
  }
  // Blocks are the unit the schedule names; for allreduce over several blocks, split the
  // count evenly (rounded to 16 elements so that slices stay vector-aligned).
  const Schedule& s0 = (*p.scheds)[0];
  int blocks = op.coll == Coll::kAllReduce ? std::max(s0.inBlocks, s0.outBlocks) : 1;
  map.blockElems = blocks > 1 ? roundUp((N + blocks - 1) / blocks, 16) : N;
  p.chanElems = roundUp((map.blockElems + nch - 1) / nch, 16);
  p.sliceBytes = p.choice.proto == Proto::kLL ? geo_.llPayload() & ~7u : geo_.slotBytes;
  // A tile is half a FIFO, the two messages in flight the verifier proves schedules with; a step that moves several
  // blocks as one message (Step::span) carries that many tiles, so its tiles are shorter.
  const size_t span = static_cast<size_t>(spanBound(op.coll, p.choice.algo, n));
  map.tileElems = std::max<size_t>(1, (static_cast<size_t>(p.sliceBytes) * geo_.nSlots / 2) / es / span);
  p.nTiles = (p.chanElems + map.tileElems - 1) / map.tileElems;
  p.reducing = collReducing(op.coll);
  p.fp = collFingerprint(seq, op);
  p.red = redOpFor(op);
  p.label = OpLabel{collName(call.coll), seq, call.count, call.dtype};
  return ncclSuccess;
}

std::vector<std::vector<const OpDesc*>> Planner::p2pBatches(const std::vector<OpDesc>& ops) {
  std::map<std::pair<int, bool>, int> nth;
  std::vector<std::vector<const OpDesc*>> batches;
  for (const OpDesc& op : ops) {
    if (op.coll != Coll::kSendRecv) continue;
    int k = nth[{op.root, op.isSend}]++;
    if (static_cast<int>(batches.size()) <= k) batches.resize(k + 1);
    batches[k].push_back(&op);
  }
  return batches;
}

std::vector<std::vector<const OpDesc*>> Planner::p2pLaunches(const std::vector<const OpDesc*>& batch, int n, int rank,
                                                             int most) {
  size_t sends = 0;
  for (const OpDesc* op : batch) sends += op->isSend ? 1 : 0;
  if (sends <= static_cast<size_t>(most) && batch.size() - sends <= static_cast<size_t>(most)) return {batch};
  std::vector<std::vector<const OpDesc*>> launches(static_cast<size_t>((n - 2) / most + 1));
  for (const OpDesc* op : batch) {
    const int distance = op->isSend ? op->root - rank : rank - op->root;  // 1 .. n-1 around the ring
    launches[static_cast<size_t>((((distance % n) + n) % n - 1) / most)].push_back(op);
  }
  launches.erase(std::remove_if(launches.begin(), launches.end(), [](const auto& l) { return l.empty(); }),
                 launches.end());
  return launches;
}

void Planner::planP2P(const std::vector<const OpDesc*>& ops, P2PPlan* out) {
  std::vector<P2PPlan> plans;
  planP2P(ops, P2PSplit{}, &plans);
  *out = std::move(plans[0]);
}

void Planner::planP2P(const std::vector<const OpDesc*>& ops, std::vector<P2PPlan>* out) {
  planP2P(ops, p2pSplit_, out);
}

int Planner::p2pParts(const P2PSplit& split, int peer, size_t bytes) const {
  const PeerInfo* peers = comm_->peers.data();
  if (split.netChannels <= 1 || peers[peer].hostHash == peers[comm_->rank].hostHash) return 1;
  const size_t parts = bytes / std::max<size_t>(split.minPartBytes, 1);
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(split.netChannels), parts)));
}

void Planner::planP2P(const std::vector<const OpDesc*>& ops, const P2PSplit& split, std::vector<P2PPlan>* out) {
  const int nch = std::max(1, split.netChannels);
  out->assign(static_cast<size_t>(nch), P2PPlan{});
  std::vector<std::vector<int>> sendPeers(nch), recvPeers(nch);
  Fingerprint first{};
  bool haveFirst = false;
  for (const OpDesc* op : ops) {
    const size_t bytes = op->count * DType::size(op->dtype);
    Fingerprint fp{0, op->count, packDesc(Coll::kSendRecv, op->dtype, 0), -1};
    fp.seq = op->isSend ? ++sendSeq_[op->root] : ++recvSeq_[op->root];
    if (!haveFirst) first = fp, haveFirst = true;
    // Part c of `parts`: contiguous, 64-byte aligned, the last one the rest (a part may be empty for a small op).
    const int parts = p2pParts(split, op->root, bytes);
    const size_t share = parts > 1 ? roundUp((bytes + parts - 1) / parts, 64) : bytes;
    for (int c = 0; c < parts; c++) {
      P2PPlan& p = (*out)[c];
      const size_t from = std::min(bytes, static_cast<size_t>(c) * share);
      const size_t len = std::min(bytes - from, share);
      if (op->isSend) {
        sendPeers[c].push_back(op->root);
        p.sendPtrs.push_back(static_cast<const char*>(op->sendbuff) + from);
        p.sendBytes.push_back(len);
        p.sendFps.push_back(fp);
      } else {
        recvPeers[c].push_back(op->root);
        p.recvPtrs.push_back(static_cast<char*>(op->recvbuff) + from);
        p.recvBytes.push_back(len);
        p.recvFps.push_back(fp);
      }
      p.maxBytes = std::max(p.maxBytes, len);
    }
  }
  bool overlap = false;  // a send and a receive of the batch share bytes (whole buffers, as before the split)
  for (const OpDesc* a : ops)
    for (const OpDesc* b : ops)
      if (a->isSend && !b->isSend) {
        const char* s = static_cast<const char*>(a->sendbuff);
        const char* r = static_cast<const char*>(b->recvbuff);
        const size_t sb = a->count * DType::size(a->dtype), rb = b->count * DType::size(b->dtype);
        overlap |= s < r + rb && r < s + sb;
      }
  for (int c = 0; c < nch; c++) {
    P2PPlan& p = (*out)[c];
    p.schedule = buildSendRecvSchedule(comm_->nranks, comm_->rank, sendPeers[c], recvPeers[c]);
    p.schedule.channel = c;
    p.sliceBytes = geo_.slotBytes;
    p.tileBytes = static_cast<size_t>(p.sliceBytes) * geo_.nSlots / 2;
    p.nTiles = (p.maxBytes + p.tileBytes - 1) / p.tileBytes;
    p.fp = first;
    p.label = OpLabel{"ncclSend/ncclRecv", 0, p.maxBytes, ncclInt8};
    p.overlap = overlap;
  }
}

}  // namespace chorus
