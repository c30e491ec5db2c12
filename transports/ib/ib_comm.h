// The IB net's connections: listen/connect/accept (ib_connect.cc) and the data path (ib_data.cc).
//
// A connection is one sender and one receiver comm, each with its own CQ and `nqps` RC queue pairs connected pairwise.
// Data flows as NCCL's IB net moves it:
//  1. irecv posts one zero-length receive on each queue pair its message will use (2.), then RDMA-writes (inline with
//     NCCL_IB_USE_INLINE) a receive descriptor (address, rkey, size, tag, sequence number; IbRecvDesc) into the next
//     slot of the sender's receive FIFO (the sender's control memory, registered for remote writes).
//  2. isend returns a null request until the descriptor for its message has arrived in its FIFO; then it posts the
//     message as one RDMA write with immediate, carrying the message's size as immediate data. As NCCL's: message n
//     goes whole on queue pair n mod nqps (NCCL_IB_SPLIT_DATA_ON_QPS=0, the default; over a merged device, split
//     over the n-th group of consecutive pairs, a pair for each port), or split over every queue pair (=1: one write
//     each, a zero-length one where a pair's share is empty). Under adaptive routing (InfiniBand ports,
//     NCCL_IB_ADAPTIVE_ROUTING) a message above NCCL_IB_AR_THRESHOLD goes as a plain RDMA write of the data followed
//     by a zero-length write with immediate on the same queue pair, which the fabric may then route packet by packet.
//  3. test() polls the comm's CQ: a send is done when its writes completed on every queue pair it used, a receive when
//     each of those delivered its immediate (writes on one queue pair land in order, so the immediate on a queue pair
//     follows that pair's data); the receive's size is the immediate's value. An error completion fails the comm but
//     not the requests whose completions had all arrived: they are still reported done.
// A merged net device (makeVDevice, NCCL's virtual NIC) spans several ports, usually of HCAs of their own. As in NCCL,
// a connection then has NCCL_IB_QPS_PER_CONNECTION queue pairs for each port of the side with more (the listen handle
// says how many the receiver has), queue pair i on each side's port i mod ports; each port has its own CQ, and memory
// is registered on each port's HCA, so a receive descriptor carries an rkey per port of the receiver. Each message is
// split over a queue pair of every port (2. below), so it goes out of and into every port.
// A receive descriptor slot is reused only after the receive that last used it completed (at most kIbMaxRequests
// receives are outstanding, and the sender takes descriptors in order), so the FIFO never overruns.
//
// GPUDirect RDMA: registrations may cover GPU memory (regMr through a peer-memory module, regMrDmaBuf through a
// dma-buf). Data the HCA wrote into GPU memory may still be on its way there when the receive completes; iflush
// makes it visible by RDMA-reading one byte of the received buffer on the receiver's flush queue pair, which is
// connected to itself: the read's response leaves the GPU only after the writes before it have landed (PCIe keeps
// reads behind earlier writes), so its completion means the data is in place.
//
// Threading: a comm and its requests are used by one thread at a time (the proxy thread that owns them).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/socket.h"
#include "transports/ib/ib_net.h"
#include "transports/ib/ib_wire.h"

