// IB net connection setup: the listen handle, the non-blocking connect/accept handshakes over TCP, and moving the
// queue pairs INIT -> RTR -> RTS.
//
// Handshake (each step is one call's worth of non-blocking socket I/O; a call that cannot finish returns a null comm):
//   connector: TCP connect, create CQ/QPs (INIT) and the receive FIFO, send its IbConnInfo
//   acceptor:  accept, receive it, create CQ/QPs with the connector's QP count, RTR+RTS, send its IbConnInfo
//   connector: receive it, RTR+RTS, send kIbReadyWord; connect() returns the send comm
//   acceptor:  receive kIbReadyWord; accept() returns the receive comm
// The acceptor writes descriptors only after the ready word, when the connector's QPs accept writes.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/checks.h"
#include "core/debug.h"
#include "core/params.h"
#include "transports/ib/ib_comm.h"
#include "transports/net/net.h"

namespace chorus {

namespace {

IntParam kIbTimeout{"NCCL_IB_TIMEOUT", 20,
                    "IB net: RC queue pair ACK timeout exponent (4.096 us x 2^value per try; 1-31).", "network"};
IntParam kIbRetryCnt{"NCCL_IB_RETRY_CNT", 7, "IB net: RC queue pair retry count (0-7).", "network"};
IntParam kIbQpsPerConn{"NCCL_IB_QPS_PER_CONNECTION", 1,
                       "IB net: queue pairs per connection (1-16); messages take them in turn, or are split over them "
                       "(NCCL_IB_SPLIT_DATA_ON_QPS).",
                       "network"};
IntParam kIbSplitData{"NCCL_IB_SPLIT_DATA_ON_QPS", 0,
                      "IB net: 1: every message is split over the connection's queue pairs; 0: each message goes whole "
                      "on one, in turn, as in NCCL. The sender's setting rules a connection: the receiver follows it.",
                      "network"};
IntParam kIbUseInline{"NCCL_IB_USE_INLINE", 0,
                      "IB net: 1: a receiver's receive descriptors (32 bytes) go as inline writes, which the HCA takes "
                      "as they are posted, without reading them from memory; 0: from registered memory, as NCCL by "
                      "default.",
                      "network"};
IntParam kIbAdaptiveRouting{"NCCL_IB_ADAPTIVE_ROUTING", -2,
                            "IB net: 1: adaptive routing is on in the fabric, so a message above NCCL_IB_AR_THRESHOLD "
                            "goes as a plain RDMA write followed by a zero-length write with immediate, which the "
                            "fabric may route packet by packet; 0: one write with immediate; -2: on for InfiniBand "
                            "ports, off for RoCE, as in NCCL.",
                            "network"};
constexpr int64_t kIbArThresholdDefault = 8192;  // NCCL's
IntParam kIbArThreshold{"NCCL_IB_AR_THRESHOLD", kIbArThresholdDefault,
                        "IB net, adaptive routing: messages larger than this many bytes go as a plain RDMA write and "
                        "then the immediate (-2: the default, as in NCCL).",
                        "network"};
IntParam kIbSl{"NCCL_IB_SL", 0,
               "IB net: InfiniBand service level of the queue pairs (0-15). Unset: the communicator's "
               "config.trafficClass where set, as in NCCL, else 0.",
               "network"};
IntParam kIbFifoTc{"NCCL_IB_FIFO_TC", -1,
                   "IB net, RoCE: traffic class of a receiver's queue pairs, which carry its receive descriptors (and "
                   "the ACKs of the data), as NCCL sets its clear-to-send queue pairs' (0-255); -1: as NCCL_IB_TC.",
                   "network"};
IntParam kIbPkey{"NCCL_IB_PKEY", 0, "IB net: the partition key index of the queue pairs (0-65535), as in NCCL.",
                 "network"};
IntParam kIbTc{"NCCL_IB_TC", 0,
               "IB net: traffic class of the queue pairs (RoCE; 0-255). Unset: the communicator's "
               "config.trafficClass where set, as in NCCL, else 0.",
               "network"};

enum ConnectState : uint32_t { kCSendInfo = 1, kCRecvInfo, kCSendReady, kCDone };
enum AcceptState : int { kAAccept = 0, kARecvInfo, kASendInfo, kARecvReady, kADone };

int64_t clampParam(const IntParam& p, int64_t lo, int64_t hi) {
  int64_t v = p.get();
  return v < lo ? lo : (v > hi ? hi : v);
}

// A queue pair's service level (kIbSl) or traffic class (kIbTc), as NCCL 2.28's IB net picks them: the variable where
// set, else the communicator's config.trafficClass where set, else the variable's default; within 0-`hi`.
int qpClass(const IntParam& p, int configClass, int hi) {
  if (!p.isSet() && configClass != NCCL_NET_TRAFFIC_CLASS_UNDEF) return std::clamp(configClass, 0, hi);
  return static_cast<int>(clampParam(p, 0, hi));
}

// A queue pair's partition key index (NCCL_IB_PKEY).
int qpPkeyIndex() { return static_cast<int>(clampParam(kIbPkey, 0, 65535)); }

uint32_t randomPsn() {
  static thread_local std::mt19937 gen(std::random_device{}());
  return gen() & 0xffffff;  // PSNs are 24 bits
}

// CQ, queue pairs (in INIT) and control memory for a comm of `nqps` queue pairs; fills c->local.
ncclResult_t createResources(IbComm* c, int nqps) {
  const IbDevice& d = c->net->device(c->dev);
  CHORUS_CHECK(c->net->openHca(c->dev, &c->hca));
  // Per request at most two completions per queue pair (under adaptive routing a sender's plain write and its
  // immediate), or one per queue pair plus a receiver's descriptor write.
  CHORUS_CHECK(c->hca->createCq(2 * kIbMaxRequests * (nqps + 1), &c->cq));
  for (int i = 0; i < nqps; ++i) {
    std::unique_ptr<IbQp> qp;
    CHORUS_CHECK(c->hca->createQp(c->cq.get(), 2 * kIbMaxRequests + 1, kIbMaxRequests + 1,
                                  c->inlineDescs ? static_cast<int>(sizeof(IbRecvDesc)) : 0, &qp));
    CHORUS_CHECK(qp->toInit(d.port.port, qpPkeyIndex(), /*remoteRead=*/false));
    c->qps.push_back(std::move(qp));
  }
  const size_t bytes = kIbMaxRequests * sizeof(IbRecvDesc);
  c->ctrl = static_cast<IbRecvDesc*>(aligned_alloc(4096, 4096));
  static_assert(kIbMaxRequests * sizeof(IbRecvDesc) <= 4096, "control memory is one page");
  if (c->ctrl == nullptr)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: cannot allocate %zu bytes of control memory", bytes);
  memset(static_cast<void*>(c->ctrl), 0, 4096);
  // Strictly ordered: a descriptor's sequence word must not land before the rest of it.
  CHORUS_CHECK(c->hca->regMr(c->ctrl, bytes, /*relaxed=*/false, &c->ctrlMr));

  IbConnInfo& l = c->local;
  l = IbConnInfo();
  l.nqps = static_cast<uint32_t>(nqps);
  l.fifoSlots = kIbMaxRequests;
  for (int i = 0; i < nqps; ++i) {
    l.qpn[i] = c->qps[i]->qpn();
    l.psn[i] = randomPsn();
  }
  l.gid = d.gid;
  l.ctrlAddr = reinterpret_cast<uintptr_t>(c->ctrl);
  l.ctrlRkey = c->ctrlMr.rkey;
  l.lid = static_cast<uint16_t>(d.port.lid);
  l.linkLayer = static_cast<uint8_t>(d.port.linkLayer);
  l.mtu = static_cast<uint8_t>(d.port.activeMtu);
  l.splitData = c->splitData ? 1 : 0;
  return ncclSuccess;
}

// Checks the peer's IbConnInfo against ours (`expectQps` > 0: the QP count must match).
ncclResult_t checkRemote(IbComm* c, int expectQps) {
  const IbConnInfo& r = c->remote;
  const IbDevice& d = c->net->device(c->dev);
  if (r.magic != kIbMagic) {
    CHORUS_FAIL(nullptr, ncclRemoteError,
                "NET/IB: %s: the peer's setup message has magic 0x%llx, not 0x%llx (another program, or another "
                "chorus version, is on the other side)",
                ibCommText(c).c_str(), static_cast<unsigned long long>(r.magic),
                static_cast<unsigned long long>(kIbMagic));
  }
  if (r.nqps < 1 || r.nqps > kIbMaxQps || (expectQps > 0 && static_cast<int>(r.nqps) != expectQps) ||
      r.fifoSlots != static_cast<uint32_t>(kIbMaxRequests)) {
    CHORUS_FAIL(nullptr, ncclRemoteError,
                "NET/IB: %s: the peer offers %u queue pairs and %u FIFO slots (expected %d and %d)",
                ibCommText(c).c_str(), r.nqps, r.fifoSlots, expectQps > 0 ? expectQps : static_cast<int>(r.nqps),
                kIbMaxRequests);
  }
  if (r.linkLayer != static_cast<uint8_t>(d.port.linkLayer)) {
    CHORUS_FAIL(nullptr, ncclRemoteError,
                "NET/IB: %s: link layers differ (ours %s, the peer's %s): InfiniBand and RoCE ports cannot connect",
                ibCommText(c).c_str(), d.port.linkLayer == IbLinkLayer::kEthernet ? "Ethernet" : "InfiniBand",
                r.linkLayer == static_cast<uint8_t>(IbLinkLayer::kEthernet) ? "Ethernet" : "InfiniBand");
  }
  return ncclSuccess;
}

// Moves `qp` on device `d` to RTR towards remote queue pair `qpn` (first PSN `remotePsn`) at `lid`/`gid` on a port of
// MTU code `mtu`, then to RTS with first PSN `psn`. `trafficClass` is the communicator's config.trafficClass;
// `fixedTc` (0-255), where not -1, is the queue pair's traffic class whatever the settings.
ncclResult_t connectQp(const IbDevice& d, IbQp* qp, uint32_t qpn, uint32_t remotePsn, int lid, const IbGid& gid,
                       int mtu, uint32_t psn, int trafficClass, int fixedTc = -1) {
  IbRtrAttr rtr;
  rtr.remoteQpn = qpn;
  rtr.remotePsn = remotePsn;
  rtr.remoteLid = lid;
  rtr.remoteGid = gid;
  // RoCE always routes by GID; InfiniBand ports of one subnet address each other by LID.
  rtr.global = d.port.linkLayer == IbLinkLayer::kEthernet;
  rtr.localGidIndex = d.gidIndex;
  rtr.mtu = d.port.activeMtu < mtu ? d.port.activeMtu : mtu;
  rtr.sl = qpClass(kIbSl, trafficClass, 15);
  rtr.trafficClass = fixedTc != -1 ? fixedTc : qpClass(kIbTc, trafficClass, 255);
  CHORUS_CHECK(qp->toRtr(d.port.port, rtr));
  IbRtsAttr rts;
  rts.psn = psn;
  rts.timeout = static_cast<int>(clampParam(kIbTimeout, 1, 31));
  rts.retryCnt = static_cast<int>(clampParam(kIbRetryCnt, 0, 7));
  return qp->toRts(rts);
}

// Moves every queue pair to RTR towards its peer queue pair, then to RTS.
ncclResult_t connectQps(IbComm* c) {
  const IbDevice& d = c->net->device(c->dev);
  const IbConnInfo& r = c->remote;
  // As NCCL: on RoCE a receiver's queue pairs, which send its receive descriptors, take NCCL_IB_FIFO_TC where set.
  const int fixedTc = !c->isSend && d.port.linkLayer == IbLinkLayer::kEthernet && kIbFifoTc.get() != -1
                          ? static_cast<int>(clampParam(kIbFifoTc, 0, 255))
                          : -1;
  for (size_t i = 0; i < c->qps.size(); ++i) {
    CHORUS_CHECK(connectQp(d, c->qps[i].get(), r.qpn[i], r.psn[i], r.lid, r.gid, r.mtu, c->local.psn[i],
                           c->trafficClass, fixedTc));
  }
  c->remoteFifoAddr = r.ctrlAddr;
  c->remoteFifoRkey = r.ctrlRkey;
  return ncclSuccess;
}

// A receiver's flush queue pair and sink (ib_comm.h), when GPU memory may be registered on its device and
// NCCL_GDR_FLUSH_DISABLE is 0: connected to itself (its own QP number, LID and GID, on its own port), and allowing
// remote reads, since it answers its own reads.
ncclResult_t createFlush(IbComm* c) {
  if (kGdrFlushDisable.get() != 0 || !(c->net->peerMemory(c->dev) || c->net->dmaBuf(c->dev))) return ncclSuccess;
  const IbDevice& d = c->net->device(c->dev);
  CHORUS_CHECK(c->hca->regMr(&c->flushSink, sizeof(c->flushSink), /*relaxed=*/false, &c->flushMr));
  std::unique_ptr<IbQp> qp;
  // One read per flush request, and flushes take request slots: at most kIbMaxRequests outstanding.
  CHORUS_CHECK(c->hca->createQp(c->cq.get(), kIbMaxRequests, 1, 0, &qp));
  CHORUS_CHECK(qp->toInit(d.port.port, qpPkeyIndex(), /*remoteRead=*/true));
  const uint32_t psn = randomPsn();
  CHORUS_CHECK(connectQp(d, qp.get(), qp->qpn(), psn, d.port.lid, d.gid, d.port.activeMtu, psn, c->trafficClass));
  c->flushQp = std::move(qp);
  return ncclSuccess;
}

// Sends (or receives) the rest of `len` bytes at `p`; *finished says whether all have gone.
ncclResult_t sendStep(IbComm* c, const void* p, size_t len, bool* finished) {
  IoResult r = c->sock.sendSome(p, len, &c->ioDone);
  if (!r.ok())
    CHORUS_FAIL(nullptr, ioToNccl(r), "NET/IB: %s: connection setup failed: %s", ibCommText(c).c_str(), r.what.c_str());
  *finished = c->ioDone == len;
  if (*finished) c->ioDone = 0;
  return ncclSuccess;
}

ncclResult_t recvStep(IbComm* c, void* p, size_t len, bool* finished) {
  IoResult r = c->sock.recvSome(p, len, &c->ioDone);
  if (!r.ok())
    CHORUS_FAIL(nullptr, ioToNccl(r), "NET/IB: %s: connection setup failed: %s", ibCommText(c).c_str(), r.what.c_str());
  *finished = c->ioDone == len;
  if (*finished) c->ioDone = 0;
  return ncclSuccess;
}

// Advances the connector as far as the socket allows; *up once the connection is usable.
ncclResult_t progressConnect(IbComm* c, bool* up) {
  bool fin = true;
  while (fin && c->state != kCDone) {
    switch (c->state) {
      case kCSendInfo:
        CHORUS_CHECK(sendStep(c, &c->local, sizeof(c->local), &fin));
        if (fin) c->state = kCRecvInfo;
        break;
      case kCRecvInfo:
        CHORUS_CHECK(recvStep(c, &c->remote, sizeof(c->remote), &fin));
        if (fin) {
          CHORUS_CHECK(checkRemote(c, static_cast<int>(c->qps.size())));
          CHORUS_CHECK(connectQps(c));
          c->readyWord = kIbReadyWord;
          c->state = kCSendReady;
        }
        break;
      case kCSendReady:
        CHORUS_CHECK(sendStep(c, &c->readyWord, sizeof(c->readyWord), &fin));
        if (fin) c->state = kCDone;
        break;
      default:
        CHORUS_FAIL(nullptr, ncclInternalError, "NET/IB: connector in unknown state %d", c->state);
    }
  }
  *up = c->state == kCDone;
  return ncclSuccess;
}

// Advances the acceptor as far as the sockets allow; *up once the connection is usable.
ncclResult_t progressAccept(IbListenComm* l, bool* up) {
  IbComm* c = l->pending.get();
  bool fin = true;
  while (fin && c->state != kADone) {
    switch (c->state) {
      case kAAccept: {
        IoResult r = l->listener.tryAccept(&c->sock);
        if (!r.ok()) CHORUS_FAIL(nullptr, ioToNccl(r), "NET/IB: accept failed: %s", r.what.c_str());
        fin = c->sock.valid();
        if (fin) c->state = kARecvInfo;
        break;
      }
      case kARecvInfo:
        CHORUS_CHECK(recvStep(c, &c->remote, sizeof(c->remote), &fin));
        if (fin) {
          CHORUS_CHECK(checkRemote(c, 0));
          c->splitData = c->remote.splitData != 0;
          c->inlineDescs = kIbUseInline.get() != 0;
          CHORUS_CHECK(createResources(c, static_cast<int>(c->remote.nqps)));
          CHORUS_CHECK(connectQps(c));
          CHORUS_CHECK(createFlush(c));
          c->state = kASendInfo;
        }
        break;
      case kASendInfo:
        CHORUS_CHECK(sendStep(c, &c->local, sizeof(c->local), &fin));
        if (fin) c->state = kARecvReady;
        break;
      case kARecvReady:
        CHORUS_CHECK(recvStep(c, &c->readyWord, sizeof(c->readyWord), &fin));
        if (fin) {
          if (c->readyWord != kIbReadyWord) {
            CHORUS_FAIL(nullptr, ncclRemoteError, "NET/IB: %s: bad ready word 0x%x from the peer",
                        ibCommText(c).c_str(), c->readyWord);
          }
          c->state = kADone;
        }
        break;
      default:
        CHORUS_FAIL(nullptr, ncclInternalError, "NET/IB: acceptor in unknown state %d", c->state);
    }
  }
  *up = c->state == kADone;
  return ncclSuccess;
}

ncclResult_t checkDev(IbNet* net, int dev) {
  if (net == nullptr) CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/IB: the net is not initialized");
  if (dev < 0 || dev >= net->ndev()) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: device %d does not exist (%d devices)", dev, net->ndev());
  }
  return ncclSuccess;
}

}  // namespace

