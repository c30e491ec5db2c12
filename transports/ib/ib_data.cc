// IB net data path: memory registration, isend/irecv through the receive FIFO, and completion (ib_comm.h has the
// protocol).
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "core/checks.h"
#include "core/debug.h"
#include "transports/ib/ib_comm.h"

namespace chorus {

namespace {

/// Messages are split over queue pairs in multiples of this many bytes (so shares stay cache-line aligned).
constexpr size_t kIbSplitAlign = 128;
/// How often a request that is still pending looks at the setup socket for the peer's end.
constexpr auto kPeerCheckPeriod = std::chrono::milliseconds(10);
/// How long a request may stay pending after the peer's socket ended before it fails: completions the peer's HCA
/// had already produced (the last data, the last acknowledgement) are still polled during this time. Well below the
/// proxy's kSuspectS: when the peer's own net failed first, its proxy names this rank after kSuspectS, and by then
/// this rank's net has said why its side ended.
constexpr auto kPeerGoneGrace = std::chrono::milliseconds(250);

const char* wrKindText(IbWrKind k) {
  switch (k) {
    case IbWrKind::kData:
      return "data write";
    case IbWrKind::kRecv:
      return "receive";
    case IbWrKind::kFifo:
      return "receive descriptor write";
    case IbWrKind::kFlush:
      return "flush read";
  }
  return "work request";
}

IbRequest* allocRequest(IbComm* c) {
  for (IbRequest& r : c->reqs) {
    if (!r.used) {
      r = IbRequest();
      r.comm = c;
      r.used = true;
      return &r;
    }
  }
  return nullptr;
}

uint32_t slotOf(const IbComm* c, const IbRequest* r) { return static_cast<uint32_t>(r - c->reqs); }

/// The queue pairs message `seq` (counting from 0, the same on both sides) uses: c->qps[first, first + count), each
/// with an equal share of it.
struct QpSpan {
  size_t first = 0;
  size_t count = 1;
};
QpSpan qpSpan(const IbComm* c, uint32_t seq) {
  const size_t nqps = c->qps.size();
  if (c->splitData) return QpSpan{0, nqps};
  // As NCCL: a message is split over one queue pair for each port of the side with more ports (one, unless a device
  // is merged), consecutive pairs, so on every port; message n takes the n-th such group, in turn. nqps is a
  // multiple of the group's size, so a group never wraps.
  const size_t group = std::max(c->ports.size(), static_cast<size_t>(c->remotePorts));
  return QpSpan{static_cast<size_t>(static_cast<uint64_t>(seq) * group % nqps), group};
}

// Records the comm's first error, with the thread's last error as its text (set just before by the verbs call or the
// caller, whose WARN it is), and returns it.
ncclResult_t failComm(IbComm* c, ncclResult_t res) {
  if (c->failed == ncclSuccess) {
    c->failed = res;
    c->failedWhy = threadLastError();
  }
  return c->failed;
}

// What every call on a failed comm returns: its first error, whose text becomes the thread's last error again.
ncclResult_t failedResult(IbComm* c) {
  setThreadLastError(c->failedWhy.c_str());
  return c->failed;
}

// Fails the comm when a fatal asynchronous event concerns it (IbNet::asyncFatal); returns whether it failed.
bool failedAsync(IbComm* c) {
  std::string why;
  if (!c->net->asyncFatal(c, &why)) return false;
  setLastError(nullptr, "NET/IB: %s: %s", ibCommText(c).c_str(), why.c_str());
  failComm(c, ncclSystemError);
  return true;
}

// Applies one completion to the request it belongs to. An error completion fails the comm and touches no request:
// a request whose completions had all arrived stays done (a receive whose data landed before its sender closed, where
// the next receive's descriptor write then failed), the others can no longer complete. Only the first error is
// reported; the work requests a queue pair in error flushes after it are not news.
void onCompletion(IbComm* c, const IbWc& wc) {
  IbWrKind kind = ibWrKind(wc.wrId);
  uint32_t slot = ibWrSlot(wc.wrId);
  if (wc.status != kIbWcSuccess) {
    if (c->failed != ncclSuccess) return;
    setLastError(nullptr, "NET/IB: %s: %s on queue pair %u failed: %s (status %d, vendor error 0x%x)",
                 ibCommText(c).c_str(), wrKindText(kind), wc.qpn, c->net->verbs().statusText(wc.status), wc.status,
                 wc.vendorErr);
    failComm(c, ncclSystemError);
    return;
  }
  if (kind == IbWrKind::kFifo) return;  // the descriptor arrived; nothing waits for this
  // Senders see only their data writes; receivers their receives (each consumed by an immediate) and flush reads.
  bool ok = slot < static_cast<uint32_t>(kIbMaxRequests) && c->reqs[slot].used && c->reqs[slot].events > 0 &&
            (kind == IbWrKind::kData) == c->isSend && (kind == IbWrKind::kRecv) == wc.recvImm &&
            (kind == IbWrKind::kFlush) == c->reqs[slot].flush;
  if (!ok) {
    setLastError(nullptr, "NET/IB: %s: unexpected completion (work request 0x%llx, queue pair %u)",
                 ibCommText(c).c_str(), static_cast<unsigned long long>(wc.wrId), wc.qpn);
    failComm(c, ncclInternalError);
    return;
  }
  IbRequest& r = c->reqs[slot];
  if (kind == IbWrKind::kRecv) {
    if (r.sizeKnown && r.size != wc.imm) {
      setLastError(nullptr, "NET/IB: %s: queue pairs disagree on a message's size (%zu and %u bytes)",
                   ibCommText(c).c_str(), r.size, wc.imm);
      failComm(c, ncclInternalError);
      return;
    }
    r.size = wc.imm;
    r.sizeKnown = true;
  }
  r.events--;
}

// Takes every completion the CQs of the comm's ports hold; a failure (of a poll or of a completion) is left in
// c->failed.
void pollComm(IbComm* c) {
  constexpr int kBatch = 16;
  IbWc wcs[kBatch];
  for (IbCommPort& p : c->ports) {
    for (;;) {
      int n = 0;
      ncclResult_t res = p.cq->poll(kBatch, wcs, &n);
      if (res != ncclSuccess) {
        failComm(c, res);
        return;
      }
      for (int i = 0; i < n; ++i) onCompletion(c, wcs[i]);  // every one taken is applied, after an error too
      if (n < kBatch) break;
    }
  }
}

// Registers memory on every port of the comm's net device: `reg` registers it on one HCA. On failure what was
// registered is released.
template <typename Reg>
ncclResult_t regOnPorts(IbComm* c, Reg reg, void** mhandle) {
  auto mh = std::make_unique<IbMhandle>();
  for (IbCommPort& p : c->ports) {
    ncclResult_t res = reg(p.hca, &mh->mr[mh->n]);
    if (res != ncclSuccess) {
      for (int i = 0; i < mh->n; ++i) c->ports[static_cast<size_t>(i)].hca->deregMr(&mh->mr[i]);
      return res;
    }
    mh->n++;
  }
  *mhandle = mh.release();
  return ncclSuccess;
}

// Fails a pending request once the peer's setup socket has ended and the grace period has passed.
ncclResult_t checkPeer(IbComm* c) {
  if (!c->sock.valid()) return ncclSuccess;
  auto now = std::chrono::steady_clock::now();
  if (now < c->nextSockCheck) return ncclSuccess;
  c->nextSockCheck = now + kPeerCheckPeriod;
  if (!c->peerGone) {
    char byte;
    size_t got = 0;
    IoResult r = c->sock.recvSome(&byte, 1, &got);
    if (r.ok() && got == 0) return ncclSuccess;
    if (r.ok()) {
      setLastError(nullptr, "NET/IB: %s: unexpected data on the setup socket after setup", ibCommText(c).c_str());
      return failComm(c, ncclRemoteError);
    }
    c->peerGone = true;
    c->peerGoneAt = now;
    return ncclSuccess;
  }
  if (now - c->peerGoneAt < kPeerGoneGrace) return ncclSuccess;
  // INFO, not WARN: a receive posted ahead of need meets this at every teardown where the peer closed first; the
  // caller decides whether it matters (the proxy asks the bootstrap whether the peer died).
  char text[512];
  snprintf(text, sizeof(text), "NET/IB: %s: the peer closed the connection while a %s was pending",
           ibCommText(c).c_str(), c->isSend ? "send" : "receive");
  INFO(kNet, "%s", text);
  setThreadLastError(text);
  return failComm(c, ncclRemoteError);
}

}  // namespace

ncclResult_t ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  auto* c = static_cast<IbComm*>(comm);
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/IB: cannot register memory of pointer type %d (host or CUDA only)",
                type);
  }
  if (type == NCCL_PTR_CUDA && !c->net->peerMemory(c->dev)) {
    CHORUS_FAIL(nullptr, ncclInternalError,
                "NET/IB: %s: cannot register %zu bytes of GPU memory at %p: no GPUDirect RDMA peer-memory module is "
                "loaded (nvidia_peermem, nv_peer_mem or amdkfd's); registering it as a dma-buf (regMrDmaBuf) is the "
                "other way%s",
                ibCommText(c).c_str(), size, data,
                c->net->dmaBuf(c->dev) ? "" : ", and this device does not offer it either");
  }
  // GPU memory goes through the same ibv_reg_mr: the peer-memory module pins it for the HCA's driver.
  const bool relaxed = c->net->relaxedOrdering();
  return regOnPorts(
      c, [&](IbHca* hca, IbMr* mr) { return hca->regMr(data, size, relaxed, mr); }, mhandle);
}

