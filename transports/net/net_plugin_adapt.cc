// Adapters: an external net plugin of version 6 to 10 presented to the proxy as an ncclNet_v11_t table.
//
// An adapter's entry points have no argument that says which plugin they wrap (test() gets a bare request, isend a
// bare comm), so each adapter is its own set of functions: Adapter<V, S> is version V's adapter in slot S, and a
// slot, once given to a plugin table, keeps it for the life of the process (libraries are never unloaded). A
// process normally loads one plugin; kSlots per version leaves room for tests that load several.
//
// Entries whose signature did not change are copied from the plugin's table as they are; the rest are wrapped here.
#include <array>
#include <climits>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "core/debug.h"
#include "transports/net/net_plugin.h"
#include "transports/net/net_plugin_abi.h"

namespace chorus {
namespace {

constexpr int kSlots = 4;
constexpr int kOldVersions = 5;  // 6 .. 10
// Most receives one irecv may group (NCCL_NET_MAX_REQUESTS); int-sized versions convert sizes on the stack.
constexpr int kMaxGroupedRecvs = NCCL_NET_MAX_REQUESTS;

template <int V>
struct Abi;
template <>
struct Abi<6> {
  using Net = ncclNet_v6_t;
  using Props = ncclNetProperties_v6_t;
};
template <>
struct Abi<7> {
  using Net = ncclNet_v7_t;
  using Props = ncclNetProperties_v7_t;
};
template <>
struct Abi<8> {
  using Net = ncclNet_v8_t;
  using Props = ncclNetProperties_v8_t;
};
template <>
struct Abi<9> {
  using Net = ncclNet_v9_t;
  using Props = ncclNetProperties_v9_t;
};
template <>
struct Abi<10> {
  using Net = ncclNet_v10_t;
  using Props = ncclNetProperties_v10_t;
};

// One adapter's state. `table` and `name` are written once, under gClaimMu, before the adapter's v11 table is
// handed out, and only read afterwards. Nothing here has a destructor to run at exit, so proxy threads that outlive
// static destruction still find their adapter intact.
struct Slot {
  const void* table = nullptr;  ///< the plugin's ncclNetPlugin_vN; null while the slot is free
  const char* name = nullptr;   ///< the plugin's name (its own string), for errors
  std::mutex initMu;            ///< serializes the plugin's one init
  bool initialized = false;     ///< the plugin's init succeeded (it is never called again)
  ncclNet_v11_t v11{};
};

static_assert(std::is_trivially_destructible<Slot>::value, "adapters must survive static destruction");
std::mutex gClaimMu;
Slot gSlots[kOldVersions][kSlots];

// What an adapted init returns as the communicator's context: the config that v11 passes to init and v10 wants at
// each connect. Owned by the proxy's communicator; freed by the adapter's finalize.
struct AdaptedCtx {
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
};

const ncclNetCommConfig_v11_t kDefaultConfig{NCCL_NET_TRAFFIC_CLASS_UNDEF};

template <int V, int S>
struct Adapter {
  using Net = typename Abi<V>::Net;
  using Props = typename Abi<V>::Props;

  static Slot& slot() { return gSlots[V - kNetPluginOldest][S]; }
  static const Net* net() { return static_cast<const Net*>(slot().table); }

  // Before v11 a plugin was initialized once per process, while v11's init is called once per communicator: the
  // plugin's init runs on the first call only, and every call makes a context. A failed init is tried again by the
  // next communicator.
  static ncclResult_t init(void** ctx, uint64_t /*commId*/, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t log,
                           ncclProfilerCallback_t prof) {
    Slot& s = slot();
    {
      std::lock_guard<std::mutex> lock(s.initMu);
      if (!s.initialized) {
        ncclResult_t rc;
        if constexpr (V == 10) {
          rc = net()->init(log, prof);
        } else {
          (void)prof;
          rc = net()->init(log);
        }
        if (rc != ncclSuccess) return rc;
        s.initialized = true;
      }
    }
    AdaptedCtx* c = new (std::nothrow) AdaptedCtx();
    if (c == nullptr) return ncclSystemError;
    if (config != nullptr) c->config = *config;
    *ctx = c;
    return ncclSuccess;
  }

  static ncclResult_t finalize(void* ctx) {
    delete static_cast<AdaptedCtx*>(ctx);
    return ncclSuccess;
  }

