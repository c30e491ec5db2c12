// The small slice of InfiniBand verbs the IB net uses, behind an interface.
//
// The IB net's state machine (transports/ib/ib_comm.h) never calls libibverbs itself: it calls these classes. Two
// backends implement them:
//  - the real one (ib_verbs_real.cc), which opens libibverbs.so.1 with dlopen at run time (so libnccl.so.2 loads on
//    hosts without it) and exists only when chorus was built with the verbs headers (CHORUS_HAVE_VERBS);
//  - a fake, in-process one (tests/unit/ib_verbs_fake.h), whose RDMA writes and reads are memcpys to or from another
//    queue pair's registered memory and whose completion queues are plain queues, so that the whole net runs in tests
//    on any machine.
//
// Nothing here depends on verbs.h: the numeric codes below (MTU, link layer, completion status) are the verbs
// values where one exists, and each backend translates at its edge.
//
// Ownership: an IbVerbs opens IbHca objects (a device context and protection domain); an IbHca makes IbCq, IbQp and
// memory registrations, which must be released before it is. Each object is used by one thread at a time, except an
// IbHca's asynchronous events, which the net's watcher thread takes while other threads use the HCA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus {

/// A port's link layer.
enum class IbLinkLayer : int { kUnknown = 0, kInfiniband = 1, kEthernet = 2 };

/// What a GID table entry is, as /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i> says.
enum class IbGidType : int { kUnknown = 0, kIbRoceV1 = 1, kRoceV2 = 2 };

/// A 16-byte GID (an IPv6 address in form; RoCE v2 GIDs of IPv4 addresses are IPv4-mapped, ::ffff:a.b.c.d).
struct IbGid {
  uint8_t raw[16] = {0};
};

/// One entry of a port's GID table.
struct IbGidEntry {
  IbGid gid;
  IbGidType type = IbGidType::kUnknown;
};

/// One port of one HCA as discovery sees it: filled from verbs on a real host, made up in tests.
struct IbPortDesc {
  std::string hca;      ///< device name ("mlx5_0")
  std::string pciPath;  ///< realpath of /sys/class/infiniband/<hca>/device, or empty
  uint64_t guid = 0;    ///< node GUID, host byte order
  int port = 1;         ///< port number (1-based)
  bool active = false;  ///< port state is ACTIVE
  IbLinkLayer linkLayer = IbLinkLayer::kUnknown;
  int lid = 0;                   ///< port LID (InfiniBand)
  int activeMtu = 5;             ///< verbs MTU code: 1 = 256 B .. 5 = 4096 B
  int activeSpeed = 0;           ///< ibv_port_attr.active_speed (one bit per lane rate)
  int activeWidth = 0;           ///< ibv_port_attr.active_width (one bit per lane count)
  int maxQp = 0;                 ///< ibv_device_attr.max_qp
  std::vector<IbGidEntry> gids;  ///< the GID table (all-zero entries are unset)
};

