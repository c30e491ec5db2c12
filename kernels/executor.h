// The executor: runs one rank's schedule for one channel over its connections.
//
// Written once against a Platform policy that supplies connections, waits and reductions:
// the host platform (src/engine/host_platform.h) runs it on a CPU thread, the device platform
// (kernels/device_platform.h) on every thread of a GPU block. For each tile of the blocks, the
// steps run in order; a step moves its data in slices through the FIFOs of kernels/fifo.h,
// streaming: a slice is received, reduced and forwarded before the next one, so a ring
// pipelines at slice granularity.
//
// On the device every thread of the block runs this code with the same values, so control flow
// stays uniform; everything that writes shared state (FIFO counters, slot headers, LL lines,
// data) goes through the platform, which divides the work among the threads and synchronises.
#pragma once

#include <cstring>

#include "algo/schedule.h"
#include "kernels/arch.h"
#include "kernels/fifo.h"
#include "nccl.h"

/// Propagates a failed result out of the executor (the platform already described it).
#define CHORUS_EXEC_CHECK(call)            \
  do {                                     \
    ncclResult_t exec_res_ = (call);       \
    if (exec_res_ != ncclSuccess) return exec_res_; \
  } while (0)

namespace chorus {

/// Where the blocks of one operation live, and how they are tiled.
struct BlockMap {
  const char* in = nullptr;
  char* out = nullptr;
  size_t esize = 1;
  size_t inTotal = 0, outTotal = 0;  ///< elements in each buffer
  size_t blockElems = 0;             ///< elements per block (same unit in and out)
  size_t chanStart = 0, chanEnd = 0; ///< this channel's part of every block, in elements
  size_t tileElems = 0;              ///< elements per tile per block
  // Point-to-point groups: block i of the input is send i, block j of the output is recv j.
  bool p2p = false;
  const char* const* sendPtrs = nullptr;
  const size_t* sendCounts = nullptr;
  char* const* recvPtrs = nullptr;
  const size_t* recvCounts = nullptr;
  const struct Fingerprint* sendFps = nullptr;  ///< per send: that pair's fingerprint
  const struct Fingerprint* recvFps = nullptr;  ///< per recv
  /// The channel's ring order, for step runs that name blocks by ring position (StepRun::ordered); device launches.
  const int32_t* blockOrder = nullptr;