// ---- handle ---------------------------------------------------------------------------------

void packIbHandle(const SockAddr& addr, void* out) {
  memset(out, 0, NCCL_NET_HANDLE_MAXSIZE);
  IbHandle h;
  h.addr = packAddr(addr);
  memcpy(out, &h, sizeof(h));
}

bool unpackIbHandle(const void* handle, SockAddr* addr, std::string* why) {
  IbHandle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kIbMagic) {
    char buf[96];
    snprintf(buf, sizeof(buf), "the handle's magic is 0x%llx, not the IB net's 0x%llx",
             static_cast<unsigned long long>(h.magic), static_cast<unsigned long long>(kIbMagic));
    *why = buf;
    return false;
  }
  if (!unpackAddr(h.addr, addr) || addr->family() == AF_UNSPEC) {
    *why = "the handle holds no readable address";
    return false;
  }
  return true;
}

IbConnectStage ibHandleStage(const void* handle) {
  IbConnectStage s;
  memcpy(&s, static_cast<const char*>(handle) + offsetof(IbHandle, stage), sizeof(s));
  return s;
}

void setIbHandleStage(void* handle, const IbConnectStage& stage) {
  memcpy(static_cast<char*>(handle) + offsetof(IbHandle, stage), &stage, sizeof(stage));
}

