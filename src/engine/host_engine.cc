// The host engine: plans each operation of a group into per-channel schedules and runs
// them with the executor on this thread. Collectives run in call order, then the
// group's sends and receives (in batches that keep one operation per peer and direction).
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "algo/generators.h"
#include "core/checks.h"
#include "core/hash.h"
#include "core/params.h"
#include "engine/connections.h"
#include "engine/engine.h"
#include "engine/host_platform.h"
#include "engine/tuner.h"
#include "kernels/dtypes.h"

namespace chorus {
namespace {

IntParam kHostChannels{"CHORUS_HOST_NCHANNELS", 1, "Channels (independent schedules) per host-path operation.",
                       "performance"};
IntParam kFifoSlots{"CHORUS_FIFO_SLOTS", 8, "Slots in each connection FIFO.", "performance"};
IntParam kSlotBytes{"CHORUS_FIFO_SLOT_BYTES", 131072, "Bytes in each Simple FIFO slot.", "performance"};
IntParam kLLLines{"CHORUS_LL_LINES", 512, "8-byte lines in each LL FIFO slot (4 payload bytes a line).", "performance"};
IntParam kSingleCopyMin{"CHORUS_SINGLE_COPY_MIN_BYTES", 0,
                        "Slices at least this large go by address between ranks of one host (the receiver reads "
                        "the sender's buffer with process_vm_readv, or directly between threads); 0 disables. Off "
                        "by default: on the 2-core test machine the FIFO path measured faster (docs/perf/cpu.md).",
                        "performance"};
IntParam kPrintSchedule{"CHORUS_PRINT_SCHEDULE", 0, "1: log every schedule the first time it is built (INFO, COLL).",
                        "debugging"};

bool reducing(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }

class HostEngine : public Engine {
 public:
  explicit HostEngine(ncclComm* comm) : comm_(comm) {
    geo_.nSlots = static_cast<uint32_t>(std::max<int64_t>(2, kFifoSlots.get()));
    geo_.slotBytes = static_cast<uint32_t>(std::max<int64_t>(4096, kSlotBytes.get()) & ~int64_t(63));
    geo_.llLines = static_cast<uint32_t>(std::max<int64_t>(64, kLLLines.get()));
    nChannels_ = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(16, kHostChannels.get())));
    conns_ = std::make_unique<Connections>(comm, geo_);
    platform_ = std::make_unique<HostPlatform>(comm, conns_.get());
    sendSeq_.assign(comm->nranks, 0);
    recvSeq_.assign(comm->nranks, 0);
  }

  ncclResult_t init() {
    CHORUS_CHECK(conns_->init());
    return probeSingleCopy();
  }

  ncclResult_t run(const std::vector<OpDesc>& ops) override {
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
    // A simple alpha-beta model of the host path: 2 us per step plus bytes at 4 GB/s.
    float us = 0;
    for (const OpDesc& op : ops) us += 2.0f * comm_->nranks + op.count * DType::size(op.dtype) / 4000.0f;
    return us;
  }

  void shutdown() override { conns_->poisonAll(PoisonReason::kAborted, comm_->rank); }

 private:
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

  const std::vector<Schedule>& schedules(Coll coll, Algo algo, int root, int nch) {
    auto key = std::make_tuple(static_cast<int>(coll), static_cast<int>(algo), root, nch);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    std::vector<Schedule> list(nch);
    for (int ch = 0; ch < nch; ch++) {
      ScheduleRequest req{coll, algo, comm_->nranks, comm_->rank, ch, nch, root};
      std::string err;
      if (!buildSchedule(req, &list[ch], &err)) list[ch].steps.clear(), list[ch].nranks = -1;
      if (kPrintSchedule.get()) INFO(kColl, "schedule:\n%s", formatSchedule(list[ch]).c_str());
    }
    return cache_.emplace(key, std::move(list)).first->second;
  }

  RedOp redOpFor(const OpDesc& op) {
    if (op.userOp) {
      // A device-resident scalar is read when the operation starts (host memory on this path).
      return makePreMulSum(op.dtype, op.scalarPtr ? op.scalarPtr : &op.scalarBits, comm_->nranks);
    }
    return makeRedOp(reducing(op.coll) ? op.op : ncclSum, op.dtype, comm_->nranks);
  }