  /// Pointer and element count of (buf, block) at tile t; count 0 when the tile is past its end.
  CHORUS_HOST_DEVICE char* range(Buf buf, int block, size_t tile, size_t* n) const {
    size_t off, len;
    char* base;
    if (p2p) {
      size_t count = buf == Buf::kInput ? sendCounts[block] : recvCounts[block];
      base = buf == Buf::kInput ? const_cast<char*>(sendPtrs[block]) : recvPtrs[block];
      off = tile * tileElems;
      len = off < count ? (count - off < tileElems ? count - off : tileElems) : 0;
    } else {
      size_t total = buf == Buf::kInput ? inTotal : outTotal;
      base = buf == Buf::kInput ? const_cast<char*>(in) : out;
      size_t bStart = static_cast<size_t>(block) * blockElems;
      size_t bEnd = bStart + blockElems < total ? bStart + blockElems : total;
      off = bStart + chanStart + tile * tileElems;
      size_t end = bStart + chanEnd;
      if (end > bEnd) end = bEnd;
      if (off + tileElems < end) end = off + tileElems;
      len = off < end ? end - off : 0;
    }
    *n = len;
    return base ? base + off * esize : nullptr;
  }
};

/// Fingerprint of the running operation, stamped into every slot header and checked by the receiver.
struct Fingerprint {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint32_t desc = 0;
  int32_t root = -1;
};

/// Reduction flags (match kernels/reduce.h).
constexpr uint32_t kExecPreLocal = 1, kExecPostOp = 2;

/// stepRecvs/stepSends of algo/schedule.h, callable from device code.
CHORUS_HOST_DEVICE inline bool execRecvs(StepOp op) {
  return op == StepOp::kRecv || op == StepOp::kRecvReduceSend || op == StepOp::kRecvReduceCopy ||
         op == StepOp::kRecvReduceCopySend || op == StepOp::kRecvCopySend;
}
CHORUS_HOST_DEVICE inline bool execSends(StepOp op) {
  return op == StepOp::kSend || op == StepOp::kRecvReduceSend || op == StepOp::kRecvReduceCopySend ||
         op == StepOp::kRecvCopySend;
}

/// StepRun::ordered: which of a run's blocks are ring positions, looked up in the channel's ring order.
enum StepRunOrdered : uint16_t {
  kStepRunSrcOrdered = 1,
  kStepRunDstOrdered = 2,
};

/// A run of schedule steps that are alike but for their peers and blocks, each of which moves by a fixed amount from
/// one step to the next. A launch descriptor holds a schedule as runs: a ring over n ranks is a few runs whatever n
/// is (its steps differ only in the block, one apart), so the descriptor's size does not bound the ranks.
/// A ring over ranks placed in no arithmetic order (hosts' ranks rotated by channel, ranks placed round-robin) names
/// per-rank blocks in that order, so its blocks move by no fixed amount; numbered by ring position they do. A run
/// whose `ordered` has kStepRunSrcOrdered (kStepRunDstOrdered) keeps the source (destination) block as a position,
/// and the step's block is order[position], order being the channel's ring order (BlockMap::blockOrder).
struct StepRun {
  StepOp op;
  Buf srcBuf, dstBuf;
  uint8_t final;
  int32_t sendPeer, recvPeer, srcBlock, dstBlock;  ///< the first step's
  uint16_t repeat;                                 ///< steps in the run, at least 1
  int16_t dSendPeer, dRecvPeer, dSrcBlock, dDstBlock;
  uint16_t ordered;  ///< StepRunOrdered bits: blocks are ring positions, looked up in `order`
  uint16_t span;     ///< Step::span of every step of the run

  /// Step k of the run; `order` is the channel's ring order (needed only when `ordered` is set).
  CHORUS_HOST_DEVICE Step at(uint32_t k, const int32_t* order = nullptr) const {
    Step st;
    const int32_t i = static_cast<int32_t>(k);
    st.op = op;
    st.sendPeer = sendPeer + i * dSendPeer;
    st.recvPeer = recvPeer + i * dRecvPeer;
    st.src.buf = srcBuf;
    st.src.block = srcBlock + i * dSrcBlock;
    st.dst.buf = dstBuf;
    st.dst.block = dstBlock + i * dDstBlock;
    if (ordered & kStepRunSrcOrdered) st.src.block = order[st.src.block];
    if (ordered & kStepRunDstOrdered) st.dst.block = order[st.dst.block];
    st.final = final != 0;
    st.span = span;
    return st;
  }
};

/// Runs schedules over a Platform.
template <class Platform>
class Executor {
 public:
  /// `describe`: slices may be passed by address (single copy) on connections that allow it.
  /// Only for schedules that never rewrite a block they sent from, and never in place.
  CHORUS_HOST_DEVICE Executor(Platform& p, const Fingerprint& fp, bool reducing, bool ll, uint32_t sliceBytes,
                               bool describe = false)
      : p_(p), fp_(fp), reducing_(reducing), ll_(ll), sliceBytes_(sliceBytes), describe_(describe && !ll) {}

  /// Waits until every slice passed by address has been read by its receiver, so the caller
  /// may return (and the user reuse the buffers). Call after the last tile.
  CHORUS_HOST_DEVICE ncclResult_t drain() { return p_.drainDescribed(); }

  /// Runs every step of `s` for tile `tile` of the blocks in `map` (host callers).
  ncclResult_t runTile(const Schedule& s, const BlockMap& map, size_t tile) {
    return runTile(s.steps.data(), s.steps.size(), s.channel, map, tile);
  }

  /// Runs steps[0, nSteps) of channel `channel` for tile `tile` of the blocks in `map`.
  CHORUS_HOST_DEVICE ncclResult_t runTile(const Step* steps, size_t nSteps, int channel, const BlockMap& map,
                                          size_t tile) {
    return runSteps(steps, nSteps, 0, static_cast<uint32_t>(nSteps), channel, map, tile);
  }