// ---- comms ----------------------------------------------------------------------------------

IbComm::~IbComm() {
  flushQp.reset();  // queue pairs go before their CQ
  qps.clear();
  cq.reset();
  if (ctrlMr.impl != nullptr && hca != nullptr) hca->deregMr(&ctrlMr);
  if (flushMr.impl != nullptr && hca != nullptr) hca->deregMr(&flushMr);
  free(ctrl);
}

IbNetCtx::~IbNetCtx() {
  for (IbComm* c : connecting) delete c;
}

std::string ibCommText(const IbComm* c) {
  std::string who = c->isSend ? "sender" : "receiver";
  const IbDevice& d = c->net->device(c->dev);
  who += " on " + d.name + ":" + std::to_string(d.port.port);
  if (c->sock.valid()) who += (c->isSend ? " to " : " from ") + c->sock.peer().str();
  return who;
}

ncclResult_t ibListen(void* ctx, int dev, void* handle, void** listenComm) {
  *listenComm = nullptr;
  IbNet* net = static_cast<IbNetCtx*>(ctx)->net;
  CHORUS_CHECK(checkDev(net, dev));
  SockAddr addr;
  std::string ifName, why;
  if (findInterface(&addr, &ifName, &why) != ncclSuccess) {
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: no interface for connection setup: %s", why.c_str());
  }
  addr.setPort(0);
  auto l = std::make_unique<IbListenComm>();
  l->net = net;
  l->dev = dev;
  l->trafficClass = static_cast<IbNetCtx*>(ctx)->trafficClass;
  IoResult r = Socket::listen(addr, &l->listener);
  if (!r.ok()) CHORUS_FAIL(nullptr, ioToNccl(r), "NET/IB: cannot listen for connections: %s", r.what.c_str());
  packIbHandle(l->listener.local(), handle);
  INFO(kNet, "NET/IB: listening on %s (%s) for %s:%d", l->listener.local().str().c_str(), ifName.c_str(),
       net->device(dev).name.c_str(), net->device(dev).port.port);
  *listenComm = l.release();
  return ncclSuccess;
}