  // Fields a version lacks get what a plugin of that time implied: host-only offload, one physical device per
  // device, messages up to what an int size holds (v6-v8), no grouped multi-requests.
  static ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) {
    Props old;
    std::memset(&old, 0, sizeof(old));
    ncclResult_t rc = net()->getProperties(dev, &old);
    if (rc != ncclSuccess) return rc;
    std::memset(props, 0, sizeof(*props));
    props->name = old.name;
    props->pciPath = old.pciPath;
    props->guid = old.guid;
    props->ptrSupport = old.ptrSupport;
    props->speed = old.speed;
    props->port = old.port;
    props->latency = old.latency;
    props->maxComms = old.maxComms;
    props->maxRecvs = old.maxRecvs;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = INT_MAX;
    props->maxCollBytes = INT_MAX;
    props->maxMultiRequestSize = 1;
    if constexpr (V >= 7) {
      props->netDeviceType = old.netDeviceType;
      props->netDeviceVersion = old.netDeviceVersion;
    }
    if constexpr (V >= 8) props->regIsGlobal = old.regIsGlobal;
    if constexpr (V >= 9) {
      props->forceFlush = old.forceFlush;
      if (old.vProps.ndevs > 0 && old.vProps.ndevs <= NCCL_NET_MAX_DEVS_PER_NIC_V11) props->vProps = old.vProps;
      props->maxP2pBytes = old.maxP2pBytes;
      props->maxCollBytes = old.maxCollBytes;
    }
    return ncclSuccess;
  }

  static ncclResult_t listen(void* /*ctx*/, int dev, void* handle, void** listenComm) {
    return net()->listen(dev, handle, listenComm);
  }

  static ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                              ncclNetDeviceHandle_v11_t** sendDevComm) {
    if constexpr (V == 6) {
      (void)ctx;
      (void)sendDevComm;
      return net()->connect(dev, handle, sendComm);
    } else if constexpr (V == 10) {
      // The config lives as long as the communicator's context, in case the plugin keeps the pointer.
      const ncclNetCommConfig_v11_t* config = ctx != nullptr ? &static_cast<AdaptedCtx*>(ctx)->config : &kDefaultConfig;
      return net()->connect(dev, const_cast<ncclNetCommConfig_v10_t*>(config), handle, sendComm, sendDevComm);
    } else {
      (void)ctx;
      return net()->connect(dev, handle, sendComm, sendDevComm);
    }
  }

  static ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** /*recvDevComm*/) {
    return net()->accept(listenComm, recvComm);
  }

  // A size an int cannot hold is refused, never truncated: the plugin would move the wrong number of bytes.
  static ncclResult_t tooLarge(const char* what, size_t size) {
    setLastError(nullptr, "net plugin %s (v%d): %s of %zu bytes refused: the v%d ABI's sizes are int (at most %d)",
                 slot().name, V, what, size, V, INT_MAX);
    return ncclInternalError;
  }

  static ncclResult_t regMrInt(void* comm, void* data, size_t size, int type, void** mhandle) {
    if (size > static_cast<size_t>(INT_MAX)) return tooLarge("regMr", size);
    return net()->regMr(comm, data, static_cast<int>(size), type, mhandle);
  }

  static ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/,
                            void** request) {
    if constexpr (V <= 8) {
      if (size > static_cast<size_t>(INT_MAX)) return tooLarge("isend", size);
      return net()->isend(sendComm, data, static_cast<int>(size), tag, mhandle, request);
    } else {
      return net()->isend(sendComm, data, size, tag, mhandle, request);
    }
  }

  static ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** /*phandles*/, void** request) {
    if constexpr (V <= 8) {
      if (n < 1 || n > kMaxGroupedRecvs) {
        setLastError(nullptr, "net plugin %s (v%d): irecv of %d grouped receives (1 to %d)", slot().name, V, n,
                     kMaxGroupedRecvs);
        return ncclInternalError;
      }
      int intSizes[kMaxGroupedRecvs];
      for (int i = 0; i < n; i++) {
        if (sizes[i] > static_cast<size_t>(INT_MAX)) return tooLarge("irecv", sizes[i]);
        intSizes[i] = static_cast<int>(sizes[i]);
      }
      return net()->irecv(recvComm, n, data, intSizes, tags, mhandles, request);
    } else {
      return net()->irecv(recvComm, n, data, sizes, tags, mhandles, request);
    }
  }

  static void fill(ncclNet_v11_t* t) {
    const Net* n = net();
    std::memset(t, 0, sizeof(*t));
    t->name = n->name;
    t->init = init;
    t->devices = n->devices;
    t->getProperties = getProperties;
    t->listen = listen;
    t->connect = connect;
    if constexpr (V == 6) {
      t->accept = accept;
    } else {
      t->accept = n->accept;
    }
    if constexpr (V <= 7) {
      t->regMr = regMrInt;
    } else {
      t->regMr = n->regMr;
    }
    t->regMrDmaBuf = n->regMrDmaBuf;
    t->deregMr = n->deregMr;
    if constexpr (V == 10) {
      t->isend = n->isend;
      t->irecv = n->irecv;
    } else {
      t->isend = isend;
      t->irecv = irecv;
    }
    t->iflush = n->iflush;
    t->test = n->test;
    t->closeSend = n->closeSend;
    t->closeRecv = n->closeRecv;
    t->closeListen = n->closeListen;
    if constexpr (V >= 7) {
      t->getDeviceMr = n->getDeviceMr;
      t->irecvConsumed = n->irecvConsumed;
    }
    if constexpr (V >= 9) t->makeVDevice = n->makeVDevice;  // the vProps layout is v11's
    t->finalize = finalize;
    t->setNetAttr = nullptr;  // no older version had it
  }
};

