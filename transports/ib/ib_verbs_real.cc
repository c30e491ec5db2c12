// The libibverbs backend of the IB net (ib_verbs.h). libibverbs.so.1 is opened with dlopen the first time the net
// is initialized, and the verbs below are resolved with dlsym, so that libnccl.so.2 itself does not depend on it and
// loads on hosts without RDMA. The data-path verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq) are inline functions
// of verbs.h that call the provider through the context's ops table, so they need no symbol. ibv_reg_dmabuf_mr
// (rdma-core 34, IBVERBS_1.12) is optional: without it the HCA simply takes no dma-buf registrations.
//
// Only built with the verbs headers (CHORUS_HAVE_VERBS); otherwise makeRealIbVerbs() says so.
#include "transports/ib/ib_verbs.h"

#ifdef CHORUS_HAVE_VERBS

#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include "core/checks.h"
#include "core/debug.h"
#include "core/files.h"
#include "transports/ib/ib_select.h"

namespace chorus {

namespace {

// The exported verbs the net resolves. Signatures are written out (not taken from verbs.h) because several of these
// names are macros there.
struct VerbsApi {
  ibv_device** (*getDeviceList)(int*) = nullptr;
  void (*freeDeviceList)(ibv_device**) = nullptr;
  const char* (*getDeviceName)(ibv_device*) = nullptr;
  ibv_context* (*openDevice)(ibv_device*) = nullptr;
  int (*closeDevice)(ibv_context*) = nullptr;
  int (*queryDevice)(ibv_context*, ibv_device_attr*) = nullptr;
  // The exported ibv_query_port fills the older, shorter port attribute struct, a prefix of ibv_port_attr.
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*allocPd)(ibv_context*) = nullptr;
  int (*deallocPd)(ibv_pd*) = nullptr;
  ibv_mr* (*regMr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*deregMr)(ibv_mr*) = nullptr;
  ibv_cq* (*createCq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroyCq)(ibv_cq*) = nullptr;
  ibv_qp* (*createQp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modifyQp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroyQp)(ibv_qp*) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status) = nullptr;
  int (*getAsyncEvent)(ibv_context*, ibv_async_event*) = nullptr;
  void (*ackAsyncEvent)(ibv_async_event*) = nullptr;
  // Optional (null when libibverbs predates it).
  ibv_mr* (*regDmaBufMr)(ibv_pd*, uint64_t offset, size_t length, uint64_t iova, int fd, int access) = nullptr;
  ibv_mr* (*regMrIova2)(ibv_pd*, void*, size_t, uint64_t iova, unsigned int access) = nullptr;
  int (*queryEce)(ibv_qp*, ibv_ece*) = nullptr;  // rdma-core 31 (IBVERBS_1.10)
  int (*setEce)(ibv_qp*, ibv_ece*) = nullptr;
};

// What every registration allows: the HCA writes received data (local write, and remote write for the sender's
// RDMA writes) and reads it (remote read: flushes, which read through the registration's rkey).
constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

std::string errText(int err) {
  char buf[128];
  return std::string(strerror_r(err, buf, sizeof(buf)));
}

// Loads libibverbs once per process (it is never unloaded: providers keep threads and state).
const VerbsApi* loadVerbs(std::string* why) {
  static std::once_flag once;
  static VerbsApi api;
  static std::string error;
  std::call_once(once, [] {
    void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libibverbs.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = std::string("cannot open libibverbs.so.1: ") + (e != nullptr ? e : "unknown error");
      return;
    }
    bool ok = true;
    auto get = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr && ok) {
        ok = false;
        error = std::string("libibverbs.so.1 lacks ") + name;
      }
    };
    get(&api.getDeviceList, "ibv_get_device_list");
    get(&api.freeDeviceList, "ibv_free_device_list");
    get(&api.getDeviceName, "ibv_get_device_name");
    get(&api.openDevice, "ibv_open_device");
    get(&api.closeDevice, "ibv_close_device");
    get(&api.queryDevice, "ibv_query_device");
    get(&api.queryPort, "ibv_query_port");
    get(&api.queryGid, "ibv_query_gid");
    get(&api.allocPd, "ibv_alloc_pd");
    get(&api.deallocPd, "ibv_dealloc_pd");
    get(&api.regMr, "ibv_reg_mr");
    get(&api.deregMr, "ibv_dereg_mr");
    get(&api.createCq, "ibv_create_cq");
    get(&api.destroyCq, "ibv_destroy_cq");
    get(&api.createQp, "ibv_create_qp");
    get(&api.modifyQp, "ibv_modify_qp");
    get(&api.destroyQp, "ibv_destroy_qp");
    get(&api.wcStatusStr, "ibv_wc_status_str");
    get(&api.getAsyncEvent, "ibv_get_async_event");
    get(&api.ackAsyncEvent, "ibv_ack_async_event");
    if (!ok) {
      api = VerbsApi();
      return;
    }
    api.regDmaBufMr = reinterpret_cast<decltype(api.regDmaBufMr)>(dlsym(lib, "ibv_reg_dmabuf_mr"));
    api.regMrIova2 = reinterpret_cast<decltype(api.regMrIova2)>(dlsym(lib, "ibv_reg_mr_iova2"));
    api.queryEce = reinterpret_cast<decltype(api.queryEce)>(dlsym(lib, "ibv_query_ece"));
    api.setEce = reinterpret_cast<decltype(api.setEce)>(dlsym(lib, "ibv_set_ece"));
  });
  if (api.getDeviceList == nullptr) {
    *why = error;
    return nullptr;
  }
  return &api;
}

