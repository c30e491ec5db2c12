// IB net connection setup: the listen handle, the non-blocking connect/accept handshakes over TCP, and moving the
// queue pairs INIT -> RTR -> RTS.
//
// Handshake (each step is one call's worth of non-blocking socket I/O; a call that cannot finish returns a null comm):
//   connector: TCP connect, create CQ/QPs (INIT) and the receive FIFO, query their ECE, send its IbConnInfo
//   acceptor:  accept, receive it, create CQ/QPs with the connector's QP count, set the connector's ECE, RTR+RTS,
//              query the agreed ECE, send its IbConnInfo
//   connector: receive it, set the acceptor's ECE, RTR+RTS, send kIbReadyWord; connect() returns the send comm
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
IntParam kIbEceEnable{"NCCL_IB_ECE_ENABLE", 1,
                      "IB net: 1: enhanced connection establishment, as NCCL: a connector sends the ECE options its "
                      "queue pairs' provider offers (ibv_query_ece), the acceptor sets them on its queue pairs "
                      "(ibv_set_ece) and answers with what it agreed, which the connector sets on its own; 0: no ECE. "
                      "The connector's setting rules the connection. Providers without ECE skip it.",
                      "network"};
IntParam kIbPkey{"NCCL_IB_PKEY", 0, "IB net: the partition key index of the queue pairs (0-65535), as in NCCL.",
                 "network"};
IntParam kIbTc{"NCCL_IB_TC", 0,
               "IB net: traffic class of the queue pairs (RoCE; 0-255). Unset: the communicator's "
               "config.trafficClass where set, as in NCCL, else 0.",
               "network"};

enum ConnectState : uint32_t { kCSendInfo = 1, kCRecvInfo, kCSendReady, kCDone };
enum AcceptState : int { kAAccept = 0, kARecvInfo, kASendInfo, kARecvReady, kADone };

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

// The ports of the comm's net device, each with its HCA, a CQ and the control memory registered there; then `nqps`
// queue pairs (in INIT), queue pair i on port i mod ports; fills c->local.
ncclResult_t createResources(IbComm* c, int nqps) {
  const std::vector<int> ports = c->net->ports(c->dev);
  const size_t bytes = kIbMaxRequests * sizeof(IbRecvDesc);
  c->ctrl = static_cast<IbRecvDesc*>(aligned_alloc(4096, 4096));
  static_assert(kIbMaxRequests * sizeof(IbRecvDesc) <= 4096, "control memory is one page");
  if (c->ctrl == nullptr)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: cannot allocate %zu bytes of control memory", bytes);
  memset(static_cast<void*>(c->ctrl), 0, 4096);
  // Queue pairs on each port (and their share of the CQ entries below).
  const int perPort = (nqps + static_cast<int>(ports.size()) - 1) / static_cast<int>(ports.size());
  c->ports.resize(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) {
    IbCommPort& p = c->ports[i];
    p.dev = ports[i];
    CHORUS_CHECK(c->net->openHca(p.dev, &p.hca));
    std::string dead;
    if (c->net->hcaFatal(p.hca, &dead)) CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: %s", dead.c_str());
    // Per request at most two completions per queue pair (under adaptive routing a sender's plain write and its
    // immediate), or one per queue pair plus a receiver's descriptor write and flush read.
    CHORUS_CHECK(p.hca->createCq(2 * kIbMaxRequests * (perPort + 1), &p.cq));
    c->net->own(p.cq.get(), c);
    // Strictly ordered: a descriptor's sequence word must not land before the rest of it.
    CHORUS_CHECK(p.hca->regMr(c->ctrl, bytes, /*relaxed=*/false, &p.ctrlMr));
  }
  for (int i = 0; i < nqps; ++i) {
    IbCommPort& p = c->portOf(static_cast<size_t>(i));
    std::unique_ptr<IbQp> qp;
    CHORUS_CHECK(p.hca->createQp(p.cq.get(), 2 * kIbMaxRequests + 1, kIbMaxRequests + 1,
                                 c->inlineDescs ? static_cast<int>(sizeof(IbRecvDesc)) : 0, &qp));
    c->net->own(qp.get(), c);
    CHORUS_CHECK(qp->toInit(c->net->device(p.dev).port.port, qpPkeyIndex(), /*remoteRead=*/false));
    c->qps.push_back(std::move(qp));
  }

  IbConnInfo& l = c->local;
  l = IbConnInfo();
  l.nqps = static_cast<uint32_t>(nqps);
  l.fifoSlots = kIbMaxRequests;
  for (int i = 0; i < nqps; ++i) {
    l.qpn[i] = c->qps[i]->qpn();
    l.psn[i] = randomPsn();
  }
  l.ports = static_cast<uint32_t>(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) {
    const IbDevice& d = c->net->device(ports[i]);
    l.port[i].gid = d.gid;
    l.port[i].ctrlRkey = c->ports[i].ctrlMr.rkey;
    l.port[i].lid = static_cast<uint16_t>(d.port.lid);
    l.port[i].mtu = static_cast<uint8_t>(d.port.activeMtu);
  }
  l.ctrlAddr = reinterpret_cast<uintptr_t>(c->ctrl);
  l.linkLayer = static_cast<uint8_t>(c->net->device(ports[0]).port.linkLayer);
  l.splitData = c->splitData ? 1 : 0;
  // The connector offers its queue pairs' ECE options (the acceptor answers with what it agreed: agreeEce).
  if (c->isSend && kIbEceEnable.get() != 0) {
    for (int i = 0; i < nqps; ++i) {
      bool supported = false;
      CHORUS_CHECK(c->qps[i]->queryEce(&l.ece[i].ece, &supported));
      l.ece[i].supported = supported ? 1 : 0;
    }
  }
  return ncclSuccess;
}

