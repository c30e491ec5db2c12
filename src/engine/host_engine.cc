// The host engine: plans each operation of a group into per-channel schedules and runs
// them with the executor on this thread. Collectives run in call order, then the
// group's sends and receives (in batches that keep one operation per peer and direction).
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>

#include "algo/generators.h"
#include "core/checks.h"
#include "core/hash.h"
#include "core/params.h"
#include "core/timeout.h"
#include "engine/connections.h"
#include "engine/device_engine.h"
#include "engine/engine.h"
#include "engine/host_platform.h"
#include "engine/plan.h"
#include "engine/tuner.h"
#include "kernels/dtypes.h"
#include "runtime/runtime.h"
#include "topo/affinity.h"
#include "topo/ring_order.h"

namespace chorus {
namespace {

constexpr int kMaxHostChannels = 16;  ///< the most channels one host-path operation runs

IntParam kHostChannels{"CHORUS_HOST_NCHANNELS", 0,
                       "Channels (independent schedules) per host-path operation, 1-16. 0: 1, except between hosts "
                       "with no GPU in the communicator, where it is one a NIC: the fewest devices the net between "
                       "hosts offers on any rank (up to 16), so that every NIC carries a channel (docs/net.md).",
                       "performance"};
IntParam kNicChannelsMinBytes{"CHORUS_NIC_CHANNELS_MIN_BYTES", 262144,
                               "With one host-path channel a NIC (CHORUS_HOST_NCHANNELS unset, several NICs): the "
                               "smallest collective (its full buffer, in bytes) that runs them all; smaller ones run "
                               "one channel, where a second one's messages cost more than its NIC gives "
                               "(docs/perf/net.md).",
                               "performance"};
IntParam kNetPeerChannels{
    "NCCL_NCHANNELS_PER_NET_PEER", 0,
    "As in NCCL: the most channels a send or receive with a peer on another host is spread "
    "over, host buffers, in parts of at least CHORUS_P2P_NIC_PART_MIN_BYTES (1-16; a channel's "
    "connections use the net's device of its number, modulo the devices). 0: one a NIC, as collectives take them "
    "(1 where there is one NIC, or a GPU in the communicator). Every rank must set the same.",
    "performance"};
IntParam kP2PNicPartMinBytes{"CHORUS_P2P_NIC_PART_MIN_BYTES", 32768,
                             "Host buffers: the smallest part a send or receive with a peer on another host is cut "
                             "into for the NICs (NCCL_NCHANNELS_PER_NET_PEER): one of B bytes runs on min(channels, "
                             "B / this) of them, whole below twice this. Every rank must set the same.",
                             "performance"};
IntParam kFifoSlots{"CHORUS_FIFO_SLOTS", 0,
                    "Slots in each connection FIFO (at least 2). 0: 16 when some ranks of the communicator reach "
                    "each other through a net (several hosts, or NCCL_SHM_DISABLE=1) and none has a GPU, 8 "
                    "otherwise. A tile of an operation is half a FIFO: what a rank sends on a step before it waits "
                    "for the next. Over a net a rank's link idles while it waits at the end of a tile, and a longer "
                    "tile makes that a smaller share (docs/perf/net.md).",
                    "performance"};
IntParam kDriveMaxBytes{"CHORUS_NET_RANK_DRIVE_MAX_BYTES", 65536,
                        "Host buffers, a net that takes calls from any thread (socket, UCX): a group whose largest "
                        "operation (its full buffer) is at most this many bytes has the rank's thread drive the "
                        "connections to other hosts in its waits while the proxy thread sleeps (docs/net.md). 0: off.",
                        "performance"};
IntParam kSlotBytes{"CHORUS_FIFO_SLOT_BYTES", 131072,
                    "Bytes in each Simple FIFO slot (at least 4096, a multiple of 64). Where it is not set, "
                    "NCCL_BUFFSIZE decides.",
                    "performance"};
IntParam kBuffSize{"NCCL_BUFFSIZE", 0,
                   "As in NCCL: bytes of each connection's Simple buffer, a channel's FIFO here. Each of its slots "
                   "(CHORUS_FIFO_SLOTS) takes this divided by the slots (at least 4096, a multiple of 64, at most "
                   "1 GiB), unless CHORUS_FIFO_SLOT_BYTES is set. 0: CHORUS_FIFO_SLOT_BYTES's default (1 MB with 8 "
                   "slots, 2 MB with 16; NCCL's default buffer is 4 MiB). Every rank must set the same.",
                   "performance"};
IntParam kLLLines{"CHORUS_LL_LINES", 512, "8-byte lines in each LL FIFO slot (4 payload bytes a line).", "performance"};
IntParam kSingleCopyMin{"CHORUS_SINGLE_COPY_MIN_BYTES", 0,
                        "Slices at least this large go by address between ranks of one host (the receiver reads "
                        "the sender's buffer with process_vm_readv, or directly between threads); 0 disables. Off "
                        "by default: on the 2-core test machine the FIFO path measured faster (docs/perf/cpu.md).",
                        "performance"};
IntParam kRuntimeConnect{"NCCL_RUNTIME_CONNECT", 1,
                         "As in NCCL: 1 makes each connection when the first call needs it. 0 makes at init those "
                         "of the collectives' schedules: for allreduce, allgather, reduce-scatter, broadcast and "
                         "reduce (root 0), the algorithm the thresholds (or NCCL_ALGO) pick at each size, and the "
                         "ring, on the channels they run (with GPUs: the device path's FIFOs, lane 0 of each "
                         "channel; sends and receives and other roots still connect on first use), and init waits "
                         "until the connections between hosts are open (CHORUS_TIMEOUT_S): a peer the net cannot "
                         "reach fails the init. Every rank must set the same.",
                         "general"};
IntParam kSideBySide{"CHORUS_HOST_SIDE_BY_SIDE", 1,
                     "1: a host-path operation's channels run side by side on the rank's thread (a wait in one "
                     "channel moves on to another); 0: they take turns a tile at a time.",
                     "performance"};

/// Whether some rank of the communicator has a GPU.
bool anyGpu(const ncclComm* comm) {
  for (const PeerInfo& p : comm->peers)
    if (p.cudaDev >= 0) return true;
  return false;
}

/// Slots of the communicator's FIFOs: CHORUS_FIFO_SLOTS, or its default; *why says which. Every rank computes the
/// same from what the ranks exchanged. Communicators with a GPU keep 8: the device path counts its lanes in tiles,
/// and was measured so.
uint32_t fifoSlots(const ncclComm* comm, const char** why) {
  if (kFifoSlots.get() > 0) {
    *why = "CHORUS_FIFO_SLOTS";
    return static_cast<uint32_t>(std::max<int64_t>(2, kFifoSlots.get()));
  }
  if (anyGpu(comm)) {
    *why = "a GPU in the communicator";
    return 8;
  }
  if (Connections::usesNet(comm)) {
    *why = "ranks joined by a net";
    return 16;
  }
  *why = "shared memory between all ranks";
  return 8;
}

/// Bytes of each of a FIFO's `slots` slots: CHORUS_FIFO_SLOT_BYTES, else NCCL_BUFFSIZE over the slots, else the
/// former's default; *fromBuffSize says whether NCCL_BUFFSIZE decided.
uint32_t fifoSlotBytes(uint32_t slots, bool* fromBuffSize) {
  int64_t bytes = kSlotBytes.get();
  *fromBuffSize = !kSlotBytes.isSet() && kBuffSize.get() > 0;
  if (*fromBuffSize) bytes = kBuffSize.get() / std::max<uint32_t>(1, slots);
  return static_cast<uint32_t>(std::min<int64_t>(int64_t(1) << 30, std::max<int64_t>(4096, bytes)) & ~int64_t(63));
}

class HostEngine : public Engine {
 public:
  explicit HostEngine(ncclComm* comm) : comm_(comm) {
    geo_.nSlots = fifoSlots(comm, &slotsWhy_);
    geo_.slotBytes = fifoSlotBytes(geo_.nSlots, &slotBytesFromBuffSize_);
    geo_.llLines = static_cast<uint32_t>(std::max<int64_t>(64, kLLLines.get()));
    // 0: 1 until init() knows the net (one a NIC between hosts).
    nChannels_ = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kMaxHostChannels, kHostChannels.get())));
    conns_ = std::make_unique<Connections>(comm, geo_);
    platform_ = std::make_unique<HostPlatform>(comm, conns_.get());
    planner_ = std::make_unique<Planner>(comm, geo_);
  }

  ncclResult_t init() {
    if (comm_->rank == 0)
      INFO(
          kInit, "comm %p: FIFOs of %u slots x %u bytes (%s%s)", (void*)comm_, geo_.nSlots, geo_.slotBytes, slotsWhy_,
          slotBytesFromBuffSize_ ? ("; the slots share NCCL_BUFFSIZE=" + std::to_string(kBuffSize.get())).c_str() : "");
    CHORUS_CHECK(conns_->init());
    // One channel a NIC: a rank's channels take the net's devices in turn, so with fewer channels than NICs some
    // NICs carry nothing. Every rank has the same net and the same agreed device count, so all pick alike. Channel
    // c takes device c mod that count whatever sets the channels (a tree runs two), and the cost model follows.
    const int devices = conns_->remote() != nullptr && !anyGpu(comm_)
                            ? std::min(kMaxHostChannels, conns_->remote()->commonDevices())
                            : 1;
    if (devices > 1) planner_->setNicChannels(devices);
    if (kHostChannels.get() <= 0 && devices > 1) {
      nChannels_ = devices;
      nicChannels_ = true;
      if (comm_->rank == 0)
        INFO(kInit, "comm %p: %d channels on the host path, one for each device of the %s (CHORUS_HOST_NCHANNELS)",
             (void*)comm_, nChannels_, conns_->remote()->name());
    }
    int capRank = -1;
    const int cap = configChannelCap(comm_, &capRank);
    planner_->setChannelCap(cap);
    if (cap > 0 && cap < nChannels_) {
      nChannels_ = cap;
      if (comm_->rank == 0)
        INFO(kInit, "comm %p: %d channel(s) on the host path: rank %d's config.maxCTAs (NCCL_MAX_CTAS, NCCL_MAX_NCHANNELS)",
             (void*)comm_, nChannels_, capRank);
    }
    int floorRank = -1;
    minChannels_ = std::min(kMaxHostChannels, configChannelFloor(comm_, &floorRank));
    if (minChannels_ > nChannels_) {
      nChannels_ = minChannels_;
      if (comm_->rank == 0)
        INFO(kInit,
             "comm %p: %d channels on the host path: rank %d's config.minCTAs (NCCL_MIN_CTAS, NCCL_MIN_NCHANNELS)",
             (void*)comm_, nChannels_, floorRank);
    }
    // Sends and receives with peers on other hosts: a part a NIC, as collectives, or as NCCL_NCHANNELS_PER_NET_PEER.
    P2PSplit split;
    split.netChannels = kNetPeerChannels.get() > 0
                            ? static_cast<int>(std::min<int64_t>(kMaxHostChannels, kNetPeerChannels.get()))
                            : (nicChannels_ ? devices : 1);
    if (cap > 0) split.netChannels = std::min(split.netChannels, cap);
    split.netChannels = std::min(split.netChannels, maxP2PChannelsSetting());
    split.minPartBytes = static_cast<size_t>(std::max<int64_t>(1, kP2PNicPartMinBytes.get()));
    planner_->setP2PSplit(split);
    if (comm_->rank == 0 && split.netChannels > 1)
      INFO(kInit,
           "comm %p: sends and receives with peers on other hosts run on up to %d channels, parts of %zu bytes or "
           "more (%s)",
           (void*)comm_, split.netChannels, split.minPartBytes,
           kNetPeerChannels.get() > 0 ? "NCCL_NCHANNELS_PER_NET_PEER" : "one a NIC");
    if (kRuntimeConnect.get() == 0) CHORUS_CHECK(connectAtInit());
    return probeSingleCopy();
  }

  // NCCL_RUNTIME_CONNECT=0: makes the connections the collectives' schedules use (Planner::initEnds), on the channel
  // counts channelsFor gives. Making one never waits for its peer, so ranks cannot wait on each other here. A
  // communicator with GPUs makes its device path's instead (DeviceEngine::connectAtInit), on ranks with a GPU.
  ncclResult_t connectAtInit() {
    if (anyGpu(comm_)) {
      // Every rank must take part: a rank waits here for the FIFOs its peers on this host own.
      int without = -1;
      for (const PeerInfo& p : comm_->peers)
        if (p.cudaDev < 0) without = p.rank;
      if (without >= 0) {
        if (comm_->rank == 0)
          INFO(kInit,
               "comm %p: NCCL_RUNTIME_CONNECT=0: rank %d has no GPU, so the device path's connections are made on "
               "first use",
               (void*)comm_, without);
        return ncclSuccess;
      }
      CHORUS_CHECK(makeDevice());
      size_t made = 0;
      CHORUS_CHECK(device_->connectAtInit(&made));
      CHORUS_CHECK(awaitNetSetup());
      INFO(kInit, "comm %p rank %d: NCCL_RUNTIME_CONNECT=0: %zu device connection ends made at init", (void*)comm_,
           comm_->rank, made);
      return ncclSuccess;
    }
    std::vector<int> counts = {nChannels_};
    if (nicChannels_ && minChannels_ < nChannels_) counts.push_back(minChannels_);
    const std::vector<LaunchEnd> ends = planner_->initEnds(counts);
    for (const auto& [ch, peer, isSend] : ends) {
      Conn* c = nullptr;
      CHORUS_CHECK(isSend ? conns_->send(ch, peer, &c) : conns_->recv(ch, peer, &c));
    }
    CHORUS_CHECK(awaitNetSetup());
    INFO(kInit, "comm %p rank %d: NCCL_RUNTIME_CONNECT=0: %zu connection ends made at init", (void*)comm_, comm_->rank,
         ends.size());
    return ncclSuccess;
  }

  // Waits until every connection to another host is open, as NCCL's init does with NCCL_RUNTIME_CONNECT=0, so that a
  // peer the net cannot reach fails the init, not the first call. Every rank made the other ends of its connections
  // (the schedules pair them), and the proxy sets them up on its own thread; CHORUS_TIMEOUT_S bounds the wait.
  ncclResult_t awaitNetSetup() {
    RemoteTransport* net = conns_->remote();
    if (net == nullptr) return ncclSuccess;
    const Deadline deadline = Deadline::fromEnv();
    for (;;) {
      std::string why;
      const RemoteTransport::Setup st = net->setupState(&why);
      if (st == RemoteTransport::Setup::kOpen) return ncclSuccess;
      if (st == RemoteTransport::Setup::kFailed)
        CHORUS_FAIL(comm_, ncclRemoteError, "rank %d: NCCL_RUNTIME_CONNECT=0: connecting at init failed: %s%s",
                    comm_->rank, why.c_str(), netFailureSuffix(net).c_str());
      if (deadline.expired())
        CHORUS_FAIL(comm_, ncclRemoteError,
                    "rank %d: NCCL_RUNTIME_CONNECT=0: connections were not set up at init within %s s "
                    "(CHORUS_TIMEOUT_S): %s",
                    comm_->rank, secondsText(deadline.seconds()).c_str(), why.c_str());
      if (comm_->abortFlag.load(std::memory_order_relaxed) != 0)
        CHORUS_FAIL(comm_, ncclInvalidUsage, "rank %d: the communicator was aborted during init", comm_->rank);
      net->kick();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  ncclResult_t run(const std::vector<OpDesc>& ops) override {
    // An operation of nothing uses no buffer, so it runs on either path: with the group's GPU operations when there
    // are any (an uneven all-to-all with empty pairs, an empty shard's collective).
    size_t nDevice = 0, nEmpty = 0;
    for (const OpDesc& op : ops) {
      nDevice += op.device;
      nEmpty += !op.device && op.count == 0;
    }
    if (nDevice > 0) return runDevice(ops, nDevice + nEmpty);
    size_t largest = 0;
    for (const OpDesc& op : ops) largest = std::max(largest, planner_->fullBuffer(op));
    const int64_t driveMax = kDriveMaxBytes.get();
    platform_->drive(driveMax > 0 && largest <= static_cast<size_t>(driveMax));
    ncclResult_t res = runHost(ops);
    platform_->drive(false);
    return res;
  }

  ncclResult_t runHost(const std::vector<OpDesc>& ops) {
    std::vector<OpDesc> p2p;
    for (const OpDesc& op : ops) {
      if (op.coll == Coll::kSendRecv) {
        p2p.push_back(op);
        continue;
      }
      ncclResult_t res = runColl(op);
      if (res != ncclSuccess) return failed(res);
    }
    if (!p2p.empty()) {
      ncclResult_t res = runP2P(p2p);
      if (res != ncclSuccess) return failed(res);
    }
    return ncclSuccess;
  }

  float estimateUs(const std::vector<OpDesc>& ops) override {
    float us = 0;  // each operation on the channels it would run (one below the NIC channels' floor)
    for (const OpDesc& op : ops) us += planner_->estimateUs({op}, channelsFor(op));
    return us;
  }

  void shutdown() override {
    if (device_) device_->abort();
    conns_->poisonAll(PoisonReason::kAborted, comm_->rank);
  }

  ncclResult_t pollAsync() override { return device_ ? device_->checkStatus() : ncclSuccess; }

  WindowTable& windows() override { return windows_; }

 private:
  // Device buffers: the whole group becomes kernel launches (the device engine is made on first use).
  ncclResult_t runDevice(const std::vector<OpDesc>& ops, size_t nDevice) {
    if (nDevice != ops.size())
      CHORUS_FAIL(comm_, ncclInvalidUsage, "rank %d: a group mixes operations on GPU buffers with operations on host "
                  "buffers; chorus runs them on different paths, so split the group", comm_->rank);
    CHORUS_CHECK(makeDevice());
    return device_->run(ops);
  }

  // The device engine, made on first use (or at init with NCCL_RUNTIME_CONNECT=0).
  ncclResult_t makeDevice() {
    if (device_) return ncclSuccess;
    GpuRuntime* rt = gpuRuntime();
    if (rt == nullptr || comm_->cudaDev < 0)
      CHORUS_FAIL(comm_, ncclInvalidUsage, "rank %d: GPU buffers on a communicator without a GPU", comm_->rank);
    auto dev = std::make_unique<DeviceEngine>(comm_, rt, planner_.get(), conns_.get(), &windows_);
    {
      const NearGpuScope nearGpu(comm_->peers[comm_->rank].busId);  // its pinned host memory near the GPU
      CHORUS_CHECK(dev->init());
    }
    device_ = std::move(dev);
    return ncclSuccess;
  }

  // After a failure the connections may hold partial data: tell the peers and retire the comm.
  ncclResult_t failed(ncclResult_t res) {
    PoisonReason reason = platform_->failReason();
    int culprit = platform_->failCulprit();
    uint64_t calls[7];
    bool mismatch = platform_->mismatchCalls(calls);
    conns_->poisonAll(reason == PoisonReason::kNone ? PoisonReason::kError : reason,
                      culprit >= 0 ? culprit : comm_->rank, mismatch ? calls : nullptr);
    comm_->state.store(static_cast<int>(CommState::kFailed));
    int expected = ncclSuccess;
    comm_->asyncError.compare_exchange_strong(expected, res);
    return res;
  }

  // An allgather as a tree allreduce (Planner::asTreeAllReduce): the output holds this rank's block and zeroes
  // elsewhere, and a sum of its bytes over the ranks is the gathered output (every byte has one nonzero term at most).
  // Every rank decides alike, from the same size and settings.
  ncclResult_t runAllGatherAsTree(const OpDesc& op) {
    const size_t bytes = op.count * DType::size(op.dtype), n = static_cast<size_t>(comm_->nranks);
    char* out = static_cast<char*>(op.recvbuff);
    char* mine = out + static_cast<size_t>(comm_->rank) * bytes;
    if (op.sendbuff != mine) std::memmove(mine, op.sendbuff, bytes);
    std::memset(out, 0, mine - out);
    std::memset(mine + bytes, 0, out + n * bytes - (mine + bytes));
    OpDesc sum = op;
    sum.coll = Coll::kAllReduce;
    sum.sendbuff = sum.recvbuff = out;
    sum.count = n * bytes;
    sum.dtype = ncclUint8;  // summed byte by byte (asTreeElemBytes)
    sum.op = ncclSum;
    sum.userOp = false;
    sum.runsFor = &op;
    return runColl(sum);
  }

  // A reduce-scatter as a tree allreduce (Planner::asTreeAllReduce): of the whole input into scratch memory, with the
  // call's type and operation, then this rank's block to the output. The input is read only.
  ncclResult_t runReduceScatterAsTree(const OpDesc& op) {
    const size_t bytes = op.count * DType::size(op.dtype), n = static_cast<size_t>(comm_->nranks);
    char* all = scratch(n * bytes);
    OpDesc sum = op;
    sum.coll = Coll::kAllReduce;
    sum.recvbuff = all;
    sum.count = n * op.count;
    sum.runsFor = &op;
    CHORUS_CHECK(runColl(sum));
    std::memmove(op.recvbuff, all + static_cast<size_t>(comm_->rank) * bytes, bytes);
    return ncclSuccess;
  }

  ncclResult_t runColl(const OpDesc& op) {
    if (planner_->asTreeAllReduce(op))
      return op.coll == Coll::kAllGather ? runAllGatherAsTree(op) : runReduceScatterAsTree(op);
    CollPlan plan;
    bool empty = false;
    ncclResult_t res = planner_->planColl(op, channelsFor(op), -1 /* the tuner default */,
                                          [this](size_t bytes) { return scratch(bytes); }, &plan, &empty);
    if (res != ncclSuccess) return platform_->internalError("no schedule for this collective");
    if (empty) return ncclSuccess;
    platform_->setOp(plan.label, plan.red, plan.fp);
    // By-address slices need a schedule that never rewrites a block it sent from, and distinct buffers.
    bool describe = !plan.inPlace && !algoRewritesSentBlocks(op.coll, plan.choice.algo);
    Executor<HostPlatform> exec(*platform_, plan.fp, plan.reducing, plan.choice.proto == Proto::kLL, plan.sliceBytes,
                                describe);
    // Each channel runs its tiles in TileOrder. Channels with data run side by side on this thread (fibers): a
    // wait in one hands the thread to another, so the two trees of a double binary tree keep their links busy at
    // once and neither waits for a slice of the other. CHORUS_HOST_SIDE_BY_SIDE=0 has them take turns a tile at a
    // time instead (a round of each TileOrder in turn).
    std::vector<BlockMap> maps;
    std::vector<TileOrder> orders;
    for (int ch = 0; ch < plan.nChannels; ch++) {
      const Schedule& s = (*plan.scheds)[ch];
      BlockMap map = plan.map;
      map.chanStart = ch * plan.chanElems;
      map.chanEnd = std::min(map.blockElems, (ch + 1) * plan.chanElems);
      if (map.chanStart >= map.blockElems) break;  // this channel and those after it have no data
      maps.push_back(map);
      orders.emplace_back(plan.nTiles, static_cast<uint32_t>(s.steps.size()), s.lagFrom, s.lag);
    }
    auto sameTile = [](uint64_t t) { return static_cast<size_t>(t); };
    const int live = static_cast<int>(maps.size());
    if (kSideBySide.get() != 0 && live > 1) {
      std::vector<Fibers::Task> tasks;
      for (int ch = 0; ch < live; ch++) {
        tasks.push_back([&, ch]() {
          const Schedule& s = (*plan.scheds)[ch];
          return exec.runOrder(s.steps.data(), s.steps.size(), orders[ch], s.channel, maps[ch], sameTile);
        });
      }
      CHORUS_CHECK(platform_->runSideBySide(tasks));
    } else {
      uint64_t rounds = 0;
      for (const TileOrder& o : orders) rounds = std::max(rounds, o.rounds());
      for (uint64_t k = 0; k < rounds; k++) {
        for (int ch = 0; ch < live; ch++) {
          const Schedule& s = (*plan.scheds)[ch];
          CHORUS_CHECK(exec.runRound(s.steps.data(), s.steps.size(), orders[ch], k, s.channel, maps[ch], sameTile));
        }
      }
    }
    return exec.drain();
  }

  ncclResult_t runP2P(const std::vector<OpDesc>& ops) {
    for (auto& batch : Planner::p2pBatches(ops)) {
      std::vector<P2PPlan> plans;
      planner_->planP2P(batch, &plans);
      std::vector<BlockMap> maps;
      std::vector<const P2PPlan*> live;
      for (const P2PPlan& plan : plans) {
        if (plan.maxBytes == 0) continue;
        BlockMap map;
        map.p2p = true;
        map.esize = 1;
        map.sendPtrs = plan.sendPtrs.data();
        map.sendCounts = plan.sendBytes.data();
        map.recvPtrs = plan.recvPtrs.data();
        map.recvCounts = plan.recvBytes.data();
        map.sendFps = plan.sendFps.data();
        map.recvFps = plan.recvFps.data();
        map.tileElems = plan.tileBytes;
        maps.push_back(map);
        live.push_back(&plan);
      }
      if (live.empty()) continue;
      const P2PPlan& head = *live[0];
      platform_->setOp(head.label, makeRedOp(ncclSum, ncclInt8, comm_->nranks), head.fp);
      // A send passed by address is read later by its receiver: not if this group also receives into it.
      Executor<HostPlatform> exec(*platform_, Fingerprint{}, false, false, head.sliceBytes, !head.overlap);
      auto runAll = [&](size_t i) -> ncclResult_t {
        for (size_t t = 0; t < live[i]->nTiles; t++) CHORUS_CHECK(exec.runTile(live[i]->schedule, maps[i], t));
        return ncclSuccess;
      };
      if (live.size() == 1 || kSideBySide.get() == 0) {
        for (size_t i = 0; i < live.size(); i++) CHORUS_CHECK(runAll(i));
      } else {  // parts on several channels (NICs) side by side, as a collective's channels run
        std::vector<Fibers::Task> tasks;
        for (size_t i = 0; i < live.size(); i++) tasks.push_back([&, i]() { return runAll(i); });
        CHORUS_CHECK(platform_->runSideBySide(tasks));
      }
      CHORUS_CHECK(exec.drain());
    }
    return ncclSuccess;
  }

  // Collective: finds which peers can read this process's memory. Threads of one process
  // always can; another process on this host can if process_vm_readv is allowed (ptrace
  // policy, containers). Every rank tries to read a known word in each local peer and the
  // results are exchanged, so a sender only passes slices by address to a peer that can read them.
  ncclResult_t probeSingleCopy() {
    static const uint64_t kProbeWord = 0x63686f7275732d31ull;
    int n = comm_->nranks, me = comm_->rank;
    int64_t minBytes = kSingleCopyMin.get();
    struct Probe {
      uint64_t pid, addr;
    };
    std::vector<Probe> probes(n);
    probes[me] = Probe{static_cast<uint64_t>(getpid()), reinterpret_cast<uint64_t>(&kProbeWord)};
    CHORUS_CHECK(comm_->bootstrap->allGather(probes.data(), sizeof(Probe)));
    std::vector<uint8_t> canRead(static_cast<size_t>(n) * n, 0);  // canRead[r * n + p]: r can read p
    for (int p = 0; p < n; p++) {
      if (p == me || !conns_->viaShm(p)) continue;
      bool ok = probes[p].pid == static_cast<uint64_t>(getpid());
      if (!ok) {
        uint64_t word = 0;
        struct iovec local = {&word, sizeof(word)};
        struct iovec far = {reinterpret_cast<void*>(probes[p].addr), sizeof(word)};
        ok = process_vm_readv(static_cast<pid_t>(probes[p].pid), &local, 1, &far, 1, 0) ==
                 static_cast<ssize_t>(sizeof(word)) && word == kProbeWord;
      }
      canRead[static_cast<size_t>(me) * n + p] = ok;
    }
    CHORUS_CHECK(comm_->bootstrap->allGather(canRead.data(), static_cast<size_t>(n)));
    std::vector<bool> readableBy(n, false);
    int count = 0;
    for (int p = 0; p < n; p++) {
      readableBy[p] = minBytes > 0 && canRead[static_cast<size_t>(p) * n + me];
      count += readableBy[p];
    }
    platform_->setReadableBy(std::move(readableBy), minBytes > 0 ? static_cast<size_t>(minBytes) : SIZE_MAX);
    INFO(kShm, "rank %d: %d local peer(s) can read its buffers directly (single copy from %ld bytes)", me, count,
         static_cast<long>(minBytes));
    return ncclSuccess;
  }

  char* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  ncclComm* comm_;
  FifoGeometry geo_;
  const char* slotsWhy_ = "";  ///< why geo_ has its slots (fifoSlots)
  bool slotBytesFromBuffSize_ = false;  ///< NCCL_BUFFSIZE set geo_'s slot bytes (fifoSlotBytes)
  int nChannels_ = 1;
  bool nicChannels_ = false;  ///< nChannels_ is one a NIC (not set by CHORUS_HOST_NCHANNELS)

  int minChannels_ = 1;  ///< the communicator's agreed config.minCTAs (configChannelFloor)

  /// The channels a collective runs: nChannels_, but below CHORUS_NIC_CHANNELS_MIN_BYTES, when they are one a NIC,
  /// only the fewest config.minCTAs asks for.
  int channelsFor(const OpDesc& op) const {
    const auto floor = static_cast<size_t>(std::max<int64_t>(0, kNicChannelsMinBytes.get()));
    return nicChannels_ && planner_->fullBuffer(op) < floor ? std::min(nChannels_, minChannels_) : nChannels_;
  }
  std::unique_ptr<Connections> conns_;
  std::unique_ptr<HostPlatform> platform_;
  std::unique_ptr<Planner> planner_;
  WindowTable windows_{comm_};            ///< outlives device_, whose kernels may reach the windows' mappings
  std::unique_ptr<DeviceEngine> device_;  ///< declared last: destroyed first (it waits for queued kernels)
  std::vector<char> scratch_;  ///< output stand-in for non-root ranks of ncclReduce
};

}  // namespace

