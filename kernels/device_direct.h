// Direct collectives for a communicator whose ranks are threads of one process on one GPU: no FIFO, every rank
// reads its peers' input buffers and writes their outputs (the launch gate hands out the pointers). Each rank
// takes a disjoint share of the work, so every input byte is read and every output byte written about once
// (docs/device_path.md, "The arithmetic"):
//   allreduce       rank r reduces chunk r of every input, then writes the result into every output (two-shot)
//   reduce          rank r reduces chunk r of every input into the root's output
//   reduce-scatter  rank r reduces block r of every input into its output
//   allgather       rank r writes its input into block r of every output
//   broadcast       rank r copies chunk r of the root's input into every output
//   alltoall        rank r gathers block r of every input into its output
//   gather/scatter  rank r writes its input into block r of the root's output / reads block r of the root's input
// Work goes in tiles of kDirectTileBytes, each tile read once and written to every destination while it is still
// in cache. Each block takes its part of the rank's share; the ranks' same blocks meet twice on counters in device
// memory: before reading (every rank's kernel has started, so its stream's earlier work on its buffers is done) and
// after writing (nobody leaves, and lets its stream reuse its buffers, while a peer still reads or writes them).
// The counters only grow: each launch meets at the next value, which also holds when a captured graph replays.
#pragma once

#include "kernels/device_platform.h"
#include "kernels/device_work.h"

namespace chorus {

/// Bytes of one tile of a direct launch (per block): small enough to stay in L2 while it is written to every
/// destination.
constexpr size_t kDirectTileBytes = 65536;

/// Element i of n parts of [0, total): where part i starts.
CHORUS_HOST_DEVICE inline size_t directPart(size_t total, int i, int n) {
  return total * static_cast<size_t>(i) / static_cast<size_t>(n);
}

/// Block `block`'s part of rank w.rank's share of a direct collective (one of nb = w.nChannels blocks), with every
/// rank's input and output at in[q] and out[q]. The caller has met the peers first and meets them again after.
CHORUS_HOST_DEVICE inline ncclResult_t directMoves(DevicePlatform& p, const DevWork& w, int block,
                                                   const char* const* in, char* const* out) {
  const int n = w.nDirect, r = w.rank, nb = w.nChannels, root = w.directRoot;
  const size_t count = w.inTotal, es = w.esize;
  const auto coll = static_cast<Coll>(w.directColl);
  // This rank's share: a chunk of the buffer (split among ranks), or the whole count (each rank has its own block).
  const bool byChunk = coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kBroadcast;
  const size_t c0 = byChunk ? directPart(count, r, n) : 0, c1 = byChunk ? directPart(count, r + 1, n) : count;
  const size_t s = c0 + directPart(c1 - c0, block, nb), e = c0 + directPart(c1 - c0, block + 1, nb);
  const size_t tile = kDirectTileBytes / es > 0 ? kDirectTileBytes / es : 1;
  const uint32_t pre = w.reducing ? kExecPreLocal : 0;
  const size_t blk = count * es;  // bytes of one rank's block (allgather, reduce-scatter, alltoall, gather, scatter)
  const bool reducing = coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kReduceScatter;
  // A tile is n moves (allreduce: 2n - 1), each a copy or a reduction into dst. One call site of each keeps the
  // kernel small: the moves are worked out here rather than unrolled per collective.
  const int moves = coll == Coll::kAllReduce ? 2 * n - 1 : (coll == Coll::kGather || coll == Coll::kScatter) ? 1 : n;
  for (size_t x = s; x < e; x += tile) {
    const size_t m = (e - x < tile ? e - x : tile), xb = x * es;
    for (int k = 0; k < moves; k++) {
      const char* src = nullptr;
      char* dst = nullptr;
      bool reduce = false;
      uint32_t flags = 0;
      if (reducing && k < n) {
        // Reduction: the first term is the one whose input may be the accumulator itself (in place).
        const int first = coll == Coll::kReduce ? root : r, q = (first + k) % n;
        dst = (coll == Coll::kReduce ? out[root] : out[r]) + xb;
        src = in[q] + (coll == Coll::kReduceScatter ? static_cast<size_t>(r) * blk : 0) + xb;
        reduce = k > 0;
        flags = pre | (k == n - 1 ? kExecPostOp : 0);
      } else if (coll == Coll::kAllReduce) {  // the result, into the other ranks' outputs
        src = out[r] + xb;
        dst = out[(r + k - n + 1) % n] + xb;
      } else if (coll == Coll::kAllGather) {
        src = in[r] + xb;
        dst = out[(r + k) % n] + static_cast<size_t>(r) * blk + xb;
      } else if (coll == Coll::kBroadcast) {
        src = in[root] + xb;
        dst = out[(r + k) % n] + xb;
      } else if (coll == Coll::kAllToAll) {
        const int q = (r + k) % n;
        src = in[q] + static_cast<size_t>(r) * blk + xb;
        dst = out[r] + static_cast<size_t>(q) * blk + xb;
      } else if (coll == Coll::kGather) {
        src = in[r] + xb;
        dst = out[root] + static_cast<size_t>(r) * blk + xb;
      } else if (coll == Coll::kScatter) {
        src = in[root] + static_cast<size_t>(r) * blk + xb;
        dst = out[r] + xb;
      } else {
        return p.internalError("direct launch of an unknown collective");
      }
      if (reduce) {
        p.reduce(dst, dst, src, m, flags);
      } else if (dst != src || flags != 0) {
        p.copy(dst, src, m, flags);
      }
    }
  }
  return ncclSuccess;
}

/// Runs block `block` of a direct launch of thread ranks: the ranks' same blocks meet on counters in device memory
/// before and after the moves.
CHORUS_HOST_DEVICE inline ncclResult_t runDirect(DevicePlatform& p, const DevWork& w, int block) {
  const int n = w.nDirect, r = w.rank;
  uint64_t* arrive = w.directSync + (static_cast<size_t>(r) * kDevMaxBlocks + block) * kDirectSyncStride;
  uint64_t* depart =
      w.directSync + (static_cast<size_t>(kDevMaxDirect + r) * kDevMaxBlocks + block) * kDirectSyncStride;
  const size_t stride = static_cast<size_t>(kDevMaxBlocks) * kDirectSyncStride;  // from one rank's to the next's
  const uint64_t epoch = loadRelaxed(arrive) + 1;
  ncclResult_t res = p.meet(arrive, w.directSync + static_cast<size_t>(block) * kDirectSyncStride, stride, n, epoch, 0);
  if (res == ncclSuccess) res = directMoves(p, w, block, w.directIn, w.directOut);
  if (res != ncclSuccess) return res;
  return p.meet(depart,
                w.directSync + static_cast<size_t>(kDevMaxDirect) * kDevMaxBlocks * kDirectSyncStride +
                    block * kDirectSyncStride,
                stride, n, epoch, 1);
}

}  // namespace chorus
