// The IB net's devices (IbNet) and its ncclNet_v11_t table.
#include "transports/ib/ib_net.h"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "core/checks.h"
#include "core/debug.h"
#include "core/params.h"
#include "transports/ib/ib_comm.h"
#include "transports/net/net.h"

namespace chorus {

StrParam kIbHca{"NCCL_IB_HCA", "",
                "IB and UCX nets: HCA ports to use, as name[:port] list: names are prefixes, a leading ^ excludes the "
                "listed ones, = (after any ^) makes names exact. Unset: every active port.",
                "network"};

namespace {
IntParam kIbGidIndex{"NCCL_IB_GID_INDEX", -1,
                     "IB net: GID index addressing each port. -1: 0 on InfiniBand; on RoCE the first routable GID "
                     "of NCCL_IB_ADDR_FAMILY, in NCCL_IB_ADDR_RANGE, of RoCE version NCCL_IB_ROCE_VERSION_NUM, then "
                     "of any version; without a range, then any RoCE v2 GID, else any configured one.",
                     "network"};
StrParam kIbAddrFamily{"NCCL_IB_ADDR_FAMILY", "AF_INET",
                       "IB net, RoCE: the address family of the GID chosen (AF_INET: IPv4-mapped, or AF_INET6).",
                       "network"};
StrParam kIbAddrRange{"NCCL_IB_ADDR_RANGE", "",
                      "IB net, RoCE: a range (address/prefix length, of NCCL_IB_ADDR_FAMILY) the chosen GID's address "
                      "must be in; a port with none in it is not used.",
                      "network"};
IntParam kIbRoutableFlidIndex{"NCCL_IB_ROUTABLE_FLID_GID_INDEX", 1,
                              "IB net, InfiniBand: the GID index used where that GID carries a FLID (a LID routers "
                              "forward to from other subnets), as NCCL; otherwise index 0.",
                              "network"};
IntParam kIbRoceVersion{"NCCL_IB_ROCE_VERSION_NUM", 2, "IB net, RoCE: the RoCE version (1 or 2) of the GID chosen.",
                        "network"};
IntParam kIbMergeNics{"NCCL_IB_MERGE_NICS", 1,
                      "IB net: 0: makeVDevice refuses to merge ports, so that every port stays a device of its own "
                      "whatever NCCL_NET_MERGE_LEVEL says (a NCCL_NET_FORCE_MERGE group then fails), as NCCL; 1: it "
                      "merges them.",
                      "network"};
IntParam kIbAsyncEvents{"NCCL_IB_RETURN_ASYNC_EVENTS", 1,
                        "IB net: 1: an HCA's asynchronous fatal event (a device fatal error; a queue pair's or CQ's "
                        "fatal error) fails the connections it concerns at their next call, naming the event, as "
                        "NCCL; 0: such events are only logged (WARN).",
                        "network"};
IntParam kIbRelaxedOrdering{"NCCL_IB_PCI_RELAXED_ORDERING", 2,
                            "IB net: 1 or 2: data registrations ask for PCIe relaxed ordering where libibverbs offers "
                            "it (ibv_reg_mr_iova2), as NCCL; 0: never. Control memory never does.",
                            "network"};

// The process's IbNet over libibverbs, made once by the table's init() (or one a test put in its place:
// replaceIbProcessNet). Never destroyed: comms of communicators that outlive finalize() (or static destructors at
// exit) may still use its HCAs.
struct ProcessNet {
  std::mutex mu;
  bool tried = false;
  ncclResult_t result = ncclSuccess;
  std::string why;
  IbNet* net = nullptr;
};

ProcessNet& processNet() {
  static ProcessNet* p = new ProcessNet();
  return *p;
}

ncclResult_t tableInit(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logFunction,
                       ncclProfilerCallback_t profFunction) {
  (void)commId, (void)logFunction, (void)profFunction;
  *ctx = nullptr;
  ProcessNet& p = processNet();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.tried) {
    p.tried = true;
    std::unique_ptr<IbVerbs> verbs = makeRealIbVerbs(&p.why);
    if (verbs == nullptr) {
      p.result = ncclSystemError;
    } else {
      auto net = std::make_unique<IbNet>(std::move(verbs));
      p.result = net->discover(&p.why);
      if (p.result == ncclSuccess) p.net = net.release();
    }
    if (p.result != ncclSuccess) p.why = "NET/IB: unavailable: " + p.why;
  }
  if (p.result != ncclSuccess) {
    // Not a WARN: most hosts have no HCA, and the net selector reports this only when IB was asked for.
    INFO(kNet | kInit, "%s", p.why.c_str());
    setThreadLastError(p.why.c_str());
    return p.result;
  }
  // A context a communicator: the process's net, and the communicator's traffic class for its queue pairs.
  *ctx = new IbNetCtx{p.net, config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return ncclSuccess;
}

ncclResult_t tableDevices(int* ndev) {
  ProcessNet& p = processNet();
  std::lock_guard<std::mutex> lock(p.mu);
  *ndev = p.net != nullptr ? p.net->ndev() : 0;
  return ncclSuccess;
}

ncclResult_t tableGetProperties(int dev, ncclNetProperties_v11_t* props) {
  IbNet* net = nullptr;
  {
    ProcessNet& p = processNet();
    std::lock_guard<std::mutex> lock(p.mu);
    net = p.net;
  }
  if (net == nullptr) CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/IB: getProperties before a successful init");
  return net->getProperties(dev, props);
}

ncclResult_t tableGetDeviceMr(void* comm, void* mhandle, void** dptrMhandle) {
  (void)comm, (void)mhandle;
  *dptrMhandle = nullptr;  // no device-side (UNPACK) offload
  return ncclSuccess;
}

ncclResult_t tableIrecvConsumed(void* recvComm, int n, void* request) {
  (void)recvComm, (void)n, (void)request;
  return ncclSuccess;
}

ncclResult_t tableMakeVDevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  IbNet* net = nullptr;
  {
    ProcessNet& p = processNet();
    std::lock_guard<std::mutex> lock(p.mu);
    net = p.net;
  }
  if (net == nullptr) CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/IB: makeVDevice before a successful init");
  return net->makeVDevice(*props, d);
}

ncclResult_t tableFinalize(void* ctx) {
  delete static_cast<IbNetCtx*>(ctx);  // the process's IbNet stays (see ProcessNet)
  return ncclSuccess;
}

ncclResult_t tableSetNetAttr(void* ctx, ncclNetAttr_v11_t* netAttr) {
  (void)ctx, (void)netAttr;
  return ncclSuccess;
}

const ncclNet_v11_t kIbNetTable = {
    "IB",
    tableInit,
    tableDevices,
    tableGetProperties,
    ibListen,
    ibConnect,
    ibAccept,
    ibRegMr,
    ibRegMrDmaBuf,
    ibDeregMr,
    ibIsend,
    ibIrecv,
    ibIflush,
    ibTest,
    ibCloseComm,
    ibCloseComm,
    ibCloseListen,
    tableGetDeviceMr,
    tableIrecvConsumed,
    tableMakeVDevice,
    tableFinalize,
    tableSetNetAttr,
};

}  // namespace

