// UCX net data path: registration, isend/irecv/iflush and test, over UCP tag matching.
//
// A request is a slot of its comm's pool (NCCL_NET_MAX_REQUESTS), so isend/irecv answer "not now" (null) when the
// pool is full and never allocate. UCX's completion callback, run inside ucp_worker_progress on the comm's thread,
// records status and length in the slot and frees UCX's request; test() then reports and frees the slot.
#if CHORUS_HAVE_UCX

#include "core/checks.h"
#include "core/debug.h"
#include "transports/ucx/ucx_net.h"

namespace chorus {
namespace ucx {
namespace {

/// Marks a slot finished (or, if test() already gave up on it, free) and hands UCX's request back.
void finish(Request* r, void* ucpRequest, ucs_status_t status) {
  ucp_request_free(ucpRequest);
  r->ucp = nullptr;
  if (r->state == ReqState::kCancelling) {
    r->state = ReqState::kFree;
    return;
  }
  r->status = status;
  r->state = ReqState::kDone;
}

void onSendDone(void* request, ucs_status_t status, void* user) {
  finish(static_cast<Request*>(user), request, status);
}

void onRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* r = static_cast<Request*>(user);
  if (status == UCS_OK) r->size = info->length;
  finish(r, request, status);
}

Request* freeSlot(Comm* c) {
  for (Request& r : c->reqs)
    if (r.state == ReqState::kFree) return &r;
  return nullptr;
}

/// "receive from" / "send to": with the peer's address, what a message says a comm is.
const char* dir(const Comm* c) { return c->isRecv ? "receive from" : "send to"; }

/// Fills what isend and irecv share: the callback's user data and the buffer's registration.
void baseParams(ucp_request_param_t* p, Request* r, void* mhandle) {
  p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p->user_data = r;
  auto* mh = static_cast<MemHandle*>(mhandle);
  if (mh != nullptr && mh->memh != nullptr) {
    p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p->memh = mh->memh;
  }
}

/// Takes the result of a *_nbx call: done at once, pending, or failed (the slot stays free then). The slot was
/// marked pending before the call, because UCX may run the completion callback inside it (it then finds the slot
/// done, and its request already freed).
ncclResult_t post(Comm* c, Request* r, ucs_status_ptr_t s, const char* op) {
  if (UCS_PTR_IS_ERR(s)) {
    r->state = ReqState::kFree;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : %s %s %s (connection %u) failed: %s", op, dir(c), c->peer.c_str(),
                c->connId, ucs_status_string(UCS_PTR_STATUS(s)));
  }
  if (s == nullptr) {
    r->state = ReqState::kDone;
  } else if (r->state == ReqState::kPending) {
    r->ucp = s;
  }
  return ncclSuccess;
}

/// Marks a slot pending before its *_nbx call (see post).
void arm(Comm* c, Request* r) {
  r->comm = c;
  r->status = UCS_OK;
  r->ucp = nullptr;
  r->state = ReqState::kPending;
}

/// The error for a comm whose endpoint UCX declared failed.
ncclResult_t endpointFailed(Comm* c, const char* op) {
  CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : %s: %s %s (connection %u): the endpoint failed: %s", op, dir(c),
              c->peer.c_str(), c->connId, ucs_status_string(c->epStatus));
}

/// Posts `r` as a send of `bytes` bytes: `count` elements of datatype `dt` at `buffer` (contiguous bytes, or r->iov).
ncclResult_t sendAs(Comm* c, Request* r, const void* buffer, size_t count, ucp_datatype_t dt, size_t bytes,
                    ucp_tag_t tag, void* mhandle, const char* op) {
  ucp_request_param_t p{};
  baseParams(&p, r, mhandle);
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  p.datatype = dt;
  p.cb.send = onSendDone;
  r->isRecv = false;
  r->size = bytes;
  arm(c, r);
  return post(c, r, ucp_tag_send_nbx(c->ep, buffer, count, tag, &p), op);
}

