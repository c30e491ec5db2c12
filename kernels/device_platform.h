// The device Platform for kernels/executor.h: every thread of a block calls every method with the same
// arguments. Waits are done by thread 0 (LL lines: by all threads, one line each) and their result is broadcast
// through shared memory; data movement is divided among the threads; counters are published by thread 0 after
// a barrier, with a system-scope fence, so that peers (other GPUs, other processes, the host) see the data first.
//
// No silent hang: every wait polls the communicator's abort word (pinned host memory), the FIFO's poison word
// and a deadline on the device timer. A failure is recorded once in DevStatus (pinned host memory) and poisons
// every FIFO this block uses, so that the peers' kernels stop too and name this rank.
//
// Compiled for the device by nvcc/hipcc (kernels/device_kernel.cu) and for the host by g++, where a block is one
// thread; the CPU tests run the device engine that way (tests/harness/emu_runtime.*).
#pragma once

#include <cstdint>

#include "kernels/arch.h"
#include "kernels/device_work.h"
#include "kernels/executor.h"
#include "kernels/fifo.h"
#include "kernels/reduce_block.h"

namespace chorus {

/// Per-block state in shared memory.
struct DevShared {
  Fifo fifos[kDevMaxBlockFifos];
  int16_t channel[kDevMaxBlockFifos];
  int16_t isSend[kDevMaxBlockFifos];
  int16_t slot[kDevMaxBlockFifos];   ///< index into DevWork::fifos
  int16_t flags[kDevMaxBlockFifos];  ///< DevFifoFlags
  RedOp red;                    ///< the launch's reduction, with a ncclScalarDevice factor loaded
  int32_t nFifos;
  int32_t result;  ///< a wait's result, broadcast from the waiting thread(s)
  int32_t failed;  ///< nonzero once this block failed: reason << 16 | (culprit + 1)
  /// Window launches: every rank's input and output as this rank reaches them (ipcWindowPeers).
  const char* winIn[kDevMaxDirect];
  char* winOut[kDevMaxDirect];
};

/// Device implementation of the executor's Platform policy.
class DevicePlatform {
 public:
  /// Thread 0 loads this block's connection ends (those of its channel and lane, and their step counters) into shared
  /// memory.
  CHORUS_HOST_DEVICE DevicePlatform(const DevWork& w, int block, DevShared& sh, int tid, int nt)
      : w_(w), sh_(sh), block_(block), channel_(blockChannel(w, block)), tid_(tid), nt_(nt) {
    if (tid == 0) {
      sh.red = w.red;
      if (w.scalarDev != nullptr) {  // ncclScalarDevice: the factor as it is when the kernel runs
        // The factor has the element type's width and sits in the low bytes (as makePreMulSum puts it).
        const void* p = w.scalarDev;
        if (w.esize == 8) {
          sh.red.scalar = *static_cast<const volatile uint64_t*>(p);
        } else if (w.esize == 4) {
          sh.red.scalar = *static_cast<const volatile uint32_t*>(p);
        } else if (w.esize == 2) {
          sh.red.scalar = *static_cast<const volatile uint16_t*>(p);
        } else {
          sh.red.scalar = *static_cast<const volatile uint8_t*>(p);
        }
      }
      int n = 0;
      const int lane = blockLane(w, block);
      for (int i = 0; i < w.nFifos && n < kDevMaxBlockFifos; i++) {  // the engine keeps a block's ends in bounds
        const DevFifo& d = w.fifos[i];
        if (d.channel != channel_ || d.lane != lane) continue;
        Fifo& f = sh.fifos[n];
        f.attach(d.base, d.geo, d.data);
        f.step = *d.step;
        f.peer = d.peer;
        f.end = d.isSend ? 0 : 1;
        sh.channel[n] = d.channel;
        sh.isSend[n] = d.isSend;
        sh.flags[n] = d.flags;
        sh.slot[n] = static_cast<int16_t>(i);
        n++;
      }
      sh.nFifos = n;
      sh.result = 0;
      sh.failed = 0;
    }
    blockSync();
  }

