// Direct allreduce for a communicator whose ranks are threads of one process on one GPU: no FIFO, every rank reads
// its peers' input buffers and writes their outputs. Rank r reduces chunk r of every input into its own output and
// writes the result into every other output, so each input byte is read once and each output byte written once
// (docs/device_path.md, "The arithmetic": 2n S bytes of HBM traffic per call, against (7n-5) S for the ring through
// FIFOs). Each block takes its part of the chunk; the ranks' same blocks meet twice on counters in device memory:
// before reading (every rank's kernel has started, so its stream's earlier work on its buffers is done) and after
// writing (nobody leaves, and lets its stream reuse its buffers, while a peer still reads or writes them). The
// counters only grow: each launch meets at the next value, which also holds when a captured graph replays.
#pragma once

#include "kernels/device_platform.h"
#include "kernels/device_work.h"

namespace chorus {

CHORUS_HOST_DEVICE inline ncclResult_t runDirectAllReduce(DevicePlatform& p, const DevWork& w, int block) {
  const int n = w.nDirect, r = w.rank, nb = w.nChannels;
  const size_t total = w.inTotal, es = w.esize;
  // Chunk r of the buffer, and this block's part of it.
  size_t c0 = total * static_cast<size_t>(r) / n, c1 = total * static_cast<size_t>(r + 1) / n;
  size_t s = c0 + (c1 - c0) * static_cast<size_t>(block) / nb, e = c0 + (c1 - c0) * static_cast<size_t>(block + 1) / nb;
  uint64_t* arrive =
      w.directSync + (static_cast<size_t>(0 * kDevMaxDirect + r) * kDevMaxChannels + block) * kDirectSyncStride;
  uint64_t* depart =
      w.directSync + (static_cast<size_t>(1 * kDevMaxDirect + r) * kDevMaxChannels + block) * kDirectSyncStride;
  const size_t stride = static_cast<size_t>(kDevMaxChannels) * kDirectSyncStride;  // from one rank's to the next's
  const uint64_t epoch = loadRelaxed(arrive) + 1;
  ncclResult_t res = p.meet(arrive, w.directSync + static_cast<size_t>(block) * kDirectSyncStride, stride, n, epoch, 0);
  if (res != ncclSuccess) return res;
  if (e > s) {
    char* acc = w.directOut[r] + s * es;
    const uint32_t pre = w.reducing ? kExecPreLocal : 0;
    // Own input first: in place, the accumulator is that very memory.
    p.copy(acc, w.directIn[r] + s * es, e - s, pre);
    for (int k = 1; k < n; k++) {
      int q = (r + k) % n;
      p.reduce(acc, acc, w.directIn[q] + s * es, e - s, pre | (k == n - 1 ? kExecPostOp : 0));
    }
    for (int k = 1; k < n; k++) {
      int q = (r + k) % n;
      p.copy(w.directOut[q] + s * es, acc, e - s, 0);
    }
  }
  return p.meet(depart,
                w.directSync + (static_cast<size_t>(kDevMaxDirect) * kDevMaxChannels + block) * kDirectSyncStride,
                stride, n, epoch, 1);
}

}  // namespace chorus