ncclResult_t ibRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  if (fd == -1) return ibRegMr(comm, data, size, type, mhandle);
  *mhandle = nullptr;
  auto* c = static_cast<IbComm*>(comm);
  for (const IbCommPort& p : c->ports) {
    if (c->net->dmaBuf(p.dev)) continue;
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/IB: %s: cannot register dma-buf %d (%zu bytes at offset %llu): %s",
                ibCommText(c).c_str(), fd, size, static_cast<unsigned long long>(offset),
                c->net->device(p.dev).dmaBuf ? "NCCL_DMABUF_ENABLE=0"
                                             : "the HCA's driver or the kernel does not support dma-buf registration");
  }
  // The registration is addressed by the buffer's own virtual address (iova), as regMr's are, so that descriptors
  // and flushes name received buffers the same way whichever way they were registered.
  const bool relaxed = c->net->relaxedOrdering();
  return regOnPorts(
      c,
      [&](IbHca* hca, IbMr* mr) {
        return hca->regDmaBufMr(offset, size, reinterpret_cast<uintptr_t>(data), fd, relaxed, mr);
      },
      mhandle);
}

ncclResult_t ibDeregMr(void* comm, void* mhandle) {
  if (mhandle == nullptr) return ncclSuccess;
  auto* c = static_cast<IbComm*>(comm);
  auto* mh = static_cast<IbMhandle*>(mhandle);
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < mh->n; ++i) {
    ncclResult_t r = c->ports[static_cast<size_t>(i)].hca->deregMr(&mh->mr[i]);
    if (res == ncclSuccess) res = r;
  }
  delete mh;
  return res;
}