int configChannelCap(const ncclComm* comm, int* rank) {
  int cap = 0;
  *rank = -1;
  for (const PeerInfo& p : comm->peers)
    if (p.maxBlocks > 0 && (cap == 0 || p.maxBlocks < cap)) cap = p.maxBlocks, *rank = p.rank;
  return cap;
}

int configChannelFloor(const ncclComm* comm, int* rank) {
  int floor = 1;
  *rank = -1;
  for (const PeerInfo& p : comm->peers)
    if (p.minBlocks > floor) floor = p.minBlocks, *rank = p.rank;
  int capRank = -1;
  const int cap = configChannelCap(comm, &capRank);
  return cap > 0 ? std::min(floor, cap) : floor;
}

unsigned long engineEnvHash() {
  std::string s = std::to_string(kHostChannels.get()) + "|" + std::to_string(kNicChannelsMinBytes.get()) + "|" +
                  std::to_string(kFifoSlots.get()) + "|" + std::to_string(kSlotBytes.get()) + "|" +
                  std::to_string(kBuffSize.get()) + "|" + std::to_string(kLLLines.get()) + "|" +
                  std::to_string(tunerEnvHash()) + "|" + std::to_string(shmDisabledSetting()) + "|" + deviceEnvKey() +
                  "|" + std::to_string(ringByHostSetting()) + "|" + std::to_string(railAlignedRingsSetting()) + "|" +
                  std::to_string(kRuntimeConnect.get() != 0) + "|" + std::to_string(kNetPeerChannels.get()) + "|" +
                  std::to_string(kP2PNicPartMinBytes.get()) + "|" + std::to_string(maxP2PChannelsSetting());
  return fnv1a64(s);
}