  /// Runs steps[first, end) of the nSteps in `steps` (channel `channel`) for tile `tile`: one part of a TileOrder
  /// round. The same shape as the StepRun form below, so that runRound takes either.
  CHORUS_HOST_DEVICE ncclResult_t runSteps(const Step* steps, size_t /*nSteps*/, uint32_t first, uint32_t end,
                                           int channel, const BlockMap& map, size_t tile) {
    for (uint32_t i = first; i < end; i++) CHORUS_EXEC_CHECK(runTileStep(channel, steps[i], i, map, tile));
    return ncclSuccess;
  }

  /// Runs the steps numbered [first, end) of runs[0, nRuns) for tile `tile` (device launches hold schedules as runs).
  CHORUS_HOST_DEVICE ncclResult_t runSteps(const StepRun* runs, size_t nRuns, uint32_t first, uint32_t end,
                                           int channel, const BlockMap& map, size_t tile) {
    uint32_t idx = 0;  // the step's index in the schedule, as on the host path
    for (size_t i = 0; i < nRuns && idx < end; i++) {
      if (idx + runs[i].repeat <= first) {
        idx += runs[i].repeat;
        continue;
      }
      for (uint32_t k = 0; k < runs[i].repeat && idx < end; k++, idx++)
        if (idx >= first) CHORUS_EXEC_CHECK(runTileStep(channel, runs[i].at(k, map.blockOrder), idx, map, tile));
    }
    return ncclSuccess;
  }

  /// Runs every tile of a schedule in `order` (algo/schedule.h), through `steps`: a Step array of n steps or a StepRun
  /// array of n runs. Tile k of the caller's tiles is tileOf(k).
  template <class Steps, class TileOf>
  CHORUS_HOST_DEVICE ncclResult_t runOrder(const Steps* steps, size_t n, const TileOrder& order, int channel,
                                           const BlockMap& map, const TileOf& tileOf) {
    for (uint64_t k = 0; k < order.rounds(); k++) CHORUS_EXEC_CHECK(runRound(steps, n, order, k, channel, map, tileOf));
    return ncclSuccess;
  }

  /// Round k of `order` (both its parts); see runOrder.
  template <class Steps, class TileOf>
  CHORUS_HOST_DEVICE ncclResult_t runRound(const Steps* steps, size_t n, const TileOrder& order, uint64_t k,
                                           int channel, const BlockMap& map, const TileOf& tileOf) {
    for (int which = 0; which < 2; which++) {
      uint64_t t;
      uint32_t first, end;
      if (order.part(k, which, &t, &first, &end))
        CHORUS_EXEC_CHECK(runSteps(steps, n, first, end, channel, map, tileOf(t)));
    }
    return ncclSuccess;
  }

 private:

  /// Step `idx` of the schedule for tile `tile`, unless the tile is past the end of the blocks it moves. runStep has
  /// this one call site, so that it is inlined once (the device kernel's compile time grows with its copies).
  CHORUS_HOST_DEVICE ncclResult_t runTileStep(int channel, const Step& st, uint32_t idx, const BlockMap& map,
                                              size_t tile) {
    const char* src = nullptr;
    char* dst = nullptr;
    size_t n = 0;
    bool gathered = false;
    if (st.span > 1) {
      CHORUS_EXEC_CHECK(spanRange(st, map, tile, &src, &dst, &n, &gathered));
    } else {
      BufRef ref = execRecvs(st.op) || st.op == StepOp::kCopy || st.op == StepOp::kLocalReduce ? st.dst : st.src;
      if (ref.buf == Buf::kNone) ref = st.src.buf != Buf::kNone ? st.src : st.dst;
      map.range(ref.buf, ref.block, tile, &n);
      size_t dummy;
      if (st.src.buf != Buf::kNone) src = map.range(st.src.buf, st.src.block, tile, &dummy);
      if (st.dst.buf != Buf::kNone) dst = map.range(st.dst.buf, st.dst.block, tile, &dummy);
    }
    if (n == 0) return ncclSuccess;
    const SpanPieces pieces{&map, st.op == StepOp::kSend ? st.src : st.dst, st.span, tile};
    return runStep(channel, st, idx, map, src, dst, n, gathered ? &pieces : nullptr);
  }