  ncclResult_t runColl(const OpDesc& op) {
    uint64_t seq = ++collSeq_;
    if (op.count == 0) return ncclSuccess;
    int n = comm_->nranks;
    size_t es = DType::size(op.dtype);
    Choice choice = chooseAlgo(op.coll, op.count * es, n);
    bool inPlace = op.sendbuff == op.recvbuff || isInPlaceOffset(op);
    if (inPlace && !algoAliasSafe(op.coll, choice.algo, n)) choice.algo = Algo::kRing;
    int nch = nChannels_;
    if (choice.algo == Algo::kTree) nch = std::max(nch, 2);  // double binary tree: one tree per channel
    const std::vector<Schedule>& scheds = schedules(op.coll, choice.algo, op.root, nch);
    if (scheds[0].nranks < 0) return platform_->internalError("no schedule for this collective");

    BlockMap map;
    map.in = static_cast<const char*>(op.sendbuff);
    map.out = static_cast<char*>(op.recvbuff);
    map.esize = es;
    size_t N = op.count;
    switch (op.coll) {
      case Coll::kAllGather: map.inTotal = N, map.outTotal = N * n; break;
      case Coll::kReduceScatter: map.inTotal = N * n, map.outTotal = N; break;
      case Coll::kAllToAll: map.inTotal = map.outTotal = N * n; break;
      case Coll::kGather: map.inTotal = N, map.outTotal = comm_->rank == op.root ? N * n : 0; break;
      case Coll::kScatter: map.inTotal = comm_->rank == op.root ? N * n : 0, map.outTotal = N; break;
      case Coll::kBroadcast: map.inTotal = comm_->rank == op.root ? N : 0, map.outTotal = N; break;
      case Coll::kReduce:
        // Non-root ranks may pass no recvbuff, but tree schedules accumulate in the output.
        map.inTotal = map.outTotal = N;
        if (comm_->rank != op.root) map.out = scratch(N * es);
        break;
      default: map.inTotal = map.outTotal = N; break;
    }
    // Blocks are the unit the schedule names; for allreduce over several blocks, split the
    // count evenly (rounded to 16 elements so that slices stay vector-aligned).
    const Schedule& s0 = scheds[0];
    int blocks = op.coll == Coll::kAllReduce ? std::max(s0.inBlocks, s0.outBlocks) : 1;
    map.blockElems = blocks > 1 ? roundUp((N + blocks - 1) / blocks, 16) : N;
    size_t chanElems = roundUp((map.blockElems + nch - 1) / nch, 16);
    Proto proto = choice.proto;
    uint32_t slice = proto == Proto::kLL ? geo_.llPayload() & ~7u : geo_.slotBytes;
    map.tileElems = std::max<size_t>(1, (static_cast<size_t>(slice) * geo_.nSlots / 2) / es);
    size_t nTiles = (chanElems + map.tileElems - 1) / map.tileElems;

    Fingerprint fp{seq, op.count, packDesc(op.coll, op.dtype, reducing(op.coll) ? op.op : 0),
                   (op.coll == Coll::kBroadcast || op.coll == Coll::kReduce || op.coll == Coll::kGather ||
                    op.coll == Coll::kScatter) ? op.root : -1};
    platform_->setOp(OpLabel{collName(op.coll), seq, op.count, op.dtype}, redOpFor(op), fp);
    // By-address slices need a schedule that never rewrites a block it sent from (ring, direct,
    // one-shot and two-shot; tree accumulates in its output) and distinct buffers.
    bool describe = !inPlace && choice.algo != Algo::kTree;
    Executor<HostPlatform> exec(*platform_, fp, reducing(op.coll), proto == Proto::kLL, slice, describe);
    for (int ch = 0; ch < nch; ch++) {
      map.chanStart = ch * chanElems;
      map.chanEnd = std::min(map.blockElems, (ch + 1) * chanElems);
      if (map.chanStart >= map.chanEnd) continue;
      for (size_t t = 0; t < nTiles; t++) CHORUS_CHECK(exec.runTile(scheds[ch], map, t));
    }
    return exec.drain();
  }

  bool isInPlaceOffset(const OpDesc& op) const {
    size_t bytes = op.count * DType::size(op.dtype);
    auto s = reinterpret_cast<uintptr_t>(op.sendbuff);
    auto r = reinterpret_cast<uintptr_t>(op.recvbuff);
    switch (op.coll) {
      case Coll::kAllGather: return s == r + bytes * comm_->rank;
      case Coll::kReduceScatter: return r == s + bytes * comm_->rank;
      case Coll::kGather: return s == r + bytes * op.root;
      case Coll::kScatter: return r == s + bytes * op.root;
      default: return false;
    }
  }

  // Sends and receives of one group, in batches: batch k holds the k-th operation of each
  // (peer, direction), so the schedule never queues two operations behind each other.
  ncclResult_t runP2P(const std::vector<OpDesc>& ops) {
    std::map<std::pair<int, bool>, int> nth;
    std::vector<std::vector<const OpDesc*>> batches;
    for (const OpDesc& op : ops) {
      int k = nth[{op.root, op.isSend}]++;
      if (static_cast<int>(batches.size()) <= k) batches.resize(k + 1);
      batches[k].push_back(&op);
    }
    for (auto& batch : batches) CHORUS_CHECK(runP2PBatch(batch));
    return ncclSuccess;
  }

