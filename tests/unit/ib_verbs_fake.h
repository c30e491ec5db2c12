// An in-process fake of the verbs the IB net uses (ib_verbs.h), so that the net's whole state machine runs on a
// machine without an HCA: an RDMA write is a memcpy into the registered memory of the queue pair it is connected to,
// an RDMA read a memcpy out of it (which may be the reading queue pair's own, connected to itself), completion queues
// are plain queues, and the fabric checks what real hardware would (queue pair states, keys and bounds of both memory
// regions, remote read access of the responder, a posted receive for every immediate, CQ overruns), reporting a
// violation as an error completion the way an HCA does. Each opened HCA is its own protection domain: a key works only
// on queue pairs of the HCA that registered it, and a queue pair only on a CQ of its HCA.
//
// GPUDirect RDMA is made up: whether a peer-memory module is "loaded" and whether HCAs take dma-buf registrations are
// flags a test sets. A dma-buf registration needs an open file descriptor and covers [iova, iova + size) of host
// memory (test buffers stand in for GPU memory); the fabric records its fd, offset and iova.
//
// Threading: every fake object takes the fabric's mutex, so the fake may be driven from several threads (the
// transport suite runs thread ranks' net proxies over it). A receiver that polls its FIFO without the mutex (as the
// net does) reads what a write put there once it sees the descriptor's last word: a write stores its bytes in order,
// the last word with release, as an HCA's write lands in order. Asynchronous events are handed to the net's handler
// with the fabric's mutex held, so a queue pair or CQ is not destroyed while an event names it (verbs' destroy waits
// for the event's acknowledgement); a destroyed one's pending events are dropped.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transports/ib/ib_verbs.h"

namespace chorus {

class FakeIbQp;
class FakeIbCq;
class FakeIbHca;

/// The fabric every fake HCA of a test is attached to.
class FakeIbFabric {
 public:
  /// One RDMA write as the fabric carried it.
  struct WriteRecord {
    uint32_t srcQpn = 0;
    std::string srcHca;  ///< the HCA of the queue pair that wrote
    uint32_t dstQpn = 0;
    std::string dstHca;  ///< the HCA of the queue pair written to
    size_t length = 0;
    bool withImm = false;
    uint32_t imm = 0;
    bool inlined = false;  ///< posted inline (IBV_SEND_INLINE)
  };
  /// One RDMA read as the fabric carried it: `srcQpn` read `length` bytes at `remoteAddr` through `dstQpn`.
  struct ReadRecord {
    uint32_t srcQpn = 0;
    uint32_t dstQpn = 0;
    uint64_t remoteAddr = 0;
    size_t length = 0;
  };
  /// One queue pair's move to RTR: its service level and traffic class, and the partition key index it had at INIT.
  struct RtrRecord {
    uint32_t qpn = 0;
    int sl = 0;
    int trafficClass = 0;
    int pkeyIndex = 0;
    IbGid remoteGid;  ///< where it sends: the peer's port
    int remoteLid = 0;
    bool global = false;    ///< with a GRH (by GID)
    int localGidIndex = 0;  ///< the GRH's source GID index
  };
  /// One ibv_set_ece a queue pair took: the options asked for, and those it kept (its HCA's that were asked for).
  struct EceRecord {
    uint32_t qpn = 0;
    IbEce asked;
    IbEce kept;
  };
  /// One dma-buf registration.
  struct DmaBufRecord {
    int fd = -1;
    uint64_t offset = 0;
    uint64_t iova = 0;
    size_t size = 0;
    uint32_t key = 0;  ///< its lkey and rkey
  };

