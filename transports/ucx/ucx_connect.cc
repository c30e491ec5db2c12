// UCX net connections: listen/connect/accept over a ucp_listener, and closing them.
//
// listen() opens a ucp_listener on chorus's socket interface (NCCL_SOCKET_IFNAME) with an ephemeral port; its
// handle carries that address and a fresh connId. connect() creates a client endpoint to the address and sends a
// hello on it; accept() turns the listener's connection request into the server endpoint and receives the hello.
// Each returns its comm only when the hello is through (sent: the wire-up is done; received), so both sides keep
// progressing their workers, by calling again, until the connection is really up: neither may return and then go
// quiet while the other still needs it for the handshake. Both endpoints use UCP_ERR_HANDLING_MODE_PEER, so a peer
// that dies fails the endpoint instead of leaving requests hanging.
#if CHORUS_HAVE_UCX

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "core/checks.h"
#include "core/debug.h"
#include "transports/ucx/ucx_net.h"

namespace chorus {
namespace ucx {
namespace {

/// Connection ids: unique in the process, so unique on every worker of it. 0 is never used.
std::atomic<uint32_t> gNextConnId{1};

void onConnRequest(ucp_conn_request_h request, void* arg) {
  // Runs inside ucp_worker_progress on the thread that drives the listener's context.
  auto* lc = static_cast<ListenComm*>(arg);
  if (lc->closed) return;  // a lingering listener (closeListen): the request is left unanswered
  if (lc->accepted || lc->connRequest != nullptr) {
    WARN("NET/UCX : listener %s (connection %u) got a second connection request; rejected", lc->addrText.c_str(),
         lc->connId);
    ucp_listener_reject(lc->listener, request);
    return;
  }
  lc->connRequest = request;
}

void onEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  // Runs inside ucp_worker_progress on the comm's thread. The error is reported (WARN) by the test() or isend()
  // that it fails, with the comm's context; here it is only recorded, in every comm the endpoint serves.
  for (Comm* c : static_cast<EpLink*>(arg)->comms) {
    if (c == nullptr || c->epStatus != UCS_OK) continue;
    c->epStatus = status;
    c->failedAt = std::chrono::steady_clock::now();
    INFO(kNet, "NET/UCX : %s endpoint of connection %u with %s failed: %s", c->isRecv ? "receive" : "send", c->connId,
         c->peer.c_str(), ucs_status_string(status));
  }
}

/// Gives `c` a link of its own, and `p` the error handling that reports to it.
void setErrorHandling(ucp_ep_params_t* p, Comm* c) {
  c->link = new EpLink();
  c->link->comms[0] = c;
  p->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p->err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p->err_handler.cb = onEndpointError;
  p->err_handler.arg = c->link;
}

/// Makes `c` the second comm of `owner`'s endpoint (the other direction, CHORUS_UCX_TWO_WAY).
void shareEndpoint(Comm* c, Comm* owner) {
  c->ep = owner->ep;
  c->link = owner->link;
  c->link->comms[1] = c;
  c->peer = owner->peer;
  c->epStatus = owner->epStatus;
  c->failedAt = owner->failedAt;
}

/// An accepted receive comm of `ctx` from context `peerCtx` whose endpoint a send comm back may share, or null.
Comm* reversibleFrom(Context* ctx, uint64_t peerCtx) {
  for (Comm* r : ctx->comms)
    if (r->isRecv && r->reversible && r->peerCtx == peerCtx && r->link->comms[1] == nullptr && r->epStatus == UCS_OK)
      return r;
  return nullptr;
}

bool anyPending(const Comm* c) {
  for (const Request& r : c->reqs)
    if (r.state == ReqState::kPending) return true;
  return c->hello.state == ReqState::kPending;
}

/// Every request slot of a comm, the hello included.
template <class F>
void forEachRequest(Comm* c, F&& f) {
  for (Request& r : c->reqs) f(r);
  f(c->hello);
}

/// A new comm on `ctx` (not yet counted in openComms).
Comm* newComm(Context* ctx, uint32_t connId, bool isRecv, std::string peer) {
  auto* c = new Comm();
  c->ctx = ctx;
  c->connId = connId;
  c->isRecv = isRecv;
  c->peer = std::move(peer);
  forEachRequest(c, [c](Request& r) { r.comm = c; });
  ctx->comms.push_back(c);
  return c;
}

/// Frees a comm that newComm made (its endpoint closed or never made).
void deleteComm(Comm* c) {
  auto& v = c->ctx->comms;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == c) {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  delete c;
}

/// Where a connect()/accept() hello stands: finished (true), not yet (false), or failed (an error).
ncclResult_t helloDone(Comm* c, const char* op, bool* done) {
  *done = false;
  Request& h = c->hello;
  if (h.state == ReqState::kDone) {
    h.state = ReqState::kFree;
    if (h.status != UCS_OK)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : %s %s (connection %u): the hello failed: %s", op,
                  c->peer.c_str(), c->connId, ucs_status_string(h.status));
    if (c->isRecv && (h.size != sizeof(Hello) || c->helloMsg.magic != kHandleMagic || c->helloMsg.connId != c->connId))
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : %s %s (connection %u): the hello is not a chorus UCX hello", op,
                  c->peer.c_str(), c->connId);
    *done = true;
    return ncclSuccess;
  }
  if (c->epStatus != UCS_OK)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : %s %s (connection %u) failed: %s", op, c->peer.c_str(), c->connId,
                ucs_status_string(c->epStatus));
  return ncclSuccess;
}