  /// A send or receive of several blocks (Step::span) is one message: the tile-t slices of blocks b .. b+span-1, their
  /// lengths summed into *n. Where they lie end to end (a tile is a whole block) the message is one range, at *src (a
  /// send) or *dst (a receive), and runs as any step; otherwise *gathered: runStep gathers it into the slot and
  /// scatters it out (SpanPieces). Sender and receiver tile alike, so both see the same lengths.
  CHORUS_HOST_DEVICE ncclResult_t spanRange(const Step& st, const BlockMap& map, size_t tile, const char** src,
                                            char** dst, size_t* n, bool* gathered) {
    if (st.op != StepOp::kSend && st.op != StepOp::kRecv) return p_.internalError("a span on a step that reduces");
    const BufRef ref = st.op == StepOp::kSend ? st.src : st.dst;
    size_t total = 0;
    char* first = nullptr;
    bool contiguous = true;
    for (int j = 0; j < st.span; j++) {
      size_t len = 0;
      char* p = map.range(ref.buf, ref.block + j, tile, &len);
      if (len == 0) continue;
      if (total == 0) {
        first = p;
      } else if (p != first + total * map.esize) {
        contiguous = false;
      }
      total += len;
    }
    *n = total;
    *gathered = !contiguous;
    if (contiguous && st.op == StepOp::kSend) *src = first;
    if (contiguous && st.op == StepOp::kRecv) *dst = first;
    return ncclSuccess;
  }

  /// The blocks of a span step whose slices do not lie end to end: the message is their concatenation.
  struct SpanPieces {
    const BlockMap* map;
    BufRef ref;
    int span;
    size_t tile;

    /// Copies message bytes [off, off + bytes), which `msg` holds, between it and the blocks: to the blocks
    /// (toBlocks: a receive; msg is only read then) or from them (a send). One copy call, inlined once.
    template <class P>
    CHORUS_HOST_DEVICE void move(P& p, char* msg, size_t off, size_t bytes, bool toBlocks, uint32_t flags) const {
      const size_t es = map->esize;
      size_t at = 0;  // message offset of block j's slice
      for (int j = 0; j < span && at < off + bytes; j++) {
        size_t n = 0;
        char* b = map->range(ref.buf, ref.block + j, tile, &n);
        const size_t len = n * es, lo = off > at ? off : at, hi = off + bytes < at + len ? off + bytes : at + len;
        if (lo < hi) {
          char* m = msg + (lo - off);
          char* blk = b + (lo - at);
          p.copy(toBlocks ? blk : m, toBlocks ? m : blk, (hi - lo) / es, flags);
        }
        at += len;
      }
    }
  };