std::string readSysfs(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[64] = {0};
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

IbGidType gidType(const std::string& hca, int port, int index) {
  // Unreadable (EINVAL) for entries that are not populated, or not mapped into a container's sysfs.
  std::string t = readSysfs("/sys/class/infiniband/" + hca + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                            std::to_string(index));
  if (t.compare(0, 7, "RoCE v2") == 0) return IbGidType::kRoceV2;
  if (t.compare(0, 10, "IB/RoCE v1") == 0 || t.compare(0, 7, "RoCE v1") == 0) return IbGidType::kIbRoceV1;
  return IbGidType::kUnknown;
}

std::string pciPathOf(const std::string& hca) {
  char real[PATH_MAX];
  std::string link = "/sys/class/infiniband/" + hca + "/device";
  return realpath(link.c_str(), real) != nullptr ? std::string(real) : "";
}

class RealCq : public IbCq {
 public:
  RealCq(const VerbsApi* api, ibv_cq* cq) : api_(api), cq_(cq) {}
  ~RealCq() override { api_->destroyCq(cq_); }
  ibv_cq* cq() const { return cq_; }

  ncclResult_t poll(int max, IbWc* out, int* n) override {
    ibv_wc wcs[32];
    if (max > 32) max = 32;
    int got = ibv_poll_cq(cq_, max, wcs);
    if (got < 0) CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_poll_cq failed (%d)", got);
    for (int i = 0; i < got; ++i) {
      IbWc& w = out[i];
      w = IbWc();
      w.wrId = wcs[i].wr_id;
      w.status = wcs[i].status;
      w.vendorErr = static_cast<int>(wcs[i].vendor_err);
      w.qpn = wcs[i].qp_num;
      if (wcs[i].status == IBV_WC_SUCCESS) {
        w.recvImm = wcs[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
        w.imm = w.recvImm ? ntohl(wcs[i].imm_data) : 0;
        w.byteLen = wcs[i].byte_len;
      }
    }
    *n = got;
    return ncclSuccess;
  }

 private:
  const VerbsApi* api_;
  ibv_cq* cq_;
};

class RealQp : public IbQp {
 public:
  RealQp(const VerbsApi* api, ibv_qp* qp) : api_(api), qp_(qp) {}
  ~RealQp() override { api_->destroyQp(qp_); }

  uint32_t qpn() const override { return qp_->qp_num; }

  ncclResult_t toInit(int port, int pkeyIndex, bool remoteRead) override {
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = static_cast<uint16_t>(pkeyIndex);
    a.port_num = static_cast<uint8_t>(port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | (remoteRead ? IBV_ACCESS_REMOTE_READ : 0);
    return modify(&a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
  }

  ncclResult_t toRtr(int port, const IbRtrAttr& r) override {
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(r.mtu);
    a.dest_qp_num = r.remoteQpn;
    a.rq_psn = r.remotePsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(port);
    a.ah_attr.sl = static_cast<uint8_t>(r.sl);
    // The LID: the peer's on InfiniBand (its FLID on another subnet), 0 on RoCE.
    a.ah_attr.dlid = static_cast<uint16_t>(r.remoteLid);
    if (r.global) {
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, r.remoteGid.raw, 16);
      a.ah_attr.grh.flow_label = 0;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(r.localGidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(r.trafficClass);
    }
    // Where it was to send: the peer's queue pair and address, and this side's GID index.
    std::string where =
        " towards QP " + std::to_string(r.remoteQpn) + " at " +
        (r.global ? "GID " + ibGidText(r.remoteGid) + " (local GID index " + std::to_string(r.localGidIndex) + ")"
                  : "LID " + std::to_string(r.remoteLid)) +
        " on port " + std::to_string(port);
    return modify(&a,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  "RTR", where);
  }

  ncclResult_t toRts(const IbRtsAttr& r) override {
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<uint8_t>(r.timeout);
    a.retry_cnt = static_cast<uint8_t>(r.retryCnt);
    a.rnr_retry = 7;  // 7: retry forever; receives are always posted before their descriptor is sent
    a.sq_psn = r.psn;
    a.max_rd_atomic = 1;
    return modify(
        &a,
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
        "RTS");
  }

  ncclResult_t queryEce(IbEce* out, bool* supported) override {
    *supported = false;
    if (api_->queryEce == nullptr) return ncclSuccess;
    ibv_ece e;
    memset(&e, 0, sizeof(e));
    int rc = api_->queryEce(qp_, &e);
    if (rc == EOPNOTSUPP || rc == ENOTSUP) return ncclSuccess;
    if (rc != 0)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_query_ece on QP %u failed: %s", qpn(), errText(rc).c_str());
    out->vendorId = e.vendor_id;
    out->options = e.options;
    out->compMask = e.comp_mask;
    *supported = true;
    return ncclSuccess;
  }

  ncclResult_t setEce(const IbEce& ece, bool* supported) override {
    *supported = false;
    if (api_->setEce == nullptr) return ncclSuccess;
    ibv_ece e;
    memset(&e, 0, sizeof(e));
    e.vendor_id = ece.vendorId;
    e.options = ece.options;
    e.comp_mask = ece.compMask;
    int rc = api_->setEce(qp_, &e);
    if (rc == EOPNOTSUPP || rc == ENOTSUP) return ncclSuccess;
    if (rc != 0)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_set_ece on QP %u failed: %s", qpn(), errText(rc).c_str());
    *supported = true;
    return ncclSuccess;
  }

  ncclResult_t postWrite(const IbWrite& w) override {
    return postRdma(w.wrId, w.withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, w.local, w.length, w.lkey,
                    w.remoteAddr, w.rkey, w.imm, w.inlineData);
  }

  ncclResult_t postRead(const IbRead& r) override {
    return postRdma(r.wrId, IBV_WR_RDMA_READ, r.local, r.length, r.lkey, r.remoteAddr, r.rkey, 0, false);
  }

  ncclResult_t postRecv(uint64_t wrId) override {
    ibv_recv_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wrId;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc != 0)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_post_recv on QP %u failed: %s", qpn(), errText(rc).c_str());
    return ncclSuccess;
  }

 private:
  // Posts one signaled RDMA write (with immediate data `imm`, host order, for IBV_WR_RDMA_WRITE_WITH_IMM; its bytes
  // taken at once with `inlineData`) or read of `length` bytes between local memory and the remote address.
  ncclResult_t postRdma(uint64_t wrId, ibv_wr_opcode opcode, const void* local, size_t length, uint32_t lkey,
                        uint64_t remoteAddr, uint32_t rkey, uint32_t imm, bool inlineData) {
    ibv_sge sge;
    sge.addr = reinterpret_cast<uintptr_t>(local);
    sge.length = static_cast<uint32_t>(length);
    sge.lkey = lkey;
    ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wrId;
    wr.sg_list = length > 0 ? &sge : nullptr;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED | (inlineData ? IBV_SEND_INLINE : 0);
    if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remoteAddr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp_, &wr, &bad);
    if (rc != 0) {
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_post_send (RDMA %s) on QP %u failed: %s",
                  opcode == IBV_WR_RDMA_READ ? "read" : "write", qpn(), errText(rc).c_str());
    }
    return ncclSuccess;
  }

  // ibv_modify_qp, retried as NCCL_IB_MQP_RETRY_* say; `where` says what the move was towards, for messages.
  ncclResult_t modify(ibv_qp_attr* a, int mask, const char* to, const std::string& where = "") {
    int attempts = 0;
    int rc = ibRetryModifyQp(
        ibModifyRetry(), [&] { return api_->modifyQp(qp_, a, mask); },
        [&](int ms, int err) {
          INFO(kNet, "NET/IB: moving QP %u to %s%s failed: %s; trying again in %d ms", qpn(), to, where.c_str(),
               errText(err < 0 ? -err : err).c_str(), ms);
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        },
        &attempts);
    if (rc != 0) {
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: moving QP %u to %s%s failed: %s (%d attempt%s)", qpn(), to,
                  where.c_str(), errText(rc < 0 ? -rc : rc).c_str(), attempts, attempts == 1 ? "" : "s");
    }
    return ncclSuccess;
  }

  const VerbsApi* api_;
  ibv_qp* qp_;
};

