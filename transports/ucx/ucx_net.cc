// UCX net (NCCL_NET=UCX; docs/net_ucx.md): the ncclNet_v11_t table, contexts and the device list.
//
// Without UCX (CHORUS_HAVE_UCX unset) ucxNet() returns null and selectNet() says the net was left out.
#include "core/params.h"
#include "transports/net/net.h"

namespace chorus {

// Declared in every build, so that docs/env.md does not depend on whether UCX was found.
/// UCX's own device selection; the UCX net offers each device it names as a device of its own.
StrParam kUcxNetDevices{"UCX_NET_DEVICES", "",
                        "The UCX net's devices (e.g. eth0,eth1 or mlx5_0:1,mlx5_1:1): each item is one device, with a "
                        "UCX context restricted to it. Unset or all: the active RDMA ports when UCX_TLS allows RDMA, "
                        "else the interfaces NCCL_SOCKET_IFNAME selects.",
                        "network"};
/// UCX's transport list; chorus reads it only to tune the rendezvous threshold over TCP (see createContext).
StrParam kUcxTls{"UCX_TLS", "",
                 "Read by UCX (transports it may use). When it names only tcp and UCX_RNDV_THRESH is unset, the UCX "
                 "net sends its messages (at most a FIFO slot) eagerly: UCX's rendezvous over TCP measured 68% of the "
                 "link's goodput for allreduce, eager 98% (docs/perf/net.md).",
                 "network"};
StrParam kUcxRndvThresh{"UCX_RNDV_THRESH", "", "Read by UCX (message size from which it uses rendezvous).", "network"};
IntParam kUcxWakeup{"CHORUS_UCX_WAKEUP", 1,
                    "1: the UCX net's worker has an event descriptor, and an idle proxy sleeps on it until UCX has "
                    "something to progress; 0: an idle proxy polls the worker (up to 100 us apart, 1 ms after a quiet "
                    "second).",
                    "network"};
IntParam kUcxTwoWay{"CHORUS_UCX_TWO_WAY", 1,
                    "1: when a UCX-net connection's receiving end later connects back to the sender's communicator, "
                    "the new connection runs over the endpoint it accepted, so that both directions share one "
                    "connection of UCX's transport (over tcp: one socket, and each direction's ACKs ride on the "
                    "other's data). 0: an endpoint each way.",
                    "network"};

}  // namespace chorus

#if CHORUS_HAVE_UCX

#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "core/checks.h"
#include "core/debug.h"
#include "core/process.h"
#include "transports/ib/ib_select.h"
#include "transports/ucx/ucx_devices.h"
#include "transports/ucx/ucx_net.h"