ncclResult_t ibConnect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm) {
  *sendComm = nullptr;
  if (sendDevComm != nullptr) *sendDevComm = nullptr;
  IbConnectStage stage = ibHandleStage(handle);
  std::unique_ptr<IbComm> c(static_cast<IbComm*>(stage.comm));
  if (c == nullptr) {
    IbNet* net = static_cast<IbNetCtx*>(ctx)->net;
    CHORUS_CHECK(checkDev(net, dev));
    SockAddr to;
    std::string why;
    if (!unpackIbHandle(handle, &to, &why)) {
      CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: connect refused a handle: %s", why.c_str());
    }
    c = std::make_unique<IbComm>();
    c->net = net;
    c->dev = dev;
    c->trafficClass = static_cast<IbNetCtx*>(ctx)->trafficClass;
    c->isSend = true;
    c->splitData = kIbSplitData.get() != 0;
    // As NCCL's: on for InfiniBand ports unless NCCL_IB_ADAPTIVE_ROUTING says otherwise.
    c->adaptiveRouting = kIbAdaptiveRouting.get() != -2 ? kIbAdaptiveRouting.get() != 0
                                                        : net->device(dev).port.linkLayer == IbLinkLayer::kInfiniband;
    // As NCCL's: -2 keeps the default.
    const int64_t arThreshold = kIbArThreshold.get();
    c->arThreshold =
        static_cast<uint64_t>(arThreshold == -2 ? kIbArThresholdDefault : std::max<int64_t>(0, arThreshold));
    // The listener exists before its handle is handed out, so the kernel completes this TCP handshake without the
    // acceptor's help: the wait is one round trip, and a refusal ends it at once (no retries).
    IoResult r = Socket::connect(to, Deadline::fromEnv(), nullptr, &c->sock, [](int) { return true; });
    if (!r.ok())
      CHORUS_FAIL(nullptr, ioToNccl(r), "NET/IB: cannot reach the listener at %s: %s", to.str().c_str(),
                  r.what.c_str());
    CHORUS_CHECK(createResources(c.get(), static_cast<int>(clampParam(kIbQpsPerConn, 1, kIbMaxQps))));
    c->state = kCSendInfo;
  }
  auto* x = static_cast<IbNetCtx*>(ctx);
  x->connecting.erase(std::remove(x->connecting.begin(), x->connecting.end(), c.get()), x->connecting.end());
  bool up = false;
  ncclResult_t res = progressConnect(c.get(), &up);
  if (res != ncclSuccess) {
    setIbHandleStage(handle, IbConnectStage());
    return res;  // c is released here
  }
  if (up) {
    char ar[96] = "";
    if (c->adaptiveRouting)
      snprintf(ar, sizeof(ar), "; adaptive routing: messages above %llu bytes as a plain write, then the immediate",
               static_cast<unsigned long long>(c->arThreshold));
    INFO(kNet, "NET/IB: %s connected with %zu queue pair(s), %s%s", ibCommText(c.get()).c_str(), c->qps.size(),
         c->splitData ? "each message split over them" : "messages taking them in turn", ar);
    setIbHandleStage(handle, IbConnectStage());
    *sendComm = c.release();
  } else {
    stage.state = static_cast<uint32_t>(c->state);
    stage.comm = c.get();
    x->connecting.push_back(c.release());
    setIbHandleStage(handle, stage);
  }
  return ncclSuccess;
}

