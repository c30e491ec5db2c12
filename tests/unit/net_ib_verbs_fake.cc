#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "core/checks.h"
#include "transports/remote.h"
#include "unit/ib_verbs_fake.h"

namespace chorus {

namespace {
enum class QpState { kReset, kInit, kRtr, kRts, kError };

// An RDMA write's bytes as an HCA puts them in memory, in order: a receiver on another thread that polls the last
// word of what was written (the net's FIFO descriptors end in their sequence number) and reads the rest after it
// (acquire) finds the rest written. The last 4 bytes, when aligned, are stored with release.
void writeInOrder(void* dst, const void* src, size_t length) {
  const uintptr_t lastWord = reinterpret_cast<uintptr_t>(dst) + length - sizeof(uint32_t);
  if (length < sizeof(uint32_t) || lastWord % alignof(uint32_t) != 0) {
    memcpy(dst, src, length);
    return;
  }
  memcpy(dst, src, length - sizeof(uint32_t));
  uint32_t word;
  memcpy(&word, static_cast<const char*>(src) + length - sizeof(uint32_t), sizeof(word));
  __atomic_store_n(reinterpret_cast<uint32_t*>(lastWord), word, __ATOMIC_RELEASE);
}
}  // namespace

// ---- CQ -------------------------------------------------------------------------------------

class FakeIbCq : public IbCq {
 public:
  FakeIbCq(std::shared_ptr<FakeIbFabric> fabric, const void* pd, int depth)
      : fabric_(std::move(fabric)), pd_(pd), depth_(depth) {}
  ~FakeIbCq() override;

  /// The HCA (protection domain) that made it.
  const void* pd() const { return pd_; }

  ncclResult_t poll(int max, IbWc* out, int* n) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    if (overrun_) CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: completion queue overrun (depth %d)", depth_);
    *n = 0;
    while (*n < max && !queue_.empty()) {
      out[(*n)++] = queue_.front();
      queue_.pop_front();
    }
    return ncclSuccess;
  }

  // fabric mu_ held.
  void push(const IbWc& wc) {
    if (static_cast<int>(queue_.size()) >= depth_) overrun_ = true;
    queue_.push_back(wc);
  }

 private:
  std::shared_ptr<FakeIbFabric> fabric_;
  const void* pd_;
  int depth_;
  std::deque<IbWc> queue_;
  bool overrun_ = false;
};

// ---- QP -------------------------------------------------------------------------------------

class FakeIbQp : public IbQp {
 public:
  FakeIbQp(std::shared_ptr<FakeIbFabric> fabric, std::string hca, const void* pd, FakeIbCq* cq, int maxSendWr,
           int maxRecvWr, int maxInline, bool ece, const IbEce& eceOffer)
      : fabric_(std::move(fabric)),
        hca_(std::move(hca)),
        pd_(pd),
        cq_(cq),
        maxSendWr_(maxSendWr),
        maxRecvWr_(maxRecvWr),
        maxInline_(maxInline),
        eceSupported_(ece),
        eceOffer_(eceOffer),
        ece_(eceOffer) {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    qpn_ = fabric_->nextQpn_++;
    fabric_->qps_[qpn_] = this;
  }
  ~FakeIbQp() override;

  /// The HCA that made it, and its CQ. fabric mu_ held.
  const void* pd() const { return pd_; }
  FakeIbCq* cq() const { return cq_; }

  uint32_t qpn() const override { return qpn_; }