IbNet::IbNet(std::unique_ptr<IbVerbs> verbs) : verbs_(std::move(verbs)) {}

IbNet::~IbNet() {
  if (watcher_.joinable()) {
    stopWatcher_ = true;
    wake_.wake();
    watcher_.join();
  }
}

const char* ibEventText(int type) {
  // libibverbs's ibv_event_type_str() texts, the same whatever the backend.
  static const char* const kText[] = {"CQ error",
                                      "local work queue catastrophic error",
                                      "invalid request local work queue error",
                                      "local access violation work queue error",
                                      "communication established",
                                      "send queue drained",
                                      "path migrated",
                                      "path migration request error",
                                      "local catastrophic error",
                                      "port active",
                                      "port error",
                                      "LID change",
                                      "P_Key change",
                                      "SM change",
                                      "SRQ catastrophic error",
                                      "SRQ limit reached",
                                      "last WQE reached",
                                      "client reregistration",
                                      "GID table change",
                                      "WQ fatal"};
  return type >= 0 && type < static_cast<int>(sizeof(kText) / sizeof(kText[0])) ? kText[type] : "unknown event";
}

void IbNet::own(const void* obj, const IbComm* c) {
  std::lock_guard<std::mutex> lock(fatalMu_);
  owners_[obj] = c;
}

