// The host Platform for kernels/executor.h: waits that spin, yield, then sleep, and that
// fail with a message naming the rank, the peer and the operation when the peer dies,
// poisons the connection, the deadline passes or the communicator is aborted.
#pragma once

#include <signal.h>

#include <array>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/fibers.h"
#include "core/timeout.h"
#include "engine/connections.h"
#include "engine/op.h"
#include "kernels/executor.h"
#include "kernels/reduce.h"

namespace chorus {

/// Host implementation of the executor's Platform policy.
class HostPlatform {
 public:
  HostPlatform(ncclComm* comm, Connections* conns) : comm_(comm), conns_(conns) {}

  void setOp(const OpLabel& label, const RedOp& red, const Fingerprint& fp) {
    label_ = label;
    red_ = red;
    fp_ = fp;
  }
  /// After a mismatch: {this rank's call[3], the offender's call[3], ranks} for poisonAll; false otherwise.
  bool mismatchCalls(uint64_t out[7]) const {
    if (failReason_ != PoisonReason::kMismatch) return false;
    for (int i = 0; i < 7; i++) out[i] = mismatch_[i];
    return true;
  }

  ncclResult_t sendFifo(int ch, int peer, bool ll, Fifo** f, bool* useLL) {
    return fifoFor(true, ch, peer, ll, f, useLL);
  }
  ncclResult_t recvFifo(int ch, int peer, bool ll, Fifo** f, bool* useLL) {
    return fifoFor(false, ch, peer, ll, f, useLL);
  }
  ncclResult_t waitSendSpace(Fifo* f);
  ncclResult_t waitRecvData(Fifo* f);
  ncclResult_t waitLines(Fifo* f, const uint64_t* lines, size_t n, uint32_t flag, uint32_t* words);
  void publishTail(Fifo* f) {
    __atomic_store_n(&f->ctrl->tail, ++f->step, __ATOMIC_RELEASE);
    moveNow(f);
  }
  void publishHead(Fifo* f) {
    __atomic_store_n(&f->ctrl->head, ++f->step, __ATOMIC_RELEASE);
    moveNow(f);
  }
  /// After a publish on f: a connection to another host moves at once, on this thread, where its net allows (a
  /// slot goes to the net, a freed slot's receive is posted: RemoteTransport::progress); the proxy is woken unless
  /// this operation drives the net itself (drive()), whose waits then step the connection waited on and the send
  /// connections with slots in hand (RemoteTransport::progressAll, docs/net.md).
  void moveNow(Fifo* f) {
    RemoteTransport* s = conns_->remote();
    if (s == nullptr) return;
    Conn* c = connOf(f);
    if (c != nullptr && !c->shm) s->progress(f);
    if (!drive_) s->kick();
  }
  /// The operation about to run (drive true) or just run: a small one drives the net's connections from this
  /// thread's waits, the proxy stepping aside (RemoteTransport::engage).
  void drive(bool on) {
    RemoteTransport* s = conns_->remote();
    if (s == nullptr || on == drive_) return;
    drive_ = s->engage(on);
  }
  /// Writes a slot header (before publishTail releases it).
  static void writeHeader(SlotHeader* h, const SlotHeader& v) { *h = v; }
  /// Packs header and payload into LL lines with flag step + 1, then advances f's step.
  void sendLL(Fifo* f, const SlotHeader& h, const char* payload, size_t bytes);
  char* staging(int which, size_t bytes);
  void copy(char* dst, const char* src, size_t n, uint32_t flags) { copyHost(red_, dst, src, n, flags); }
  void reduce(char* dst, const char* recv, const char* local, size_t n, uint32_t flags) {
    reduceHost(red_, dst, recv, local, n, flags);
  }
  ncclResult_t mismatch(Fifo* f, const SlotHeader& got, const Fingerprint& mine, size_t bytes, uint32_t step);
  /// A slot whose header places it elsewhere on the connection (kernels/executor.h, checkOrdinal).
  ncclResult_t outOfOrder(Fifo* f, uint32_t got, uint32_t want);