/// A memory registration: the keys a work request names it by.
struct IbMr {
  void* impl = nullptr;  ///< the backend's object (ibv_mr*, or the fake's record)
  uint64_t addr = 0;
  size_t size = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

/// One signaled RDMA write (with immediate data when `withImm`); `length` may be 0.
struct IbWrite {
  uint64_t wrId = 0;
  const void* local = nullptr;
  size_t length = 0;
  uint32_t lkey = 0;
  uint64_t remoteAddr = 0;
  uint32_t rkey = 0;
  bool withImm = false;
  uint32_t imm = 0;  ///< host byte order; the backend converts for the wire
  /// The HCA takes the bytes as the write is posted (IBV_SEND_INLINE): `lkey` is not used, `length` is at most the
  /// queue pair's maxInline.
  bool inlineData = false;
};

/// One signaled RDMA read of `length` bytes from remote memory into a registered local buffer.
struct IbRead {
  uint64_t wrId = 0;
  void* local = nullptr;
  size_t length = 0;
  uint32_t lkey = 0;
  uint64_t remoteAddr = 0;
  uint32_t rkey = 0;
};

/// Completion status codes: the values of enum ibv_wc_status for the ones the net names.
enum IbWcStatus : int {
  kIbWcSuccess = 0,
  kIbWcLocLenErr = 1,
  kIbWcLocProtErr = 4,
  kIbWcWrFlushErr = 5,
  kIbWcRemAccessErr = 10,
  kIbWcRetryExcErr = 12,
  kIbWcRnrRetryExcErr = 13,
};

/// One completion. For an error only wrId, status, vendorErr and qpn are meaningful (as in verbs).
struct IbWc {
  uint64_t wrId = 0;
  int status = kIbWcSuccess;
  int vendorErr = 0;
  uint32_t qpn = 0;
  bool recvImm = false;  ///< a receive consumed by an RDMA write with immediate
  uint32_t imm = 0;      ///< host byte order
  uint32_t byteLen = 0;
};

/// A queue pair's enhanced connection establishment options (struct ibv_ece): what its provider offers, or what it
/// agreed with the peer's.
struct IbEce {
  uint32_t vendorId = 0;  ///< the provider's IEEE OUI
  uint32_t options = 0;   ///< provider-specific option bits
  uint32_t compMask = 0;
};

/// What RTR needs to know about the remote queue pair.
struct IbRtrAttr {
  uint32_t remoteQpn = 0;
  uint32_t remotePsn = 0;
  int remoteLid = 0;  ///< InfiniBand: the peer's LID, or its FLID on another subnet
  IbGid remoteGid;
  bool global = false;  ///< route by GID (RoCE, or IB through a router)
  int localGidIndex = 0;
  int mtu = 5;  ///< verbs MTU code
  int sl = 0;
  int trafficClass = 0;
};

/// What RTS needs.
struct IbRtsAttr {
  uint32_t psn = 0;
  int timeout = 20;  ///< 4.096 us * 2^timeout per try
  int retryCnt = 7;
};

/// Asynchronous event types: the values of enum ibv_event_type.
enum IbEventType : int {
  kIbEventCqErr = 0,
  kIbEventQpFatal = 1,
  kIbEventQpReqErr = 2,
  kIbEventQpAccessErr = 3,
  kIbEventCommEst = 4,
  kIbEventSqDrained = 5,
  kIbEventPathMig = 6,
  kIbEventPathMigErr = 7,
  kIbEventDeviceFatal = 8,
  kIbEventPortActive = 9,
  kIbEventPortErr = 10,
  kIbEventLidChange = 11,
  kIbEventPkeyChange = 12,
  kIbEventSmChange = 13,
  kIbEventSrqErr = 14,
  kIbEventSrqLimitReached = 15,
  kIbEventQpLastWqeReached = 16,
  kIbEventClientReregister = 17,
  kIbEventGidChange = 18,
  kIbEventWqFatal = 19,
};

/// libibverbs's text of an event type ("local catastrophic error"), or "unknown event".
const char* ibEventText(int type);

class IbQp;
class IbCq;

/// One asynchronous event of an HCA, as ibv_get_async_event reports it. Which of the elements is set depends on the
/// type: `qp` and `qpn` for a queue pair's events, `cq` for kIbEventCqErr, `port` for a port's.
struct IbAsyncEvent {
  int type = 0;        ///< an IbEventType
  IbQp* qp = nullptr;  ///< the net's queue pair object (not the backend's)
  uint32_t qpn = 0;    ///< its number
  IbCq* cq = nullptr;  ///< the net's CQ object
  int port = 0;        ///< port number (1-based)
};

/// A completion queue.
class IbCq {
 public:
  virtual ~IbCq() = default;
  /// Takes up to `max` completions into `out`; *n says how many (0 when none).
  virtual ncclResult_t poll(int max, IbWc* out, int* n) = 0;
};

/// An RC queue pair whose send and receive completions go to one CQ.
class IbQp {
 public:
  virtual ~IbQp() = default;
  /// The queue pair number the peer addresses.
  virtual uint32_t qpn() const = 0;
  /// RESET -> INIT on `port` with partition key `pkeyIndex` (an index into the port's P_Key table), allowing remote
  /// writes, and remote reads too when `remoteRead` (a queue pair that RDMA-reads from itself, as the flush queue pair
  /// does, is the responder of its own reads).
  virtual ncclResult_t toInit(int port, int pkeyIndex, bool remoteRead) = 0;
  /// INIT -> RTR towards the remote queue pair.
  virtual ncclResult_t toRtr(int port, const IbRtrAttr& attr) = 0;
  /// RTR -> RTS.
  virtual ncclResult_t toRts(const IbRtsAttr& attr) = 0;
  /// The queue pair's ECE options (ibv_query_ece): before RTR what its provider offers, after it what was agreed.
  /// *supported false, and no error, when libibverbs or the provider has no ECE.
  virtual ncclResult_t queryEce(IbEce* out, bool* supported) = 0;
  /// Asks for the peer's ECE options (ibv_set_ece), before RTR; the provider keeps those it supports too. *supported
  /// false, and no error, when libibverbs or the provider has no ECE.
  virtual ncclResult_t setEce(const IbEce& ece, bool* supported) = 0;
  /// Posts one signaled RDMA write.
  virtual ncclResult_t postWrite(const IbWrite& w) = 0;
  /// Posts one signaled RDMA read.
  virtual ncclResult_t postRead(const IbRead& r) = 0;
  /// Posts one zero-length receive (consumed by an RDMA write with immediate).
  virtual ncclResult_t postRecv(uint64_t wrId) = 0;
};

/// An opened HCA: a device context and one protection domain.
class IbHca {
 public:
  virtual ~IbHca() = default;
  /// A completion queue of at least `depth` entries.
  virtual ncclResult_t createCq(int depth, std::unique_ptr<IbCq>* out) = 0;
  /// An RC queue pair in RESET whose completions go to `cq`, taking inline writes of up to `maxInline` bytes.
  virtual ncclResult_t createQp(IbCq* cq, int maxSendWr, int maxRecvWr, int maxInline, std::unique_ptr<IbQp>* out) = 0;
  /// Registers memory for local use and remote writes and reads: host memory, or GPU memory when a peer-memory
  /// module (nvidia_peermem) lets the HCA's driver pin it. `relaxed`: with PCIe relaxed ordering (the HCA's writes to
  /// it may pass each other; its completions still follow them), where IbVerbs::relaxedOrdering() offers it.
  virtual ncclResult_t regMr(void* addr, size_t size, bool relaxed, IbMr* out) = 0;
  /// Whether the HCA's driver takes dma-buf registrations (ibv_reg_dmabuf_mr exists and the kernel supports it).
  virtual bool dmaBufSupported() = 0;
  /// Registers `size` bytes at `offset` of the dma-buf `fd` (GPU memory exported by its driver) with the access of
  /// regMr; work requests address it at `iova` (the buffer's virtual address, so that the net's addresses work).
  virtual ncclResult_t regDmaBufMr(uint64_t offset, size_t size, uint64_t iova, int fd, bool relaxed, IbMr* out) = 0;
  /// Releases a registration made by regMr or regDmaBufMr.
  virtual ncclResult_t deregMr(IbMr* mr) = 0;
  /// A descriptor that polls readable while the HCA has asynchronous events to take (the device context's async_fd,
  /// made non-blocking), or -1 when it never has any.
  virtual int asyncEventFd() = 0;
  /// Takes the HCA's pending asynchronous events without blocking, handing each to `handle` before acknowledging it:
  /// as in verbs, a queue pair or CQ an event names is not destroyed until its events are acknowledged, so `handle`
  /// may use the objects as keys. `handle` must not call into the backend. Fails only when events cannot be read.
  virtual ncclResult_t takeAsyncEvents(const std::function<void(const IbAsyncEvent&)>& handle) = 0;
};

/// A verbs implementation: discovery plus device opening.
class IbVerbs {
 public:
  virtual ~IbVerbs() = default;
  /// "libibverbs" or "fake", for logs.
  virtual const char* name() const = 0;
  /// Every port of every HCA, active or not. Fails (with *why) only when the devices cannot be listed at all.
  virtual ncclResult_t listPorts(std::vector<IbPortDesc>* out, std::string* why) = 0;
  /// Whether a GPUDirect RDMA peer-memory module is loaded (nvidia_peermem, nv_peer_mem, or amdkfd's on ROCm hosts),
  /// so that regMr takes GPU memory; *why (may be null) says what was found or looked for.
  virtual bool peerMemory(std::string* why) = 0;
  /// Whether registrations may ask for PCIe relaxed ordering (libibverbs has ibv_reg_mr_iova2, IBVERBS_1.8, as NCCL
  /// checks); *why (may be null) says what was found.
  virtual bool relaxedOrdering(std::string* why) = 0;
  /// Opens HCA `hca` (a name listPorts returned).
  virtual ncclResult_t openHca(const std::string& hca, std::unique_ptr<IbHca>* out) = 0;
  /// The text of a completion status ("remote access error").
  virtual const char* statusText(int status) const = 0;
};

/// The libibverbs backend, or null with *why when chorus was built without the verbs headers or libibverbs.so.1
/// cannot be opened or lacks a verb the net uses.
std::unique_ptr<IbVerbs> makeRealIbVerbs(std::string* why);

}  // namespace chorus
