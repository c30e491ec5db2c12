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
  // that it fails, with the comm's context; here it is only recorded.
  auto* c = static_cast<Comm*>(arg);
  if (c->epStatus != UCS_OK) return;
  c->epStatus = status;
  c->failedAt = std::chrono::steady_clock::now();
  INFO(kNet, "NET/UCX : %s endpoint of connection %u with %s failed: %s", c->isRecv ? "receive" : "send", c->connId,
       c->peer.c_str(), ucs_status_string(status));
}

void setErrorHandling(ucp_ep_params_t* p, Comm* c) {
  p->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p->err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p->err_handler.cb = onEndpointError;
  p->err_handler.arg = c;
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
  return c;
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
  closeEndpoint(c->ctx, c->ep, abnormal, c->peer, &c->epStatus);
  drainRequests(c);
  for (ucp_mem_h m : c->deferredUnmaps) ucp_mem_unmap(c->ctx->context, m);
  c->ctx->openComms--;
  delete c;
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

}  // namespace

void closeEndpoint(Context* ctx, ucp_ep_h ep, bool failed, const std::string& what, const ucs_status_t* epStatus) {
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
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
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
    comm = newComm(c, h.connId, /*isRecv=*/false, to.str());
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&to.storage);
    p.sockaddr.addrlen = to.len;
    setErrorHandling(&p, comm);
    ucs_status_t st = ucp_ep_create(c->worker, &p, &comm->ep);
    if (st != UCS_OK) {
      delete comm;
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : connecting to %s (connection %u) failed: %s", to.str().c_str(),
                  h.connId, ucs_status_string(st));
    }
    c->openComms++;
    // UCX holds the hello until the wire-up is done; its completion says the endpoint is connected.
    comm->helloMsg.magic = kHandleMagic;
    comm->helloMsg.connId = h.connId;
    ncclResult_t res =
        postSend(comm, &comm->hello, &comm->helloMsg, sizeof(Hello), makeHelloTag(h.connId), nullptr, "connect to");
    if (res != ncclSuccess) {
      closeComm(comm);
      return res;
    }
    c->connecting[key] = comm;
    INFO(kNet, "NET/UCX : connecting to %s over device %s, connection %u", comm->peer.c_str(), c->devName.c_str(),
         comm->connId);
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
    if (lc->connRequest == nullptr) return ncclSuccess;  // not yet: called again
    std::string peer = "a peer of " + lc->addrText;
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(lc->connRequest, &attr) == UCS_OK) {
      SockAddr from;
      from.storage = attr.client_address;
      from.len = attr.client_address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
      peer = from.str();
    }
    Comm* comm = newComm(lc->ctx, lc->connId, /*isRecv=*/true, peer);
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = lc->connRequest;
    setErrorHandling(&p, comm);
    lc->connRequest = nullptr;  // ucp_ep_create consumes it, whether it succeeds or not
    ucs_status_t st = ucp_ep_create(lc->ctx->worker, &p, &comm->ep);
    if (st != UCS_OK) {
      delete comm;
      lc->accepted = true;
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : accepting %s on %s (connection %u) failed: %s", peer.c_str(),
                  lc->addrText.c_str(), lc->connId, ucs_status_string(st));
    }
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
    progress(lc->ctx);
  }
  Comm* comm = lc->accepting;
  bool done = false;
  ncclResult_t res = helloDone(comm, "accept from", &done);
  if (res != ncclSuccess || done) {
    lc->accepting = nullptr;
    lc->accepted = true;
  }
  if (res != ncclSuccess) {
    closeComm(comm);
    return res;
  }
  if (done) {
    INFO(kNet, "NET/UCX : accepted %s on %s, connection %u", comm->peer.c_str(), lc->addrText.c_str(), lc->connId);
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