  ncclResult_t toInit(int port, int pkeyIndex, bool remoteRead) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    CHORUS_CHECK(expect(QpState::kReset, "INIT"));
    port_ = port;
    pkeyIndex_ = pkeyIndex;
    remoteRead_ = remoteRead;
    state_ = QpState::kInit;
    return ncclSuccess;
  }

  ncclResult_t toRtr(int port, const IbRtrAttr& attr) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    CHORUS_CHECK(expect(QpState::kInit, "RTR"));
    if (port != port_ || attr.mtu < 1 || attr.mtu > 5) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: RTR of QP %u with port %d (INIT had %d) and MTU code %d", qpn_,
                  port, port_, attr.mtu);
    }
    remoteQpn_ = attr.remoteQpn;
    fabric_->rtrs_.push_back(FakeIbFabric::RtrRecord{qpn_, attr.sl, attr.trafficClass, pkeyIndex_, attr.remoteGid,
                                                     attr.remoteLid, attr.global, attr.localGidIndex});
    state_ = QpState::kRtr;
    return ncclSuccess;
  }

  ncclResult_t toRts(const IbRtsAttr& attr) override {
    (void)attr;
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    CHORUS_CHECK(expect(QpState::kRtr, "RTS"));
    state_ = QpState::kRts;
    return ncclSuccess;
  }

  ncclResult_t queryEce(IbEce* out, bool* supported) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    *supported = eceSupported_;
    if (eceSupported_) *out = ece_;
    return ncclSuccess;
  }

  ncclResult_t setEce(const IbEce& ece, bool* supported) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    *supported = eceSupported_;
    if (!eceSupported_) return ncclSuccess;
    // As a provider: before RTR only, and it keeps what it offers of what is asked (the same vendor's options).
    if (state_ != QpState::kReset && state_ != QpState::kInit)
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: ibv_set_ece on QP %u after RTR", qpn_);
    ece_ = IbEce();
    if (ece.vendorId == eceOffer_.vendorId) {
      ece_.vendorId = ece.vendorId;
      ece_.options = ece.options & eceOffer_.options;
      ece_.compMask = ece.compMask & eceOffer_.compMask;
    }
    fabric_->eceSets_.push_back(FakeIbFabric::EceRecord{qpn_, ece, ece_});
    return ncclSuccess;
  }

  ncclResult_t postWrite(const IbWrite& w) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    CHORUS_CHECK(checkPost("write"));
    if (dead(pd_)) return ncclSuccess;  // a dead HCA carries nothing and completes nothing
    if (w.inlineData && w.length > static_cast<size_t>(maxInline_)) {  // ibv_post_send refuses it, as a driver does
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: inline write of %zu bytes on QP %u (max_inline_data %d)",
                  w.length, qpn_, maxInline_);
    }
    complete(w.wrId, carry(w), w.length);
    return ncclSuccess;
  }

  ncclResult_t postRead(const IbRead& r) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    CHORUS_CHECK(checkPost("read"));
    if (dead(pd_)) return ncclSuccess;
    complete(r.wrId, carryRead(r), r.length);
    return ncclSuccess;
  }

  ncclResult_t postRecv(uint64_t wrId) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    if (state_ == QpState::kReset)
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: receive posted on QP %u in RESET", qpn_);
    if (static_cast<int>(recvs_.size()) >= maxRecvWr_) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: receive queue of QP %u overflows (%d work requests)", qpn_,
                  maxRecvWr_);
    }
    recvs_.push_back(wrId);
    return ncclSuccess;
  }

 private:
  // fabric mu_ held.
  ncclResult_t expect(QpState s, const char* to) {
    if (state_ == s) return ncclSuccess;
    CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: QP %u cannot move to %s from state %d", qpn_, to,
                static_cast<int>(state_));
  }

  // A work request may be posted (RTS, or in error, where it is flushed) and the send queue has room. fabric mu_ held.
  ncclResult_t checkPost(const char* what) {
    if (state_ != QpState::kRts && state_ != QpState::kError) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: %s posted on QP %u, which is not in RTS", what, qpn_);
    }
    // Work requests complete as they are posted, so the send queue holds at most this one.
    if (maxSendWr_ < 1) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: send queue of QP %u overflows (%d work requests)", qpn_,
                  maxSendWr_);
    }
    return ncclSuccess;
  }

  // Queues the completion of a send-queue work request. fabric mu_ held.
  void complete(uint64_t wrId, int status, size_t length) {
    if (status != kIbWcSuccess) state_ = QpState::kError;
    IbWc wc;
    wc.wrId = wrId;
    wc.status = status;
    wc.qpn = qpn_;
    wc.byteLen = static_cast<uint32_t>(length);
    cq_->push(wc);
  }

  // The status a failNext*() call asked for (then forgotten), or success. fabric mu_ held.
  static int takeFailure(int* status) {
    int s = *status;
    *status = kIbWcSuccess;
    return s;
  }

  // Whether HCA `pd` is dead (kIbEventDeviceFatal). fabric mu_ held.
  bool dead(const void* pd) const {
    return std::find(fabric_->dead_.begin(), fabric_->dead_.end(), pd) != fabric_->dead_.end();
  }

  // The connected queue pair, or null when it is gone, not yet RTR, connected elsewhere, or on a dead HCA: such a
  // peer never acknowledges, so the requester retries, then fails. Loopback (connected to itself) is fine. fabric
  // mu_ held.
  FakeIbQp* peer() const {
    auto it = fabric_->qps_.find(remoteQpn_);
    FakeIbQp* dst = it == fabric_->qps_.end() ? nullptr : it->second;
    if (dst == nullptr || (dst->state_ != QpState::kRtr && dst->state_ != QpState::kRts) || dst->remoteQpn_ != qpn_ ||
        dead(dst->pd_)) {
      return nullptr;
    }
    return dst;
  }

  // What a write and a read meet first, in order: this queue pair in error, a failure the test injected (*fail),
  // the local buffer outside lkey's registration, no connected peer. kIbWcSuccess with *dst, else the completion
  // status. fabric mu_ held.
  int start(int* fail, const void* local, size_t length, uint32_t lkey, FakeIbQp** dst) {
    if (state_ == QpState::kError) return kIbWcWrFlushErr;
    if (*fail != kIbWcSuccess) return takeFailure(fail);
    if (length > 0 && !fabric_->covers(lkey, pd_, reinterpret_cast<uintptr_t>(local), length)) return kIbWcLocProtErr;
    *dst = peer();
    return *dst == nullptr ? kIbWcRetryExcErr : kIbWcSuccess;
  }

  // Carries one write to the connected queue pair; returns the completion status. fabric mu_ held.
  int carry(const IbWrite& w) {
    FakeIbFabric& f = *fabric_;
    FakeIbQp* dst = nullptr;
    // An inline write's bytes are taken as it is posted, without its lkey.
    if (int st = start(&f.failStatus_, w.local, w.inlineData ? 0 : w.length, w.lkey, &dst); st != kIbWcSuccess)
      return st;
    // The rkey must be of the responder's protection domain (its HCA).
    if (w.length > 0 && !f.covers(w.rkey, dst->pd_, w.remoteAddr, w.length)) return kIbWcRemAccessErr;
    if (w.withImm && dst->recvs_.empty()) return kIbWcRnrRetryExcErr;
    if (w.length > 0) writeInOrder(reinterpret_cast<void*>(w.remoteAddr), w.local, w.length);
    if (w.withImm) {
      IbWc wc;
      wc.wrId = dst->recvs_.front();
      dst->recvs_.pop_front();
      wc.qpn = dst->qpn_;
      wc.recvImm = true;
      wc.imm = w.imm;
      wc.byteLen = static_cast<uint32_t>(w.length);
      dst->cq_->push(wc);
    }
    FakeIbFabric::WriteRecord rec;
    rec.srcQpn = qpn_;
    rec.srcHca = hca_;
    rec.dstQpn = dst->qpn_;
    rec.dstHca = dst->hca_;
    rec.length = w.length;
    rec.withImm = w.withImm;
    rec.imm = w.imm;
    rec.inlined = w.inlineData;
    f.log_.push_back(rec);
    return kIbWcSuccess;
  }

  // Carries one read from the connected queue pair's memory; returns the completion status. fabric mu_ held.
  int carryRead(const IbRead& r) {
    FakeIbFabric& f = *fabric_;
    FakeIbQp* dst = nullptr;
    if (int st = start(&f.failReadStatus_, r.local, r.length, r.lkey, &dst); st != kIbWcSuccess) return st;
    // The responder must allow remote reads (INIT's access flags), and the rkey must cover what is read.
    if (!dst->remoteRead_) return kIbWcRemAccessErr;
    if (r.length > 0 && !f.covers(r.rkey, dst->pd_, r.remoteAddr, r.length)) return kIbWcRemAccessErr;
    if (r.length > 0) memmove(r.local, reinterpret_cast<const void*>(r.remoteAddr), r.length);
    FakeIbFabric::ReadRecord rec;
    rec.srcQpn = qpn_;
    rec.dstQpn = dst->qpn_;
    rec.remoteAddr = r.remoteAddr;
    rec.length = r.length;
    f.reads_.push_back(rec);
    return kIbWcSuccess;
  }

  std::shared_ptr<FakeIbFabric> fabric_;
  std::string hca_;  // the HCA that made it
  const void* pd_;   // that HCA's protection domain: the keys it may use
  FakeIbCq* cq_;
  int maxSendWr_;
  int maxRecvWr_;
  int maxInline_;
  uint32_t qpn_ = 0;
  int port_ = 0;
  int pkeyIndex_ = 0;
  uint32_t remoteQpn_ = 0;
  bool remoteRead_ = false;
  QpState state_ = QpState::kReset;
  std::deque<uint64_t> recvs_;
  bool eceSupported_;
  IbEce eceOffer_;  // what its HCA offers
  IbEce ece_;       // what it has: the offer, or after ibv_set_ece what it kept of the peer's
};

