// UCX net (NCCL_NET=UCX; docs/net_ucx.md): the ncclNet_v11_t table, contexts and the device list.
//
// Without UCX (CHORUS_HAVE_UCX unset) ucxNet() returns null and selectNet() says the net was left out.
#include "core/params.h"
#include "transports/net/net.h"

namespace chorus {

// Declared in every build, so that docs/env.md does not depend on whether UCX was found.
/// UCX's own device selection; chorus reads it only to name and describe its one UCX device.
StrParam kUcxNetDevices{"UCX_NET_DEVICES", "",
                        "Read by UCX (devices it may use, e.g. eth0 or mlx5_0:1); the UCX net names its device after "
                        "it when it names exactly one.",
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

}  // namespace chorus

#if CHORUS_HAVE_UCX

#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "core/checks.h"
#include "core/debug.h"
#include "transports/ucx/ucx_net.h"

namespace chorus {
namespace ucx {
namespace {

// ucp_init/ucp_cleanup parse UCX's configuration and touch its global state; several communicators may init at
// once, so they are serialized (not a hot path).
std::mutex gInitMutex;

/// Creates a UCP context with tag matching (and wakeup: its worker gets an event descriptor); the caller owns it.
ncclResult_t createContext(ucp_context_h* out, bool wakeup) {
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
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | (wakeup ? UCP_FEATURE_WAKEUP : 0);
  params.name = "chorus";
  {
    std::lock_guard<std::mutex> lock(gInitMutex);
    st = ucp_init(&params, config, out);
  }
  ucp_config_release(config);
  if (st != UCS_OK) CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_init failed: %s", ucs_status_string(st));
  return ncclSuccess;
}

void destroyContext(ucp_context_h context) {
  std::lock_guard<std::mutex> lock(gInitMutex);
  ucp_cleanup(context);
}

/// What devices()/getProperties() report, probed once per process (they take no context).
struct Probe {
  bool usable = false;   ///< a UCP context could be created
  bool cudaMem = false;  ///< the context handles CUDA memory
  std::string name;      ///< the device's name
  std::string pciPath;   ///< its /sys device path, or empty
  int speedMbps = 10000;
  int port = 1;
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

/// Fills name, pciPath, speed and port: after UCX_NET_DEVICES when it names exactly one device ("eth0",
/// "mlx5_0:1"), else "ucx" on the interface chorus's socket code selects (where the listener binds).
void describeDevice(Probe* p) {
  std::string spec = kUcxNetDevices.get();
  bool one = !spec.empty() && spec != "all" && spec.find(',') == std::string::npos;
  p->name = one ? spec : "ucx";
  std::string netdev;
  if (one && spec.find(':') != std::string::npos) {
    // A verbs device and port: /sys/class/infiniband/<dev>/ports/<port>/rate reads "100 Gb/sec (4X EDR)".
    std::string dev = spec.substr(0, spec.find(':'));
    p->port = atoi(spec.c_str() + spec.find(':') + 1);
    p->pciPath = realPath("/sys/class/infiniband/" + dev + "/device");
    double gbps =
        atof(readLine("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(p->port) + "/rate").c_str());
    if (gbps > 0) p->speedMbps = static_cast<int>(gbps * 1000);
    return;
  }
  if (one) {
    netdev = spec;
  } else {
    SockAddr addr;
    std::string why;
    if (findInterface(&addr, &netdev, &why) != ncclSuccess) netdev.clear();
  }
  if (netdev.empty()) return;
  p->pciPath = realPath("/sys/class/net/" + netdev + "/device");
  int mbps = atoi(readLine("/sys/class/net/" + netdev + "/speed").c_str());  // -1 or empty when unknown
  if (mbps > 0) p->speedMbps = mbps;
}

const Probe& probe() {
  static Probe p;
  static std::once_flag once;
  std::call_once(once, [] {
    ucp_context_h context = nullptr;
    if (createContext(&context, false) != ncclSuccess) return;
    p.usable = true;
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) == UCS_OK) p.cudaMem = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    destroyContext(context);
    describeDevice(&p);
    INFO(kNet | kInit, "NET/UCX : UCX %s, device %s (%d Mbit/s)%s", ucp_get_version_string(), p.name.c_str(),
         p.speedMbps, p.cudaMem ? ", CUDA memory" : "");
  });
  return p;
}

ncclResult_t init(void** ctx, uint64_t /*commId*/, ncclNetCommConfig_v11_t* /*config*/,
                  ncclDebugLogger_t /*logFunction*/, ncclProfilerCallback_t /*profFunction*/) {
  *ctx = nullptr;
  auto* c = new Context();
  std::string why;
  if (findInterface(&c->listenAddr, &c->ifName, &why) != ncclSuccess) {
    delete c;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : no interface to listen on: %s", why.c_str());
  }
  c->listenAddr.setPort(0);
  ncclResult_t res = createContext(&c->context, kUcxWakeup.get() != 0);
  if (res != ncclSuccess) {
    delete c;
    return res;
  }
  // One thread drives the worker (the communicator's proxy), so UCX needs no locks of its own.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t st = ucp_worker_create(c->context, &wp, &c->worker);
  if (st != UCS_OK) {
    destroyContext(c->context);
    delete c;
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/UCX : ucp_worker_create failed: %s", ucs_status_string(st));
  }
  if (kUcxWakeup.get() != 0) {
    // The proxy sleeps on the worker's descriptor, or on busyFd when events are already waiting (ucxPollFds).
    int efd = -1;
    st = ucp_worker_get_efd(c->worker, &efd);
    int busy = st == UCS_OK ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
    if (st == UCS_OK && busy >= 0) {
      c->efd = efd;
      c->busyFd = busy;
    } else {
      INFO(kNet | kInit, "NET/UCX : the proxy polls the worker: %s",
           st != UCS_OK ? ucs_status_string(st) : strerror(errno));
    }
  }
  INFO(kNet | kInit, "NET/UCX : context ready, listening on %s (%s)%s", c->ifName.c_str(),
       c->listenAddr.hostStr().c_str(), c->efd >= 0 ? ", an idle proxy sleeps on the worker's events" : "");
  *ctx = c;
  return ncclSuccess;
}

ncclResult_t finalize(void* ctx) {
  auto* c = static_cast<Context*>(ctx);
  if (c == nullptr) return ncclSuccess;
  // connect()s that never finished belong to no caller: they are closed here.
  while (!c->connecting.empty()) {
    Comm* comm = c->connecting.begin()->second;
    c->connecting.erase(c->connecting.begin());
    closeSend(comm);
  }
  if (c->openComms != 0) WARN("NET/UCX : finalize with %d comms still open", c->openComms);
  if (!c->lingering.empty()) {
    // Destroying those listeners, or the worker under them, races with a peer still connecting (closeListen).
    INFO(kNet,
         "NET/UCX : %zu listener(s) closed before a peer connected: their UCX context stays until the process "
         "exits",
         c->lingering.size());
    return ncclSuccess;
  }
  ucp_worker_destroy(c->worker);
  destroyContext(c->context);
  if (c->busyFd >= 0) close(c->busyFd);
  delete c;
  return ncclSuccess;
}

ncclResult_t devices(int* ndev) {
  *ndev = probe().usable ? 1 : 0;
  return ncclSuccess;
}

ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) {
  const Probe& p = probe();
  if (dev != 0 || !p.usable) CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/UCX : no device %d", dev);
  *props = ncclNetProperties_v11_t{};
  // The strings live as long as the process-wide probe.
  props->name = const_cast<char*>(p.name.c_str());
  props->pciPath = p.pciPath.empty() ? nullptr : const_cast<char*>(p.pciPath.c_str());
  props->guid = 0;
  props->ptrSupport = NCCL_PTR_HOST | (p.cudaMem ? NCCL_PTR_CUDA : 0);
  props->regIsGlobal = 0;  // a registration belongs to one context's ucp_context
  props->forceFlush = 0;
  props->speed = p.speedMbps;
  props->port = p.port;
  props->latency = 0;  // unknown: UCX does not say before an endpoint exists
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = 0;
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

void progress(Context* ctx) {
  // Bounded: a peer streaming data must not keep one call here forever.
  for (int i = 0; i < 64 && ucp_worker_progress(ctx->worker) != 0; ++i) {
  }
}

int pollFds(void* ctx, pollfd* fds, int max) {
  auto* c = static_cast<Context*>(ctx);
  if (c->efd < 0 || max < 1) return 0;
  uint64_t drained = 0;
  if (read(c->busyFd, &drained, sizeof(drained)) < 0) drained = 0;  // EAGAIN: it was not set
  // UCX arms the descriptor only once the worker has nothing left to progress; events that came meanwhile make it
  // busy, and then the proxy must not sleep: busyFd, set here, wakes it at once.
  for (int i = 0; i < 1024 && ucp_worker_progress(c->worker) != 0; ++i) {
  }
  ucs_status_t st = ucp_worker_arm(c->worker);
  if (st == UCS_OK) {
    fds[0] = pollfd{c->efd, POLLIN, 0};
    return 1;
  }
  uint64_t one = 1;
  if (write(c->busyFd, &one, sizeof(one)) < 0) return 0;  // cannot happen short of 2^64 - 1 pending counts
  fds[0] = pollfd{c->busyFd, POLLIN, 0};
  return 1;
}

const NetProgressHooks kHooks = {pollFds, nullptr};

}  // namespace ucx

const ncclNet_v11_t* ucxNet() { return &ucx::kUcxNet; }
const NetProgressHooks* ucxNetHooks() { return &ucx::kHooks; }

}  // namespace chorus

#else  // !CHORUS_HAVE_UCX

namespace chorus {
const ncclNet_v11_t* ucxNet() { return nullptr; }
const NetProgressHooks* ucxNetHooks() { return nullptr; }
}  // namespace chorus

#endif
