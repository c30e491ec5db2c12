// Allreduce for ranks that are processes of one host (each its own GPU, or several under MPS on one), through
// inboxes: for every ordered pair (q, r) an inbox in r's GPU memory that q writes through its IPC mapping and r
// reads locally (DeviceConnections, kDevIpcChannel). No FIFO slots, no schedule steps: each block pushes its share
// of the input into the peers' inboxes with plain stores, raises a flag in each, and waits for the peers' flags
// in its own memory (remote writes are posted; polling stays local).
//
//   one-shot (small): every rank pushes its whole share to every peer, then reduces all n terms itself.
//                     One flag exchange; each rank writes (n-1) S over the links and reads n S locally.
//   two-shot (mid):   chunk q of the share goes to rank q only; rank q reduces chunk q and pushes the result to
//                     every peer; everyone copies the chunks out. Two flag exchanges; (n-1)/n S each way twice.
//
// Every rank reduces in rank order, so one-shot results are bitwise the same on every rank (as a ring's are).
//
// An inbox holds two halves of data, used by alternate launches, a poison word (a failed rank poisons the inboxes
// it writes, so that the peers waiting for it stop), and a flag line per (half, phase, block) with
// the launch's count and description (a mismatched call is refused naming the peer). Reuse is safe without a
// departure barrier: a rank that starts launch k+2 has seen every peer's flags of launch k+1 (in some block), so
// every peer has started launch k+1 and, its launches running in call order, finished launch k, the last to use this
// half. Flags and counters only grow, and each block's launch counter lives in device memory, so graph replays
// continue where the last launch left off. Launches on registered windows (kernels/device_window.h) share these
// flag lines and counters and count as launches here; they may use more blocks, and every launch moves all the
// counters (ipcDone), so the counters stay equal.
#pragma once

#include "kernels/device_direct.h"
#include "kernels/device_platform.h"
#include "kernels/device_work.h"