// ---- HCA ------------------------------------------------------------------------------------

class FakeIbHca : public IbHca {
 public:
  FakeIbHca(std::shared_ptr<FakeIbFabric> fabric, std::string name, bool dmaBuf, bool ece, const IbEce& eceOffer)
      : fabric_(std::move(fabric)), name_(std::move(name)), dmaBuf_(dmaBuf), ece_(ece), eceOffer_(eceOffer) {
    eventWake_.open();
  }
  ~FakeIbHca() override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    auto& dead = fabric_->dead_;
    dead.erase(std::remove(dead.begin(), dead.end(), static_cast<const void*>(this)), dead.end());
  }

  int asyncEventFd() override { return eventWake_.fd(); }

  ncclResult_t takeAsyncEvents(const std::function<void(const IbAsyncEvent&)>& handle) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    eventWake_.drain();
    while (!events_.empty()) {
      const IbAsyncEvent ev = events_.front();
      events_.pop_front();
      handle(ev);
    }
    return ncclSuccess;
  }

  // Queues one event and makes the descriptor readable. fabric mu_ held.
  void raise(const IbAsyncEvent& ev) {
    events_.push_back(ev);
    eventWake_.wake();
  }

  // Drops the pending events that name `obj` (a queue pair or CQ being destroyed). fabric mu_ held.
  void forget(const void* obj) {
    events_.erase(std::remove_if(events_.begin(), events_.end(),
                                 [&](const IbAsyncEvent& e) { return e.qp == obj || e.cq == obj; }),
                  events_.end());
  }

  ncclResult_t createCq(int depth, std::unique_ptr<IbCq>* out) override {
    out->reset(new FakeIbCq(fabric_, this, depth));
    return ncclSuccess;
  }

  ncclResult_t createQp(IbCq* cq, int maxSendWr, int maxRecvWr, int maxInline, std::unique_ptr<IbQp>* out) override {
    // As verbs: a queue pair's CQ is of its own device context.
    if (static_cast<FakeIbCq*>(cq)->pd() != this)
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: %s: queue pair on a completion queue of another HCA",
                  name_.c_str());
    out->reset(new FakeIbQp(fabric_, name_, this, static_cast<FakeIbCq*>(cq), maxSendWr, maxRecvWr, maxInline, ece_,
                            eceOffer_));
    return ncclSuccess;
  }

  ncclResult_t regMr(void* addr, size_t size, bool relaxed, IbMr* out) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    add(reinterpret_cast<uintptr_t>(addr), size, relaxed, out);
    return ncclSuccess;
  }

  bool dmaBufSupported() override { return dmaBuf_; }

  ncclResult_t regDmaBufMr(uint64_t offset, size_t size, uint64_t iova, int fd, bool relaxed, IbMr* out) override {
    if (!dmaBuf_) CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: this HCA takes no dma-buf registrations");
    if (fcntl(fd, F_GETFD) == -1) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: dma-buf registration of fd %d, which is not open", fd);
    }
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    // Test memory is host memory: the registration covers the buffer at iova itself.
    add(iova, size, relaxed, out);
    FakeIbFabric::DmaBufRecord rec;
    rec.fd = fd;
    rec.offset = offset;
    rec.iova = iova;
    rec.size = size;
    rec.key = out->lkey;
    fabric_->dmaBufs_.push_back(rec);
    return ncclSuccess;
  }

  ncclResult_t deregMr(IbMr* mr) override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    auto it = fabric_->mrs_.find(mr->lkey);
    if (it != fabric_->mrs_.end() && it->second.pd != this) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: %s: deregistering memory key 0x%x of another HCA",
                  name_.c_str(), mr->lkey);
    }
    if (fabric_->mrs_.erase(mr->lkey) == 0) {
      CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: deregistering unknown memory key 0x%x", mr->lkey);
    }
    mr->impl = nullptr;
    return ncclSuccess;
  }

 private:
  // A registration of [addr, addr + size). fabric mu_ held.
  void add(uint64_t addr, size_t size, bool relaxed, IbMr* out) {
    uint32_t key = fabric_->nextKey_++;
    fabric_->mrs_[key] = FakeIbFabric::MrRec{addr, size, relaxed, this};
    out->impl = reinterpret_cast<void*>(static_cast<uintptr_t>(key));
    out->addr = addr;
    out->size = size;
    out->lkey = out->rkey = key;
  }

  std::shared_ptr<FakeIbFabric> fabric_;
  std::string name_;
  bool dmaBuf_;
  bool ece_;
  IbEce eceOffer_;
  ProxyWake eventWake_;              // readable while events are pending
  std::deque<IbAsyncEvent> events_;  // fabric mu_
};