ncclResult_t ibAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm) {
  *recvComm = nullptr;
  if (recvDevComm != nullptr) *recvDevComm = nullptr;
  auto* l = static_cast<IbListenComm*>(listenComm);
  if (l->pending == nullptr) {
    l->pending = std::make_unique<IbComm>();
    l->pending->net = l->net;
    l->pending->dev = l->dev;
    l->pending->trafficClass = l->trafficClass;
    l->pending->state = kAAccept;
  }
  bool up = false;
  ncclResult_t res = progressAccept(l, &up);
  if (res != ncclSuccess) {
    l->pending.reset();
    return res;
  }
  if (up) {
    INFO(kNet, "NET/IB: %s accepted with %zu queue pair(s)%s", ibCommText(l->pending.get()).c_str(),
         l->pending->qps.size(), l->pending->flushQp != nullptr ? " and a GPUDirect RDMA flush queue pair" : "");
    *recvComm = l->pending.release();
  }
  return ncclSuccess;
}

ncclResult_t ibCloseComm(void* comm) {
  delete static_cast<IbComm*>(comm);
  return ncclSuccess;
}

ncclResult_t ibCloseListen(void* listenComm) {
  delete static_cast<IbListenComm*>(listenComm);
  return ncclSuccess;
}

}  // namespace chorus