class RealHca : public IbHca {
 public:
  RealHca(const VerbsApi* api, std::string name, ibv_context* ctx, ibv_pd* pd)
      : api_(api), name_(std::move(name)), ctx_(ctx), pd_(pd) {
    // Events are taken without blocking, when poll() says there are some (IbNet's watcher).
    int flags = fcntl(ctx_->async_fd, F_GETFL);
    asyncFdOk_ = flags != -1 && fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK) == 0;
  }
  ~RealHca() override {
    api_->deallocPd(pd_);
    api_->closeDevice(ctx_);
  }

  ncclResult_t createCq(int depth, std::unique_ptr<IbCq>* out) override {
    ibv_cq* cq = api_->createCq(ctx_, depth, nullptr, nullptr, 0);
    if (cq == nullptr) {
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_create_cq(%d) on %s failed: %s", depth, name_.c_str(),
                  errText(errno).c_str());
    }
    auto* wrapper = new RealCq(api_, cq);
    cq->cq_context = static_cast<IbCq*>(wrapper);  // what an event on it names
    out->reset(wrapper);
    return ncclSuccess;
  }

  ncclResult_t createQp(IbCq* cq, int maxSendWr, int maxRecvWr, int maxInline, std::unique_ptr<IbQp>* out) override {
    ibv_qp_init_attr a;
    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = static_cast<RealCq*>(cq)->cq();
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = static_cast<uint32_t>(maxSendWr);
    a.cap.max_recv_wr = static_cast<uint32_t>(maxRecvWr);
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = static_cast<uint32_t>(maxInline);
    ibv_qp* qp = api_->createQp(pd_, &a);
    if (qp == nullptr) {
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_create_qp on %s failed: %s", name_.c_str(),
                  errText(errno).c_str());
    }
    auto* wrapper = new RealQp(api_, qp);
    qp->qp_context = static_cast<IbQp*>(wrapper);  // what an event on it names
    out->reset(wrapper);
    return ncclSuccess;
  }

  ncclResult_t regMr(void* addr, size_t size, bool relaxed, IbMr* out) override {
    // GPU memory too, when a peer-memory module (nvidia_peermem) is loaded: the kernel asks it to pin the pages.
    // Relaxed ordering goes through ibv_reg_mr_iova2, as NCCL registers it (IBV_ACCESS_RELAXED_ORDERING is an
    // optional flag: a device without it ignores it).
    ibv_mr* mr = relaxed && api_->regMrIova2 != nullptr
                     ? api_->regMrIova2(pd_, addr, size, reinterpret_cast<uintptr_t>(addr),
                                        kMrAccess | IBV_ACCESS_RELAXED_ORDERING)
                     : api_->regMr(pd_, addr, size, kMrAccess);
    if (mr == nullptr) {
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_reg_mr of %zu bytes at %p on %s failed: %s", size, addr,
                  name_.c_str(), errText(errno).c_str());
    }
    fill(mr, reinterpret_cast<uintptr_t>(addr), size, out);
    return ncclSuccess;
  }

  bool dmaBufSupported() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (dmaBuf_ < 0) {
      dmaBuf_ = 0;
      if (api_->regDmaBufMr != nullptr) {
        // As NCCL: a registration of fd -1 fails with EOPNOTSUPP or EPROTONOSUPPORT when the provider or the kernel
        // has no dma-buf support, and with another errno (EBADF) when it has.
        errno = 0;
        ibv_mr* mr = api_->regDmaBufMr(pd_, 0, 0, 0, -1, 0);
        int err = errno;
        if (mr != nullptr) api_->deregMr(mr);
        dmaBuf_ = err != EOPNOTSUPP && err != EPROTONOSUPPORT ? 1 : 0;
      }
    }
    return dmaBuf_ == 1;
  }

  ncclResult_t regDmaBufMr(uint64_t offset, size_t size, uint64_t iova, int fd, bool relaxed, IbMr* out) override {
    if (api_->regDmaBufMr == nullptr) {
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: libibverbs.so.1 lacks ibv_reg_dmabuf_mr (rdma-core 34 or later)");
    }
    ibv_mr* mr =
        api_->regDmaBufMr(pd_, offset, size, iova, fd, kMrAccess | (relaxed ? IBV_ACCESS_RELAXED_ORDERING : 0));
    if (mr == nullptr) {
      CHORUS_FAIL(nullptr, ncclSystemError,
                  "NET/IB: ibv_reg_dmabuf_mr of %zu bytes at offset %llu of dma-buf %d (iova 0x%llx) on %s failed: %s",
                  size, static_cast<unsigned long long>(offset), fd, static_cast<unsigned long long>(iova),
                  name_.c_str(), errText(errno).c_str());
    }
    fill(mr, iova, size, out);
    return ncclSuccess;
  }

  ncclResult_t deregMr(IbMr* mr) override {
    int rc = api_->deregMr(static_cast<ibv_mr*>(mr->impl));
    mr->impl = nullptr;
    if (rc != 0)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_dereg_mr on %s failed: %s", name_.c_str(),
                  errText(rc).c_str());
    return ncclSuccess;
  }

  int asyncEventFd() override { return asyncFdOk_ ? ctx_->async_fd : -1; }

  ncclResult_t takeAsyncEvents(const std::function<void(const IbAsyncEvent&)>& handle) override {
    for (;;) {
      ibv_async_event ev;
      if (api_->getAsyncEvent(ctx_, &ev) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
        CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_get_async_event on %s failed: %s", name_.c_str(),
                    errText(errno).c_str());
      }
      IbAsyncEvent e;
      e.type = ev.event_type;
      switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
          e.qp = static_cast<IbQp*>(ev.element.qp->qp_context);
          e.qpn = ev.element.qp->qp_num;
          break;
        case IBV_EVENT_CQ_ERR:
          e.cq = static_cast<IbCq*>(ev.element.cq->cq_context);
          break;
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE:
          e.port = ev.element.port_num;
          break;
        default:
          break;
      }
      handle(e);
      api_->ackAsyncEvent(&ev);  // last: a destroy of the queue pair or CQ waits for it
    }
  }

 private:
  static void fill(ibv_mr* mr, uint64_t addr, size_t size, IbMr* out) {
    out->impl = mr;
    out->addr = addr;
    out->size = size;
    out->lkey = mr->lkey;
    out->rkey = mr->rkey;
  }

  const VerbsApi* api_;
  std::string name_;
  ibv_context* ctx_;
  ibv_pd* pd_;
  std::mutex mu_;    // guards dmaBuf_ (registrations may come from several proxy threads)
  int dmaBuf_ = -1;  // -1: not probed yet
  bool asyncFdOk_ = false;
};