namespace chorus {

/// Bytes of one flag line of an inbox.
constexpr size_t kIpcLineBytes = 64;
/// Header of an inbox: a FifoCtrl (its poison word; a pinned host inbox also records its ends there, as a FIFO
/// does), then one flag line per (half, phase, block); data starts after it.
constexpr size_t kIpcHeaderBytes = ((sizeof(FifoCtrl) + kIpcLineBytes * 4 * kDevMaxBlocks) + 4095) / 4096 * 4096;

/// Offset of the flag line of (half, phase, block) in an inbox.
CHORUS_HOST_DEVICE inline size_t ipcFlagOffset(int half, int phase, int block) {
  return sizeof(FifoCtrl) + kIpcLineBytes * static_cast<size_t>((half * 2 + phase) * kDevMaxBlocks + block);
}
/// Bytes of an inbox whose halves hold `halfBytes` each.
CHORUS_HOST_DEVICE inline size_t ipcInboxBytes(size_t halfBytes) { return kIpcHeaderBytes + 2 * halfBytes; }

namespace detail {

/// out[x0, x1) = post(pre(t_0) op pre(t_1) op ... op pre(t_{n-1})), in rank order, where t_r is this rank's `own`
/// and t_q (q != r) is in q's inbox. The accumulator is out (rank 0) or the inbox of rank 0 (whose term is
/// consumed first): never a term still to be read, even when out is `own` (in place).
CHORUS_HOST_DEVICE inline void ipcReduceRange(DevicePlatform& p, const DevWork& w, size_t data, const char* own,
                                              char* out, size_t x0, size_t x1) {
  const int n = w.nDirect, r = w.rank;
  if (x1 <= x0) return;
  const size_t m = x1 - x0, off = x0 * w.esize;
  const uint32_t pre = kExecPreLocal;
  out += off;
  auto term = [&](int q) -> const char* { return q == r ? own + off : w.ipcFrom[q] + data + off; };
  char* acc = r == 0 ? out : w.ipcFrom[0] + data + off;
  if (term(0) != acc || !p.identityCopy(pre)) p.copy(acc, term(0), m, pre);
  for (int q = 1; q < n; q++) p.reduce(q == n - 1 ? out : acc, acc, term(q), m, pre | (q == n - 1 ? kExecPostOp : 0));
}

}  // namespace detail

/// Runs block `block` of an inbox launch. Every collective pushes, raises its flags in every peer's inbox (empty
/// ones included: a rank that runs ahead must have seen every peer finish the launch before last), waits for every
/// peer's, and collects:
///   allreduce       one-shot: push the share to every peer; reduce all n terms. Two-shot: see the file comment.
///   reduce          push the share to the root; the root reduces all n terms
///   broadcast       the root pushes its share to every peer; they copy it out
///   allgather       push the share of this rank's block to every peer; copy every peer's into its output block
///   reduce-scatter  push the share of block q to rank q; reduce block r's n terms
///   alltoall        push the share of block q to rank q; copy each peer's into its output block
CHORUS_HOST_DEVICE inline ncclResult_t runIpc(DevicePlatform& p, const DevWork& w, int block) {
  const int n = w.nDirect, r = w.rank, nb = w.nChannels, root = w.directRoot;
  const size_t count = w.inTotal, es = w.esize, blk = count * es;
  const auto coll = static_cast<Coll>(w.directColl);
  uint64_t* counter = w.ipcEpochs + static_cast<size_t>(block) * kDirectSyncStride;
  const uint64_t epoch = loadRelaxed(counter) + 1;
  const int half = static_cast<int>(epoch & 1);
  const size_t data = kIpcHeaderBytes + static_cast<size_t>(half) * w.ipcHalfBytes;
  // This block's share of the count, and (two-shot) chunk q of it, which rank q reduces.
  const size_t s = directPart(count, block, nb), e = directPart(count, block + 1, nb);
  auto chunk = [&](int q, size_t* c0, size_t* c1) {
    *c0 = s + directPart(e - s, q, n);
    *c1 = s + directPart(e - s, q + 1, n);
  };
  const bool perPeerBlock = coll == Coll::kReduceScatter || coll == Coll::kAllToAll;
  size_t c0 = s, c1 = e;
  for (int k = 1; k < n; k++) {
    const int q = (r + k) % n;  // peers in a rotated order, so that the ranks do not all write to one at once
    if ((coll == Coll::kBroadcast && r != root) || (coll == Coll::kReduce && q != root)) continue;
    if (w.ipcTwoShot) chunk(q, &c0, &c1);
    const char* src = w.in + (perPeerBlock ? static_cast<size_t>(q) * blk : 0) + c0 * es;
    if (c1 > c0) p.copy(w.ipcTo[q] + data + c0 * es, src, c1 - c0, 0);
  }
  p.ipcSignal(ipcFlagOffset(half, 0, block), epoch);
  ncclResult_t res = p.ipcWait(ipcFlagOffset(half, 0, block), epoch, 0);
  if (res == ncclSuccess) {
    const size_t sb = s * es;
    if (coll == Coll::kAllReduce && !w.ipcTwoShot) {
      detail::ipcReduceRange(p, w, data, w.in, w.out, s, e);
    } else if (coll == Coll::kReduce) {
      if (r == root) detail::ipcReduceRange(p, w, data, w.in, w.out, s, e);
    } else if (coll == Coll::kReduceScatter) {
      detail::ipcReduceRange(p, w, data, w.in + static_cast<size_t>(r) * blk, w.out, s, e);
    } else if (coll == Coll::kBroadcast) {
      const char* src = r == root ? w.in + sb : w.ipcFrom[root] + data + sb;
      if (e > s && src != w.out + sb) p.copy(w.out + sb, src, e - s, 0);
    } else if (coll == Coll::kAllGather || coll == Coll::kAllToAll) {
      for (int q = 0; q < n && e > s; q++) {
        char* dst = w.out + static_cast<size_t>(q) * blk + sb;
        const char* src =
            q != r ? w.ipcFrom[q] + data + sb : w.in + (perPeerBlock ? static_cast<size_t>(r) * blk : 0) + sb;
        if (dst != src) p.copy(dst, src, e - s, 0);
      }
    }
  }
  if (res == ncclSuccess && coll == Coll::kAllReduce && w.ipcTwoShot) {
    chunk(r, &c0, &c1);
    detail::ipcReduceRange(p, w, data, w.in, w.out, c0, c1);
    for (int k = 1; k < n; k++) {
      const int q = (r + k) % n;
      if (c1 > c0) p.copy(w.ipcTo[q] + data + c0 * es, w.out + c0 * es, c1 - c0, 0);
    }
    p.ipcSignal(ipcFlagOffset(half, 1, block), epoch);
    res = p.ipcWait(ipcFlagOffset(half, 1, block), epoch, 1);
    for (int k = 1; k < n && res == ncclSuccess; k++) {
      const int q = (r + k) % n;
      chunk(q, &c0, &c1);
      if (c1 > c0) p.copy(w.out + c0 * es, w.ipcFrom[q] + data + c0 * es, c1 - c0, 0);
    }
  }
  if (res != ncclSuccess) {
    p.ipcPoison();  // the peers waiting for this rank's flags stop too, naming the culprit
    return res;
  }
  p.ipcDone(w.ipcEpochs, nb, epoch);
  return ncclSuccess;
}

}  // namespace chorus