/// Posts `r` as a receive into `count` elements of datatype `dt` at `buffer`.
ncclResult_t recvAs(Comm* c, Request* r, void* buffer, size_t count, ucp_datatype_t dt, ucp_tag_t tag, void* mhandle,
                    const char* op) {
  ucp_request_param_t p{};
  baseParams(&p, r, mhandle);
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  p.datatype = dt;
  // Every receive completes through onRecvDone, which has the true length: UCX 1.13 may complete a receive inside
  // ucp_tag_recv_nbx without filling recv_info, so immediate completion is refused (UCP_OP_ATTR_FLAG_NO_IMM_CMPL).
  p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = onRecvDone;
  r->isRecv = true;
  r->size = 0;
  const ucp_tag_t kFullMask = ~ucp_tag_t{0};
  arm(c, r);
  return post(c, r, ucp_tag_recv_nbx(c->ctx->worker, buffer, count, tag, kFullMask, &p), op);
}

/// The number of buffers an isendv/irecvv may span, checked; r's iov list filled with them. Returns the total bytes.
bool fillIov(Request* r, int n, void** data, const size_t* sizes, size_t* total) {
  if (n < 1 || n > kMaxIov) return false;
  *total = 0;
  for (int i = 0; i < n; ++i) {
    r->iov[i].buffer = data[i];
    r->iov[i].length = sizes[i];
    *total += sizes[i];
  }
  return true;
}

/// Whether a receive may still be posted, or go on waiting, on `c`: after its peer's endpoint failed, only within
/// kPeerGoneGrace (a receive may still match a message that arrived before).
bool mayReceive(const Comm* c) {
  return c->epStatus == UCS_OK || std::chrono::steady_clock::now() - c->failedAt <= kPeerGoneGrace;
}

/// Whether a receive of `tag` may be posted on `c`: within the grace, or later when its message is already here. A
/// peer that finished and closed its end flushed first, so what it sent waits in this worker's unexpected queue
/// until a receive is posted for it, however long this rank takes to get there (a loaded rank may free the slot
/// for the last message seconds after the peer left).
bool mayPost(Comm* c, ucp_tag_t tag) {
  if (mayReceive(c)) return true;
  progress(c->ctx);
  ucp_tag_recv_info_t info{};
  return ucp_tag_probe_nb(c->ctx->worker, tag, ~ucp_tag_t{0}, 0, &info) != nullptr;
}

/// A free slot of `c`, or null after letting completions in (the pool is full: the caller is called again).
Request* takeSlot(Comm* c) {
  Request* r = freeSlot(c);
  if (r == nullptr) progress(c->ctx);
  return r;
}

}  // namespace

ncclResult_t postSend(Comm* c, Request* r, const void* data, size_t size, ucp_tag_t tag, void* mhandle,
                      const char* op) {
  return sendAs(c, r, data, size, ucp_dt_make_contig(1), size, tag, mhandle, op);
}

ncclResult_t postRecv(Comm* c, Request* r, void* data, size_t size, ucp_tag_t tag, void* mhandle, const char* op) {
  return recvAs(c, r, data, size, ucp_dt_make_contig(1), tag, mhandle, op);
}

