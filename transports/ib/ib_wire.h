// What the IB net puts on the wire: the listen handle, the queue-pair information both sides exchange over TCP at
// connection setup, the receive descriptors a receiver RDMA-writes into its sender's FIFO, and work request ids.
// All integers are host byte order: both ends of a connection run the same chorus on the same architecture
// (little-endian x86-64 or aarch64), and the magic rejects anything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chorus/net.h"
#include "core/socket.h"
#include "transports/ib/ib_verbs.h"

namespace chorus {

/// Requests one comm may have outstanding (NCCL_NET_MAX_REQUESTS); also the number of receive FIFO slots.
constexpr int kIbMaxRequests = NCCL_NET_MAX_REQUESTS;
/// Largest NCCL_IB_QPS_PER_CONNECTION honoured.
constexpr int kIbMaxQpsPerConn = 16;
/// Most ports a merged net device (makeVDevice) spans, as NCCL's NCCL_NET_MAX_DEVS_PER_NIC.
constexpr int kIbMaxDevs = NCCL_NET_MAX_DEVS_PER_NIC_V11;
/// Most queue pairs a connection has: NCCL_IB_QPS_PER_CONNECTION for each port of the side with more.
constexpr int kIbMaxQps = kIbMaxQpsPerConn * kIbMaxDevs;
/// Identifies an IB net handle and handshake ("chorusIB" plus a format version in the low byte).
constexpr uint64_t kIbMagic = 0x63686f7275734904ull;  // 4: ECE options per queue pair

/// The connector's progress between connect() calls. It lives inside the caller's handle buffer, as NCCL's IB net
/// keeps it, because connect() is called again with the same handle until the connection is up.
struct IbConnectStage {
  uint32_t state = 0;
  uint32_t reserved = 0;
  void* comm = nullptr;  ///< the IbComm being connected; null before the first call and after the last
};

/// The listen handle: where the listener's TCP socket waits, how many ports its net device spans (so that the
/// connector makes queue pairs for the side with more before it sends its setup message), and the connector's stage.
struct IbHandle {
  uint64_t magic = kIbMagic;
  PackedAddr addr;
  uint32_t ports = 1;
  uint32_t reserved = 0;
  IbConnectStage stage;
};
static_assert(sizeof(IbHandle) <= NCCL_NET_HANDLE_MAXSIZE, "the IB handle must fit NCCL's handle");

/// Writes a fresh handle for a listener at `addr` on a net device of `ports` ports into `out`
/// (NCCL_NET_HANDLE_MAXSIZE bytes).
void packIbHandle(const SockAddr& addr, int ports, void* out);
/// Reads a handle: false with *why when it is not an IB net handle, or its address or port count is unreadable.
bool unpackIbHandle(const void* handle, SockAddr* addr, int* ports, std::string* why);
/// The connector's stage stored in a handle.
IbConnectStage ibHandleStage(const void* handle);
/// Stores the connector's stage in a handle.
void setIbHandleStage(void* handle, const IbConnectStage& stage);

/// One port of a side's net device, as its peer addresses it.
struct IbPortInfo {
  IbGid gid;
  uint32_t ctrlRkey = 0;  ///< the side's control memory's rkey on this port's HCA (a receiver's is not used)
  uint16_t lid = 0;
  uint8_t mtu = 0;  ///< verbs MTU code
  uint8_t reserved = 0;
};

/// One queue pair's enhanced connection establishment options in a setup message: the connector's as its provider
/// offers them, the acceptor's as it agreed them; `supported` 0 where the side has none (no ECE, or
/// NCCL_IB_ECE_ENABLE=0 on the connector).
struct IbQpEce {
  IbEce ece;
  uint32_t supported = 0;
};

/// One side's connection information, sent over the TCP socket during setup. Queue pair i of a side is on its port
/// i mod ports, and is connected to the peer's queue pair i.
struct IbConnInfo {
  uint64_t magic = kIbMagic;
  uint32_t nqps = 0;
  uint32_t fifoSlots = 0;  ///< receive FIFO slots (kIbMaxRequests)
  uint32_t qpn[kIbMaxQps] = {0};
  uint32_t psn[kIbMaxQps] = {0};
  uint32_t ports = 0;  ///< ports of the side's net device (1 unless merged), each in port[]
  IbPortInfo port[kIbMaxDevs];
  uint64_t ctrlAddr = 0;  ///< the side's control memory: the receive FIFO on a sender, descriptor staging on a receiver
  uint8_t linkLayer = 0;  ///< IbLinkLayer (the same on every port of a net device)
  /// The connector's NCCL_IB_SPLIT_DATA_ON_QPS: 1, every message split over the queue pairs; 0, each message whole on
  /// one, in turn. The acceptor (the receiver) follows it, as it follows nqps, since it posts the receives the
  /// sender's writes consume.
  uint8_t splitData = 0;
  IbQpEce ece[kIbMaxQps];  ///< queue pair i's ECE options
};

/// Sent by the connector once its queue pairs are ready to receive, so that the acceptor writes nothing earlier.
constexpr uint32_t kIbReadyWord = 0x52454459;  // "REDY"

/// One receive descriptor, written by the receiver's irecv into slot (seq - 1) % kIbMaxRequests of the sender's FIFO.
/// `seq` is written last in memory order and read first: the sender takes a slot once seq equals the number of the
/// message it is about to send (counting from 1, so that a zeroed FIFO holds no descriptor).
struct IbRecvDesc {
  uint64_t addr = 0;  ///< where the message goes
  uint64_t size = 0;  ///< the receive's size: the largest message it takes
  uint32_t rkey[kIbMaxDevs] = {0};  ///< the buffer's rkey on each port of the receiver's net device
  int32_t tag = 0;
  uint32_t reserved[2] = {0, 0};
  uint32_t seq = 0;
};
static_assert(sizeof(IbRecvDesc) == 48, "receive descriptors are 48 bytes");

/// What a work request id names: its kind and the request slot (or FIFO slot) it belongs to.
enum class IbWrKind : uint32_t {
  kData = 1,   ///< a sender's RDMA write (with immediate; under adaptive routing a plain one first) per queue pair used
  kRecv = 2,   ///< a receiver's posted receive (one per queue pair a message uses)
  kFifo = 3,   ///< a receiver's descriptor write into the sender's FIFO
  kFlush = 4,  ///< a receiver's flush: an RDMA read on its loopback queue pair (one per iflush)
};
/// Packs a work request id.
inline uint64_t ibWrId(IbWrKind kind, uint32_t slot) { return (static_cast<uint64_t>(kind) << 32) | slot; }
/// The kind of a work request id.
inline IbWrKind ibWrKind(uint64_t wrId) { return static_cast<IbWrKind>(wrId >> 32); }
/// The slot of a work request id.
inline uint32_t ibWrSlot(uint64_t wrId) { return static_cast<uint32_t>(wrId); }

}  // namespace chorus