// The HCA of protection domain `pd` (every fake protection domain is its HCA). fabric mu_ held.
static FakeIbHca* hcaOf(const void* pd) { return const_cast<FakeIbHca*>(static_cast<const FakeIbHca*>(pd)); }

FakeIbCq::~FakeIbCq() {
  std::lock_guard<std::mutex> lock(fabric_->mu_);
  hcaOf(pd_)->forget(this);
}

FakeIbQp::~FakeIbQp() {
  std::lock_guard<std::mutex> lock(fabric_->mu_);
  fabric_->qps_.erase(qpn_);
  hcaOf(pd_)->forget(this);
}

// ---- fabric and verbs -----------------------------------------------------------------------

int FakeIbFabric::mrRelaxed(uint32_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mrs_.find(key);
  return it == mrs_.end() ? -1 : (it->second.relaxed ? 1 : 0);
}

bool FakeIbFabric::covers(uint32_t key, const void* pd, uint64_t addr, size_t len) const {
  auto it = mrs_.find(key);
  return it != mrs_.end() && it->second.pd == pd && addr >= it->second.addr &&
         addr + len <= it->second.addr + it->second.size;
}

void FakeIbFabric::raiseHcaEvent(IbHca* hca, int type, int port) {
  std::lock_guard<std::mutex> lock(mu_);
  IbAsyncEvent ev;
  ev.type = type;
  ev.port = port;
  auto* fake = static_cast<FakeIbHca*>(hca);
  if (type == kIbEventDeviceFatal) dead_.push_back(fake);
  fake->raise(ev);
}