/// Shared by closeSend and closeRecv: requests first cancelled, then the endpoint closed (which purges pending
/// sends through their callbacks, so the comm must still exist), then the slots drained.
ncclResult_t closeComm(Comm* c) {
  if (c == nullptr) return ncclSuccess;
  bool abnormal = c->epStatus != UCS_OK || anyPending(c);
  forEachRequest(c, [c](Request& r) {
    if (r.state == ReqState::kPending) {
      r.state = ReqState::kCancelling;  // first: a receive's callback may run inside ucp_request_cancel
      ucp_request_cancel(c->ctx->worker, r.ucp);
    }
  });
  // An endpoint that serves the other direction too stays open for it; the last comm closes it, flushing what the
  // send comm sent unless that one closed abnormally (a receive comm closes with receives still posted: that does not
  // make the other direction's data disposable).
  EpLink* l = c->link;
  bool last = true;
  if (l != nullptr) {
    for (Comm*& x : l->comms)
      if (x == c) x = nullptr;
    last = l->comms[0] == nullptr && l->comms[1] == nullptr;
    if (!c->isRecv) {
      l->sendClosed = true;
      l->sendClean = !abnormal;
    }
  }
  if (last) {
    const bool failed = l != nullptr && l->sendClosed ? c->epStatus != UCS_OK || !l->sendClean : abnormal;
    closeEndpoint(c->ctx, c->ep, failed, c->peer, &c->epStatus);
    delete l;
  }
  drainRequests(c);
  for (ucp_rkey_h k : c->deferredRkeys) ucp_rkey_destroy(k);
  for (ucp_mem_h m : c->deferredUnmaps) ucp_mem_unmap(c->ctx->context, m);
  c->ctx->openComms--;
  deleteComm(c);
  return ncclSuccess;
}