// Before RTR: sets on each queue pair the ECE options the peer sent for it (the connector's offer on an acceptor, the
// acceptor's agreement on a connector), as NCCL. An acceptor records whether its own provider took them; a side
// without ECE takes none.
ncclResult_t takeRemoteEce(IbComm* c) {
  for (size_t i = 0; i < c->qps.size(); ++i) {
    bool supported = false;
    if (c->remote.ece[i].supported != 0) CHORUS_CHECK(c->qps[i]->setEce(c->remote.ece[i].ece, &supported));
    if (!c->isSend) c->local.ece[i].supported = supported ? 1 : 0;
  }
  if (!c->qps.empty() && c->remote.ece[0].supported != 0) {
    const IbEce& e = c->remote.ece[0].ece;
    INFO(kNet, "NET/IB: %s: ECE of the peer set (vendor 0x%x, options 0x%x, comp_mask 0x%x on queue pair 0)%s",
         ibCommText(c).c_str(), e.vendorId, e.options, e.compMask,
         c->isSend || c->local.ece[0].supported != 0 ? "" : ", not supported here");
  }
  return ncclSuccess;
}

// After RTR, on an acceptor: the ECE options each queue pair agreed, to answer the connector with.
ncclResult_t agreeEce(IbComm* c) {
  for (size_t i = 0; i < c->qps.size(); ++i) {
    if (c->remote.ece[i].supported == 0 || c->local.ece[i].supported == 0) continue;
    bool supported = false;
    CHORUS_CHECK(c->qps[i]->queryEce(&c->local.ece[i].ece, &supported));
    c->local.ece[i].supported = supported ? 1 : 0;
  }
  return ncclSuccess;
}