bool FakeIbFabric::raiseQpEvent(uint32_t qpn, int type) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return false;
  IbAsyncEvent ev;
  ev.type = type;
  if (type == kIbEventCqErr) {
    ev.cq = it->second->cq();
  } else {
    ev.qp = it->second;
    ev.qpn = qpn;
  }
  hcaOf(it->second->pd())->raise(ev);
  return true;
}

void FakeIbFabric::failNextWrite(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  failStatus_ = status;
}

void FakeIbFabric::failNextRead(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  failReadStatus_ = status;
}

std::vector<FakeIbFabric::ReadRecord> FakeIbFabric::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

std::vector<FakeIbFabric::DmaBufRecord> FakeIbFabric::dmaBufs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dmaBufs_;
}

std::vector<FakeIbFabric::EceRecord> FakeIbFabric::eceSets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return eceSets_;
}

std::vector<FakeIbFabric::RtrRecord> FakeIbFabric::rtrs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rtrs_;
}

std::vector<FakeIbFabric::WriteRecord> FakeIbFabric::writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void FakeIbFabric::clearWrites() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
}

int FakeIbFabric::liveQps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(qps_.size());
}

int FakeIbFabric::liveMrs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(mrs_.size());
}

FakeIbVerbs::FakeIbVerbs(std::shared_ptr<FakeIbFabric> fabric, std::vector<IbPortDesc> ports)
    : fabric_(std::move(fabric)), ports_(std::move(ports)) {}