  ncclResult_t runP2PBatch(const std::vector<const OpDesc*>& ops) {
    std::vector<int> sendPeers, recvPeers;
    std::vector<const char*> sendPtrs;
    std::vector<char*> recvPtrs;
    std::vector<size_t> sendBytes, recvBytes;
    std::vector<Fingerprint> sendFps, recvFps;
    size_t maxBytes = 0;
    for (const OpDesc* op : ops) {
      size_t bytes = op->count * DType::size(op->dtype);
      Fingerprint fp{0, op->count, packDesc(Coll::kSendRecv, op->dtype, 0), -1};
      if (op->isSend) {
        fp.seq = ++sendSeq_[op->root];
        sendPeers.push_back(op->root);
        sendPtrs.push_back(static_cast<const char*>(op->sendbuff));
        sendBytes.push_back(bytes);
        sendFps.push_back(fp);
      } else {
        fp.seq = ++recvSeq_[op->root];
        recvPeers.push_back(op->root);
        recvPtrs.push_back(static_cast<char*>(op->recvbuff));
        recvBytes.push_back(bytes);
        recvFps.push_back(fp);
      }
      maxBytes = std::max(maxBytes, bytes);
    }
    if (maxBytes == 0) return ncclSuccess;
    Schedule s = buildSendRecvSchedule(comm_->nranks, comm_->rank, sendPeers, recvPeers);
    BlockMap map;
    map.p2p = true;
    map.esize = 1;
    map.sendPtrs = sendPtrs.data();
    map.sendCounts = sendBytes.data();
    map.recvPtrs = recvPtrs.data();
    map.recvCounts = recvBytes.data();
    map.sendFps = sendFps.data();
    map.recvFps = recvFps.data();
    // Sends and receives pick LL by the size of the exchange, which both ends know.
    bool ll = false;
    uint32_t slice = geo_.slotBytes;
    map.tileElems = static_cast<size_t>(slice) * geo_.nSlots / 2;
    size_t nTiles = (maxBytes + map.tileElems - 1) / map.tileElems;
    platform_->setOp(OpLabel{"ncclSend/ncclRecv", 0, maxBytes, ncclInt8}, makeRedOp(ncclSum, ncclInt8, comm_->nranks),
                     sendFps.empty() ? recvFps[0] : sendFps[0]);
    // A send passed by address is read later by its receiver: not if this group also receives into it.
    bool describe = true;
    for (size_t i = 0; i < sendPtrs.size() && describe; i++)
      for (size_t j = 0; j < recvPtrs.size(); j++)
        if (sendPtrs[i] < recvPtrs[j] + recvBytes[j] && recvPtrs[j] < sendPtrs[i] + sendBytes[i]) describe = false;
    Executor<HostPlatform> exec(*platform_, Fingerprint{}, false, ll, slice, describe);
    for (size_t t = 0; t < nTiles; t++) CHORUS_CHECK(exec.runTile(s, map, t));
    return exec.drain();
  }

  static size_t roundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

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
  int nChannels_ = 1;
  std::unique_ptr<Connections> conns_;
  std::unique_ptr<HostPlatform> platform_;
  std::map<std::tuple<int, int, int, int>, std::vector<Schedule>> cache_;
  uint64_t collSeq_ = 0;
  std::vector<uint64_t> sendSeq_, recvSeq_;
  std::vector<char> scratch_;  ///< output stand-in for non-root ranks of ncclReduce
};

}  // namespace

unsigned long engineEnvHash() {
  std::string s = std::to_string(kHostChannels.get()) + "|" + std::to_string(kFifoSlots.get()) + "|" +
                  std::to_string(kSlotBytes.get()) + "|" + std::to_string(kLLLines.get()) + "|" +
                  std::to_string(tunerEnvHash()) + "|" + std::to_string(shmDisabledSetting());
  return fnv1a64(s);
}

ncclResult_t Engine::create(ncclComm* comm, std::unique_ptr<Engine>* out) {
  for (const PeerInfo& p : comm->peers) {
    if (p.envHash != comm->peers[comm->rank].envHash)
      CHORUS_FAIL(comm, ncclInvalidUsage,
                  "rank %d and rank %d run with different settings of NCCL_ALGO, NCCL_PROTO, NCCL_SHM_DISABLE or "
                  "CHORUS_* transport variables; every rank must use the same values", comm->rank, p.rank);
  }
  auto engine = std::make_unique<HostEngine>(comm);
  CHORUS_CHECK(engine->init());
  if (comm->rank == 0)
    INFO(kInit, "comm %p: host path (this build has no GPU backend; buffers are used as host memory)", (void*)comm);
  *out = std::move(engine);
  return ncclSuccess;
}

}  // namespace chorus