/// Progresses until `req` (a request without callback) is finished, `end` passes, or *epStatus (when given) says
/// the endpoint failed; then hands it back to UCX.
ucs_status_t waitAndFree(Context* ctx, ucs_status_ptr_t req, std::chrono::steady_clock::time_point end,
                         const ucs_status_t* epStatus) {
  if (req == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  while (ucp_request_check_status(req) == UCS_INPROGRESS) {
    if (std::chrono::steady_clock::now() >= end || (epStatus != nullptr && *epStatus != UCS_OK)) break;
    ucp_worker_progress(ctx->worker);
  }
  ucs_status_t st = ucp_request_check_status(req);
  // No callback was set, so freeing an unfinished request only hands it to UCX.
  ucp_request_free(req);
  return st;
}

/// An accept whose hello is in: with an endpoint of its own, it may later carry a connection back (reversible);
/// after a reverse hello, it takes the endpoint of this context's send connection the hello names.
ncclResult_t adoptEndpoint(ListenComm* lc, Comm* comm) {
  const Hello& h = comm->helloMsg;
  comm->peerCtx = h.fromCtx;
  if (h.via == 0) {
    if (comm->ep == nullptr)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : accept on %s (connection %u): a hello came with no connection",
                  lc->addrText.c_str(), lc->connId);
    comm->reversible = lc->ctx->id != 0 && h.fromCtx != 0;
    return ncclSuccess;
  }
  Comm* owner = nullptr;
  for (Comm* s : lc->ctx->comms)
    if (!s->isRecv && s->connId == h.via && s->peerCtx == h.fromCtx && s->link != nullptr &&
        s->link->comms[1] == nullptr)
      owner = s;
  if (comm->ep != nullptr || owner == nullptr)
    CHORUS_FAIL(nullptr, ncclSystemError,
                "NET/UCX : accept on %s (connection %u): the peer's hello names connection %u back to it, which this "
                "context %s",
                lc->addrText.c_str(), lc->connId, h.via,
                comm->ep != nullptr ? "got over a connection of its own" : "does not have");
  shareEndpoint(comm, owner);
  return ncclSuccess;
}

}  // namespace