ncclResult_t FakeIbVerbs::listPorts(std::vector<IbPortDesc>* out, std::string* why) {
  (void)why;
  *out = ports_;
  return ncclSuccess;
}

ncclResult_t FakeIbVerbs::openHca(const std::string& hca, std::unique_ptr<IbHca>* out) {
  for (const IbPortDesc& p : ports_) {
    if (p.hca == hca) {
      out->reset(new FakeIbHca(fabric_, hca, dmaBuf_, ece_, eceOffer_));
      return ncclSuccess;
    }
  }
  CHORUS_FAIL(nullptr, ncclSystemError, "fake verbs: no HCA named %s", hca.c_str());
}

bool FakeIbVerbs::relaxedOrdering(std::string* why) {
  if (why != nullptr) *why = relaxedOrdering_ ? "fake relaxed ordering" : "no fake relaxed ordering";
  return relaxedOrdering_;
}

bool FakeIbVerbs::peerMemory(std::string* why) {
  if (why != nullptr) *why = peerMemory_ ? "fake peer memory" : "no fake peer memory";
  return peerMemory_;
}

const char* FakeIbVerbs::statusText(int status) const {
  switch (status) {
    case kIbWcSuccess:
      return "success";
    case kIbWcLocLenErr:
      return "local length error";
    case kIbWcLocProtErr:
      return "local protection error";
    case kIbWcWrFlushErr:
      return "Work Request Flushed Error";
    case kIbWcRemAccessErr:
      return "remote access error";
    case kIbWcRetryExcErr:
      return "transport retry counter exceeded";
    case kIbWcRnrRetryExcErr:
      return "RNR retry counter exceeded";
    default:
      return "unknown";
  }
}

IbPortDesc fakeIbPort(const std::string& hca, int port, int n) {
  IbPortDesc p;
  p.hca = hca;
  p.pciPath = "/sys/devices/pci0000:00/0000:00:0" + std::to_string(n % 10) + ".0";
  p.guid = 0x1000 + static_cast<uint64_t>(n);
  p.port = port;
  p.active = true;
  p.linkLayer = IbLinkLayer::kEthernet;
  p.activeMtu = 5;
  p.activeSpeed = 32;  // EDR lane rate
  p.activeWidth = 2;   // 4x
  p.maxQp = 1024;
  IbGidEntry link;
  link.gid.raw[0] = 0xfe;
  link.gid.raw[1] = 0x80;
  link.gid.raw[15] = static_cast<uint8_t>(n);
  link.type = IbGidType::kIbRoceV1;
  IbGidEntry v4;
  v4.gid.raw[10] = 0xff;
  v4.gid.raw[11] = 0xff;
  v4.gid.raw[12] = 10;
  v4.gid.raw[15] = static_cast<uint8_t>(n);
  v4.type = IbGidType::kRoceV2;
  p.gids = {link, v4};
  return p;
}

}  // namespace chorus