  CHORUS_HOST_DEVICE ncclResult_t sendFifo(int ch, int peer, bool ll, Fifo** f, bool* useLL) {
    return find(true, ch, peer, ll, f, useLL);
  }
  CHORUS_HOST_DEVICE ncclResult_t recvFifo(int ch, int peer, bool ll, Fifo** f, bool* useLL) {
    return find(false, ch, peer, ll, f, useLL);
  }

  CHORUS_HOST_DEVICE ncclResult_t waitSendSpace(Fifo* f) {
    uint64_t limit = f->geo.nSlots;
    return waitFor(f, kDevWaitSpace, [f, limit]() { return f->step - loadPoll(&f->ctrl->head) < limit; });
  }
  CHORUS_HOST_DEVICE ncclResult_t waitRecvData(Fifo* f) {
    return waitFor(f, kDevWaitData, [f]() { return loadPoll(&f->ctrl->tail) > f->step; });
  }

  /// LL: thread t waits for lines t, t + nt, ...; a line is ready when its flag half equals `flag`.
  CHORUS_HOST_DEVICE ncclResult_t waitLines(Fifo* f, const uint64_t* lines, size_t n, uint32_t flag, uint32_t* words) {
    int res = 0;
    for (size_t i = tid_; i < n && res == 0; i += nt_) {
      uint64_t v;
      uint32_t iter = 0;
      uint64_t start = 0;
      while (static_cast<uint32_t>((v = loadPoll(&lines[i])) >> 32) != flag) {
        pollPause(iter);
        if ((++iter & 1023) != 0) continue;
        if ((res = check(f, kDevWaitLL, &start)) != 0) break;
        if (peerGone(f)) {  // what the peer wrote before it exited is all there will be
          memoryFence();
          if (static_cast<uint32_t>((v = loadPoll(&lines[i])) >> 32) != flag) res = peerDied(f, kDevWaitLL);
          break;
        }
      }
      words[i] = static_cast<uint32_t>(v);
    }
    if (res != 0) sh_.result = res;  // any failing thread; all write the same kind of value
    return broadcastResult();
  }

  CHORUS_HOST_DEVICE void publishTail(Fifo* f) { publish(f, &f->ctrl->tail); }
  CHORUS_HOST_DEVICE void publishHead(Fifo* f) { publish(f, &f->ctrl->head); }
  CHORUS_HOST_DEVICE void writeHeader(SlotHeader* h, const SlotHeader& v) {
    if (tid_ == 0) *h = v;
  }
  CHORUS_HOST_DEVICE void sendLL(Fifo* f, const SlotHeader& h, const char* payload, size_t bytes) {
    uint64_t flag = static_cast<uint64_t>(static_cast<uint32_t>(f->step + 1)) << 32;
    uint64_t* lines = f->slotLL();
    const uint32_t* hw = reinterpret_cast<const uint32_t*>(&h);
    for (uint32_t i = tid_; i < FifoGeometry::kLLHeaderLines; i += nt_) storeRelaxed(&lines[i], flag | hw[i]);
    uint64_t* d = lines + FifoGeometry::kLLHeaderLines;
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(payload);  // staging: aligned
    size_t nw = bytes / 4;
    for (size_t i = tid_; i < nw; i += nt_) storeRelaxed(&d[i], flag | pw[i]);
    if (tid_ == 0 && bytes % 4) {
      uint32_t w = 0;
      for (size_t b = 0; b < bytes % 4; b++)
        w |= static_cast<uint32_t>(static_cast<uint8_t>(payload[4 * nw + b])) << (8 * b);
      storeRelaxed(&d[nw], flag | w);
    }
    blockSync();
    if (tid_ == 0) f->step++;
    blockSync();
  }