// Checks the peer's IbConnInfo against ours (`expectQps` > 0: the QP count must match; `expectPorts` > 0: the port
// count must).
ncclResult_t checkRemote(IbComm* c, int expectQps, int expectPorts) {
  const IbConnInfo& r = c->remote;
  const IbDevice& d = c->net->device(c->net->ports(c->dev)[0]);
  if (r.magic != kIbMagic) {
    CHORUS_FAIL(nullptr, ncclRemoteError,
                "NET/IB: %s: the peer's setup message has magic 0x%llx, not 0x%llx (another program, or another "
                "chorus version, is on the other side)",
                ibCommText(c).c_str(), static_cast<unsigned long long>(r.magic),
                static_cast<unsigned long long>(kIbMagic));
  }
  if (r.ports < 1 || r.ports > static_cast<uint32_t>(kIbMaxDevs) ||
      (expectPorts > 0 && r.ports != static_cast<uint32_t>(expectPorts))) {
    CHORUS_FAIL(nullptr, ncclRemoteError, "NET/IB: %s: the peer's net device has %u ports (expected %d)",
                ibCommText(c).c_str(), r.ports, expectPorts > 0 ? expectPorts : kIbMaxDevs);
  }
  // Every port of either side has a queue pair.
  const uint32_t least = std::max<uint32_t>(r.ports, static_cast<uint32_t>(c->net->ports(c->dev).size()));
  if (r.nqps < least || r.nqps > kIbMaxQps || (expectQps > 0 && static_cast<int>(r.nqps) != expectQps) ||
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

// Moves `qp` on port `d` to RTR towards remote queue pair `qpn` (first PSN `remotePsn`) at the remote port `at`, then
// to RTS with first PSN `psn`. `trafficClass` is the communicator's config.trafficClass; `fixedTc` (0-255), where not
// -1, is the queue pair's traffic class whatever the settings.
ncclResult_t connectQp(const IbDevice& d, IbQp* qp, uint32_t qpn, uint32_t remotePsn, const IbPortInfo& at,
                       uint32_t psn, int trafficClass, int fixedTc = -1) {
  IbRtrAttr rtr;
  rtr.remoteQpn = qpn;
  rtr.remotePsn = remotePsn;
  rtr.remoteLid = at.lid;
  rtr.remoteGid = at.gid;
  // RoCE always routes by GID; InfiniBand ports of one subnet address each other by LID.
  rtr.global = d.port.linkLayer == IbLinkLayer::kEthernet;
  if (d.port.linkLayer == IbLinkLayer::kInfiniband && ibGidLocalSubnet(d.gid) != ibGidLocalSubnet(at.gid)) {
    // As NCCL: a port on another subnet is reached through the routers, by its GID, with its FLID as the LID.
    rtr.global = true;
    if (ibGidFlid(at.gid) != 0) {
      rtr.remoteLid = ibGidFlid(at.gid);
    } else {
      WARN("NET/IB: %s:%d: the peer's port (GID %s) is on another subnet but has no FLID; addressing its LID %d",
           d.name.c_str(), d.port.port, ibGidText(at.gid).c_str(), at.lid);
    }
  }
  rtr.localGidIndex = d.gidIndex;
  rtr.mtu = d.port.activeMtu < at.mtu ? d.port.activeMtu : at.mtu;
  rtr.sl = qpClass(kIbSl, trafficClass, 15);
  rtr.trafficClass = fixedTc != -1 ? fixedTc : qpClass(kIbTc, trafficClass, 255);
  CHORUS_CHECK(qp->toRtr(d.port.port, rtr));
  IbRtsAttr rts;
  rts.psn = psn;
  rts.timeout = static_cast<int>(clampParam(kIbTimeout, 1, 31));
  rts.retryCnt = static_cast<int>(clampParam(kIbRetryCnt, 0, 7));
  return qp->toRts(rts);
}

// Moves every queue pair to RTR towards its peer queue pair (queue pair i to the peer's i, on the peer's port
// i mod ports), then to RTS.
ncclResult_t connectQps(IbComm* c) {
  const IbConnInfo& r = c->remote;
  const bool roce = c->net->device(c->ports[0].dev).port.linkLayer == IbLinkLayer::kEthernet;
  // As NCCL: on RoCE a receiver's queue pairs, which send its receive descriptors, take NCCL_IB_FIFO_TC where set.
  const int fixedTc =
      !c->isSend && roce && kIbFifoTc.get() != -1 ? static_cast<int>(clampParam(kIbFifoTc, 0, 255)) : -1;
  c->remotePorts = static_cast<int>(r.ports);
  for (size_t i = 0; i < c->qps.size(); ++i) {
    CHORUS_CHECK(connectQp(c->net->device(c->portOf(i).dev), c->qps[i].get(), r.qpn[i], r.psn[i], r.port[i % r.ports],
                           c->local.psn[i], c->trafficClass, fixedTc));
  }
  // Descriptors go on queue pair 0, to the peer's port 0.
  c->remoteFifoAddr = r.ctrlAddr;
  c->remoteFifoRkey = r.port[0].ctrlRkey;
  return ncclSuccess;
}

// A receiver's flush queue pair and sink registration on each port (ib_comm.h), when GPU memory may be registered on
// its device and NCCL_GDR_FLUSH_DISABLE is 0: connected to itself (its own QP number, LID and GID, on its own port),
// and allowing remote reads, since it answers its own reads.
ncclResult_t createFlush(IbComm* c) {
  if (kGdrFlushDisable.get() != 0 || !(c->net->peerMemory(c->dev) || c->net->dmaBuf(c->dev))) return ncclSuccess;
  for (IbCommPort& p : c->ports) {
    const IbDevice& d = c->net->device(p.dev);
    CHORUS_CHECK(p.hca->regMr(&c->flushSink, sizeof(c->flushSink), /*relaxed=*/false, &p.flushMr));
    std::unique_ptr<IbQp> qp;
    // One read per flush request, and flushes take request slots: at most kIbMaxRequests outstanding.
    CHORUS_CHECK(p.hca->createQp(p.cq.get(), kIbMaxRequests, 1, 0, &qp));
    c->net->own(qp.get(), c);
    CHORUS_CHECK(qp->toInit(d.port.port, qpPkeyIndex(), /*remoteRead=*/true));
    const uint32_t psn = randomPsn();
    IbPortInfo self;
    self.gid = d.gid;
    self.lid = static_cast<uint16_t>(d.port.lid);
    self.mtu = static_cast<uint8_t>(d.port.activeMtu);
    CHORUS_CHECK(connectQp(d, qp.get(), qp->qpn(), psn, self, psn, c->trafficClass));
    p.flushQp = std::move(qp);
  }
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
          CHORUS_CHECK(checkRemote(c, static_cast<int>(c->qps.size()), c->remotePorts));
          CHORUS_CHECK(takeRemoteEce(c));
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
          CHORUS_CHECK(checkRemote(c, 0, 0));
          c->splitData = c->remote.splitData != 0;
          c->inlineDescs = kIbUseInline.get() != 0;
          CHORUS_CHECK(createResources(c, static_cast<int>(c->remote.nqps)));
          CHORUS_CHECK(takeRemoteEce(c));
          CHORUS_CHECK(connectQps(c));
          CHORUS_CHECK(agreeEce(c));
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
  if (net->ports(dev).empty()) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: device %d does not exist (%d devices)", dev, net->ndev());
  }
  return ncclSuccess;
}

}  // namespace