void closeEndpoint(Context* ctx, ucp_ep_h ep, bool failed, const std::string& what, const ucs_status_t* epStatus,
                   bool peerErrors) {
  if (ep == nullptr) return;
  auto end = std::chrono::steady_clock::now() + kCloseTimeout;
  ucp_request_param_t param{};
  if (!failed) {
    // A send that test() reported done may still sit in UCX's buffers (an eager send completes once copied; over
    // TCP it waits there while the peer's socket is full), so the endpoint is flushed first, until the peer has
    // everything, the endpoint fails (the peer closed), or kCloseTimeout. Closing on an idle worker instead lost
    // data under load: a busy receiver leaves the socket full, and UCX's worker then has nothing to do.
    ucs_status_t st = waitAndFree(ctx, ucp_ep_flush_nbx(ep, &param), end, epStatus);
    if (st != UCS_OK)
      INFO(kNet, "NET/UCX : flushing the endpoint to %s before closing it: %s", what.c_str(), ucs_status_string(st));
  }
  if (peerErrors) {  // UCX forces only an endpoint with peer error handling to close
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  ucs_status_t st = waitAndFree(ctx, ucp_ep_close_nbx(ep, &param), end, nullptr);
  if (st != UCS_OK && st != UCS_ERR_CANCELED)
    INFO(kNet, "NET/UCX : closing the endpoint to %s: %s", what.c_str(), ucs_status_string(st));
}

void drainRequests(Comm* c) {
  auto busy = [](const Request& r) { return r.state == ReqState::kCancelling || r.state == ReqState::kPending; };
  auto anyBusy = [c, &busy] {
    bool any = false;
    forEachRequest(c, [&](Request& r) { any = any || busy(r); });
    return any;
  };
  auto end = std::chrono::steady_clock::now() + kCloseTimeout;
  while (anyBusy() && std::chrono::steady_clock::now() < end) progress(c->ctx);
  forEachRequest(c, [&busy](Request& r) {
    if (busy(r) && r.ucp != nullptr) {
      // ucp_request_free stops every later callback, so the slot (and the comm) can go.
      ucp_request_free(r.ucp);
      r.ucp = nullptr;
    }
    r.state = ReqState::kFree;
  });
}

ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
  *listenComm = nullptr;
  Context* c = nullptr;
  CHORUS_CHECK(deviceContext(static_cast<NetContext*>(ctx), dev, &c));
  auto* lc = new ListenComm();
  lc->ctx = c;
  lc->connId = gNextConnId.fetch_add(1);
  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&c->listenAddr.storage);
  params.sockaddr.addrlen = c->listenAddr.len;
  params.conn_handler.cb = onConnRequest;
  params.conn_handler.arg = lc;
  ucs_status_t st = ucp_listener_create(c->worker, &params, &lc->listener);
  if (st != UCS_OK) {
    delete lc;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_listener_create on %s failed: %s", c->listenAddr.str().c_str(),
                ucs_status_string(st));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(lc->listener, &attr);
  if (st != UCS_OK) {
    ucp_listener_destroy(lc->listener);
    delete lc;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_listener_query failed: %s", ucs_status_string(st));
  }
  SockAddr bound = c->listenAddr;
  bound.setPort(attr.sockaddr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&attr.sockaddr)->sin6_port)
                                                    : ntohs(reinterpret_cast<sockaddr_in*>(&attr.sockaddr)->sin_port));
  lc->addrText = bound.str();
  Handle h;
  h.magic = kHandleMagic;
  h.connId = lc->connId;
  h.addr = packAddr(bound);
  h.ctxId = c->id;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  c->openComms++;
  INFO(kNet, "NET/UCX : listening on %s (device %s) for connection %u", lc->addrText.c_str(), c->devName.c_str(),
       lc->connId);
  *listenComm = lc;
  return ncclSuccess;
}

ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm) {
  *sendComm = nullptr;
  if (sendDevComm != nullptr) *sendDevComm = nullptr;
  Context* c = nullptr;
  CHORUS_CHECK(deviceContext(static_cast<NetContext*>(ctx), dev, &c));
  Handle h;
  memcpy(&h, handle, sizeof(h));
  SockAddr to;
  if (h.magic != kHandleMagic || !unpackAddr(h.addr, &to))
    CHORUS_FAIL(nullptr, ncclInternalError, "NET/UCX : connect: the handle is not a UCX net handle");
  std::string key = to.str() + "/" + std::to_string(h.connId);
  auto it = c->connecting.find(key);
  Comm* comm = it != c->connecting.end() ? it->second : nullptr;
  if (comm == nullptr) {
    // A connection back to a context that connected to this one runs over the endpoint this one accepted.
    Comm* back = h.ctxId != 0 && c->id != 0 ? reversibleFrom(c, h.ctxId) : nullptr;
    comm = newComm(c, h.connId, /*isRecv=*/false, to.str());
    comm->peerCtx = h.ctxId;
    comm->helloMsg.magic = kHandleMagic;
    comm->helloMsg.connId = h.connId;
    comm->helloMsg.fromCtx = c->id;
    if (back != nullptr) {
      shareEndpoint(comm, back);
      back->reversible = false;
      comm->helloMsg.via = back->connId;
    } else {
      ucp_ep_params_t p{};
      p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
      p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
      p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&to.storage);
      p.sockaddr.addrlen = to.len;
      setErrorHandling(&p, comm);
      ucs_status_t st = ucp_ep_create(c->worker, &p, &comm->ep);
      if (st != UCS_OK) {
        delete comm->link;
        deleteComm(comm);
        CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : connecting to %s (connection %u) failed: %s", to.str().c_str(),
                    h.connId, ucs_status_string(st));
      }
    }
    c->openComms++;
    // UCX holds the hello until the wire-up is done; its completion says the endpoint is connected.
    ncclResult_t res =
        postSend(comm, &comm->hello, &comm->helloMsg, sizeof(Hello), makeHelloTag(h.connId), nullptr, "connect to");
    if (res != ncclSuccess) {
      closeComm(comm);
      return res;
    }
    c->connecting[key] = comm;
    if (back != nullptr) {
      INFO(kNet, "NET/UCX : connection %u to %s runs over the endpoint of connection %u from it", comm->connId,
           comm->peer.c_str(), back->connId);
    } else {
      INFO(kNet, "NET/UCX : connecting to %s over device %s, connection %u", comm->peer.c_str(), c->devName.c_str(),
           comm->connId);
    }
  }
  progress(c);
  bool done = false;
  ncclResult_t res = helloDone(comm, "connect to", &done);
  if (res != ncclSuccess || done) c->connecting.erase(key);
  if (res != ncclSuccess) {
    closeComm(comm);
    return res;
  }
  if (done) {
    INFO(kNet, "NET/UCX : connected to %s, connection %u", comm->peer.c_str(), comm->connId);
    *sendComm = comm;
  }
  return ncclSuccess;
}

ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm) {
  auto* lc = static_cast<ListenComm*>(listenComm);
  *recvComm = nullptr;
  if (recvDevComm != nullptr) *recvDevComm = nullptr;
  if (lc->accepted)
    CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/UCX : listener %s (connection %u) was already accepted",
                lc->addrText.c_str(), lc->connId);
  progress(lc->ctx);
  if (lc->accepting == nullptr) {
    // The hello is received on the worker: over the endpoint of the connection request below, or over an endpoint
    // this context already has to the peer (a reverse hello, CHORUS_UCX_TWO_WAY).
    Comm* comm = newComm(lc->ctx, lc->connId, /*isRecv=*/true, "a peer of " + lc->addrText);
    lc->ctx->openComms++;
    lc->accepting = comm;
    ncclResult_t res =
        postRecv(comm, &comm->hello, &comm->helloMsg, sizeof(Hello), makeHelloTag(lc->connId), nullptr, "accept from");
    if (res != ncclSuccess) {
      lc->accepting = nullptr;
      lc->accepted = true;
      closeComm(comm);
      return res;
    }
  }
  Comm* comm = lc->accepting;
  if (comm->ep == nullptr && lc->connRequest != nullptr) {
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(lc->connRequest, &attr) == UCS_OK) {
      SockAddr from;
      from.storage = attr.client_address;
      from.len = attr.client_address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
      comm->peer = from.str();
    }
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = lc->connRequest;
    setErrorHandling(&p, comm);
    lc->connRequest = nullptr;  // ucp_ep_create consumes it, whether it succeeds or not
    ucs_status_t st = ucp_ep_create(lc->ctx->worker, &p, &comm->ep);
    if (st != UCS_OK) {
      delete comm->link;
      comm->link = nullptr;
      comm->ep = nullptr;
      lc->accepting = nullptr;
      lc->accepted = true;
      std::string peer = comm->peer;
      closeComm(comm);
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : accepting %s on %s (connection %u) failed: %s", peer.c_str(),
                  lc->addrText.c_str(), lc->connId, ucs_status_string(st));
    }
    progress(lc->ctx);
  }
  bool done = false;
  ncclResult_t res = helloDone(comm, "accept from", &done);
  if (res == ncclSuccess && done) res = adoptEndpoint(lc, comm);
  if (res != ncclSuccess || done) {
    lc->accepting = nullptr;
    lc->accepted = true;
  }
  if (res != ncclSuccess) {
    closeComm(comm);
    return res;
  }
  if (done) {
    INFO(kNet, "NET/UCX : accepted %s on %s, connection %u%s", comm->peer.c_str(), lc->addrText.c_str(), lc->connId,
         comm->helloMsg.via != 0 ? " (over the endpoint of the connection to it)" : "");
    *recvComm = comm;
  }
  return ncclSuccess;
}

ncclResult_t closeSend(void* sendComm) { return closeComm(static_cast<Comm*>(sendComm)); }

ncclResult_t closeRecv(void* recvComm) { return closeComm(static_cast<Comm*>(recvComm)); }

ncclResult_t closeListen(void* listenComm) {
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr) return ncclSuccess;
  if (lc->accepting != nullptr) closeComm(lc->accepting);
  lc->accepting = nullptr;
  if (!lc->accepted) {
    // Never accepted: a peer may still be connecting to it, and UCX's async thread can then run the connection
    // request on a listener destroyed under it (a crash; openucx/ucx#11087). It lingers, unanswered, until the
    // process exits (finalize leaves the context to it).
    lc->closed = true;
    lc->ctx->lingering.push_back(lc);
    lc->ctx->openComms--;
    return ncclSuccess;
  }
  if (lc->connRequest != nullptr) ucp_listener_reject(lc->listener, lc->connRequest);
  ucp_listener_destroy(lc->listener);
  lc->ctx->openComms--;
  delete lc;
  return ncclSuccess;
}

}  // namespace ucx
}  // namespace chorus

#endif  // CHORUS_HAVE_UCX
