// Connection FIFOs: the memory layout shared by both ends of a one-way connection, and
// the protocol rules both ends follow. Plain data, usable from host and device code.
//
// Layout of one FIFO (one channel, one direction, one peer pair):
//   [FifoCtrl][SlotHeader x nSlots][Simple data: (slotBytes + slotGap) x nSlots][LL lines: llLines x nSlots]
// Simple: the producer fills slot (tail % nSlots) and its header, then release-stores
//   tail+1; the consumer waits for tail > its step, reads, then release-stores head+1.
// LL: every 8-byte line carries 4 data bytes and a 4-byte flag equal to (step + 1); the
//   consumer polls flags instead of tail (no fence needed), then advances head as above.
// The producer never runs more than nSlots ahead of head.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/arch.h"

namespace chorus {

/// Control words of a FIFO, each written by one side only (poison by either).
struct alignas(64) FifoCtrl {
  uint64_t tail;  ///< slots produced (producer writes)
  uint64_t pad0[7];
  uint64_t head;  ///< slots consumed (consumer writes)
  uint64_t pad1[7];
  uint64_t poison;    ///< nonzero after a failure: (reason << 32) | (culprit rank + 1)
  uint64_t attached;  ///< endpoints that mapped this FIFO (the second unlinks its name)
  /// For a mismatch, written before poison so that every far end can name both calls: the
  /// detecting rank's call and the offending rank's call, each {seq, count, desc | root << 32},
  /// and failRanks = detector | offender << 32.
  uint64_t failCall[3];
  uint64_t failCall2[3];
  uint64_t failRanks;
  /// Heartbeats (CLOCK_MONOTONIC ms) each end writes while it waits: [0] producer, [1] consumer.
  /// A peer whose beat is fresh is alive and waiting on someone else, so it is not blamed.
  uint64_t beat[2];
  /// The processes of both ends, written by the first to attach: a segment whose two processes have both exited
  /// is garbage that shmSweepStale() removes (transports/shm/shm.h). 0: not written yet.
  uint64_t pids[2];
  uint64_t pad2[3];
};

/// Per-slot header: the operation's fingerprint and the payload size.
struct SlotHeader {
  uint64_t seq;    ///< operation sequence number (collective or per-pair point-to-point)
  uint64_t count;  ///< the operation's count argument
  uint32_t desc;   ///< coll | dtype << 8 | (op & 0xffff) << 16
  int32_t root;    ///< root (or -1)
  uint32_t bytes;  ///< payload bytes in this slot
  /// The sender's count on this connection when it filled the slot (low 31 bits), which the receiver's must equal;
  /// and kDescribedSlot.
  uint32_t step;
};

/// SlotHeader::step bit: the slot holds the sender's address of the data (8 bytes at the start of the slot) instead
/// of the data. Between ranks of one host the receiver reads it in place (single copy); on a connection to another
/// host the sender's net proxy sends the data from that address, and the receiver gets the data itself.
constexpr uint32_t kDescribedSlot = 0x80000000u;

/// A slot's place on its connection as SlotHeader::step holds it: the low 31 bits of an end's count (`step`, or a
/// header's step field without kDescribedSlot).
CHORUS_HOST_DEVICE inline uint32_t slotOrdinal(uint64_t step) { return static_cast<uint32_t>(step) & ~kDescribedSlot; }

/// Why a FIFO was poisoned.
/// kNetSetup: a connection to another host was not set up by the deadline (the net never completed it).
enum class PoisonReason : uint32_t {
  kNone = 0,
  kPeerDied = 1,
  kTimeout = 2,
  kMismatch = 3,
  kAborted = 4,
  kError = 5,
  kNetSetup = 6
};

/// Packs a FIFO poison word: (reason << 32) | (culprit rank + 1).
CHORUS_HOST_DEVICE inline uint64_t makePoison(PoisonReason reason, int culprit) {
  return (static_cast<uint64_t>(reason) << 32) | static_cast<uint64_t>(static_cast<uint32_t>(culprit + 1));
}

/// Unpacks a poison word: its reason, and the rank it names (0-based) in *culprit.
CHORUS_HOST_DEVICE inline PoisonReason poisonReason(uint64_t poison, int* culprit) {
  *culprit = static_cast<int>(poison & 0xffffffffu) - 1;
  return static_cast<PoisonReason>(poison >> 32);
}

/// Geometry of a FIFO.
struct FifoGeometry {
  uint32_t nSlots = 8;
  uint32_t slotBytes = 64 << 10;
  uint32_t llLines = 1024;  ///< lines per LL slot (8 header lines + data: 4 bytes a line)
  /// Bytes after each Simple slot's data that no payload uses: where a net proxy that sends a slot as one message
  /// puts the slot's header, after its payload (transports/net). 0 but on such a proxy's connections.
  uint32_t slotGap = 0;

