// External net plugins (transports/net/net_plugin*.cc): the loader, the v6-v10 adapters and the process cache of
// pluginNet(). The suite's own plugin, tests/plugins/test_net.c (a TCP net), is built once per ABI version; each
// build is loaded and driven through the v11 table chorus sees, as the proxy drives it, in one thread: connect and
// accept polled to completion, one registration per buffer, messages of 0, 1 and 64 KiB each way with their bytes
// checked. Small in-process tables check what an adapter passes that the TCP plugin cannot show (a v10 config, a
// retried init).
//
// The plugin builds come from compile definitions CHORUS_TEST_NET_V5 .. _V11 (tests/CMakeLists.txt), else from the
// folder CHORUS_TEST_NET_PLUGINS names (libnccl-net-chorustest-vN.so files); without either the tests are skipped.
#include "transports/net/net_plugin.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "core/debug.h"
#include "core/params.h"
#include "transports/net/net.h"
#include "transports/net/net_plugin_abi.h"

namespace chorus {
namespace {

using std::chrono::steady_clock;

// The path of the test plugin built as ncclNetPlugin_v<version>, or "" when this build has none.
std::string pluginPath(int version) {
  switch (version) {
#ifdef CHORUS_TEST_NET_V5
    case 5:
      return CHORUS_TEST_NET_V5;
#endif
#ifdef CHORUS_TEST_NET_V6
    case 6:
      return CHORUS_TEST_NET_V6;
#endif
#ifdef CHORUS_TEST_NET_V7
    case 7:
      return CHORUS_TEST_NET_V7;
#endif
#ifdef CHORUS_TEST_NET_V8
    case 8:
      return CHORUS_TEST_NET_V8;
#endif
#ifdef CHORUS_TEST_NET_V9
    case 9:
      return CHORUS_TEST_NET_V9;
#endif
#ifdef CHORUS_TEST_NET_V10
    case 10:
      return CHORUS_TEST_NET_V10;
#endif
#ifdef CHORUS_TEST_NET_V11
    case 11:
      return CHORUS_TEST_NET_V11;
#endif
    default:
      break;
  }
  const char* dir = getenv("CHORUS_TEST_NET_PLUGINS");
  if (dir == nullptr || dir[0] == '\0') return "";
  return std::string(dir) + "/libnccl-net-chorustest-v" + std::to_string(version) + ".so";
}

#define REQUIRE_PLUGIN(path, version)           \
  const std::string path = pluginPath(version); \
  if (path.empty()) GTEST_SKIP() << "no test net plugin v" << (version) << " in this build"

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// A few seconds for what takes milliseconds: generous on two busy cores, short enough to fail fast.
struct Deadline {
  steady_clock::time_point end = steady_clock::now() + std::chrono::seconds(10);
  bool passed() const { return steady_clock::now() > end; }
};

// One direction of traffic: a listen, its connection, and one registered buffer on each side (as the proxy
// registers a connection's FIFO once).
struct Link {
  void* listenComm = nullptr;
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  std::vector<char> sendBuf, recvBuf;
  void* sendMr = nullptr;
  void* recvMr = nullptr;
};

constexpr size_t kSlotBytes = 64 * 1024;
constexpr int kSlots = 4;

// Listens with `listenCtx`'s communicator and connects with `connectCtx`'s, polling both to completion.
void connectLink(const ncclNet_v11_t* net, void* listenCtx, void* connectCtx, Link* l) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  ASSERT_EQ(net->listen(listenCtx, 0, handle, &l->listenComm), ncclSuccess);
  ASSERT_NE(l->listenComm, nullptr);
  ncclNetDeviceHandle_v11_t* sendDev = nullptr;
  ncclNetDeviceHandle_v11_t* recvDev = nullptr;
  for (Deadline d; l->sendComm == nullptr || l->recvComm == nullptr;) {
    ASSERT_FALSE(d.passed()) << "connect/accept did not complete";
    if (l->sendComm == nullptr) {
      ASSERT_EQ(net->connect(connectCtx, 0, handle, &l->sendComm, &sendDev), ncclSuccess);
    }
    if (l->recvComm == nullptr) {
      ASSERT_EQ(net->accept(l->listenComm, &l->recvComm, &recvDev), ncclSuccess);
    }
  }
  l->sendBuf.assign(kSlots * kSlotBytes, 0);
  l->recvBuf.assign(kSlots * kSlotBytes, 0);
  ASSERT_EQ(net->regMr(l->sendComm, l->sendBuf.data(), l->sendBuf.size(), NCCL_PTR_HOST, &l->sendMr), ncclSuccess);
  ASSERT_EQ(net->regMr(l->recvComm, l->recvBuf.data(), l->recvBuf.size(), NCCL_PTR_HOST, &l->recvMr), ncclSuccess);
}

void closeLink(const ncclNet_v11_t* net, Link* l) {
  EXPECT_EQ(net->deregMr(l->sendComm, l->sendMr), ncclSuccess);
  EXPECT_EQ(net->deregMr(l->recvComm, l->recvMr), ncclSuccess);
  EXPECT_EQ(net->closeSend(l->sendComm), ncclSuccess);
  EXPECT_EQ(net->closeRecv(l->recvComm), ncclSuccess);
  EXPECT_EQ(net->closeListen(l->listenComm), ncclSuccess);
}

char pattern(size_t i, int salt) { return static_cast<char>((i * 131 + static_cast<size_t>(salt) * 17 + 7) & 0xff); }

// Posts one message per size (all outstanding at once, each in its own slot, every receive a full slot), then
// tests every request to completion; checks each receive's size and bytes.
void exchange(const ncclNet_v11_t* net, Link* l, const std::vector<size_t>& sizes, int salt) {
  ASSERT_LE(sizes.size(), static_cast<size_t>(kSlots));
  const int n = static_cast<int>(sizes.size());
  for (int m = 0; m < n; m++)
    for (size_t i = 0; i < sizes[m]; i++) l->sendBuf[m * kSlotBytes + i] = pattern(i, salt + m);
  std::fill(l->recvBuf.begin(), l->recvBuf.end(), 0);
  std::vector<void*> sends(n, nullptr), recvs(n, nullptr);
  std::vector<int> sendDone(n, 0), recvDone(n, 0), recvSize(n, -1);
  for (int m = 0; m < n; m++) {
    for (Deadline d; sends[m] == nullptr;) {
      ASSERT_FALSE(d.passed()) << "isend gave no request";
      ASSERT_EQ(net->isend(l->sendComm, &l->sendBuf[m * kSlotBytes], sizes[m], 0, l->sendMr, nullptr, &sends[m]),
                ncclSuccess);
    }
    for (Deadline d; recvs[m] == nullptr;) {
      ASSERT_FALSE(d.passed()) << "irecv gave no request";
      void* data = &l->recvBuf[m * kSlotBytes];
      size_t size = kSlotBytes;
      int tag = 0;
      ASSERT_EQ(net->irecv(l->recvComm, 1, &data, &size, &tag, &l->recvMr, nullptr, &recvs[m]), ncclSuccess);
    }
  }
  for (Deadline d;;) {
    bool all = true;
    for (int m = 0; m < n; m++) {
      if (!sendDone[m]) {
        ASSERT_EQ(net->test(sends[m], &sendDone[m], nullptr), ncclSuccess);
      }
      if (!recvDone[m]) {
        ASSERT_EQ(net->test(recvs[m], &recvDone[m], &recvSize[m]), ncclSuccess);
      }
      all = all && sendDone[m] && recvDone[m];
    }
    if (all) break;
    ASSERT_FALSE(d.passed()) << "messages did not complete";
  }
  for (int m = 0; m < n; m++) {
    EXPECT_EQ(recvSize[m], static_cast<int>(sizes[m])) << "message " << m;
    size_t wrong = 0;
    for (size_t i = 0; i < sizes[m]; i++) wrong += l->recvBuf[m * kSlotBytes + i] != pattern(i, salt + m);
    EXPECT_EQ(wrong, 0u) << "message " << m << " of " << sizes[m] << " bytes";
    // Nothing past the message was written.
    if (sizes[m] < kSlotBytes) {
      EXPECT_EQ(l->recvBuf[m * kSlotBytes + sizes[m]], 0) << "message " << m;
    }
  }
}

class NetPluginVersion : public ::testing::TestWithParam<int> {};

TEST_P(NetPluginVersion, LoadsAndCarriesMessagesBothWays) {
  const int v = GetParam();
  REQUIRE_PLUGIN(path, v);
  std::string why;
  int version = 0;
  const ncclNet_v11_t* net = loadNetPluginForTest(path.c_str(), &why, &version);
  ASSERT_NE(net, nullptr) << why;
  EXPECT_EQ(version, v);
  EXPECT_STREQ(net->name, "ChorusTestNet");
  EXPECT_TRUE(has(why, "v" + std::to_string(v) + ")")) << why;
  // The same library again: the same table (one adapter per plugin table).
  std::string why2;
  int version2 = 0;
  EXPECT_EQ(loadNetPluginForTest(path.c_str(), &why2, &version2), net) << why2;

  // Two communicators, each with its own context. The v6-v10 builds refuse a second init, so this also checks that
  // an adapter initializes an old plugin once per process.
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void* ctxA = nullptr;
  void* ctxB = nullptr;
  ASSERT_EQ(net->init(&ctxA, 1, &config, pluginLog, nullptr), ncclSuccess);
  ASSERT_EQ(net->init(&ctxB, 2, &config, pluginLog, nullptr), ncclSuccess);
  EXPECT_NE(ctxA, nullptr);
  int ndev = 0;
  ASSERT_EQ(net->devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 1);

  ncclNetProperties_v11_t props;
  std::memset(&props, 0xff, sizeof(props));  // every field must be written
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  ASSERT_NE(props.name, nullptr);
  EXPECT_EQ(props.pciPath, nullptr);
  EXPECT_EQ(props.guid, 0xC0DE0000u + v);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.speed, 10000);
  EXPECT_EQ(props.port, 1);
  EXPECT_FLOAT_EQ(props.latency, 1.5f);
  EXPECT_EQ(props.maxComms, 1024);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_EQ(props.regIsGlobal, v >= 8 ? 1 : 0);
  EXPECT_EQ(props.forceFlush, 0);
  EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(props.netDeviceVersion, 0);
  EXPECT_EQ(props.vProps.ndevs, 1);
  EXPECT_EQ(props.vProps.devs[0], 0);
  // Int-sized versions are capped at INT_MAX; later ones report what the plugin says.
  EXPECT_EQ(props.maxP2pBytes, v >= 9 ? size_t{1} << 30 : static_cast<size_t>(INT_MAX));
  EXPECT_EQ(props.maxMultiRequestSize, 1);