// ---- handle ---------------------------------------------------------------------------------

void packIbHandle(const SockAddr& addr, int ports, void* out) {
  memset(out, 0, NCCL_NET_HANDLE_MAXSIZE);
  IbHandle h;
  h.addr = packAddr(addr);
  h.ports = static_cast<uint32_t>(ports);
  memcpy(out, &h, sizeof(h));
}

bool unpackIbHandle(const void* handle, SockAddr* addr, int* ports, std::string* why) {
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
  if (h.ports < 1 || h.ports > static_cast<uint32_t>(kIbMaxDevs)) {
    *why = "the handle's net device has " + std::to_string(h.ports) + " ports";
    return false;
  }
  *ports = static_cast<int>(h.ports);
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
  if (net != nullptr) net->disown(this);          // before its queue pairs and CQs go: their events are no longer its
  for (IbCommPort& p : ports) p.flushQp.reset();  // queue pairs go before their CQs
  qps.clear();
  for (IbCommPort& p : ports) {
    p.cq.reset();
    if (p.ctrlMr.impl != nullptr) p.hca->deregMr(&p.ctrlMr);
    if (p.flushMr.impl != nullptr) p.hca->deregMr(&p.flushMr);
  }
  free(ctrl);
}

IbNetCtx::~IbNetCtx() {
  for (IbComm* c : connecting) delete c;
}

std::string ibCommText(const IbComm* c) {
  std::string who = c->isSend ? "sender" : "receiver";
  who += " on " + c->net->deviceText(c->dev);
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
  packIbHandle(l->listener.local(), static_cast<int>(net->ports(dev).size()), handle);
  INFO(kNet, "NET/IB: listening on %s (%s) for %s", l->listener.local().str().c_str(), ifName.c_str(),
       net->deviceText(dev).c_str());
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
    int remotePorts = 1;
    std::string why;
    if (!unpackIbHandle(handle, &to, &remotePorts, &why)) {
      CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: connect refused a handle: %s", why.c_str());
    }
    c = std::make_unique<IbComm>();
    c->net = net;
    c->dev = dev;
    c->trafficClass = static_cast<IbNetCtx*>(ctx)->trafficClass;
    c->isSend = true;
    c->remotePorts = remotePorts;
    c->splitData = kIbSplitData.get() != 0;
    // As NCCL's: on for InfiniBand ports unless NCCL_IB_ADAPTIVE_ROUTING says otherwise.
    c->adaptiveRouting = kIbAdaptiveRouting.get() != -2
                             ? kIbAdaptiveRouting.get() != 0
                             : net->device(net->ports(dev)[0]).port.linkLayer == IbLinkLayer::kInfiniband;
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
    // As NCCL: NCCL_IB_QPS_PER_CONNECTION for each port of the side whose net device has more.
    const int ports = std::max(remotePorts, static_cast<int>(net->ports(dev).size()));
    CHORUS_CHECK(createResources(c.get(), static_cast<int>(clampParam(kIbQpsPerConn, 1, kIbMaxQpsPerConn)) * ports));
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
    INFO(kNet, "NET/IB: %s connected with %zu queue pair(s) to %d port(s), %s%s", ibCommText(c.get()).c_str(),
         c->qps.size(), c->remotePorts, c->splitData ? "each message split over them" : "messages taking them in turn",
         ar);
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
    INFO(kNet, "NET/IB: %s accepted with %zu queue pair(s) from %d port(s)%s", ibCommText(l->pending.get()).c_str(),
         l->pending->qps.size(), l->pending->remotePorts,
         l->pending->flushes() ? " and GPUDirect RDMA flush queue pairs" : "");
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