  CHORUS_HOST_DEVICE char* staging(int which, size_t /*bytes: the engine sizes scratchBytes for the largest*/) {
    return w_.scratch + (static_cast<size_t>(block_) * 2 + which) * w_.scratchBytes;
  }
  CHORUS_HOST_DEVICE void copy(char* dst, const char* src, size_t n, uint32_t flags) {
    blockCopy(sh_.red, dst, src, n, flags, tid_, nt_);
    blockSync();
  }
  CHORUS_HOST_DEVICE void reduce(char* dst, const char* recv, const char* local, size_t n, uint32_t flags) {
    blockReduce(sh_.red, dst, recv, local, n, flags, tid_, nt_);
    blockSync();
  }
  CHORUS_HOST_DEVICE bool identityCopy(uint32_t flags) const { return !copyTransforms(sh_.red, flags); }

  CHORUS_HOST_DEVICE ncclResult_t mismatch(Fifo* f, const SlotHeader& got, const Fingerprint& mine, size_t,
                                           uint32_t step) {
    if (tid_ == 0) record(ncclInvalidUsage, PoisonReason::kMismatch, f->peer, kDevWaitData, f, mine.seq, step, &got);
    blockSync();
    return ncclInvalidUsage;
  }
  /// A slot whose header places it elsewhere on the connection (kernels/executor.h, checkOrdinal): recorded with
  /// both places (DevStatus::got[0] the slot's, got[1] this end's).
  CHORUS_HOST_DEVICE ncclResult_t outOfOrder(Fifo* f, uint32_t got, uint32_t want) {
    if (tid_ == 0) {
      const uint64_t words[3] = {got, want, 0};
      record(ncclInternalError, PoisonReason::kError, w_.rank, kDevSlotOrder, f, w_.fp.seq, want, nullptr, -1, words);
    }
    blockSync();
    return ncclInternalError;
  }
  CHORUS_HOST_DEVICE ncclResult_t internalError(const char*) {
    if (tid_ == 0) record(ncclInternalError, PoisonReason::kError, w_.rank, 0, nullptr, w_.fp.seq, 0, nullptr);
    blockSync();
    return ncclInternalError;
  }

  // Single copy is a host-path feature: device slices always go through the FIFO.
  CHORUS_HOST_DEVICE bool canDescribe(Fifo*, size_t) { return false; }
  CHORUS_HOST_DEVICE ncclResult_t fetch(Fifo*, char*, uint64_t, size_t) { return internalError("fetch"); }
  CHORUS_HOST_DEVICE void noteDescribed(Fifo*) {}
  CHORUS_HOST_DEVICE ncclResult_t drainDescribed() { return ncclSuccess; }

  /// Direct launches: once the block's memory accesses are done and visible, thread 0 sets `*mine` to `value` and
  /// waits until every counter at base[k * stride], k < n, has reached it (each rank's same block got as far).
  /// Bounded by the abort word and the deadline like every wait; every thread returns the result. `phase` (0: before
  /// reading, 1: after writing) goes into the failure report.
  CHORUS_HOST_DEVICE ncclResult_t meet(uint64_t* mine, const uint64_t* base, size_t stride, int n, uint64_t value,
                                       uint32_t phase) {
    blockSync();
    if (tid_ == 0) {
      storeRelease(mine, value);
      int res = 0;
      uint64_t start = 0;
      for (int k = 0; k < n && res == 0; k++) {
        uint32_t iter = 0;
        while (loadPoll(base + k * stride) < value) {
          pollPause(iter);
          if ((++iter & 255) != 0) continue;
          if (*w_.abortFlag != 0) {
            res =
                record(ncclRemoteError, PoisonReason::kAborted, k, kDevWaitDirect, nullptr, w_.fp.seq, phase, nullptr);
            break;
          }
          uint64_t now = deviceClock();
          if (start == 0) start = now;
          if (w_.timeoutTicks != 0 && now - start > w_.timeoutTicks) {
            res =
                record(ncclRemoteError, PoisonReason::kTimeout, k, kDevWaitDirect, nullptr, w_.fp.seq, phase, nullptr);
            break;
          }
        }
      }
      memoryFence();  // acquire: the peers' data is read after their counters
      sh_.result = res;
    }
    return broadcastResult();
  }