  /// Runs step `st` over n elements at src and dst (either null where the step has none), or, with `pieces`, a send
  /// or receive of several blocks gathered or scattered piece by piece.
  CHORUS_HOST_DEVICE ncclResult_t runStep(int channel, const Step& st, uint32_t idx, const BlockMap& map,
                                          const char* src, char* dst, size_t n, const SpanPieces* pieces) {
    // Point-to-point steps carry the fingerprint of their own send/recv; collectives one for all.
    const Fingerprint& sfp = map.p2p && st.src.buf == Buf::kInput ? map.sendFps[st.src.block] : fp_;
    const Fingerprint& rfp = map.p2p && st.dst.buf == Buf::kOutput ? map.recvFps[st.dst.block] : fp_;
    uint32_t localFlags = (reducing_ && st.src.buf == Buf::kInput ? kExecPreLocal : 0) | (st.final ? kExecPostOp : 0);
    bool recv = execRecvs(st.op), send = execSends(st.op);
    Fifo* rf = nullptr;
    Fifo* sf = nullptr;
    bool rll = false, sll = false;
    if (recv) CHORUS_EXEC_CHECK(p_.recvFifo(channel, st.recvPeer, ll_, &rf, &rll));
    if (send) CHORUS_EXEC_CHECK(p_.sendFifo(channel, st.sendPeer, ll_, &sf, &sll));
    size_t bytes = n * map.esize;
    size_t es = map.esize;
    // Which local memory could stand for the outgoing data (so the receiver reads it in place).
    bool canDescribe = send && !sll && describe_ && !pieces && p_.canDescribe(sf, bytes) &&
                       ((st.op == StepOp::kSend && p_.identityCopy(localFlags)) ||
                        st.op == StepOp::kRecvReduceCopySend || st.op == StepOp::kRecvCopySend);
    for (size_t off = 0; off < bytes; off += sliceBytes_) {
      size_t b = bytes - off < sliceBytes_ ? bytes - off : sliceBytes_;
      size_t ne = b / es;
      const char* srcp = src ? src + off : nullptr;
      char* dstp = dst ? dst + off : nullptr;
      const char* r = nullptr;
      bool fetchedToDst = false;
      if (recv) {
        CHORUS_EXEC_CHECK(rll ? recvLL(rf, rfp, b, idx, &r) : recvSimple(rf, rfp, b, idx, &r));
        if (!rll && (rf->hdrs[rf->slot()].step & kDescribedSlot)) {
          uint64_t remote = *reinterpret_cast<const uint64_t*>(r);  // slots are 4 KiB aligned
          // Data that only lands in dst is read straight there; an operand goes to staging.
          fetchedToDst = (st.op == StepOp::kRecv || st.op == StepOp::kRecvCopySend) && !pieces;
          char* into = fetchedToDst ? dstp : p_.staging(0, b);
          CHORUS_EXEC_CHECK(p_.fetch(rf, into, remote, b));
          r = into;
        }
      }
      char* out = nullptr;
      if (send) {
        CHORUS_EXEC_CHECK(p_.waitSendSpace(sf));
        out = sll ? p_.staging(1, b) : canDescribe ? nullptr : sf->slotData();
      }
      const char* sendFrom = nullptr;  // set when the slice goes by address
      // A send or receive of blocks that do not lie end to end (only kSend and kRecv take a span): gathered into the
      // slot, or scattered from what arrived (a described slot was fetched to staging, as fetchedToDst needs a range).
      if (pieces) {
        pieces->move(p_, send ? out : const_cast<char*>(r), off, b, /*toBlocks=*/!send,
                     send ? localFlags : (st.final ? kExecPostOp : 0));
      } else switch (st.op) {
        case StepOp::kSend:
          if (canDescribe) {
            sendFrom = srcp;
          } else {
            p_.copy(out, srcp, ne, localFlags);
          }
          break;
        case StepOp::kRecv:
          if (!fetchedToDst) {
            p_.copy(dstp, r, ne, st.final ? kExecPostOp : 0);
          } else if (st.final && !p_.identityCopy(kExecPostOp)) {
            p_.copy(dstp, dstp, ne, kExecPostOp);
          }
          break;
        case StepOp::kRecvReduceSend: p_.reduce(out, r, srcp, ne, localFlags); break;
        case StepOp::kRecvReduceCopy: p_.reduce(dstp, r, srcp, ne, localFlags); break;
        case StepOp::kRecvReduceCopySend:
          p_.reduce(dstp, r, srcp, ne, localFlags);
          if (canDescribe) {
            sendFrom = dstp;
          } else {
            p_.copy(out, dstp, ne, 0);
          }
          break;
        case StepOp::kRecvCopySend:
          if (!fetchedToDst) p_.copy(dstp, r, ne, 0);
          if (canDescribe) {
            sendFrom = dstp;
          } else {
            p_.copy(out, r, ne, 0);
          }
          break;
        case StepOp::kCopy: p_.copy(dstp, srcp, ne, localFlags); break;
        case StepOp::kLocalReduce: p_.reduce(dstp, dstp, srcp, ne, localFlags); break;
        default: return p_.internalError("unknown step op");
      }
      if (send) {
        if (sll) {
          sendLL(sf, sfp, out, b);
        } else {
          uint32_t tag = slotOrdinal(sf->step);
          if (sendFrom) {
            *reinterpret_cast<uint64_t*>(sf->slotData()) = reinterpret_cast<uint64_t>(sendFrom);
            tag |= kDescribedSlot;
            p_.noteDescribed(sf);
          }
          p_.writeHeader(&sf->hdrs[sf->slot()], header(sfp, b, tag));
          p_.publishTail(sf);
        }
      }
      if (recv) p_.publishHead(rf);
    }
    return ncclSuccess;
  }