void IbNet::disown(const IbComm* c) {
  std::lock_guard<std::mutex> lock(fatalMu_);
  for (auto it = owners_.begin(); it != owners_.end();) it = it->second == c ? owners_.erase(it) : std::next(it);
  fatalComms_.erase(c);
}

const std::string* IbNet::deadHcaText(const IbHca* hca) const {
  auto it = deadHcas_.find(hca);
  return it == deadHcas_.end() ? nullptr : &it->second;
}

bool IbNet::hcaFatal(const IbHca* hca, std::string* why) const {
  if (fatalEvents_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(fatalMu_);
  const std::string* dead = deadHcaText(hca);
  if (dead == nullptr) return false;
  *why = *dead;
  return true;
}

bool IbNet::asyncFatal(const IbComm* c, std::string* why) const {
  if (fatalEvents_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(fatalMu_);
  auto it = fatalComms_.find(c);
  if (it != fatalComms_.end()) {
    *why = it->second;
    return true;
  }
  for (const IbCommPort& p : c->ports) {
    if (const std::string* dead = deadHcaText(p.hca)) {
      *why = *dead;
      return true;
    }
  }
  return false;
}

void IbNet::onAsyncEvent(const std::string& name, const IbHca* hca, const IbAsyncEvent& ev) {
  const char* what = ibEventText(ev.type);
  const bool act = kIbAsyncEvents.get() != 0;
  const char* kept = act ? "" : " (NCCL_IB_RETURN_ASYNC_EVENTS=0: connections go on)";
  char text[256];
  switch (ev.type) {
    case kIbEventDeviceFatal: {
      snprintf(text, sizeof(text), "HCA %s reported a fatal error: %s (asynchronous event %d)", name.c_str(), what,
               ev.type);
      WARN("NET/IB: %s%s", text, kept);
      if (!act) return;
      std::lock_guard<std::mutex> lock(fatalMu_);
      if (deadHcas_.emplace(hca, text).second) fatalEvents_.fetch_add(1, std::memory_order_release);
      return;
    }
    case kIbEventCqErr:
    case kIbEventQpFatal:
    case kIbEventQpReqErr:
    case kIbEventQpAccessErr: {
      const bool cq = ev.type == kIbEventCqErr;
      if (cq) {
        snprintf(text, sizeof(text), "HCA %s reported a fatal error on a completion queue: %s (asynchronous event %d)",
                 name.c_str(), what, ev.type);
      } else {
        snprintf(text, sizeof(text), "HCA %s reported a fatal error on queue pair %u: %s (asynchronous event %d)",
                 name.c_str(), ev.qpn, what, ev.type);
      }
      bool owned = false;
      {
        std::lock_guard<std::mutex> lock(fatalMu_);
        auto it = owners_.find(cq ? static_cast<const void*>(ev.cq) : static_cast<const void*>(ev.qp));
        owned = it != owners_.end();
        // The first fatal event of a comm is the one its calls report.
        if (owned && act && fatalComms_.emplace(it->second, text).second)
          fatalEvents_.fetch_add(1, std::memory_order_release);
      }
      WARN("NET/IB: %s%s%s", text, owned ? "" : " (of no connection)", kept);
      return;
    }
    case kIbEventCommEst:  // a queue pair's first message arrived before RTS: expected, nothing to say
      return;
    case kIbEventSrqErr:
    case kIbEventWqFatal:
      WARN("NET/IB: HCA %s: asynchronous event: %s (%d), on an object the net does not use", name.c_str(), what,
           ev.type);
      return;
    default:
      if (ev.port > 0) {
        WARN("NET/IB: HCA %s port %d: asynchronous event: %s (%d), not fatal", name.c_str(), ev.port, what, ev.type);
      } else {
        WARN("NET/IB: HCA %s: asynchronous event: %s (%d), not fatal", name.c_str(), what, ev.type);
      }
      return;
  }
}

void IbNet::watchAsyncEvents() {
  pthread_setname_np(pthread_self(), "chorus-ibasync");
  std::set<const IbHca*> unwatched;  // HCAs whose events could not be read
  for (;;) {
    std::vector<std::pair<std::string, IbHca*>> hcas;
    std::vector<pollfd> fds(1);
    fds[0] = pollfd{wake_.fd(), POLLIN, 0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [name, h] : hcas_) {
        const int fd = h->asyncEventFd();
        if (fd < 0 || unwatched.count(h.get()) != 0) continue;
        hcas.emplace_back(name, h.get());
        fds.push_back(pollfd{fd, POLLIN, 0});
      }
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      WARN("NET/IB: asynchronous events are no longer watched: poll failed: %s", strerror(errno));
      return;
    }
    if (fds[0].revents != 0) {
      wake_.drain();
      if (stopWatcher_) return;
    }
    for (size_t i = 0; i < hcas.size(); ++i) {
      const short got = fds[i + 1].revents;
      if (got == 0) continue;
      const std::string& name = hcas[i].first;
      IbHca* h = hcas[i].second;
      ncclResult_t res = h->takeAsyncEvents([&](const IbAsyncEvent& ev) {
        onAsyncEvent(name, h, ev);
        eventsTaken_.fetch_add(1, std::memory_order_release);
      });
      if (res != ncclSuccess || (got & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
        WARN("NET/IB: HCA %s: its asynchronous events are no longer watched: %s", name.c_str(),
             res != ncclSuccess ? threadLastError() : "its event descriptor failed");
        unwatched.insert(h);
      }
    }
  }
}

ncclResult_t IbNet::discover(std::string* why) {
  std::vector<IbPortDesc> ports;
  CHORUS_CHECK(verbs_->listPorts(&ports, why));
  std::vector<std::string> skipped;
  const std::string spec = kIbHca.get();
  std::vector<std::string> notes;
  IbGidPrefs prefs = parseIbGidPrefs(kIbAddrFamily.get(), kIbAddrRange.get(), kIbRoceVersion.get(), &notes);
  prefs.routableFlidIndex = static_cast<int>(clampParam(kIbRoutableFlidIndex, -1, 65535));
  for (const std::string& n : notes) INFO(kNet | kInit, "NET/IB: %s", n.c_str());
  devices_ = selectIbDevices(ports, spec, kIbGidIndex.get(), &skipped, prefs);
  for (const std::string& s : skipped) INFO(kNet | kInit, "NET/IB: skipping %s", s.c_str());
  std::string peerWhy;
  const bool peerMemory = !devices_.empty() && verbs_->peerMemory(&peerWhy);
  if (!peerWhy.empty()) peerWhy = " (" + peerWhy + ")";
  for (int i = 0; i < ndev(); ++i) {
    IbDevice& d = devices_[i];
    INFO(kNet | kInit, "NET/IB: [%d] %s:%d %s speed %d Mbit/s MTU %d GID %d (%s) pci %s", i, d.name.c_str(),
         d.port.port, d.port.linkLayer == IbLinkLayer::kEthernet ? "RoCE" : "IB", d.speedMbps,
         ibMtuBytes(d.port.activeMtu), d.gidIndex, ibGidText(d.gid).c_str(),
         d.port.pciPath.empty() ? "unknown" : d.port.pciPath.c_str());
    d.peerMemory = peerMemory;
    // dma-buf support is the HCA's driver's (and the kernel's): probed on the opened HCA, which the net keeps.
    IbHca* hca = nullptr;
    d.dmaBuf = openHca(i, &hca) == ncclSuccess && hca->dmaBufSupported();
    INFO(kNet | kInit, "NET/IB: [%d] %s:%d: GPUDirect RDMA: peer memory %s%s, dma-buf %s%s", i, d.name.c_str(),
         d.port.port, d.peerMemory ? "yes" : "no", peerWhy.c_str(), d.dmaBuf ? "yes" : "no",
         d.dmaBuf && kDmaBufEnable.get() == 0 ? " (not used: NCCL_DMABUF_ENABLE=0)" : "");
  }
  if (devices_.empty()) {
    summary_ = "NET/IB: no usable port (" + std::string(verbs_->name()) + " lists " + std::to_string(ports.size()) +
               " port(s)" + (spec.empty() ? "" : ", NCCL_IB_HCA=" + spec) + ")";
  } else {
    const int64_t mode = kIbRelaxedOrdering.get();
    std::string roWhy = "NCCL_IB_PCI_RELAXED_ORDERING=0";
    relaxedOrdering_ = (mode == 1 || mode == 2) && verbs_->relaxedOrdering(&roWhy);
    INFO(kNet | kInit, "NET/IB: PCIe relaxed ordering on data registrations: %s (%s)", relaxedOrdering_ ? "yes" : "no",
         roWhy.c_str());
    summary_ = "NET/IB: " + std::to_string(ndev()) + " device(s):";
    for (const IbDevice& d : devices_) summary_ += " " + d.name + ":" + std::to_string(d.port.port);
  }
  INFO(kNet | kInit, "%s", summary_.c_str());
  return ncclSuccess;
}

int IbNet::ndev() const {
  std::lock_guard<std::mutex> lock(mergedMu_);
  return nports() + static_cast<int>(merged_.size());
}

std::vector<int> IbNet::ports(int dev) const {
  if (dev >= 0 && dev < nports()) return {dev};
  std::lock_guard<std::mutex> lock(mergedMu_);
  const size_t m = static_cast<size_t>(dev - nports());
  return dev >= nports() && m < merged_.size() ? merged_[m].ports : std::vector<int>{};
}

std::string IbNet::deviceText(int dev) const {
  std::string out;
  for (int p : ports(dev))
    out += (out.empty() ? "" : "+") + devices_[p].name + ":" + std::to_string(devices_[p].port.port);
  return out.empty() ? "device " + std::to_string(dev) : out;
}

ncclResult_t IbNet::makeVDevice(const ncclNetVDeviceProps_v11_t& props, int* dev) {
  *dev = -1;
  if (props.ndevs < 1 || props.ndevs > kIbMaxDevs) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: makeVDevice of %d ports: a net device spans 1 to %d",
                props.ndevs, kIbMaxDevs);
  }
  std::vector<int> want(props.devs, props.devs + props.ndevs);
  for (size_t i = 0; i < want.size(); i++) {
    const int p = want[i];
    if (p < 0 || p >= nports()) {
      CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: makeVDevice: port %d does not exist (%d ports)", p, nports());
    }
    if (std::find(want.begin(), want.begin() + static_cast<long>(i), p) != want.begin() + static_cast<long>(i)) {
      CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: makeVDevice: port %d (%s:%d) is listed twice", p,
                  devices_[p].name.c_str(), devices_[p].port.port);
    }
    if (devices_[p].port.linkLayer != devices_[want[0]].port.linkLayer) {
      CHORUS_FAIL(nullptr, ncclInvalidArgument,
                  "NET/IB: makeVDevice: %s:%d is %s but %s:%d is %s: a net device's ports share a link layer (select "
                  "ports of one with NCCL_IB_HCA)",
                  devices_[want[0]].name.c_str(), devices_[want[0]].port.port,
                  devices_[want[0]].port.linkLayer == IbLinkLayer::kEthernet ? "RoCE" : "InfiniBand",
                  devices_[p].name.c_str(), devices_[p].port.port,
                  devices_[p].port.linkLayer == IbLinkLayer::kEthernet ? "RoCE" : "InfiniBand");
    }
  }
  if (want.size() == 1) {
    *dev = want[0];
    return ncclSuccess;
  }
  if (kIbMergeNics.get() == 0) {
    CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/IB: makeVDevice of %d ports refused: NCCL_IB_MERGE_NICS=0",
                props.ndevs);
  }
  {
    std::lock_guard<std::mutex> lock(mergedMu_);
    for (size_t m = 0; m < merged_.size(); m++) {
      if (merged_[m].ports == want) {
        *dev = nports() + static_cast<int>(m);
        return ncclSuccess;
      }
    }
    Merged m;
    m.ports = want;
    for (int p : want) m.name += (m.name.empty() ? "" : "+") + devices_[p].name;
    merged_.push_back(std::move(m));
    *dev = nports() + static_cast<int>(merged_.size()) - 1;
  }
  INFO(kNet | kInit, "NET/IB: [%d] merged from %s", *dev, deviceText(*dev).c_str());  // deviceText takes the lock
  return ncclSuccess;
}