  /// Inbox launches (kernels/device_ipc.h): once the block's writes are done and visible, thread 0 raises the flag
  /// line at `off` in every peer's inbox to `epoch`, with the call's count, description, sequence number and root,
  /// and (window launches) its buffers' windows and offsets.
  CHORUS_HOST_DEVICE void ipcSignal(size_t off, uint64_t epoch) {
    blockSync();
    if (tid_ == 0) {
      for (int q = 0; q < w_.nDirect; q++) {
        if (q == w_.rank) continue;
        uint64_t* line = reinterpret_cast<uint64_t*>(w_.ipcTo[q] + off);
        storeRelaxed(line + 1, w_.fp.count);
        storeRelaxed(line + 2, w_.fp.desc);
        storeRelaxed(line + 3, w_.fp.seq);
        storeRelaxed(line + 4, static_cast<uint64_t>(static_cast<uint32_t>(w_.fp.root)));
        storeRelaxed(line + 5, w_.winOff[0]);
        storeRelaxed(line + 6, w_.winOff[1]);
        storeRelaxed(line + 7, w_.winIds);
        storeRelease(line, epoch);
      }
    }
    blockSync();
  }

  /// Thread 0 waits until every peer raised the flag line at `off` of its inbox here to `epoch`, and compares the
  /// peer's call with this one (and whether both run on windows). Bounded like every wait; also stops when the
  /// peer's process exited or the peer poisoned its inbox. `phase` goes into the failure report.
  CHORUS_HOST_DEVICE ncclResult_t ipcWait(size_t off, uint64_t epoch, uint32_t phase) {
    blockSync();
    if (tid_ == 0) {
      int res = 0;
      uint64_t start = 0;
      for (int q = 0; q < w_.nDirect && res == 0; q++) {
        if (q == w_.rank) continue;
        const uint64_t* line = reinterpret_cast<const uint64_t*>(w_.ipcFrom[q] + off);
        const uint64_t* poisonWord = &reinterpret_cast<const FifoCtrl*>(w_.ipcFrom[q])->poison;
        uint32_t iter = 0;
        while (loadPoll(line) < epoch) {
          pollPause(iter);
          if ((++iter & 255) != 0) continue;
          uint64_t poison = loadRelaxed(poisonWord);
          if (*w_.abortFlag != 0) {
            res = record(ncclRemoteError, PoisonReason::kAborted, q, kDevWaitIpc, nullptr, w_.fp.seq, phase, nullptr);
          } else if (poison != 0) {
            int culprit;
            PoisonReason reason = poisonReason(poison, &culprit);
            // Reported as kError: the peer stopped, for its own reason, naming culprit.
            res = record(reason == PoisonReason::kMismatch ? ncclInvalidUsage : ncclRemoteError, PoisonReason::kError,
                         culprit, kDevWaitIpc, nullptr, w_.fp.seq, phase, nullptr, q);
          } else if (w_.deadPeers != nullptr && w_.deadPeers[q] != 0) {
            memoryFence();  // what the peer wrote before it exited is all there will be
            if (loadPoll(line) >= epoch) break;
            res = record(ncclRemoteError, PoisonReason::kPeerDied, q, kDevWaitIpc, nullptr, w_.fp.seq, phase, nullptr);
          } else {
            uint64_t now = deviceClock();
            if (start == 0) start = now;
            if (w_.timeoutTicks != 0 && now - start > w_.timeoutTicks)
              res = record(ncclRemoteError, PoisonReason::kTimeout, q, kDevWaitIpc, nullptr, w_.fp.seq, phase, nullptr);
          }
          if (res != 0) break;
        }
        if (res != 0) break;
        memoryFence();  // acquire: the peer's data and call are read after its flag
        SlotHeader got{};
        got.count = loadRelaxed(line + 1);
        got.desc = static_cast<uint32_t>(loadRelaxed(line + 2));
        got.seq = loadRelaxed(line + 3);
        got.root = static_cast<int32_t>(static_cast<uint32_t>(loadRelaxed(line + 4)));
        if (got.count != w_.fp.count || got.desc != w_.fp.desc || got.root != w_.fp.root) {
          res = record(ncclInvalidUsage, PoisonReason::kMismatch, q, kDevWaitIpc, nullptr, w_.fp.seq, phase, &got);
        } else {
          const uint64_t ids = loadRelaxed(line + 7);
          if ((ids != 0) != (w_.winIds != 0)) {
            const uint64_t words[3] = {ids, w_.winIds, 2};
            res = record(ncclInvalidUsage, PoisonReason::kMismatch, q, kDevWaitWindow, nullptr, w_.fp.seq, phase,
                         nullptr, -1, words);
          }
        }
      }
      sh_.result = res;
    }
    return broadcastResult();
  }