  CHORUS_HOST_DEVICE static SlotHeader header(const Fingerprint& fp, size_t bytes, uint32_t tag) {
    SlotHeader h;
    h.seq = fp.seq;
    h.count = fp.count;
    h.desc = fp.desc;
    h.root = fp.root;
    h.bytes = static_cast<uint32_t>(bytes);
    h.step = tag;
    return h;
  }

  /// A slot read at another place on its connection than it was written (the two ends out of step, or the slot read
  /// before the sender filled it: its header is then an older slot's) would give some other slice's data, or an
  /// earlier call's, without any other check noticing when the sizes agree. It stops the operation instead.
  CHORUS_HOST_DEVICE ncclResult_t checkOrdinal(Fifo* f, const SlotHeader& h) {
    const uint32_t got = slotOrdinal(h.step), want = slotOrdinal(f->step);
    return got == want ? ncclSuccess : p_.outOfOrder(f, got, want);
  }

  CHORUS_HOST_DEVICE ncclResult_t checkHeader(Fifo* f, const Fingerprint& fp, const SlotHeader& h, size_t bytes, uint32_t idx) {
    if (h.seq != fp.seq || h.count != fp.count || h.desc != fp.desc || h.root != fp.root || h.bytes != bytes)
      return p_.mismatch(f, h, fp, bytes, idx);
    return ncclSuccess;
  }

  CHORUS_HOST_DEVICE ncclResult_t recvSimple(Fifo* f, const Fingerprint& fp, size_t bytes, uint32_t idx, const char** r) {
    CHORUS_EXEC_CHECK(p_.waitRecvData(f));
    const SlotHeader& h = f->hdrs[f->slot()];
    CHORUS_EXEC_CHECK(checkOrdinal(f, h));
    CHORUS_EXEC_CHECK(checkHeader(f, fp, h, bytes, idx));
    *r = f->slotData();
    return ncclSuccess;
  }

  // LL: header words then payload words, each in a line with flag = step + 1. The header is
  // waited for first, so that a slot of the wrong size is reported as a mismatch, not a timeout.
  // Both land in staging area 0: header words, then the payload.
  CHORUS_HOST_DEVICE ncclResult_t recvLL(Fifo* f, const Fingerprint& fp, size_t bytes, uint32_t idx, const char** r) {
    uint32_t flag = static_cast<uint32_t>(f->step + 1);
    uint64_t* lines = f->slotLL();
    constexpr uint32_t kHdr = FifoGeometry::kLLHeaderLines;
    char* buf = p_.staging(0, kHdr * 4 + bytes + 4);
    uint32_t* words = reinterpret_cast<uint32_t*>(buf);
    CHORUS_EXEC_CHECK(p_.waitLines(f, lines, kHdr, flag, words));
    SlotHeader h = *reinterpret_cast<const SlotHeader*>(buf);
    CHORUS_EXEC_CHECK(checkOrdinal(f, h));
    CHORUS_EXEC_CHECK(checkHeader(f, fp, h, bytes, idx));
    CHORUS_EXEC_CHECK(p_.waitLines(f, lines + kHdr, (bytes + 3) / 4, flag, words + kHdr));
    *r = buf + kHdr * 4;
    return ncclSuccess;
  }

  CHORUS_HOST_DEVICE void sendLL(Fifo* f, const Fingerprint& fp, const char* payload, size_t bytes) {
    p_.sendLL(f, header(fp, bytes, slotOrdinal(f->step)), payload, bytes);  // advances f->step: the flags signal
  }

  Platform& p_;
  Fingerprint fp_;
  bool reducing_;
  bool ll_;
  size_t sliceBytes_;
  bool describe_;
};

}  // namespace chorus