using FillFn = void (*)(ncclNet_v11_t*);

template <int V, size_t... S>
constexpr std::array<FillFn, kSlots> fillersOf(std::index_sequence<S...>) {
  return {&Adapter<V, static_cast<int>(S)>::fill...};
}

const std::array<FillFn, kSlots> kFillers[kOldVersions] = {
    fillersOf<6>(std::make_index_sequence<kSlots>()), fillersOf<7>(std::make_index_sequence<kSlots>()),
    fillersOf<8>(std::make_index_sequence<kSlots>()), fillersOf<9>(std::make_index_sequence<kSlots>()),
    fillersOf<10>(std::make_index_sequence<kSlots>())};

// The first entry chorus calls that the table leaves null, or null when none is. iflush (GPU memory only),
// regMrDmaBuf, getDeviceMr, irecvConsumed, makeVDevice, finalize and setNetAttr may be null.
template <class Net>
const char* missingEntry(const Net* n) {
  if (n->name == nullptr) return "name";
  if (n->init == nullptr) return "init";
  if (n->devices == nullptr) return "devices";
  if (n->getProperties == nullptr) return "getProperties";
  if (n->listen == nullptr) return "listen";
  if (n->connect == nullptr) return "connect";
  if (n->accept == nullptr) return "accept";
  if (n->regMr == nullptr) return "regMr";
  if (n->deregMr == nullptr) return "deregMr";
  if (n->isend == nullptr) return "isend";
  if (n->irecv == nullptr) return "irecv";
  if (n->test == nullptr) return "test";
  if (n->closeSend == nullptr) return "closeSend";
  if (n->closeRecv == nullptr) return "closeRecv";
  if (n->closeListen == nullptr) return "closeListen";
  return nullptr;
}

const char* missingEntry(const void* table, int version) {
  switch (version) {
    case 6:
      return missingEntry(static_cast<const ncclNet_v6_t*>(table));
    case 7:
      return missingEntry(static_cast<const ncclNet_v7_t*>(table));
    case 8:
      return missingEntry(static_cast<const ncclNet_v8_t*>(table));
    case 9:
      return missingEntry(static_cast<const ncclNet_v9_t*>(table));
    case 10:
      return missingEntry(static_cast<const ncclNet_v10_t*>(table));
    default:
      return missingEntry(static_cast<const ncclNet_v11_t*>(table));
  }
}

}  // namespace

const ncclNet_v11_t* adaptNetPlugin(const void* table, int version, const std::string& libName, std::string* why) {
  const std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  if (table == nullptr || version < kNetPluginOldest || version > kNetPluginNewest) {
    *why = libName + ": " + sym + " is not a version chorus loads (v6 to v11)";
    return nullptr;
  }
  if (const char* missing = missingEntry(table, version)) {
    *why = libName + ": " + sym + " has no " + missing + " (a null entry chorus needs)";
    return nullptr;
  }
  if (version == kNetPluginNewest) return static_cast<const ncclNet_v11_t*>(table);
  std::lock_guard<std::mutex> lock(gClaimMu);
  Slot* slots = gSlots[version - kNetPluginOldest];
  int free = -1;
  for (int s = 0; s < kSlots; s++) {
    if (slots[s].table == table) return &slots[s].v11;
    if (slots[s].table == nullptr && free < 0) free = s;
  }
  if (free < 0) {
    *why = libName + ": " + sym + " cannot be adapted: " + std::to_string(kSlots) + " other v" +
           std::to_string(version) + " plugins are already loaded in this process";
    return nullptr;
  }
  Slot& s = slots[free];
  s.table = table;
  s.name = *static_cast<const char* const*>(table);  // every version's table starts with its name
  kFillers[version - kNetPluginOldest][free](&s.v11);
  return &s.v11;
}

}  // namespace chorus