namespace {

/// The key of mapping mh->memh on the context's flush endpoint (made on first use), for flushes of what receives
/// write there.
ncclResult_t flushKey(Comm* c, MemHandle* mh) {
  Context* x = c->ctx;
  ucs_status_t st = UCS_OK;
  if (x->flushEp == nullptr) {
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    st = ucp_worker_get_address(x->worker, &addr, &len);
    if (st == UCS_OK) {
      ucp_ep_params_t p{};
      p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      p.address = addr;
      st = ucp_ep_create(x->worker, &p, &x->flushEp);
      ucp_worker_release_address(x->worker, addr);
    }
    if (st != UCS_OK) {
      x->flushEp = nullptr;
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : device %s: no endpoint to its own worker for flushes: %s",
                  x->devName.c_str(), ucs_status_string(st));
    }
  }
  void* packed = nullptr;
  size_t packedSize = 0;
  st = ucp_rkey_pack(x->context, mh->memh, &packed, &packedSize);
  if (st == UCS_OK) {
    st = ucp_ep_rkey_unpack(x->flushEp, packed, &mh->rkey);
    ucp_rkey_buffer_release(packed);
  }
  if (st != UCS_OK) {
    mh->rkey = nullptr;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : the key of GPU memory to flush on device %s: %s",
                x->devName.c_str(), ucs_status_string(st));
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  auto* c = static_cast<Comm*>(comm);
  *mhandle = nullptr;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/UCX : regMr of memory type %d", type);
  auto* mh = new MemHandle();
  if (size > 0) {
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = data;
    p.length = size;
    ucs_status_t st = ucp_mem_map(c->ctx->context, &p, &mh->memh);
    if (st != UCS_OK) {
      delete mh;
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_mem_map of %zu bytes at %p failed: %s", size, data,
                  ucs_status_string(st));
    }
  }
  if (mh->memh != nullptr && type == NCCL_PTR_CUDA && c->isRecv && c->ctx->rma) {
    ncclResult_t res = flushKey(c, mh);
    if (res != ncclSuccess) {
      ucp_mem_unmap(c->ctx->context, mh->memh);
      delete mh;
      return res;
    }
  }
  *mhandle = mh;
  return ncclSuccess;
}

ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t /*offset*/, int fd, void** mhandle) {
  if (fd >= 0) {
    *mhandle = nullptr;
    CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/UCX : dma-buf registration is not supported (ptrSupport says so)");
  }
  return regMr(comm, data, size, type, mhandle);
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  auto* c = static_cast<Comm*>(comm);
  auto* mh = static_cast<MemHandle*>(mhandle);
  if (mh == nullptr) return ncclSuccess;
  bool busy = false;
  for (const Request& r : c->reqs) busy = busy || r.state == ReqState::kPending || r.state == ReqState::kCancelling;
  ucs_status_t st = UCS_OK;
  if (mh->rkey != nullptr && busy) {
    c->deferredRkeys.push_back(mh->rkey);
  } else if (mh->rkey != nullptr) {
    ucp_rkey_destroy(mh->rkey);
  }
  if (mh->memh != nullptr && busy) {
    c->deferredUnmaps.push_back(mh->memh);  // closeComm unmaps it after draining the requests
  } else if (mh->memh != nullptr) {
    st = ucp_mem_unmap(c->ctx->context, mh->memh);
  }
  delete mh;
  if (st != UCS_OK) CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_mem_unmap failed: %s", ucs_status_string(st));
  return ncclSuccess;
}

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/, void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  *request = nullptr;
  if (c->epStatus != UCS_OK) return endpointFailed(c, "isend");
  Request* r = takeSlot(c);
  if (r == nullptr) return ncclSuccess;
  CHORUS_CHECK(postSend(c, r, data, size, makeTag(c->connId, tag), mhandle, "isend"));
  *request = r;
  return ncclSuccess;
}

ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** /*phandles*/,
                   void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  *request = nullptr;
  if (n != 1) CHORUS_FAIL(nullptr, ncclInternalError, "NET/UCX : irecv of %d buffers (maxRecvs is 1)", n);
  const ucp_tag_t tag = makeTag(c->connId, tags[0]);
  if (!mayPost(c, tag)) return endpointFailed(c, "irecv");
  Request* r = takeSlot(c);
  if (r == nullptr) return ncclSuccess;
  CHORUS_CHECK(postRecv(c, r, data[0], sizes[0], tag, mhandles != nullptr ? mhandles[0] : nullptr, "irecv"));
  *request = r;
  return ncclSuccess;
}

// isendv and irecvv take host memory only, unregistered: UCX copies a message this small (a FIFO slot's header and a
// small payload) through its bounce buffers, and a memory handle names one contiguous buffer.
ncclResult_t isendv(void* sendComm, int n, void** data, size_t* sizes, int tag, void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  *request = nullptr;
  if (c->epStatus != UCS_OK) return endpointFailed(c, "isendv");
  Request* r = takeSlot(c);
  if (r == nullptr) return ncclSuccess;
  size_t total = 0;
  if (!fillIov(r, n, data, sizes, &total))
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/UCX : isendv of %d buffers (1 to %d)", n, kMaxIov);
  CHORUS_CHECK(sendAs(c, r, r->iov, static_cast<size_t>(n), ucp_dt_make_iov(), total, makeTag(c->connId, tag), nullptr,
                      "isendv"));
  *request = r;
  return ncclSuccess;
}