static_assert(int{IBV_EVENT_CQ_ERR} == kIbEventCqErr && int{IBV_EVENT_QP_FATAL} == kIbEventQpFatal &&
                  int{IBV_EVENT_DEVICE_FATAL} == kIbEventDeviceFatal && int{IBV_EVENT_PORT_ERR} == kIbEventPortErr &&
                  int{IBV_EVENT_GID_CHANGE} == kIbEventGidChange && int{IBV_EVENT_WQ_FATAL} == kIbEventWqFatal,
              "IbEventType follows enum ibv_event_type");

class RealVerbs : public IbVerbs {
 public:
  explicit RealVerbs(const VerbsApi* api) : api_(api) {}
  const char* name() const override { return "libibverbs"; }

  ncclResult_t listPorts(std::vector<IbPortDesc>* out, std::string* why) override {
    out->clear();
    int n = 0;
    errno = 0;
    ibv_device** list = api_->getDeviceList(&n);
    if (list == nullptr) {
      int err = errno != 0 ? errno : ENODEV;
      *why = "ibv_get_device_list failed: " + errText(err);
      // rdma-core says ENOSYS when the kernel has no RDMA support loaded (no /sys/class/infiniband).
      if (err == ENOSYS) *why += " (no RDMA devices or kernel modules on this host)";
      return ncclSystemError;
    }
    for (int i = 0; i < n; ++i) listDevice(list[i], out);
    api_->freeDeviceList(list);
    return ncclSuccess;
  }