ncclResult_t IbNet::getProperties(int dev, ncclNetProperties_v11_t* props) const {
  const std::vector<int> ps = ports(dev);
  if (ps.empty()) {
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/IB: device %d does not exist (%d devices)", dev, ndev());
  }
  const IbDevice& d = devices_[ps[0]];
  memset(props, 0, sizeof(*props));
  // NCCL's properties are plain char*; the strings live as long as the net (devices never change after discover).
  props->name = const_cast<char*>(d.name.c_str());
  props->pciPath = d.port.pciPath.empty() ? nullptr : const_cast<char*>(d.port.pciPath.c_str());
  props->guid = d.port.guid;
  props->ptrSupport = NCCL_PTR_HOST;
  if (peerMemory(dev)) props->ptrSupport |= NCCL_PTR_CUDA;                // regMr of GPU memory (peer memory)
  if (dmaBuf(dev)) props->ptrSupport |= NCCL_PTR_CUDA | NCCL_PTR_DMABUF;  // regMrDmaBuf of GPU memory
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = d.speedMbps;
  props->port = d.port.port;
  props->latency = 0;
  props->maxComms = d.port.maxQp > 0 ? d.port.maxQp : 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  if (ps.size() > 1) {
    // A merged device: as NCCL's, named after its ports' HCAs and as fast as they are together.
    {
      std::lock_guard<std::mutex> lock(mergedMu_);
      props->name = const_cast<char*>(merged_[static_cast<size_t>(dev - nports())].name.c_str());
    }
    props->vProps.ndevs = static_cast<int>(ps.size());
    props->speed = 0;
    for (size_t i = 0; i < ps.size(); i++) {
      const IbDevice& p = devices_[ps[i]];
      props->vProps.devs[i] = ps[i];
      props->speed += p.speedMbps;
      if (p.port.maxQp > 0 && p.port.maxQp < props->maxComms) props->maxComms = p.port.maxQp;
    }
  }
  // The immediate data carries a message's size in 32 bits, and test() reports sizes as int.
  props->maxP2pBytes = INT_MAX;
  props->maxCollBytes = INT_MAX;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

bool IbNet::peerMemory(int dev) const {
  const std::vector<int> ps = ports(dev);
  return !ps.empty() && std::all_of(ps.begin(), ps.end(), [&](int p) { return devices_[p].peerMemory; });
}

bool IbNet::dmaBuf(int dev) const {
  const std::vector<int> ps = ports(dev);
  return kDmaBufEnable.get() != 0 && !ps.empty() &&
         std::all_of(ps.begin(), ps.end(), [&](int p) { return devices_[p].dmaBuf; });
}

ncclResult_t IbNet::openHca(int dev, IbHca** out) {
  const std::string& name = devices_[dev].name;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hcas_.find(name);
  if (it == hcas_.end()) {
    std::unique_ptr<IbHca> hca;
    CHORUS_CHECK(verbs_->openHca(name, &hca));
    it = hcas_.emplace(name, std::move(hca)).first;
    // The watcher takes this HCA's events too: started with the first, woken to look again for the others.
    if (watcher_.joinable()) {
      wake_.wake();
    } else if (wake_.fd() < 0 && !wake_.open()) {
      WARN("NET/IB: asynchronous events are not watched: eventfd failed: %s", strerror(errno));
    } else {
      watcher_ = std::thread([this] { watchAsyncEvents(); });
    }
  }
  *out = it->second.get();
  return ncclSuccess;
}

const ncclNet_v11_t* ibNetTable() { return &kIbNetTable; }

std::string ibProcessNetSummary() {
  ProcessNet& p = processNet();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.tried) return "";
  return p.net != nullptr ? p.net->summary() : p.why;
}

std::unique_ptr<IbNet> replaceIbProcessNet(std::unique_ptr<IbNet> net) {
  ProcessNet& p = processNet();
  std::lock_guard<std::mutex> lock(p.mu);
  std::unique_ptr<IbNet> old(p.net);
  p.net = net.release();
  p.tried = p.net != nullptr;
  p.result = ncclSuccess;
  p.why.clear();
  return old;
}

const ncclNet_v11_t* ibNet() {
#ifdef CHORUS_HAVE_VERBS
  return &kIbNetTable;
#else
  return nullptr;
#endif
}

}  // namespace chorus
