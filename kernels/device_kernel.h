// Body of the collective kernel: on the FIFO path block b runs one lane of one channel's steps of a DevWork (its
// tiles, through its FIFOs) with the executor over the device platform. kernels/device_kernel.cu wraps it in a
// __global__ function for CUDA and HIP; g++ compiles it for the host emulation the CPU tests use (a block of one
// thread).
#pragma once

#include "kernels/arch.h"
#include "kernels/device_direct.h"
#include "kernels/device_ipc.h"
#include "kernels/device_platform.h"
#include "kernels/device_window.h"
#include "kernels/device_work.h"
#include "kernels/executor.h"

namespace chorus {

/// Threads per block of the collective kernel.
constexpr int kDevThreads = 256;

/// Runs block `block` of `w` on thread tid of nt (every thread of the block calls it).
CHORUS_HOST_DEVICE inline void runDevBlock(const DevWork& w, int block, DevShared& sh, int tid, int nt) {
  DevicePlatform p(w, block, sh, tid, nt);
  BlockMap map;
  map.in = w.in;
  map.out = w.out;
  map.esize = w.esize;
  map.inTotal = w.inTotal;
  map.outTotal = w.outTotal;
  map.blockElems = w.blockElems;
  // FIFO path: the block is lane `lane` of channel `ch` (kernels/device_work.h, DevWork::lanes).
  const int ch = blockChannel(w, block), lane = blockLane(w, block);
  map.chanStart = static_cast<size_t>(ch) * w.chanElems;
  map.chanEnd = map.chanStart + w.chanElems < w.blockElems ? map.chanStart + w.chanElems : w.blockElems;
  map.tileElems = w.tileElems;
  map.blockOrder = ch < kDevMaxChannels ? w.chanOrder[ch] : nullptr;
  if (w.p2p) {
    map.p2p = true;
    map.sendPtrs = w.sendPtrs;
    map.sendCounts = w.sendCounts;
    map.recvPtrs = w.recvPtrs;
    map.recvCounts = w.recvCounts;
    map.sendFps = w.sendFps;
    map.recvFps = w.recvFps;
  }
  ncclResult_t res = ncclSuccess;
  if (w.direct == kDevDirectThreads) {
    p.finish(runDirect(p, w, block));
    return;
  }
  if (w.direct == kDevDirectIpc) {
    p.finish(runIpc(p, w, block));
    return;
  }
  if (w.direct == kDevDirectWindows) {
    p.finish(runWindows(p, w, block));
    return;
  }
  if (w.p2p || map.chanStart < map.chanEnd) {
    Executor<DevicePlatform> exec(p, w.fp, w.reducing != 0, w.ll != 0, w.sliceBytes, false);
    const StepRun* runs = w.runs + w.chanFirst[ch];
    size_t nRuns = static_cast<size_t>(w.chanFirst[ch + 1] - w.chanFirst[ch]);
    // The lane's tiles are lane, lane + lanes, ...: the schedule's tile order (algo/schedule.h) runs over those.
    const uint64_t stride = static_cast<uint64_t>(workLanes(w));
    const uint64_t mine = w.nTiles > static_cast<uint64_t>(lane) ? (w.nTiles - lane + stride - 1) / stride : 0;
    const TileOrder order(mine, w.chanSteps[ch], w.chanLagFrom[ch], w.chanLag[ch]);
    res = exec.runOrder(runs, nRuns, order, ch, map, [lane, stride](uint64_t j) {
      return static_cast<size_t>(static_cast<uint64_t>(lane) + j * stride);
    });
  }
  p.finish(res);
}

/// Launches the collective kernel (GPU builds only); returns the runtime's error code (0 on success).
int launchCollKernel(const DevWork& work, int threads, void* stream);
/// Launches the copy kernel (GPU builds only): dst = src over `blocks` blocks of `threads` threads; returns the
/// runtime's error code.
int launchCopyKernel(void* dst, const void* src, size_t bytes, int blocks, int threads, void* stream);
/// Blocks of `threads` threads of the collective kernel one multiprocessor runs at once (GPU builds only); 0 when
/// the runtime cannot say.
int collKernelBlocksPerSM(int threads);

}  // namespace chorus