  /// Window launches, after ipcWait(off) succeeded: thread 0 works out where every rank's input (`needIn`) and
  /// output (`needOut`) are, as this rank reaches them, into sh_.winIn/winOut: its own are w.in and w.out, a peer's
  /// are its offsets (from its flag line at `off`) in its copy of this rank's windows. A peer whose buffer is in
  /// another window than this rank's is refused, naming it. Every thread returns the result.
  CHORUS_HOST_DEVICE ncclResult_t ipcWindowPeers(size_t off, bool needIn, bool needOut) {
    if (tid_ == 0) {
      int res = 0;
      for (int q = 0; q < w_.nDirect && res == 0; q++) {
        sh_.winIn[q] = q == w_.rank ? w_.in : nullptr;
        sh_.winOut[q] = q == w_.rank ? w_.out : nullptr;
        if (q == w_.rank) continue;
        const uint64_t* line = reinterpret_cast<const uint64_t*>(w_.ipcFrom[q] + off);
        const uint64_t ids = loadRelaxed(line + 7);
        for (int which = 0; which < 2 && res == 0; which++) {
          if (!(which == 0 ? needIn : needOut)) continue;
          const uint32_t theirs = windowId(ids, which);
          if (theirs == 0 || theirs != windowId(w_.winIds, which)) {
            const uint64_t words[3] = {ids, w_.winIds, static_cast<uint64_t>(which)};
            res = record(ncclInvalidUsage, PoisonReason::kMismatch, q, kDevWaitWindow, nullptr, w_.fp.seq, 0, nullptr,
                         -1, words);
          } else if (which == 0) {
            sh_.winIn[q] = w_.directIn[q] + loadRelaxed(line + 5);
          } else {
            sh_.winOut[q] = w_.directOut[q] + loadRelaxed(line + 6);
          }
        }
      }
      sh_.result = res;
    }
    return broadcastResult();
  }
  /// What ipcWindowPeers worked out (the same on every thread after it returns).
  CHORUS_HOST_DEVICE const char* const* windowIn() const { return sh_.winIn; }
  CHORUS_HOST_DEVICE char* const* windowOut() const { return sh_.winOut; }

  /// After a failed inbox launch: thread 0 poisons every peer's inbox from this rank, so that peers waiting for its
  /// flags stop and name the culprit.
  CHORUS_HOST_DEVICE void ipcPoison() {
    blockSync();
    if (tid_ == 0 && sh_.failed != 0) {
      const uint64_t poison = poisonFor(sh_.failed);
      for (int q = 0; q < w_.nDirect; q++) {
        if (q == w_.rank) continue;
        uint64_t* word = &reinterpret_cast<FifoCtrl*>(w_.ipcTo[q])->poison;
        if (loadRelaxed(word) == 0) storeRelease(word, poison);
      }
    }
    blockSync();
  }

