// UCX net internals (docs/net_ucx.md): the objects behind the ncclNet_v11_t table that ucxNet() returns.
//
// Built only with UCX (CHORUS_HAVE_UCX). One NetContext per init(); in it, one Context per device the
// communicator uses (ucx_devices.h): its own ucp_context, restricted to that device (UCX_NET_DEVICES), and one
// ucp_worker in UCS_THREAD_MODE_SERIALIZED. Every object below is driven by one thread at a time, under the net
// proxy's lock (NetProxy::passMu_): the proxy of one communicator, or its rank's thread handing over a slot it has
// just published (NetProxy::progress). UCX callbacks run inside ucp_worker_progress() on whichever thread that is,
// so nothing here is locked.
//
// Data moves with UCP tag matching: a send carries tag (connId << 32 | NCCL tag) and the receiver posts the same
// tag with a full mask on its worker. connId is chosen by listen() (unique in the process, hence on every worker)
// and travels in the handle, so the receives of two connections on one worker never match each other's messages.
// Tags with bit 63 set are chorus's own (the hello of connect/accept, see makeHelloTag); connIds stay below 2^31.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "chorus/net.h"
#include "core/socket.h"

namespace chorus {
namespace ucx {

/// "UCX1": the first word of every handle, so that a handle of another net is refused, not misread.
constexpr uint32_t kHandleMagic = 0x31584355u;

/// What listen() hands the peer (NCCL_NET_HANDLE_MAXSIZE bytes at most): the ucp_listener's address and the id
/// the sender puts in the high half of every tag.
struct Handle {
  uint32_t magic = 0;   ///< kHandleMagic
  uint32_t connId = 0;  ///< the connection's tag prefix
  PackedAddr addr;      ///< the listener's address (chorus's socket interface, NCCL_SOCKET_IFNAME)
  uint64_t ctxId = 0;   ///< the listening Context's id (0: it runs no connection over another's endpoint)
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "a UCX handle must fit NCCL's handle");

/// How long a receive may stay pending after its peer's endpoint failed before test() fails it: messages the peer
/// sent just before closing may still be in flight on the data lane when the disconnect is seen. A receive posted
/// after it is taken only when its message already waits in the worker.
constexpr std::chrono::milliseconds kPeerGoneGrace{1000};
/// How long closing an endpoint may progress its worker (its flush waits for the peer to have everything) before the
/// close is left to UCX.
constexpr std::chrono::milliseconds kCloseTimeout{2000};

struct Comm;
struct ListenComm;
struct Context;

/// The comms one endpoint serves (its error callback's argument): the comm that made it, and a comm of the other
/// direction that runs over it (CHORUS_UCX_TWO_WAY; null otherwise). The endpoint is closed with the last of them.
struct EpLink {
  Comm* comms[2] = {nullptr, nullptr};
  /// The send comm closed, and how: whether what it sent is still to be flushed to the peer (it closed with nothing
  /// pending and a healthy endpoint), which the last comm to close then does.
  bool sendClosed = false;
  bool sendClean = false;
};

/// One init(): the Context of each device it has used (made by its first listen or connect).
struct NetContext {
  std::vector<Context*> devs;  ///< by device index; null until used
  bool wakeup = false;         ///< CHORUS_UCX_WAKEUP: workers get event descriptors
  int busyFd = -1;             ///< an eventfd set when a worker had events as the proxy was about to sleep
};
/// The Context of device `dev` of `net`, made on first use; fails (WARN) for a device that does not exist or whose
/// context UCX cannot make.
ncclResult_t deviceContext(NetContext* net, int dev, Context** out);

/// One device of one init(): a UCP context restricted to the device, and its worker. Owned by the thread that drives
/// the communicator.
struct Context {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int dev = 0;
  /// A random id that handles and hellos carry, so that a peer can tell that a connection comes from the context it
  /// connects to (CHORUS_UCX_TWO_WAY); 0 when two ways are off.
  uint64_t id = 0;
  std::vector<Comm*> comms;  ///< open send and receive comms, connecting and accepting ones included
  std::string devName;       ///< the UCX device (UCX_NET_DEVICES of this context)
  int efd = -1;              ///< the worker's event descriptor (CHORUS_UCX_WAKEUP), or -1: the proxy polls
  SockAddr listenAddr;       ///< where listen() binds (port 0 until a listener picks one)
  std::string ifName;        ///< the interface of listenAddr, for logs
  int openComms = 0;         ///< listen/send/recv comms not yet closed, connecting ones included
  /// connect()s not finished yet, by the handle's listener address and connId ("1.2.3.4:5/7"): connect() is called
  /// again with the same handle until it returns a comm, and this finds the comm it started.
  std::map<std::string, Comm*> connecting;
  /// Listeners closed before they accepted: kept, with this context, for the rest of the process (closeListen).
  std::vector<ListenComm*> lingering;
  /// Made with UCP_FEATURE_RMA, for flushes (flushesGpuMemory() when the context was made).
  bool rma = false;
  /// An endpoint to this worker itself, whose gets read back what a receive wrote into GPU memory (iflush); made by
  /// the first registration that needs it.
  ucp_ep_h flushEp = nullptr;
};

/// The most buffers one isendv/irecvv message spans (a FIFO slot's header and payload).
constexpr int kMaxIov = 2;

/// Where a request is in its life. A request belongs to its comm's pool and is reused after test() frees it.
enum class ReqState : int {
  kFree = 0,
  kPending,     ///< handed to UCX; its callback has not run yet
  kDone,        ///< UCX finished it (status says how); test() reports and frees it
  kCancelling,  ///< test() gave up on it; the slot stays taken until UCX's callback runs
};

/// One isend/irecv/iflush. The UCX callback writes status/size through user_data = this.
struct Request {
  Comm* comm = nullptr;
  ReqState state = ReqState::kFree;
  bool isRecv = false;
  void* ucp = nullptr;  ///< UCX's request while kPending/kCancelling (freed in the callback)
  ucs_status_t status = UCS_OK;
  size_t size = 0;  ///< bytes sent, or the true length received
  /// A message of several buffers (isendv/irecvv): UCX reads this list until the request completes.
  ucp_dt_iov_t iov[kMaxIov] = {};
};

/// The hello a send end sends once connected (tag makeHelloTag(connId)); its receipt completes accept().
struct Hello {
  uint32_t magic = 0;    ///< kHandleMagic
  uint32_t connId = 0;   ///< the connection it opens
  uint64_t fromCtx = 0;  ///< the sender's Context id
  /// Nonzero: the hello came over the endpoint of the receiver's send connection `via` to the sender (the sender
  /// accepted that connection, and this one runs over its endpoint); 0: over an endpoint of its own.
  uint32_t via = 0;
  uint32_t pad = 0;
};

/// A connection end (send or receive): its endpoint and request pool.
struct Comm {
  Context* ctx = nullptr;
  ucp_ep_h ep = nullptr;
  EpLink* link = nullptr;  ///< ep's link (null while an accept has no endpoint yet)
  uint32_t connId = 0;
  bool isRecv = false;
  uint64_t peerCtx = 0;     ///< the peer's Context id (its hello's, or the handle's), 0 when unknown
  bool reversible = false;  ///< a receive comm with an endpoint of its own that a send comm back may still share
  std::string peer;         ///< the peer's address, for messages
  /// Set by the endpoint's error callback (UCS_OK while healthy); failedAt is when.
  ucs_status_t epStatus = UCS_OK;
  std::chrono::steady_clock::time_point failedAt{};
  Request reqs[NCCL_NET_MAX_REQUESTS];
  /// connect()/accept()'s hello: sent by the send end, received by the receive end, before the comm is returned.
  Request hello;
  Hello helloMsg;
  /// Mappings deregMr was asked to drop while requests that use them were still with UCX: unmapped by closeComm
  /// once those requests are drained (unmapping under a request in flight can crash UCX); their flush keys likewise.
  std::vector<ucp_mem_h> deferredUnmaps;
  std::vector<ucp_rkey_h> deferredRkeys;
  /// Where a flush's get puts the byte it reads.
  uint8_t flushSink = 0;
};

/// A listen(): one ucp_listener, accepted once.
struct ListenComm {
  Context* ctx = nullptr;
  ucp_listener_h listener = nullptr;
  uint32_t connId = 0;
  std::string addrText;                      ///< the listener's address, for messages
  ucp_conn_request_h connRequest = nullptr;  ///< the first connection request, until accept() takes it
  Comm* accepting = nullptr;                 ///< the receive end while its hello has not arrived
  bool accepted = false;                     ///< accept() returned the comm (or failed): no second connection
  bool closed = false;                       ///< closeListen left it lingering (never accepted)
};

/// A regMr(): the UCX mapping of a buffer (memh null for an empty buffer), and for GPU memory of a receive comm that
/// flushes, the mapping's key unpacked on the context's flushEp.
struct MemHandle {
  ucp_mem_h memh = nullptr;
  ucp_rkey_h rkey = nullptr;
};

/// Whether receive comms flush GPU memory: UCX handles CUDA memory here (or forceGpuMemoryForTests) and
/// NCCL_GDR_FLUSH_DISABLE is 0. A flush then gets one byte of the last buffer received, through an endpoint of the
/// worker to itself: the get's completion comes after the writes that delivered the data, as NCCL's UCX plugin and
/// IB net read it back.
bool flushesGpuMemory();
/// Tests: act as if UCX handled CUDA memory where it does not: devices offer NCCL_PTR_CUDA and receive comms flush, so
/// that GPUDirect RDMA runs over host memory (the emulated GPU runtime's "GPU memory", UCX's tcp transport).
/// Registrations of NCCL_PTR_CUDA are then host memory. Takes effect for contexts made after the call.
void forceGpuMemoryForTests(bool on);

/// NetProgressHooks::shareWaitMs: 100 when a connection back to a peer that connected to this context runs over
/// that connection's endpoint (CHORUS_UCX_TWO_WAY), 0 otherwise. More than the socket net's 10: UCX's client-server
/// wire-up (a connection manager's handshake, then the transport's) takes more round trips than a socket's connect.
int shareWaitMs(void* ctx);
/// NetProgressHooks::pollFds: progresses every worker of the init until it is idle, arms their event descriptors and
/// names them; when events came in meanwhile, names a descriptor that is already ready instead.
int pollFds(void* ctx, struct pollfd* fds, int max);
/// Runs the worker's progress until it has nothing more to do (bounded, so a busy worker cannot trap the caller).
void progress(Context* ctx);
/// The 64-bit UCX tag of NCCL tag `tag` on connection `connId`.
inline ucp_tag_t makeTag(uint32_t connId, int tag) {
  return (static_cast<ucp_tag_t>(connId) << 32) | static_cast<uint32_t>(tag);
}
/// The tag of a connection's hello: bit 63 set, so no NCCL tag of any connection can match it.
inline ucp_tag_t makeHelloTag(uint32_t connId) { return (ucp_tag_t{1} << 63) | (static_cast<ucp_tag_t>(connId) << 32); }
/// Closes `ep`: flushes it while the peer is healthy, then closes it (by force where it has peer error handling,
/// as the endpoints to peers do), progressing the worker up to kCloseTimeout; what remains after that is left to UCX.
void closeEndpoint(Context* ctx, ucp_ep_h ep, bool failed, const std::string& what, const ucs_status_t* epStatus,
                   bool peerErrors = true);
/// Cancels a comm's outstanding requests and waits (bounded) for UCX to give their slots back.
void drainRequests(Comm* comm);
/// Posts `r` (a slot of `c`, hello included) as a send of `size` bytes with UCX tag `tag`; on error the slot stays
/// free and the WARN names `op`.
ncclResult_t postSend(Comm* c, Request* r, const void* data, size_t size, ucp_tag_t tag, void* mhandle, const char* op);
/// The same for a receive into at most `size` bytes.
ncclResult_t postRecv(Comm* c, Request* r, void* data, size_t size, ucp_tag_t tag, void* mhandle, const char* op);

// The table's entries, one file per concern: ucx_net.cc (context, devices), ucx_connect.cc (listen, connect,
// accept, close), ucx_data.cc (registration, isend, irecv, iflush, test).

/// ncclNet_v11_t::listen.
ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm);
/// ncclNet_v11_t::connect.
ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm);
/// ncclNet_v11_t::accept.
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm);
/// ncclNet_v11_t::closeSend.
ncclResult_t closeSend(void* sendComm);
/// ncclNet_v11_t::closeRecv.
ncclResult_t closeRecv(void* recvComm);
/// ncclNet_v11_t::closeListen.
ncclResult_t closeListen(void* listenComm);
/// ncclNet_v11_t::regMr.
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle);
/// ncclNet_v11_t::regMrDmaBuf (no dma-buf support: refused unless it is a plain host registration).
ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
/// ncclNet_v11_t::deregMr.
ncclResult_t deregMr(void* comm, void* mhandle);
/// ncclNet_v11_t::isend.
ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
/// ncclNet_v11_t::irecv (one receive per call: maxRecvs is 1).
ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                   void** request);
/// ncclNet_v11_t::iflush: a get of the last buffer that received data, where it is GPU memory and flushesGpuMemory();
/// otherwise a request that is already done.
ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
/// ncclNet_v11_t::test.
ncclResult_t test(void* request, int* done, int* sizes);
/// NetProgressHooks::isendv: `n` host buffers as one tagged message.
ncclResult_t isendv(void* sendComm, int n, void** data, size_t* sizes, int tag, void** request);
/// NetProgressHooks::irecvv: one tagged message into `n` host buffers, in turn.
ncclResult_t irecvv(void* recvComm, int n, void** data, size_t* sizes, int tag, void** request);

}  // namespace ucx
}  // namespace chorus