ncclResult_t ibIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
  (void)phandle;
  *request = nullptr;
  auto* c = static_cast<IbComm*>(sendComm);
  if (c->failed != ncclSuccess || failedAsync(c)) return failedResult(c);
  const uint32_t want = c->seq + 1;
  IbRecvDesc* slot = &c->ctrl[c->seq % kIbMaxRequests];
  // The receiver's HCA writes the slot; seq is read first (acquire), the rest only once it matches.
  if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != want) return ncclSuccess;
  IbRecvDesc desc;
  memcpy(&desc, slot, sizeof(desc));
  if (desc.tag != tag) {
    setLastError(nullptr, "NET/IB: %s: message %u has tag %d but the receive it matches has tag %d",
                 ibCommText(c).c_str(), want, tag, desc.tag);
    return failComm(c, ncclInvalidUsage);
  }
  if (size > desc.size || size > static_cast<size_t>(INT_MAX)) {
    setLastError(nullptr,
                 "NET/IB: %s: message %u of %zu bytes is larger than the receive it matches (%llu bytes) or than "
                 "%d bytes",
                 ibCommText(c).c_str(), want, size, static_cast<unsigned long long>(desc.size), INT_MAX);
    return failComm(c, ncclInvalidUsage);
  }
  if (size > 0 && mhandle == nullptr) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: %s: isend of %zu bytes without a memory registration",
                ibCommText(c).c_str(), size);
  }
  IbRequest* r = allocRequest(c);
  if (r == nullptr) return ncclSuccess;  // all requests outstanding: try again after a test()
  const auto* mh = static_cast<const IbMhandle*>(mhandle);
  const QpSpan qps = qpSpan(c, c->seq);
  size_t share = (size + qps.count - 1) / qps.count;
  share = (share + kIbSplitAlign - 1) / kIbSplitAlign * kIbSplitAlign;
  // Under adaptive routing, as NCCL: the data as a plain write, then the immediate alone (the fabric may spread the
  // former's packets over its paths; the latter lands after them on the same queue pair).
  const bool apart = c->adaptiveRouting && size > c->arThreshold;
  int events = 0;
  for (size_t i = 0; i < qps.count; ++i) {
    size_t off = i * share < size ? i * share : size;
    size_t len = size - off < share ? size - off : share;
    IbWrite w;
    w.wrId = ibWrId(IbWrKind::kData, slotOf(c, r));
    w.local = static_cast<const char*>(data) + off;
    w.length = len;
    // The keys of the ports the queue pair joins: ours (i mod ports), the receiver's (i mod its ports).
    const size_t q = qps.first + i;
    w.lkey = len > 0 ? mh->mr[q % c->ports.size()].lkey : 0;
    w.remoteAddr = desc.addr + off;
    w.rkey = desc.rkey[q % static_cast<size_t>(c->remotePorts)];
    IbQp* qp = c->qps[qps.first + i].get();
    if (apart && len > 0) {
      ncclResult_t res = qp->postWrite(w);
      if (res != ncclSuccess) return failComm(c, res);
      events++;
      w.local = nullptr;
      w.length = 0;
      w.lkey = 0;
      w.remoteAddr = desc.addr + off + len;
    }
    w.withImm = true;
    w.imm = static_cast<uint32_t>(size);
    ncclResult_t res = qp->postWrite(w);
    if (res != ncclSuccess) return failComm(c, res);
    events++;
  }
  r->events = events;
  r->size = size;
  c->seq++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ibIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                     void** request) {
  (void)phandles;
  *request = nullptr;
  auto* c = static_cast<IbComm*>(recvComm);
  if (c->failed != ncclSuccess || failedAsync(c)) return failedResult(c);
  if (n != 1) {
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/IB: irecv of %d buffers; the IB net takes one (maxRecvs 1)", n);
  }
  if (sizes[0] > 0 && mhandles[0] == nullptr) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: %s: irecv of %zu bytes without a memory registration",
                ibCommText(c).c_str(), sizes[0]);
  }
  IbRequest* r = allocRequest(c);
  if (r == nullptr) return ncclSuccess;
  const uint32_t slot = slotOf(c, r);
  // Receives first, on the queue pairs the message will use: the sender may write as soon as it sees the descriptor.
  const QpSpan qps = qpSpan(c, c->seq);
  for (size_t i = 0; i < qps.count; ++i) {
    ncclResult_t res = c->qps[qps.first + i]->postRecv(ibWrId(IbWrKind::kRecv, slot));
    if (res != ncclSuccess) {
      r->used = false;
      return failComm(c, res);
    }
  }
  const uint32_t fifo = c->seq % kIbMaxRequests;
  IbRecvDesc& d = c->ctrl[fifo];
  d.addr = reinterpret_cast<uintptr_t>(data[0]);
  d.size = sizes[0];
  for (size_t p = 0; p < c->ports.size(); ++p)
    d.rkey[p] = sizes[0] > 0 ? static_cast<const IbMhandle*>(mhandles[0])->mr[p].rkey : 0;
  d.tag = tags[0];
  d.seq = c->seq + 1;
  IbWrite w;
  w.wrId = ibWrId(IbWrKind::kFifo, fifo);
  w.local = &d;
  w.length = sizeof(d);
  w.lkey = c->ports[0].ctrlMr.lkey;
  w.remoteAddr = c->remoteFifoAddr + fifo * sizeof(IbRecvDesc);
  w.rkey = c->remoteFifoRkey;
  w.inlineData = c->inlineDescs;
  ncclResult_t res = c->qps[0]->postWrite(w);
  if (res != ncclSuccess) return failComm(c, res);
  r->events = static_cast<int>(qps.count);
  c->seq++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ibIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = nullptr;
  auto* c = static_cast<IbComm*>(recvComm);
  if (c->failed != ncclSuccess || failedAsync(c)) return failedResult(c);
  if (!c->flushes()) return ncclSuccess;  // no GPUDirect RDMA here, or NCCL_GDR_FLUSH_DISABLE=1
  // As NCCL: one read of the last buffer that received data, through each port (each HCA's writes are ordered only
  // with its own read). The HCA wrote every buffer of the receive before it completed, and the read's response
  // follows those writes to the GPU.
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > 0 && mhandles[i] != nullptr) last = i;
  }
  if (last == -1) return ncclSuccess;
  IbRequest* r = allocRequest(c);
  if (r == nullptr) {
    // A null request would mean "flushed": refuse instead. The proxy never has this many receives and flushes out.
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/IB: %s: iflush with all %d requests outstanding",
                ibCommText(c).c_str(), kIbMaxRequests);
  }
  r->flush = true;
  for (size_t p = 0; p < c->ports.size(); ++p) {
    IbRead rd;
    rd.wrId = ibWrId(IbWrKind::kFlush, slotOf(c, r));
    rd.local = &c->flushSink;
    rd.length = 1;  // NCCL reads one byte too: any read orders behind the writes
    rd.lkey = c->ports[p].flushMr.lkey;
    rd.remoteAddr = reinterpret_cast<uintptr_t>(data[last]);
    rd.rkey = static_cast<const IbMhandle*>(mhandles[last])->mr[p].rkey;
    ncclResult_t res = c->ports[p].flushQp->postRead(rd);
    if (res != ncclSuccess) {
      if (p == 0) r->used = false;  // reads already posted would still complete into the slot
      return failComm(c, res);
    }
    r->events++;
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t ibTest(void* request, int* done, int* sizes) {
  *done = 0;
  auto* r = static_cast<IbRequest*>(request);
  IbComm* c = r->comm;
  // Completions are taken after a failure too: a request all of whose completions arrived is done, whatever failed
  // after them.
  pollComm(c);
  if (r->events == 0) {
    *done = 1;
    if (sizes != nullptr && !r->flush) *sizes = static_cast<int>(r->size);
    r->used = false;
    return ncclSuccess;
  }
  if (c->failed != ncclSuccess || failedAsync(c)) return failedResult(c);
  return checkPeer(c);
}

}  // namespace chorus