  ncclResult_t openHca(const std::string& hca, std::unique_ptr<IbHca>* out) override {
    int n = 0;
    ibv_device** list = api_->getDeviceList(&n);
    if (list == nullptr)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_get_device_list failed: %s", errText(errno).c_str());
    ibv_context* ctx = nullptr;
    for (int i = 0; i < n && ctx == nullptr; ++i) {
      if (hca == api_->getDeviceName(list[i])) ctx = api_->openDevice(list[i]);
    }
    int err = errno;
    api_->freeDeviceList(list);
    if (ctx == nullptr)
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: cannot open %s: %s", hca.c_str(), errText(err).c_str());
    ibv_pd* pd = api_->allocPd(ctx);
    if (pd == nullptr) {
      err = errno;
      api_->closeDevice(ctx);
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/IB: ibv_alloc_pd on %s failed: %s", hca.c_str(), errText(err).c_str());
    }
    out->reset(new RealHca(api_, hca, ctx, pd));
    return ncclSuccess;
  }

  const char* statusText(int status) const override { return api_->wcStatusStr(static_cast<ibv_wc_status>(status)); }

  bool peerMemory(std::string* why) override {
    // NCCL's and RCCL's test: a peer-memory module's version file (NVIDIA's or AMD's: chorus's GPU runtime then says
    // whether its own vendor's is there).
    const std::string f = peerMemoryModuleFile(PeerMemoryVendor::kAny);
    if (why != nullptr) *why = f.empty() ? "no peer-memory module (nvidia_peermem, nv_peer_mem, amdkfd's)" : f;
    return !f.empty();
  }