  /// End of a successful inbox-family launch run by `nb` blocks: the launch counters (kDevMaxBlocks of them, one
  /// line each from `counters`) move to `epoch`, block b storing those of blocks b, b + nb, ... So every counter
  /// stays equal to the others whatever number of blocks each launch uses, and the next launch, which starts after
  /// this one ends (stream order), reads the same epoch in every block.
  CHORUS_HOST_DEVICE void ipcDone(uint64_t* counters, int nb, uint64_t epoch) {
    blockSync();
    if (tid_ == 0)
      for (int b = block_; b < kDevMaxBlocks; b += nb)
        storeRelaxed(counters + static_cast<size_t>(b) * kDirectSyncStride, epoch);
    blockSync();
  }

  /// End of the block: thread 0 stores the step counters back for the next launch; after a failure it poisons
  /// every FIFO of the block instead, so that peers stop waiting and name the culprit.
  CHORUS_HOST_DEVICE void finish(ncclResult_t res) {
    blockSync();
    if (tid_ == 0) {
      int failed = sh_.failed;
      if (res != ncclSuccess && failed == 0) failed = (static_cast<int>(PoisonReason::kError) << 16) | (w_.rank + 1);
      for (int i = 0; i < sh_.nFifos; i++) {
        const Fifo& f = sh_.fifos[i];
        if (failed != 0) {
          if (loadRelaxed(&f.ctrl->poison) == 0) storeRelease(&f.ctrl->poison, poisonFor(failed));
        } else {
          *w_.fifos[sh_.slot[i]].step = f.step;
        }
      }
      memoryFence();
    }
    blockSync();
  }

 private:
  /// The poison word peers read for sh_.failed's encoding (reason << 16 | culprit + 1): reason << 32 | culprit + 1.
  static CHORUS_HOST_DEVICE uint64_t poisonFor(int failed) {
    return makePoison(static_cast<PoisonReason>(failed >> 16), (failed & 0xffff) - 1);
  }

  CHORUS_HOST_DEVICE ncclResult_t find(bool isSend, int ch, int peer, bool ll, Fifo** f, bool* useLL) {
    for (int i = 0; i < sh_.nFifos; i++) {
      if (sh_.channel[i] == ch && sh_.fifos[i].peer == peer && (sh_.isSend[i] != 0) == isSend) {
        *f = &sh_.fifos[i];
        *useLL = ll && !(sh_.flags[i] & kDevFifoStaged);  // both ends agree: both see the peer as remote
        return ncclSuccess;
      }
    }
    return internalError("no connection for this step");
  }

  // Thread 0 polls; everyone learns the result.
  template <class Ready>
  CHORUS_HOST_DEVICE ncclResult_t waitFor(Fifo* f, uint32_t what, Ready ready) {
    if (tid_ == 0) {
      int res = 0;
      uint32_t iter = 0;
      uint64_t start = 0;
      while (!ready()) {
        pollPause(iter);
        if ((++iter & 255) != 0) continue;
        if ((res = check(f, what, &start)) != 0) break;
        if (peerGone(f)) {  // what the peer wrote before it exited is all there will be
          memoryFence();
          if (!ready()) res = peerDied(f, what);
          break;
        }
      }
      memoryFence();  // acquire: the data behind the counter is read after it
      sh_.result = res;
    }
    return broadcastResult();
  }

  CHORUS_HOST_DEVICE ncclResult_t broadcastResult() {
    blockSync();
    int res = sh_.result;
    blockSync();
    if (res != 0 && tid_ == 0) sh_.result = 0;
    return static_cast<ncclResult_t>(res);
  }