  // A slice of `bytes` may be passed by address: to a rank of this host that can read this process's memory (a
  // thread of this process, or another process through process_vm_readv), from CHORUS_SINGLE_COPY_MIN_BYTES; to
  // another host when this rank's net proxy sends from the address (Conn::byAddress), at any size.
  bool canDescribe(Fifo* f, size_t bytes);
  /// Whether copy() with these flags is a plain memcpy for the current reduction.
  bool identityCopy(uint32_t flags) const;
  /// Reads `bytes` at the far end's address `remote` into dst.
  ncclResult_t fetch(Fifo* f, char* dst, uint64_t remote, size_t bytes);
  /// Waits until the far end has consumed every slot produced on f.
  ncclResult_t waitConsumed(Fifo* f);
  /// Remembers that f carried a slice by address (drainDescribed waits for its reader).
  void noteDescribed(Fifo* f) {
    for (Fifo* d : described_)
      if (d == f) return;
    described_.push_back(f);
  }
  /// Waits until every slice passed by address has been read.
  ncclResult_t drainDescribed();
  /// Which peers may read this process's memory (set once at init).
  void setReadableBy(std::vector<bool> readable, size_t minBytes) {
    readableBy_ = std::move(readable);
    describeMin_ = minBytes;
  }
  ncclResult_t internalError(const char* what);

  /// The failure that stopped the last operation (reason and culprit rank), for poisoning.
  PoisonReason failReason() const { return failReason_; }
  int failCulprit() const { return failCulprit_; }

  /// Runs tasks (a channel each) side by side on this thread: a wait that finds nothing ready passes to another.
  ncclResult_t runSideBySide(const std::vector<Fibers::Task>& tasks);

 private:
  // Polls `ready` until true; between polls checks abort, poison, peer liveness and the deadline.
  template <class Ready>
  ncclResult_t waitFor(Fifo* f, Ready ready, const char* what);
  Conn* connOf(Fifo* f);
  ncclResult_t fifoFor(bool isSend, int ch, int peer, bool ll, Fifo** f, bool* useLL);
  // Builds the error for a FIFO the far end poisoned (and remembers a mismatch to pass on).
  ncclResult_t poisoned(const Fifo* f, uint64_t poison, const char* where);
  ncclResult_t fail(ncclResult_t res, PoisonReason reason, int culprit, const std::string& text);

  ncclComm* comm_;
  Connections* conns_;
  OpLabel label_;
  RedOp red_{};
  Fingerprint fp_{};
  uint64_t mismatch_[7] = {0};
  uint64_t lastBeat_ = 0;  ///< when this rank last wrote its heartbeat into its FIFOs
  std::vector<bool> readableBy_;  ///< peer p can read this process's memory
  size_t describeMin_ = SIZE_MAX;
  std::vector<std::array<std::vector<char>, 2>> staging_;  ///< per channel running side by side: two areas each
  std::vector<Fifo*> described_;  ///< send FIFOs that carried slices by address in this operation
  std::vector<std::pair<Fifo*, Conn*>> fifoConns_;
  PoisonReason failReason_ = PoisonReason::kNone;
  int failCulprit_ = -1;
  Fibers fibers_;
  bool drive_ = false;  ///< this operation drives the remote transport from its waits (drive())
};

/// Describes a fingerprint as "ncclAllReduce #5 (count 1024, float32, op 0)".
std::string describeFingerprint(uint64_t seq, uint64_t count, uint32_t desc, int32_t root);
/// A slot read at another place on its connection than written (kernels/executor.h, checkOrdinal), in words: `got`
/// the place its header gives, `want` the reader's. Both paths' errors say it so.
std::string slotOutOfStepText(int rank, int peer, uint64_t got, uint64_t want);
/// Packs (coll, dtype, op) into SlotHeader::desc.
uint32_t packDesc(Coll coll, int dtype, int op);

}  // namespace chorus