  bool relaxedOrdering(std::string* why) override {
    const bool has = api_->regMrIova2 != nullptr;
    if (why != nullptr) *why = has ? "ibv_reg_mr_iova2" : "libibverbs.so.1 lacks ibv_reg_mr_iova2 (IBVERBS_1.8)";
    return has;
  }

 private:
  void listDevice(ibv_device* dev, std::vector<IbPortDesc>* out) {
    std::string name = api_->getDeviceName(dev);
    ibv_context* ctx = api_->openDevice(dev);
    if (ctx == nullptr) {
      INFO(kNet | kInit, "NET/IB: cannot open %s: %s", name.c_str(), errText(errno).c_str());
      return;
    }
    ibv_device_attr da;
    memset(&da, 0, sizeof(da));
    if (api_->queryDevice(ctx, &da) != 0) {
      INFO(kNet | kInit, "NET/IB: ibv_query_device on %s failed", name.c_str());
      api_->closeDevice(ctx);
      return;
    }
    std::string pci = pciPathOf(name);
    for (int port = 1; port <= da.phys_port_cnt; ++port) {
      ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (api_->queryPort(ctx, static_cast<uint8_t>(port), &pa) != 0) continue;
      IbPortDesc p;
      p.hca = name;
      p.pciPath = pci;
      p.guid = be64toh(da.node_guid);
      p.port = port;
      p.active = pa.state == IBV_PORT_ACTIVE;
      // Old drivers report IBV_LINK_LAYER_UNSPECIFIED for InfiniBand ports.
      p.linkLayer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? IbLinkLayer::kEthernet : IbLinkLayer::kInfiniband;
      p.lid = pa.lid;
      p.activeMtu = pa.active_mtu;
      p.activeSpeed = pa.active_speed;
      p.activeWidth = pa.active_width;
      p.maxQp = da.max_qp;
      int ngid = p.active ? pa.gid_tbl_len : 0;
      if (ngid > 256) ngid = 256;  // RoCE tables hold a few entries per address; the first 256 are plenty
      for (int g = 0; g < ngid; ++g) {
        IbGidEntry e;
        ibv_gid gid;
        if (api_->queryGid(ctx, static_cast<uint8_t>(port), g, &gid) == 0) memcpy(e.gid.raw, gid.raw, 16);
        if (ibGidSet(e.gid)) e.type = gidType(name, port, g);
        p.gids.push_back(e);
      }
      out->push_back(std::move(p));
    }
    api_->closeDevice(ctx);
  }

  static bool ibGidSet(const IbGid& g) {
    for (uint8_t b : g.raw) {
      if (b != 0) return true;
    }
    return false;
  }

  const VerbsApi* api_;
};

}  // namespace

std::unique_ptr<IbVerbs> makeRealIbVerbs(std::string* why) {
  const VerbsApi* api = loadVerbs(why);
  if (api == nullptr) return nullptr;
  return std::make_unique<RealVerbs>(api);
}

}  // namespace chorus

#else  // !CHORUS_HAVE_VERBS

namespace chorus {

std::unique_ptr<IbVerbs> makeRealIbVerbs(std::string* why) {
  *why = "chorus was built without the libibverbs headers (libibverbs-dev)";
  return nullptr;
}

}  // namespace chorus

#endif  // CHORUS_HAVE_VERBS