  /// Makes the next write posted on any queue pair complete with `status` (an IbWcStatus) instead of being carried,
  /// and moves that queue pair to the error state, as a failing HCA does.
  void failNextWrite(int status);
  /// The same for the next read.
  void failNextRead(int status);
  /// Raises asynchronous event `type` (an IbEventType) on `hca`, an HCA of this fabric: for `port` where the type is a
  /// port's. kIbEventDeviceFatal also kills the HCA, as a device fatal error does: what its queue pairs post is never
  /// carried and never completes, and writes and reads to them fail (retries exceeded).
  void raiseHcaEvent(IbHca* hca, int type, int port = 1);
  /// Raises `type` on queue pair `qpn` (a queue pair's event), or with kIbEventCqErr on its CQ; false when there is no
  /// such queue pair. Only the event: the queue pair goes on working.
  bool raiseQpEvent(uint32_t qpn, int type);
  /// Every write carried so far, in order.
  std::vector<WriteRecord> writes() const;
  /// Forgets the writes carried so far.
  void clearWrites();
  /// Every read carried so far, in order.
  std::vector<ReadRecord> reads() const;
  /// Every dma-buf registration made so far (released ones too), in order.
  std::vector<DmaBufRecord> dmaBufs() const;
  /// Every ibv_set_ece taken so far, in order.
  std::vector<EceRecord> eceSets() const;
  /// Every queue pair's move to RTR so far, in order.
  std::vector<RtrRecord> rtrs() const;
  /// Queue pairs that exist.
  int liveQps() const;
  /// Memory registrations that exist.
  int liveMrs() const;
  /// Whether the live registration of key `key` asked for relaxed ordering: 1 or 0; -1 when there is none.
  int mrRelaxed(uint32_t key) const;

 private:
  friend class FakeIbQp;
  friend class FakeIbCq;
  friend class FakeIbHca;
  struct MrRec {
    uint64_t addr;
    size_t size;
    bool relaxed;
    const void* pd;  // the HCA that made it: only its queue pairs may use the key
  };
  bool covers(uint32_t key, const void* pd, uint64_t addr, size_t len) const;  // mu_ held

  mutable std::mutex mu_;
  std::vector<const void*> dead_;  // HCAs (protection domains) killed by kIbEventDeviceFatal
  uint32_t nextQpn_ = 0x100;
  uint32_t nextKey_ = 0x1000;
  std::map<uint32_t, FakeIbQp*> qps_;
  std::map<uint32_t, MrRec> mrs_;  // by key; a registration's lkey and rkey are equal
  int failStatus_ = kIbWcSuccess;
  int failReadStatus_ = kIbWcSuccess;
  std::vector<WriteRecord> log_;
  std::vector<ReadRecord> reads_;
  std::vector<DmaBufRecord> dmaBufs_;
  std::vector<RtrRecord> rtrs_;
  std::vector<EceRecord> eceSets_;
};

/// A "host": the fake HCAs (ports) a test makes up, over a shared fabric.
class FakeIbVerbs : public IbVerbs {
 public:
  /// Offers `ports` (their hca names are the HCAs openHca() opens).
  FakeIbVerbs(std::shared_ptr<FakeIbFabric> fabric, std::vector<IbPortDesc> ports);
  const char* name() const override { return "fake verbs"; }
  ncclResult_t listPorts(std::vector<IbPortDesc>* out, std::string* why) override;
  ncclResult_t openHca(const std::string& hca, std::unique_ptr<IbHca>* out) override;
  const char* statusText(int status) const override;
  bool peerMemory(std::string* why) override;
  bool relaxedOrdering(std::string* why) override;

  /// Whether peerMemory() says a peer-memory module is loaded (default: no).
  void setPeerMemory(bool on) { peerMemory_ = on; }
  /// Whether HCAs opened from now on take dma-buf registrations (default: no).
  void setDmaBuf(bool on) { dmaBuf_ = on; }
  /// Whether relaxedOrdering() offers relaxed ordering (default: no).
  void setRelaxedOrdering(bool on) { relaxedOrdering_ = on; }
  /// Whether the queue pairs of HCAs opened from now on have ECE, offering `ece` (default: no ECE, as a provider
  /// without it).
  void setEce(bool on, const IbEce& ece = IbEce()) {
    ece_ = on;
    eceOffer_ = ece;
  }

 private:
  std::shared_ptr<FakeIbFabric> fabric_;
  std::vector<IbPortDesc> ports_;
  bool peerMemory_ = false;
  bool dmaBuf_ = false;
  bool relaxedOrdering_ = false;
  bool ece_ = false;
  IbEce eceOffer_;
};

/// A made-up active RoCE port with one RoCE v2 IPv4 GID (10.0.0.<n>), for tests.
IbPortDesc fakeIbPort(const std::string& hca, int port, int n);

}  // namespace chorus