  CHORUS_HOST_DEVICE size_t slotStride() const { return static_cast<size_t>(slotBytes) + slotGap; }
  CHORUS_HOST_DEVICE size_t hdrOffset() const { return sizeof(FifoCtrl); }
  CHORUS_HOST_DEVICE size_t dataOffset() const { return align(hdrOffset() + sizeof(SlotHeader) * nSlots); }
  CHORUS_HOST_DEVICE size_t llOffset() const { return align(dataOffset() + slotStride() * nSlots); }
  CHORUS_HOST_DEVICE size_t totalBytes() const { return align(llOffset() + static_cast<size_t>(llLines) * 8 * nSlots); }
  /// Payload bytes one LL slot carries.
  CHORUS_HOST_DEVICE uint32_t llPayload() const { return (llLines - kLLHeaderLines) * 4; }
  static constexpr uint32_t kLLHeaderLines = sizeof(SlotHeader) / 4;
  CHORUS_HOST_DEVICE static size_t align(size_t x) { return (x + 4095) & ~static_cast<size_t>(4095); }
};

/// One end's view of a FIFO in mapped memory.
struct Fifo {
  FifoCtrl* ctrl = nullptr;
  SlotHeader* hdrs = nullptr;
  char* data = nullptr;
  uint64_t* ll = nullptr;
  FifoGeometry geo;
  uint64_t step = 0;  ///< this end's count: slots produced (send end) or consumed (recv end)
  int peer = -1;      ///< the rank at the other end
  int end = 0;        ///< 0: this view is the producer, 1: the consumer

  /// Points the view at a mapped FIFO of geometry g starting at base. `apart`, when not null, holds the Simple slot
  /// data instead of base + dataOffset() (a net FIFO whose data is in GPU memory, for GPUDirect RDMA: its control
  /// words and headers stay in host memory, where the net proxy reads them).
  CHORUS_HOST_DEVICE void attach(void* base, const FifoGeometry& g, char* apart = nullptr) {
    char* b = static_cast<char*>(base);
    geo = g;
    ctrl = reinterpret_cast<FifoCtrl*>(b);
    hdrs = reinterpret_cast<SlotHeader*>(b + g.hdrOffset());
    data = apart != nullptr ? apart : b + g.dataOffset();
    ll = reinterpret_cast<uint64_t*>(b + g.llOffset());
  }
  CHORUS_HOST_DEVICE uint32_t slot() const { return static_cast<uint32_t>(step % geo.nSlots); }
  CHORUS_HOST_DEVICE char* slotData() const { return slotData(slot()); }
  /// Simple data of slot `s` (the net proxy works on slots other than the executor's current one).
  CHORUS_HOST_DEVICE char* slotData(uint32_t s) const { return data + static_cast<size_t>(s) * geo.slotStride(); }
  CHORUS_HOST_DEVICE uint64_t* slotLL() const { return ll + static_cast<size_t>(slot()) * geo.llLines; }
};

}  // namespace chorus
