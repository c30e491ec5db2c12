// The engine's view of the transport between hosts: connections whose ends are local FIFOs, moved by a proxy
// thread. The implementation is the net proxy (transports/net/), which drives any net behind NCCL's ncclNet
// interface: sockets (transports/socket/), UCX, IB verbs, an external plugin. createRemoteTransport() picks the net
// as NCCL does (NCCL_NET, NCCL_NET_PLUGIN, NCCL_IB_DISABLE; docs/net.md).
#pragma once

#include <atomic>
#include <memory>

#include "core/comm.h"
#include "kernels/fifo.h"

namespace chorus {

/// SlotHeader::bytes value that marks a failure notice sent in band (never a valid payload size): its seq holds the
/// sender's FIFO poison word.
constexpr uint32_t kPoisonFrameBytes = 0xffffffffu;

/// Whether a poison word received from a peer is well formed for a communicator of `nranks`.
inline bool poisonWordValid(uint64_t word, int nranks) {
  uint32_t reason = static_cast<uint32_t>(word >> 32);
  uint32_t culpritPlus1 = static_cast<uint32_t>(word);
  return reason >= static_cast<uint32_t>(PoisonReason::kPeerDied) &&
         reason <= static_cast<uint32_t>(PoisonReason::kError) && culpritPlus1 >= 1 &&
         culpritPlus1 <= static_cast<uint32_t>(nranks);
}

/// Connections to ranks on other hosts, progressed by one proxy thread per communicator.
class RemoteTransport {
 public:
  virtual ~RemoteTransport() = default;
  /// Connects (lazily, once) the send side of (channel, peer); *out views the local FIFO. Never waits for the peer.
  virtual ncclResult_t connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out) = 0;
  /// Prepares the receive side of (channel, peer); *out views the local FIFO.
  virtual ncclResult_t connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out) = 0;
  /// Flushes what was published, closes every connection and stops the proxy (peers see the connection end).
  virtual void shutdown() = 0;
  /// This rank failed with FIFO poison `word`: the proxy passes it on to peers where the transport can.
  virtual void markFailed(uint64_t word) = 0;
  /// For a mismatch, called before markFailed: the two calls and the ranks (FifoCtrl's failCall, failCall2 and
  /// failRanks, 7 words), which a transport that can passes on so that every rank's error names both calls.
  virtual void markFailedCalls(const uint64_t* calls) { (void)calls; }
  /// Called by the executor after it published or freed a slot: wakes a sleeping proxy (a fence and a load when
  /// the proxy is awake).
  virtual void kick() = 0;
  /// The transport's name for logs ("net Socket", "net UCX", ...).
  virtual const char* name() const = 0;
  /// Whether the proxy sends a slot passed by address (kDescribedSlot) from that address in this process's memory,
  /// so that the executor need not copy the data into the FIFO.
  virtual bool sendsByAddress() const { return false; }
  /// The fewest devices (NICs) the net offers on any rank of the communicator, the same on every rank: how many
  /// channels it takes for every rank's connections to use all of them.
  virtual int commonDevices() const { return 1; }
};

/// How the executor wakes a proxy thread that sleeps: an eventfd the proxy polls, and a flag that lets kick() skip
/// the write while the proxy is awake. The proxy announces a sleep (sleeping(true)), looks at its work once more, and
/// only then blocks on fd(); an executor that published before seeing the flag is caught by that look, one that
/// publishes after it writes the eventfd. Both sides fence in between.
class ProxyWake {
 public:
  ProxyWake() = default;
  ProxyWake(const ProxyWake&) = delete;
  ProxyWake& operator=(const ProxyWake&) = delete;
  ~ProxyWake();
  /// Creates the eventfd; false (errno set) on failure.
  bool open();
  /// The descriptor to poll (-1 before open).
  int fd() const { return fd_; }
  /// Makes fd() readable.
  void wake();
  /// wake() if the proxy sleeps, or is about to.
  void kick() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the FIFO store before, the flag load after
    if (sleeping_.load(std::memory_order_relaxed)) wake();
  }
  /// The proxy thread: about to sleep (true), or awake again (false).
  void sleeping(bool s) {
    sleeping_.store(s, std::memory_order_relaxed);
    if (s) std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  /// The proxy thread: empties fd() after a wake.
  void drain();

 private:
  int fd_ = -1;
  std::atomic<bool> sleeping_{false};
};

/// Collective over the communicator: chooses the net (every rank must choose the same; a mismatch fails naming
/// the ranks), logs the choice and why, and starts its proxy.
ncclResult_t createRemoteTransport(ncclComm* comm, std::unique_ptr<RemoteTransport>* out);

/// Sets a FIFO's poison word unless one is there (the first failure wins). For a mismatch, `calls` (7 words:
/// FifoCtrl's failCall, failCall2 and failRanks; null otherwise) are written first, so that the rank that reads the
/// word can name both calls.
void poisonFifo(const Fifo& f, uint64_t word, const uint64_t* calls = nullptr);

/// Page-aligned, zeroed memory for one FIFO of geometry `geo`, in whole pages (the device path pins it for its
/// GPU); null when out of memory. Free with std::free.
void* allocRemoteFifo(const FifoGeometry& geo);

}  // namespace chorus