ncclResult_t irecvv(void* recvComm, int n, void** data, size_t* sizes, int tag, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  *request = nullptr;
  const ucp_tag_t full = makeTag(c->connId, tag);
  if (!mayPost(c, full)) return endpointFailed(c, "irecvv");
  Request* r = takeSlot(c);
  if (r == nullptr) return ncclSuccess;
  size_t total = 0;
  if (!fillIov(r, n, data, sizes, &total))
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/UCX : irecvv of %d buffers (1 to %d)", n, kMaxIov);
  CHORUS_CHECK(recvAs(c, r, r->iov, static_cast<size_t>(n), ucp_dt_make_iov(), full, nullptr, "irecvv"));
  *request = r;
  return ncclSuccess;
}

ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  *request = nullptr;
  // The last buffer that received data into GPU memory, if this comm flushes (its mapping has a flush key).
  int last = -1;
  for (int i = 0; i < n; ++i) {
    const auto* mh = static_cast<const MemHandle*>(mhandles[i]);
    if (sizes[i] > 0 && mh != nullptr && mh->rkey != nullptr) last = i;
  }
  Request* r = freeSlot(c);
  if (r == nullptr) {
    // A null request would mean "flushed": refuse instead. The proxy never has this many receives and flushes out.
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/UCX : iflush %s %s (connection %u) with all %d requests outstanding",
                dir(c), c->peer.c_str(), c->connId, NCCL_NET_MAX_REQUESTS);
  }
  r->isRecv = true;
  r->size = 0;
  if (last < 0) {
    // Host memory (or no flush): coherent once the receive completed, so the request is already done.
    r->comm = c;
    r->status = UCS_OK;
    r->state = ReqState::kDone;
    *request = r;
    return ncclSuccess;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = r;
  p.cb.send = onSendDone;
  const auto* mh = static_cast<const MemHandle*>(mhandles[last]);
  arm(c, r);
  CHORUS_CHECK(post(c, r,
                    ucp_get_nbx(c->ctx->flushEp, &c->flushSink, 1, reinterpret_cast<uintptr_t>(data[last]), mh->rkey,
                                &p),
                    "iflush (get)"));
  *request = r;
  return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  Comm* c = r->comm;
  *done = 0;
  if (r->state == ReqState::kPending) progress(c->ctx);
  if (r->state == ReqState::kDone) {
    r->state = ReqState::kFree;
    if (r->status != UCS_OK) {
      if (c->epStatus == UCS_OK) {
        c->epStatus = r->status;  // any error fails the connection
        c->failedAt = std::chrono::steady_clock::now();
      }
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : test: %s of %zu bytes %s %s (connection %u) failed: %s",
                  r->isRecv ? "a receive" : "a send", r->size, r->isRecv ? "from" : "to", c->peer.c_str(), c->connId,
                  ucs_status_string(r->status));
    }
    *done = 1;
    if (sizes != nullptr) sizes[0] = static_cast<int>(r->size);
    return ncclSuccess;
  }
  // Still pending. A send on a failed endpoint is failed by UCX itself (its callback brings the status); a receive
  // is posted on the worker, not the endpoint, so it is given up here once the grace for late messages is over.
  if (r->state == ReqState::kPending && !mayReceive(c)) {
    // Marked first: the cancellation's callback, which frees the slot, may run inside ucp_request_cancel.
    r->state = ReqState::kCancelling;
    ucp_request_cancel(c->ctx->worker, r->ucp);
    return endpointFailed(c, "test");
  }
  return ncclSuccess;
}

}  // namespace ucx
}  // namespace chorus

#endif  // CHORUS_HAVE_UCX