namespace chorus {
namespace ucx {
namespace {

/// At most this many devices, as the socket net.
constexpr size_t kMaxNetDevices = 16;

// ucp_init/ucp_cleanup parse UCX's configuration and touch its global state; several communicators may init at
// once, so they are serialized (not a hot path).
std::mutex gInitMutex;

/// Creates a UCP context with tag matching (and wakeup: its worker gets an event descriptor; rma: gets and puts),
/// restricted to network device `netDevice` when it is not empty; the caller owns it.
ncclResult_t createContext(ucp_context_h* out, bool wakeup, const std::string& netDevice, bool rma = false) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_config_read failed: %s", ucs_status_string(st));
  // Over TCP alone, rendezvous costs round trips for every FIFO slot (at most a few hundred KB); RDMA transports
  // keep UCX's default, where rendezvous is zero-copy.
  if (kUcxTls.get() == "tcp" && !kUcxRndvThresh.isSet()) {
    if (ucp_config_modify(config, "RNDV_THRESH", "4m") == UCS_OK)
      INFO(kNet | kInit, "NET/UCX : UCX_TLS=tcp: messages go eagerly (RNDV_THRESH 4m; set UCX_RNDV_THRESH to change)");
  }
  if (!netDevice.empty()) {
    st = ucp_config_modify(config, "NET_DEVICES", netDevice.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : cannot restrict a context to device %s: %s", netDevice.c_str(),
                  ucs_status_string(st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | (wakeup ? UCP_FEATURE_WAKEUP : 0) | (rma ? UCP_FEATURE_RMA : 0);
  params.name = "chorus";
  {
    std::lock_guard<std::mutex> lock(gInitMutex);
    st = ucp_init(&params, config, out);
  }
  ucp_config_release(config);
  if (st != UCS_OK)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_init%s%s failed: %s", netDevice.empty() ? "" : " on device ",
                netDevice.c_str(), ucs_status_string(st));
  return ncclSuccess;
}

void destroyContext(ucp_context_h context) {
  std::lock_guard<std::mutex> lock(gInitMutex);
  ucp_cleanup(context);
}

/// One device as devices()/getProperties() report it.
struct ProbedDevice {
  DeviceSpec spec;
  bool hasListenAddr = false;  ///< spec.listenIf has an address (listenAddr); else it listens on the socket interface
  SockAddr listenAddr;
  std::string pciPath;  ///< its /sys device path, or empty
  int speedMbps = 10000;
  int port = 1;
};

/// What devices()/getProperties() report, probed once per process (they take no context).
struct Probe {
  bool usable = false;   ///< a UCP context could be created, and there is a device
  bool cudaMem = false;  ///< the context handles CUDA memory
  std::vector<ProbedDevice> devs;
  std::string why;  ///< why it is not usable
};

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string realPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

/// Fills pciPath, speed and port from /sys: /sys/class/infiniband for an RDMA port ("mlx5_0:1"), /sys/class/net for
/// an interface.
void describeDevice(ProbedDevice* d) {
  const std::string& name = d->spec.name;
  if (d->spec.verbs) {
    // /sys/class/infiniband/<dev>/ports/<port>/rate reads "100 Gb/sec (4X EDR)".
    std::string dev = name.substr(0, name.find(':'));
    d->port = atoi(name.c_str() + name.find(':') + 1);
    d->pciPath = realPath("/sys/class/infiniband/" + dev + "/device");
    double gbps =
        atof(readLine("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(d->port) + "/rate").c_str());
    if (gbps > 0) d->speedMbps = static_cast<int>(gbps * 1000);
    return;
  }
  d->pciPath = realPath("/sys/class/net/" + name + "/device");
  int mbps = atoi(readLine("/sys/class/net/" + name + "/speed").c_str());  // -1 or empty when unknown
  if (mbps > 0) d->speedMbps = mbps;
}

/// The host's networks as listUcxDevices reads them; `selected` gets the interfaces chorus's socket code selects,
/// `addressed` every interface with an address.
HostNets hostNets(std::vector<IfAddr>* selected, std::vector<IfAddr>* addressed) {
  HostNets h;
  std::string why;
  *addressed = listInterfaces();
  if (findInterfaces(*addressed, selected, kMaxNetDevices, &why) != ncclSuccess) selected->clear();
  for (const IfAddr& i : *selected) h.selectedIfs.push_back(i.name);
  for (const IfAddr& i : *addressed) h.addressedIfs.push_back(i.name);
  h.verbsPorts = filterVerbsPorts(activeVerbsPorts("/sys/class/infiniband", &h.portInterfaces), kIbHca.get());
  return h;
}

/// Where device `d` listens: its interface's address among those chorus selects (NCCL_SOCKET_FAMILY applies), else
/// that interface's first address (IPv4 first).
void findListenAddress(ProbedDevice* d, const std::vector<IfAddr>& selected, const std::vector<IfAddr>& addressed) {
  if (d->spec.listenIf.empty()) return;
  std::vector<IfAddr> mine;
  for (const IfAddr& i : selected)
    if (i.name == d->spec.listenIf) mine.push_back(i);
  if (mine.empty()) mine = selectInterfaces(addressed, "=" + d->spec.listenIf, AF_UNSPEC, 1);
  if (mine.empty()) return;
  d->hasListenAddr = true;
  d->listenAddr = mine[0].addr;
}

const Probe& probe() {
  static Probe p;
  static std::once_flag once;
  std::call_once(once, [] {
    ucp_context_h context = nullptr;
    if (createContext(&context, false, "") != ncclSuccess) {
      p.why = std::string(threadLastError()) + " (UCX_TLS=\"" + kUcxTls.get() + "\", UCX_NET_DEVICES=\"" +
              kUcxNetDevices.get() + "\")";
      return;
    }
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) == UCS_OK) p.cudaMem = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    destroyContext(context);
    std::string list;
    std::vector<IfAddr> selected, addressed;
    HostNets host = hostNets(&selected, &addressed);
    for (const DeviceSpec& spec : listUcxDevices(kUcxNetDevices.get(), kUcxTls.get(), host, kMaxNetDevices)) {
      ProbedDevice d;
      d.spec = spec;
      describeDevice(&d);
      findListenAddress(&d, selected, addressed);
      list += (list.empty() ? "" : ", ") + spec.name + " (" + std::to_string(d.speedMbps) + " Mbit/s)";
      p.devs.push_back(d);
    }
    p.usable = !p.devs.empty();
    if (p.usable) {
      INFO(kNet | kInit, "NET/UCX : UCX %s, %zu device(s): %s%s", ucp_get_version_string(), p.devs.size(), list.c_str(),
           p.cudaMem ? "; CUDA memory" : "");
    } else {
      p.why = "UCX_NET_DEVICES names none, and no interface or RDMA port was found";
    }
  });
  return p;
}

std::atomic<bool> gForceGpu{false};

}  // namespace

bool flushesGpuMemory() {
  return kGdrFlushDisable.get() == 0 && (gForceGpu.load(std::memory_order_relaxed) || probe().cudaMem);
}

void forceGpuMemoryForTests(bool on) { gForceGpu.store(on, std::memory_order_relaxed); }

namespace {

ncclResult_t init(void** ctx, uint64_t /*commId*/, ncclNetCommConfig_v11_t* /*config*/,
                  ncclDebugLogger_t /*logFunction*/, ncclProfilerCallback_t /*profFunction*/) {
  *ctx = nullptr;
  const Probe& p = probe();
  if (!p.usable) CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : no usable UCX device: %s", p.why.c_str());
  auto* n = new NetContext();
  n->devs.assign(p.devs.size(), nullptr);
  n->wakeup = kUcxWakeup.get() != 0;
  if (n->wakeup) {
    // The proxy sleeps on the workers' descriptors, or on busyFd when events are already waiting (pollFds).
    n->busyFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->busyFd < 0) {
      INFO(kNet | kInit, "NET/UCX : the proxy polls the workers: eventfd: %s", strerror(errno));
      n->wakeup = false;
    }
  }
  *ctx = n;
  return ncclSuccess;
}

/// The address device `d` listens on: the one probed for its interface, else chorus's socket interface's (an RDMA
/// port without an IP interface: UCX may then find no transport on it, and connecting fails with UCX's reason).
ncclResult_t listenAddress(const ProbedDevice& d, SockAddr* addr, std::string* ifName) {
  if (d.hasListenAddr) {
    *addr = d.listenAddr;
    *ifName = d.spec.listenIf;
    return ncclSuccess;
  }
  std::string why;
  if (findInterface(addr, ifName, &why) != ncclSuccess)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : no interface to listen on: %s", why.c_str());
  return ncclSuccess;
}

/// Makes device `dev`'s Context: a context restricted to the device, its worker and (wakeup) its descriptor.
ncclResult_t makeContext(NetContext* n, int dev, Context** out) {
  const ProbedDevice& d = probe().devs[dev];
  auto* c = new Context();
  c->dev = dev;
  if (kUcxTwoWay.get() != 0) c->id = randomNonce();
  c->devName = d.spec.name;
  ncclResult_t res = listenAddress(d, &c->listenAddr, &c->ifName);
  c->rma = flushesGpuMemory();
  if (res == ncclSuccess) res = createContext(&c->context, n->wakeup, d.spec.name, c->rma);
  if (res != ncclSuccess) {
    delete c;
    return res;
  }
  c->listenAddr.setPort(0);
  // One thread at a time drives the worker: the communicator's proxy, or a rank's thread handing it what it just
  // published (NetProxy::progress), both under the proxy's lock. So UCX needs no locks of its own.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st = ucp_worker_create(c->context, &wp, &c->worker);
  if (st != UCS_OK) {
    destroyContext(c->context);
    delete c;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_worker_create on device %s failed: %s", d.spec.name.c_str(),
                ucs_status_string(st));
  }
  if (n->wakeup) {
    int efd = -1;
    st = ucp_worker_get_efd(c->worker, &efd);
    if (st == UCS_OK) {
      c->efd = efd;
    } else {
      INFO(kNet | kInit, "NET/UCX : device %s: the proxy polls the worker: %s", d.spec.name.c_str(),
           ucs_status_string(st));
    }
  }
  INFO(kNet | kInit, "NET/UCX : device %d (%s) ready, listening on %s (%s)%s", dev, c->devName.c_str(),
       c->ifName.c_str(), c->listenAddr.hostStr().c_str(),
       c->efd >= 0 ? ", an idle proxy sleeps on the worker's events" : "");
  *out = c;
  return ncclSuccess;
}

/// Closes one device's Context, unless listeners left lingering on it keep it.
void finalizeContext(Context* c) {
  // connect()s that never finished belong to no caller: they are closed here.
  while (!c->connecting.empty()) {
    Comm* comm = c->connecting.begin()->second;
    c->connecting.erase(c->connecting.begin());
    closeSend(comm);
  }
  if (c->openComms != 0)
    WARN("NET/UCX : finalize with %d comms still open on device %s", c->openComms, c->devName.c_str());
  if (!c->lingering.empty()) {
    // Destroying those listeners, or the worker under them, races with a peer still connecting (closeListen).
    INFO(kNet,
         "NET/UCX : %zu listener(s) on device %s closed before a peer connected: their UCX context stays until the "
         "process exits",
         c->lingering.size(), c->devName.c_str());
    return;
  }
  if (c->flushEp != nullptr) closeEndpoint(c, c->flushEp, false, "itself (flushes)", nullptr, false);
  ucp_worker_destroy(c->worker);
  destroyContext(c->context);
  delete c;
}

ncclResult_t finalize(void* ctx) {
  auto* n = static_cast<NetContext*>(ctx);
  if (n == nullptr) return ncclSuccess;
  for (Context* c : n->devs)
    if (c != nullptr) finalizeContext(c);
  // A lingering context keeps its worker; busyFd was only ever named to the proxy that is now gone.
  if (n->busyFd >= 0) close(n->busyFd);
  delete n;
  return ncclSuccess;
}

ncclResult_t devices(int* ndev) {
  *ndev = static_cast<int>(probe().devs.size());
  return ncclSuccess;
}

ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) {
  const Probe& p = probe();
  if (dev < 0 || dev >= static_cast<int>(p.devs.size()))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/UCX : no device %d (there are %zu)", dev, p.devs.size());
  const ProbedDevice& d = p.devs[dev];
  *props = ncclNetProperties_v11_t{};
  // The strings live as long as the process-wide probe.
  props->name = const_cast<char*>(d.spec.name.c_str());
  props->pciPath = d.pciPath.empty() ? nullptr : const_cast<char*>(d.pciPath.c_str());
  props->guid = static_cast<uint64_t>(dev);
  props->ptrSupport = NCCL_PTR_HOST | (p.cudaMem || gForceGpu.load(std::memory_order_relaxed) ? NCCL_PTR_CUDA : 0);
  props->regIsGlobal = 0;  // a registration belongs to one context's ucp_context
  props->forceFlush = 0;
  props->speed = d.speedMbps;
  props->port = d.port;
  props->latency = 0;  // unknown: UCX does not say before an endpoint exists
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = INT_MAX;  // test() reports sizes as int
  props->maxCollBytes = INT_MAX;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t setNetAttr(void* /*ctx*/, ncclNetAttr_v11_t* /*netAttr*/) { return ncclSuccess; }

const ncclNet_v11_t kUcxNet = {
    "UCX",
    init,
    devices,
    getProperties,
    listen,
    connect,
    accept,
    regMr,
    regMrDmaBuf,
    deregMr,
    isend,
    irecv,
    iflush,
    test,
    closeSend,
    closeRecv,
    closeListen,
    nullptr /*getDeviceMr*/,
    nullptr /*irecvConsumed*/,
    nullptr /*makeVDevice*/,
    finalize,
    setNetAttr,
};

}  // namespace

ncclResult_t deviceContext(NetContext* net, int dev, Context** out) {
  *out = nullptr;
  if (dev < 0 || dev >= static_cast<int>(net->devs.size()))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/UCX : no device %d (there are %zu)", dev, net->devs.size());
  if (net->devs[dev] == nullptr) CHORUS_CHECK(makeContext(net, dev, &net->devs[dev]));
  *out = net->devs[dev];
  return ncclSuccess;
}

void progress(Context* ctx) {
  // Bounded: a peer streaming data must not keep one call here forever.
  for (int i = 0; i < 64 && ucp_worker_progress(ctx->worker) != 0; ++i) {
  }
}

int pollFds(void* ctx, pollfd* fds, int max) {
  auto* n = static_cast<NetContext*>(ctx);
  if (!n->wakeup) return 0;
  int count = 0;
  for (Context* c : n->devs) {
    if (c == nullptr) continue;
    if (c->efd < 0) return 0;  // a worker without a descriptor: the proxy polls
    ++count;
  }
  if (count == 0 || count > max) return 0;
  uint64_t drained = 0;
  if (read(n->busyFd, &drained, sizeof(drained)) < 0) drained = 0;  // EAGAIN: it was not set
  // UCX arms a descriptor only once its worker has nothing left to progress; events that came meanwhile make it
  // busy, and then the proxy must not sleep: busyFd, set here, wakes it at once.
  int k = 0;
  bool busy = false;
  for (Context* c : n->devs) {
    if (c == nullptr) continue;
    for (int i = 0; i < 1024 && ucp_worker_progress(c->worker) != 0; ++i) {
    }
    if (ucp_worker_arm(c->worker) != UCS_OK) busy = true;
    fds[k++] = pollfd{c->efd, POLLIN, 0};
  }
  if (!busy) return k;
  uint64_t one = 1;
  if (write(n->busyFd, &one, sizeof(one)) < 0) return 0;  // cannot happen short of 2^64 - 1 pending counts
  fds[0] = pollfd{n->busyFd, POLLIN, 0};
  return 1;
}

int shareWaitMs(void* /*ctx*/) { return kUcxTwoWay.get() != 0 ? 100 : 0; }

const NetProgressHooks kHooks = {pollFds, nullptr, nullptr, shareWaitMs, isendv, irecvv, nullptr};

}  // namespace ucx

bool ucxFlushesGpuMemory() { return ucx::flushesGpuMemory(); }
const ncclNet_v11_t* ucxNet() { return &ucx::kUcxNet; }
const NetProgressHooks* ucxNetHooks() { return &ucx::kHooks; }

}  // namespace chorus

#else  // !CHORUS_HAVE_UCX

namespace chorus {
bool ucxFlushesGpuMemory() { return false; }
const ncclNet_v11_t* ucxNet() { return nullptr; }
const NetProgressHooks* ucxNetHooks() { return nullptr; }
}  // namespace chorus

#endif
