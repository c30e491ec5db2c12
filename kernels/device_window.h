// Collectives on registered windows (ncclCommWindowRegister) between processes of one host: every rank's buffers
// are mapped into every other rank's process at registration (src/engine/windows.cc), so the ranks run the direct
// design of kernels/device_direct.h on the users' own buffers, with no FIFO and no inbox copy. Each rank takes a
// disjoint share: an allreduce is two-shot on the peers' buffers (rank r reduces chunk r of every input and writes
// it into every output), an allgather pushes, a reduce-scatter and an alltoall pull; every input byte is read and
// every output byte written about once (docs/device_path.md, "The arithmetic").
//
// The ranks' same blocks meet twice on the inboxes' flag lines (kernels/device_ipc.h), whose watchdog, poison and
// mismatch checks they share:
//   before the moves: every peer's kernel has started, so its stream's earlier work on its buffers is done; the
//                     flag also carries the peer's call, the ids of the windows its buffers are in and their offsets
//                     there (windows need not sit at the same offset on every rank: NCCL_WIN_DEFAULT);
//   after the moves:  no rank ends, and lets its stream reuse its buffers, while a peer still reads or writes them.
// A peer whose call is not on windows, or whose buffer is in another window, is refused by both kernels, naming it.
#pragma once

#include "kernels/device_direct.h"
#include "kernels/device_ipc.h"

namespace chorus {

/// Whether the collective of a window launch reads its peers' inputs / writes their outputs (what must be in
/// windows on every rank). The host decides with the same rule (DeviceEngine::windowsFor).
CHORUS_HOST_DEVICE inline bool windowReadsInputs(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kAllToAll;
}
CHORUS_HOST_DEVICE inline bool windowWritesOutputs(Coll c) { return c == Coll::kAllReduce || c == Coll::kAllGather; }

/// Runs block `block` of a window launch.
CHORUS_HOST_DEVICE inline ncclResult_t runWindows(DevicePlatform& p, const DevWork& w, int block) {
  const auto coll = static_cast<Coll>(w.directColl);
  const uint64_t epoch = loadRelaxed(w.ipcEpochs + static_cast<size_t>(block) * kDirectSyncStride) + 1;
  const int half = static_cast<int>(epoch & 1);
  p.ipcSignal(ipcFlagOffset(half, 0, block), epoch);
  ncclResult_t res = p.ipcWait(ipcFlagOffset(half, 0, block), epoch, 0);
  if (res == ncclSuccess)
    res = p.ipcWindowPeers(ipcFlagOffset(half, 0, block), windowReadsInputs(coll), windowWritesOutputs(coll));
  if (res == ncclSuccess) res = directMoves(p, w, block, p.windowIn(), p.windowOut());
  if (res == ncclSuccess) {
    p.ipcSignal(ipcFlagOffset(half, 1, block), epoch);
    res = p.ipcWait(ipcFlagOffset(half, 1, block), epoch, 1);
  }
  if (res != ncclSuccess) {
    p.ipcPoison();  // the peers waiting for this rank's flags stop too, naming the culprit
    return res;
  }
  p.ipcDone(w.ipcEpochs, w.nChannels, epoch);
  return ncclSuccess;
}

}  // namespace chorus