ncclResult_t Engine::create(ncclComm* comm, std::unique_ptr<Engine>* out) {
  // As NCCL's init, a setting of NCCL_ALGO or NCCL_PROTO that names what neither chorus nor NCCL has is refused.
  if (const std::string bad = tuningSettingsError(); !bad.empty())
    CHORUS_FAIL(comm, ncclInvalidUsage, "rank %d: %s", comm->rank, bad.c_str());
  for (const PeerInfo& p : comm->peers) {
    if (p.envHash != comm->peers[comm->rank].envHash)
      CHORUS_FAIL(
          comm, ncclInvalidUsage,
          "rank %d and rank %d run with different settings of NCCL_ALGO, NCCL_PROTO, NCCL_SHM_DISABLE, "
          "NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_CROSS_NIC, NCCL_RUNTIME_CONNECT, NCCL_NCHANNELS_PER_NET_PEER, "
          "NCCL_MAX_P2P_NCHANNELS or CHORUS_* transport and "
          "device-path variables; "
          "every rank must use the same values",
          comm->rank, p.rank);
  }
  auto engine = std::make_unique<HostEngine>(comm);
  CHORUS_CHECK(engine->init());
  if (comm->rank == 0)
    INFO(kInit, "comm %p: %s", (void*)comm,
         gpuRuntime() && comm->cudaDev >= 0 ? "host buffers on the host path, GPU buffers as kernels"
                                            : "host path (no GPU in use: every buffer is host memory)");
  *out = std::move(engine);
  return ncclSuccess;
}

}  // namespace chorus