namespace chorus {

struct IbComm;

/// One outstanding isend or irecv.
struct IbRequest {
  IbComm* comm = nullptr;
  bool used = false;
  int events = 0;          ///< completions still expected: one per queue pair
  size_t size = 0;         ///< send: bytes sent; receive: the message's size, from the first immediate
  bool sizeKnown = false;  ///< receive: an immediate has arrived
  bool flush = false;      ///< an iflush: one read completion expected, no size to report
};

/// What the IB net's init hands a communicator as its `ctx`: the process's net and the communicator's
/// config.trafficClass (NCCL_NET_TRAFFIC_CLASS_UNDEF when unset).
struct IbNetCtx {
  IbNetCtx(IbNet* n, int tc) : net(n), trafficClass(tc) {}
  IbNetCtx(const IbNetCtx&) = delete;
  IbNetCtx& operator=(const IbNetCtx&) = delete;
  IbNet* net = nullptr;
  int trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  /// Connector comms between two connect() calls, kept in their handles as NCCL's are: finalize releases those the
  /// proxy gave up on (a communicator that failed or was aborted mid-setup), with their queue pairs and registration.
  std::vector<IbComm*> connecting;
  ~IbNetCtx();
};

/// A memory registration of a comm (regMr's mhandle): one per port of the comm's net device, each on that port's HCA.
struct IbMhandle {
  int n = 0;
  IbMr mr[kIbMaxDevs];
};

/// One port of a comm's net device (a merged device has several, each usually on an HCA of its own): its HCA, the
/// CQ of the queue pairs on it, and what the comm registered there.
struct IbCommPort {
  int dev = 0;           ///< the port's physical net device (IbNet::device)
  IbHca* hca = nullptr;  ///< owned by the net
  std::unique_ptr<IbCq> cq;
  IbMr ctrlMr;  ///< the control memory's registration on this HCA
  // GPUDirect RDMA flush (receiver only; null when flushes are off: no GPUDirect RDMA on the device, or
  // NCCL_GDR_FLUSH_DISABLE=1). Its reads complete on `cq`.
  std::unique_ptr<IbQp> flushQp;  ///< connected to itself; destroyed before `cq`
  IbMr flushMr;                   ///< the comm's flushSink's registration on this HCA
};

/// A sender or receiver comm (they share the setup and completion code).
struct IbComm {
  IbNet* net = nullptr;
  int dev = 0;  ///< the net device (a port, or a merged device of several: IbNet::ports)
  int trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;  ///< its communicator's (IbNetCtx)
  bool isSend = false;
  /// The net device's ports. Queue pair i is on ports[i % ports.size()], and is connected to the peer's queue pair i,
  /// on the peer's port i % remotePorts.
  std::vector<IbCommPort> ports;
  int remotePorts = 1;
  /// The setup socket, kept open for the comm's life: after setup nothing is sent on it, and its end (EOF) tells
  /// this side that the peer has gone while a request waits for it.
  Socket sock;
  std::vector<std::unique_ptr<IbQp>> qps;  ///< destroyed before the ports' CQs
  /// Control memory (kIbMaxRequests descriptors): the receive FIFO on a sender, descriptor staging on a receiver.
  IbRecvDesc* ctrl = nullptr;
  uint64_t remoteFifoAddr = 0;  ///< receiver: the sender's FIFO
  uint32_t remoteFifoRkey = 0;  ///< on the peer's port of queue pair 0, which carries the descriptors
  uint32_t seq = 0;             ///< messages sent / receives posted so far
  bool splitData = false;  ///< every message split over the queue pairs (the connector's NCCL_IB_SPLIT_DATA_ON_QPS)
  bool adaptiveRouting = false;  ///< sender: messages above arThreshold go as a plain write, then the immediate
  uint64_t arThreshold = 0;
  bool inlineDescs = false;  ///< receiver: descriptors go as inline writes (NCCL_IB_USE_INLINE)
  /// Outstanding requests (a receiver's receives and flushes share them).
  IbRequest reqs[kIbMaxRequests];
  uint32_t flushSink = 0;             ///< where flush reads land; never looked at
  ncclResult_t failed = ncclSuccess;  ///< set once by the first error; every later call returns it
  std::string failedWhy;              ///< that error's text, the thread's last error of every later call

  /// The port of queue pair i.
  IbCommPort& portOf(size_t qp) { return ports[qp % ports.size()]; }
  /// Whether the receiver flushes (its ports have flush queue pairs).
  bool flushes() const { return !ports.empty() && ports[0].flushQp != nullptr; }

  // Setup (ib_connect.cc).
  int state = 0;
  size_t ioDone = 0;  ///< bytes of the current handshake message sent or received
  IbConnInfo local;
  IbConnInfo remote;
  uint32_t readyWord = 0;

  // Peer liveness (ib_data.cc).
  std::chrono::steady_clock::time_point nextSockCheck{};
  std::chrono::steady_clock::time_point peerGoneAt{};
  bool peerGone = false;

  ~IbComm();
};

/// A listener: its TCP socket and the one connection it accepts.
struct IbListenComm {
  IbNet* net = nullptr;
  int dev = 0;
  int trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  Socket listener;
  std::unique_ptr<IbComm> pending;  ///< the connection being accepted
};

/// "sender" or "receiver" and the peer's address, for messages.
std::string ibCommText(const IbComm* c);

// ncclNet_v11_t entry points; `ctx` is an IbNetCtx*.
/// listen(): a TCP listener on the bootstrap interface, and its handle.
ncclResult_t ibListen(void* ctx, int dev, void* handle, void** listenComm);
/// connect(): one step of the connector's setup; *sendComm stays null until the connection is up.
ncclResult_t ibConnect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm);
/// accept(): one step of the acceptor's setup; *recvComm stays null until the connection is up.
ncclResult_t ibAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm);
/// closeSend()/closeRecv(): releases a comm and its outstanding requests.
ncclResult_t ibCloseComm(void* comm);
/// closeListen().
ncclResult_t ibCloseListen(void* listenComm);
/// regMr(): registers host memory, or GPU memory (NCCL_PTR_CUDA) when a peer-memory module is loaded, with the comm's
/// HCA.
ncclResult_t ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
/// regMrDmaBuf(): regMr when fd is -1; otherwise registers `size` bytes at `offset` of dma-buf `fd`, addressed as
/// `data`, when the HCA takes dma-bufs and NCCL_DMABUF_ENABLE is not 0.
ncclResult_t ibRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
/// deregMr().
ncclResult_t ibDeregMr(void* comm, void* mhandle);
/// isend(): null *request until the receiver's descriptor for this message has arrived.
ncclResult_t ibIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
/// irecv(): one receive (n must be 1); null *request when kIbMaxRequests are outstanding.
ncclResult_t ibIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                     void** request);
/// iflush(): makes received data visible in GPU memory: one RDMA read of the last non-empty buffer on the flush queue
/// pair, whose request test() completes. Null *request (nothing to wait for) when flushes are off or every size is 0.
ncclResult_t ibIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
/// test(): polls the comm's CQ; a done request is freed.
ncclResult_t ibTest(void* request, int* done, int* sizes);

}  // namespace chorus