  Link ab, ba;
  ASSERT_NO_FATAL_FAILURE(connectLink(net, ctxB, ctxA, &ab));  // A sends to B
  ASSERT_NO_FATAL_FAILURE(connectLink(net, ctxA, ctxB, &ba));  // B sends to A
  for (int round = 0; round < 2; round++) {
    // 100 bytes into a 64 KiB receive: the receive learns the size.
    ASSERT_NO_FATAL_FAILURE(exchange(net, &ab, {0, 1, kSlotBytes, 100}, 10 * round));
    ASSERT_NO_FATAL_FAILURE(exchange(net, &ba, {kSlotBytes, 100, 1, 0}, 10 * round + 5));
  }
  closeLink(net, &ab);
  closeLink(net, &ba);
  for (void* ctx : {ctxA, ctxB}) {
    if (net->finalize != nullptr) {
      EXPECT_EQ(net->finalize(ctx), ncclSuccess);
    }
  }
}

TEST_P(NetPluginVersion, PeerCloseFailsThePendingReceive) {
  const int v = GetParam();
  REQUIRE_PLUGIN(path, v);
  std::string why;
  int version = 0;
  const ncclNet_v11_t* net = loadNetPluginForTest(path.c_str(), &why, &version);
  ASSERT_NE(net, nullptr) << why;
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void* ctx = nullptr;
  ASSERT_EQ(net->init(&ctx, 3, &config, pluginLog, nullptr), ncclSuccess);
  Link l;
  ASSERT_NO_FATAL_FAILURE(connectLink(net, ctx, ctx, &l));
  void* req = nullptr;
  void* data = l.recvBuf.data();
  size_t size = kSlotBytes;
  int tag = 0;
  ASSERT_EQ(net->irecv(l.recvComm, 1, &data, &size, &tag, &l.recvMr, nullptr, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(net->deregMr(l.sendComm, l.sendMr), ncclSuccess);
  EXPECT_EQ(net->closeSend(l.sendComm), ncclSuccess);
  ncclResult_t rc = ncclSuccess;
  int done = 0;
  for (Deadline d; rc == ncclSuccess;) {
    ASSERT_FALSE(d.passed()) << "the receive did not fail after the peer closed";
    rc = net->test(req, &done, nullptr);
    ASSERT_EQ(done, 0);
  }
  EXPECT_EQ(rc, ncclSystemError);
  EXPECT_EQ(net->deregMr(l.recvComm, l.recvMr), ncclSuccess);
  EXPECT_EQ(net->closeRecv(l.recvComm), ncclSuccess);
  EXPECT_EQ(net->closeListen(l.listenComm), ncclSuccess);
  if (net->finalize != nullptr) {
    EXPECT_EQ(net->finalize(ctx), ncclSuccess);
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, NetPluginVersion, ::testing::Values(11, 10, 9, 8, 7, 6),
                         [](const ::testing::TestParamInfo<int>& p) { return "v" + std::to_string(p.param); });

// v6-v8 take int message sizes (v6-v7 int registrations too): a larger size is refused by the adapter, not
// truncated, and the connection carries the next messages unharmed.
TEST(NetPlugin, IntSizedVersionsRefuseSizesAboveIntMax) {
  for (int v : {6, 8}) {
    SCOPED_TRACE("v" + std::to_string(v));
    REQUIRE_PLUGIN(path, v);
    std::string why;
    int version = 0;
    const ncclNet_v11_t* net = loadNetPluginForTest(path.c_str(), &why, &version);
    ASSERT_NE(net, nullptr) << why;
    ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    void* ctx = nullptr;
    ASSERT_EQ(net->init(&ctx, 4, &config, pluginLog, nullptr), ncclSuccess);
    Link l;
    ASSERT_NO_FATAL_FAILURE(connectLink(net, ctx, ctx, &l));
    const size_t big = static_cast<size_t>(INT_MAX) + 1;
    void* req = nullptr;
    EXPECT_EQ(net->isend(l.sendComm, l.sendBuf.data(), big, 0, l.sendMr, nullptr, &req), ncclInternalError);
    EXPECT_EQ(req, nullptr);
    EXPECT_TRUE(has(threadLastError(), "isend of 2147483648 bytes refused")) << threadLastError();
    void* data = l.recvBuf.data();
    size_t size = big;
    int tag = 0;
    EXPECT_EQ(net->irecv(l.recvComm, 1, &data, &size, &tag, &l.recvMr, nullptr, &req), ncclInternalError);
    EXPECT_EQ(req, nullptr);
    EXPECT_TRUE(has(threadLastError(), "irecv of 2147483648 bytes refused")) << threadLastError();
    // regMr: v8's size is a size_t (the plugin only records the region; nothing is touched).
    void* mr = nullptr;
    if (v == 6) {
      EXPECT_EQ(net->regMr(l.sendComm, l.sendBuf.data(), big, NCCL_PTR_HOST, &mr), ncclInternalError);
      EXPECT_TRUE(has(threadLastError(), "regMr of 2147483648 bytes refused")) << threadLastError();
    } else {
      ASSERT_EQ(net->regMr(l.sendComm, l.sendBuf.data(), big, NCCL_PTR_HOST, &mr), ncclSuccess);
      EXPECT_EQ(net->deregMr(l.sendComm, mr), ncclSuccess);
    }
    ASSERT_NO_FATAL_FAILURE(exchange(net, &l, {1, 100}, 3));
    closeLink(net, &l);
    if (net->finalize != nullptr) {
      EXPECT_EQ(net->finalize(ctx), ncclSuccess);
    }
  }
}

TEST(NetPlugin, MissingPathSaysNotFound) {
  std::string why;
  int version = -1;
  EXPECT_EQ(loadNetPluginForTest("/nonexistent/libnccl-net-chorus-missing.so", &why, &version), nullptr);
  EXPECT_EQ(version, 0);
  EXPECT_TRUE(has(why, "/nonexistent/libnccl-net-chorus-missing.so")) << why;
  EXPECT_TRUE(has(why, "No such file")) << why;
}

TEST(NetPlugin, PlainNameTriesTheNameThenLibncclNetName) {
  std::string why;
  int version = -1;
  EXPECT_EQ(loadNetPluginForTest("chorus-missing", &why, &version), nullptr);
  EXPECT_TRUE(has(why, "chorus-missing: cannot open")) << why;
  EXPECT_TRUE(has(why, "libnccl-net-chorus-missing.so: cannot open")) << why;
  // A library name (lib*.so) is tried as given only.
  EXPECT_EQ(loadNetPluginForTest("libchorus-missing.so", &why, &version), nullptr);
  EXPECT_FALSE(has(why, "libnccl-net-")) << why;
}

TEST(NetPlugin, LibraryWithoutSymbolIsNotANetPlugin) {
  std::string why;
  int version = -1;
  EXPECT_EQ(loadNetPluginForTest("libm.so.6", &why, &version), nullptr);
  EXPECT_EQ(version, 0);
  EXPECT_TRUE(has(why, "exports no ncclNetPlugin_v11 .. _v6 symbol")) << why;
}

TEST(NetPlugin, OlderThanV6IsRefusedByName) {
  REQUIRE_PLUGIN(path, 5);
  std::string why;
  int version = -1;
  EXPECT_EQ(loadNetPluginForTest(path.c_str(), &why, &version), nullptr);
  EXPECT_EQ(version, 0);
  EXPECT_TRUE(has(why, "exports ncclNetPlugin_v5, a version neither chorus nor NCCL 2.28 loads")) << why;
}

// pluginNet(): NCCL_NET_PLUGIN is read at each call until a library is loaded; a list is tried in order; once
// loaded, the library stays whatever the variable says later. Assumes nothing loaded a plugin earlier in this
// process (ctest runs each test in its own).
TEST(NetPlugin, ProcessCache) {
  REQUIRE_PLUGIN(path, 8);
  std::string why;
  int version = -1;
  setenv("NCCL_NET_PLUGIN", "none", 1);
  paramsReload();
  EXPECT_EQ(pluginNet(&why, &version), nullptr);
  EXPECT_EQ(why, "disabled (NCCL_NET_PLUGIN=none)");
  EXPECT_EQ(version, 0);
  setenv("NCCL_NET_PLUGIN", "/nonexistent/libnccl-net-a.so", 1);
  paramsReload();
  EXPECT_EQ(pluginNet(&why, &version), nullptr);
  EXPECT_TRUE(has(why, "/nonexistent/libnccl-net-a.so")) << why;
  // A list: the missing entry is passed over and the next one loads.
  setenv("NCCL_NET_PLUGIN", ("/nonexistent/libnccl-net-a.so," + path).c_str(), 1);
  paramsReload();
  const ncclNet_v11_t* net = pluginNet(&why, &version);
  ASSERT_NE(net, nullptr) << why;
  EXPECT_EQ(version, 8);
  EXPECT_TRUE(has(why, "(ChorusTestNet, v8)")) << why;
  setenv("NCCL_NET_PLUGIN", "none", 1);
  paramsReload();
  EXPECT_EQ(pluginNet(&why, &version), net);
  EXPECT_EQ(version, 8);
  unsetenv("NCCL_NET_PLUGIN");
  paramsReload();
  EXPECT_EQ(pluginNet(&why, &version), net);
}

// ---- Adapters, checked with in-process tables that record what they are given. ----

struct FakeV10 {
  static inline int inits = 0;
  static inline int failInits = 0;
  static inline int trafficClass = 0;
  static inline ncclNetCommConfig_v10_t* config = nullptr;
  static inline int token = 0;

  static ncclResult_t init(ncclDebugLogger_t, ncclProfilerCallback_t) {
    inits++;
    return inits <= failInits ? ncclSystemError : ncclSuccess;
  }
  static ncclResult_t connect(int, ncclNetCommConfig_v10_t* c, void*, void** sendComm, ncclNetDeviceHandle_v10_t**) {
    config = c;
    trafficClass = c != nullptr ? c->trafficClass : -99;
    *sendComm = &token;
    return ncclSuccess;
  }
  static ncclResult_t getProperties(int dev, ncclNetProperties_v10_t* p) {
    std::memset(p, 0, sizeof(*p));
    p->name = const_cast<char*>("fake0");
    p->forceFlush = 1;
    p->vProps.ndevs = 2;
    p->vProps.devs[0] = dev;
    p->vProps.devs[1] = dev + 1;
    p->maxP2pBytes = size_t{1} << 40;
    return ncclSuccess;
  }
  static ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v10_t*) {
    *d = 7;
    return ncclSuccess;
  }
  static ncclNet_v10_t table() {
    ncclNet_v10_t t;
    std::memset(&t, 0, sizeof(t));
    t.name = "FakeV10";
    t.init = init;
    t.devices = [](int* n) { return *n = 1, ncclSuccess; };
    t.getProperties = getProperties;
    t.listen = [](int, void*, void** c) { return *c = &token, ncclSuccess; };
    t.connect = connect;
    t.accept = [](void*, void** c, ncclNetDeviceHandle_v10_t**) { return *c = &token, ncclSuccess; };
    t.regMr = [](void*, void*, size_t, int, void** m) { return *m = &token, ncclSuccess; };
    t.deregMr = [](void*, void*) { return ncclSuccess; };
    t.isend = [](void*, void*, size_t, int, void*, void*, void** r) { return *r = &token, ncclSuccess; };
    t.irecv = [](void*, int, void**, size_t*, int*, void**, void**, void** r) { return *r = &token, ncclSuccess; };
    t.test = [](void*, int* done, int*) { return *done = 1, ncclSuccess; };
    t.closeSend = t.closeRecv = t.closeListen = [](void*) { return ncclSuccess; };
    t.makeVDevice = makeVDevice;
    return t;
  }
};

TEST(NetPluginAdapter, OldInitRunsOnceAndAFailureIsRetried) {
  static const ncclNet_v10_t fake = FakeV10::table();
  FakeV10::inits = 0;  // this table's adapter has not called init yet
  FakeV10::failInits = 1;
  std::string why;
  const ncclNet_v11_t* net = adaptNetPlugin(&fake, 10, "fake", &why);
  ASSERT_NE(net, nullptr) << why;
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void* ctx = nullptr;
  EXPECT_EQ(net->init(&ctx, 1, &config, pluginLog, nullptr), ncclSystemError);
  EXPECT_EQ(FakeV10::inits, 1);
  ASSERT_EQ(net->init(&ctx, 1, &config, pluginLog, nullptr), ncclSuccess);
  EXPECT_EQ(FakeV10::inits, 2);
  void* ctx2 = nullptr;
  ASSERT_EQ(net->init(&ctx2, 2, &config, pluginLog, nullptr), ncclSuccess);
  EXPECT_EQ(FakeV10::inits, 2);  // not called again
  EXPECT_NE(ctx, ctx2);          // one context per communicator
  ASSERT_NE(net->finalize, nullptr);
  EXPECT_EQ(net->finalize(ctx), ncclSuccess);
  EXPECT_EQ(net->finalize(ctx2), ncclSuccess);
}

TEST(NetPluginAdapter, V10ConnectGetsTheConfigInitWasGiven) {
  static const ncclNet_v10_t fake = FakeV10::table();
  FakeV10::failInits = 0;
  std::string why;
  const ncclNet_v11_t* net = adaptNetPlugin(&fake, 10, "fake", &why);
  ASSERT_NE(net, nullptr) << why;
  EXPECT_EQ(adaptNetPlugin(&fake, 10, "fake", &why), net);  // one adapter per table
  ncclNetCommConfig_v11_t five{5}, seven{7};
  void* ctx5 = nullptr;
  void* ctx7 = nullptr;
  ASSERT_EQ(net->init(&ctx5, 1, &five, pluginLog, nullptr), ncclSuccess);
  ASSERT_EQ(net->init(&ctx7, 2, &seven, pluginLog, nullptr), ncclSuccess);
  five.trafficClass = 0;  // the context holds its own copy
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* comm = nullptr;
  ncclNetDeviceHandle_v11_t* dev = nullptr;
  ASSERT_EQ(net->connect(ctx5, 0, handle, &comm, &dev), ncclSuccess);
  EXPECT_EQ(FakeV10::trafficClass, 5);
  ncclNetCommConfig_v10_t* first = FakeV10::config;
  ASSERT_EQ(net->connect(ctx7, 0, handle, &comm, &dev), ncclSuccess);
  EXPECT_EQ(FakeV10::trafficClass, 7);
  ASSERT_EQ(net->connect(ctx5, 0, handle, &comm, &dev), ncclSuccess);
  EXPECT_EQ(FakeV10::config, first);  // stable for the communicator's life
  // Entries whose signature did not change are the plugin's own.
  EXPECT_EQ(net->isend, fake.isend);
  EXPECT_EQ(net->irecv, fake.irecv);
  EXPECT_EQ(net->makeVDevice, fake.makeVDevice);
  EXPECT_EQ(net->regMrDmaBuf, nullptr);
  EXPECT_EQ(net->setNetAttr, nullptr);
  // v10's properties carry over, with maxMultiRequestSize added.
  ncclNetProperties_v11_t props;
  std::memset(&props, 0xff, sizeof(props));
  ASSERT_EQ(net->getProperties(3, &props), ncclSuccess);
  EXPECT_STREQ(props.name, "fake0");
  EXPECT_EQ(props.forceFlush, 1);
  EXPECT_EQ(props.vProps.ndevs, 2);
  EXPECT_EQ(props.vProps.devs[1], 4);
  EXPECT_EQ(props.maxP2pBytes, size_t{1} << 40);
  EXPECT_EQ(props.maxMultiRequestSize, 1);
  EXPECT_EQ(net->finalize(ctx5), ncclSuccess);
  EXPECT_EQ(net->finalize(ctx7), ncclSuccess);
}

TEST(NetPluginAdapter, ANullEntryChorusCallsIsRefused) {
  static ncclNet_v8_t fake;
  std::memset(&fake, 0, sizeof(fake));
  const ncclNet_v10_t full = FakeV10::table();
  fake.name = "FakeV8";
  fake.init = [](ncclDebugLogger_t) { return ncclSuccess; };
  fake.devices = full.devices;
  fake.listen = full.listen;
  std::string why;
  EXPECT_EQ(adaptNetPlugin(&fake, 8, "libfake.so", &why), nullptr);
  EXPECT_EQ(why, "libfake.so: ncclNetPlugin_v8 has no getProperties (a null entry chorus needs)");
  EXPECT_EQ(adaptNetPlugin(&full, 12, "libfake.so", &why), nullptr);
  EXPECT_TRUE(has(why, "ncclNetPlugin_v12 is not a version chorus loads")) << why;
}

}  // namespace
}  // namespace chorus