  // Between polls: abort, poison from a peer, deadline. Returns 0 or the error (already recorded).
  CHORUS_HOST_DEVICE int check(Fifo* f, uint32_t what, uint64_t* start) {
    if (*w_.abortFlag != 0)
      return record(ncclRemoteError, PoisonReason::kAborted, w_.rank, what, f, w_.fp.seq,
                    static_cast<uint32_t>(f->step), nullptr);
    uint64_t poison = loadRelaxed(&f->ctrl->poison);
    if (poison != 0) {
      int culprit;
      PoisonReason reason = poisonReason(poison, &culprit);
      return record(reason == PoisonReason::kMismatch ? ncclInvalidUsage : ncclRemoteError, reason, culprit, what, f,
                    w_.fp.seq, static_cast<uint32_t>(f->step), nullptr);
    }
    uint64_t now = deviceClock();
    if (*start == 0) {
      *start = now;
    } else if (w_.timeoutTicks != 0 && now - *start > w_.timeoutTicks) {
      return record(ncclRemoteError, PoisonReason::kTimeout, f->peer, what, f, w_.fp.seq,
                    static_cast<uint32_t>(f->step), nullptr);
    }
    return 0;
  }

  // Whether the host saw f's peer process exit (kernels cannot see that themselves: device_engine.cc's watchdog).
  CHORUS_HOST_DEVICE bool peerGone(const Fifo* f) const {
    return w_.deadPeers != nullptr && f->peer >= 0 && w_.deadPeers[f->peer] != 0;
  }
  CHORUS_HOST_DEVICE int peerDied(const Fifo* f, uint32_t what) {
    return record(ncclRemoteError, PoisonReason::kPeerDied, f->peer, what, f, w_.fp.seq, static_cast<uint32_t>(f->step),
                  nullptr);
  }

  // Records the first failure of the launch in DevStatus and marks the block failed. `step` is the FIFO slot
  // (waits) or the schedule step (a mismatch, whose offending header is `got`). `waitedFor`: the peer waited on
  // when that is not the culprit and there is no FIFO to name it (an inbox poisoned by a third rank's failure).
  // `words`: DevStatus::got as it is, for a failure that is not about a header (kDevWaitWindow).
  CHORUS_HOST_DEVICE int record(ncclResult_t code, PoisonReason reason, int culprit, uint32_t what, const Fifo* f,
                                uint64_t seq, uint32_t step, const SlotHeader* got, int waitedFor = -1,
                                const uint64_t* words = nullptr) {
    DevStatus* st = w_.status;
    if (atomicCas32(&st->code, 0, static_cast<uint32_t>(code)) == 0) {
      st->reason = static_cast<uint32_t>(reason);
      st->channel = channel_;
      st->peer = f ? f->peer : waitedFor >= 0 ? waitedFor : culprit;
      st->step = step;
      st->what = what;
      st->seq = seq;
      st->launch = w_.direct;
      if (words) {
        for (int i = 0; i < 3; i++) st->got[i] = words[i];
      } else if (got) {
        st->got[0] = got->seq;
        st->got[1] = got->count;
        st->got[2] = got->desc | (static_cast<uint64_t>(static_cast<uint32_t>(got->root)) << 32);
      } else {
        st->got[0] = static_cast<uint64_t>(culprit + 1);
      }
      memoryFence();
    }
    sh_.failed = (static_cast<int>(reason) << 16) | (culprit + 1);
    return static_cast<int>(code);
  }

  // Thread 0 advances f's step and releases it in `word` (tail or head) once the block's accesses are done.
  CHORUS_HOST_DEVICE void publish(Fifo* f, uint64_t* word) {
    blockSync();
    if (tid_ == 0) {
      f->step++;
      storeRelease(word, f->step);
    }
    blockSync();
  }

  const DevWork& w_;
  DevShared& sh_;
  int block_, channel_, tid_, nt_;
};

}  // namespace chorus
