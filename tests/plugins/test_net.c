/* A net plugin for chorus's tests, written against NCCL 2.28's net plugin ABI: a real net over TCP that exports
 * ncclNetPlugin_v<NET_VERSION> (11 by default; 6 to 10 for the older layouts chorus adapts; 5 exports a symbol of
 * a version chorus does not load, with v6's layout, to test that it is refused). Its name is "ChorusTestNet".
 *
 * - One device, named after its interface. listen() binds 0.0.0.0 and puts a reachable address in the handle: the
 *   address of the interface NCCL_SOCKET_IFNAME selects (comma-separated name prefixes, a leading ^ excludes, =
 *   asks for exact names), else the first non-loopback IPv4 interface that is up, else 127.0.0.1; so it works across
 *   network namespaces.
 * - CHORUS_TEST_NET_DEVICES=name,name,... (at most 16) offers that many devices of those names instead, all over
 *   that one interface: a test's stand-in for a node's NICs. listen and connect log at INFO the device they got.
 *   From v9, makeVDevice merges some of them into a device appended after them (named "a+b", its vProps listing
 *   them), over the same interface.
 * - Nothing blocks. connect() starts a non-blocking connect and keeps its progress in the caller's handle (as NCCL's
 *   own nets do), so the caller passes the same handle again until a comm comes back. isend()/irecv() queue a
 *   request (null when the comm's queue is full); test(), isend() and irecv() move bytes as far as the socket lets
 *   them. Requests of one comm complete in posting order.
 * - Each message is an 8-byte little-endian length, then the payload: a receive learns the size, and a message
 *   larger than its receive fails the connection. One receive per irecv (maxRecvs 1).
 * - regMr returns a handle that remembers the region; isend/irecv check that the buffer lies inside it.
 * - A peer's EOF or a socket error fails the comm: test() of any request not yet complete returns ncclSystemError.
 * - Before v11 a plugin is initialized once per process: a second successful init of a v6-v10 build fails, so a test
 *   can see that chorus's adapter calls it once. CHORUS_TEST_NET_FAIL=init makes init fail.
 * - CHORUS_TEST_NET_STALL_DEV=d: connect() on device d never completes (it returns no comm, call after call), as a
 *   net may offer a device it cannot connect through; the peer's accept() then finds nobody.
 * - CHORUS_TEST_NET_UNREACHABLE_DEV=d: connect() on device d fails at once, with a WARN, as a connect to an address
 *   the host has no route to does; the peer's accept() then finds nobody.
 * - CHORUS_TEST_NET_SLOW_CONNECT_S=s: the process's first connect() does not return for s seconds, as a plugin's
 *   connect that allocates hundreds of MB may not on a loaded machine; the caller's thread is held in the net.
 * - CHORUS_TEST_NET_SLOW_TEST_S=s: the process's first test() does not return for s seconds, as a net's progress
 *   call may not when it waits inside (a provider's lock, a retry); the connection is open, its data in flight.
 * - CHORUS_TEST_NET_SLOW_DEV=d: the held connect() or test() above is the first on device d rather than the process's
 *   first, so that a call over another device can run before it.
 * - CHORUS_TEST_NET_FAIL=test:N: the process's Nth test() call (from 1) fails its comm, with a WARN that says so, as a
 *   net reports an error completion.
 * - chorusTestNetFailStaleReceives(ms), which a test calls through dlopen(RTLD_NOLOAD) and dlsym: from then on, the
 *   first receive to wait ms for its data (counted from that call or its posting, whichever is later) fails its comm at
 *   its next test(), with a WARN, as a net whose receives time out does. Once a process. A test arms it just before a
 *   call whose peer sends nothing, so that the net fails the connection a known time into the call's wait.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#ifndef NET_VERSION
#define NET_VERSION 11
#endif
/* The layout of the table: NET_VERSION's, v6's for the refused v5. */
#if NET_VERSION < 6
#define NET_LAYOUT 6
#else
#define NET_LAYOUT NET_VERSION
#endif

/* ---- The ABI, as NCCL 2.28 defines it for NET_LAYOUT. ---- */

enum { kHandleMax = 128, kPtrHost = 1, kPtrCuda = 2, kPtrDmaBuf = 4, kLogWarn = 2, kLogInfo = 3, kSubsysNet = 0x10, kMaxReqs = 32 };

typedef void (*Logger)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
typedef ncclResult_t (*ProfilerCallback)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

typedef struct {
  int netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} DevHandle;

typedef struct {
  int ndevs;
  int devs[4];
} VDeviceProps;

typedef struct {
  int trafficClass;
} CommConfig;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
#if NET_LAYOUT >= 8
  int regIsGlobal;
#endif
#if NET_LAYOUT >= 9
  int forceFlush;
#endif
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
#if NET_LAYOUT >= 7
  int netDeviceType;
  int netDeviceVersion;
#endif
#if NET_LAYOUT >= 9
  VDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
#endif
#if NET_LAYOUT >= 11
  int maxMultiRequestSize;
#endif
} Props;

/* Sizes of isend/irecv (int before v9) and of regMr (int before v8). */
#if NET_LAYOUT >= 9
typedef size_t MsgSize;
#else
typedef int MsgSize;
#endif
#if NET_LAYOUT >= 8
typedef size_t MrSize;
#else
typedef int MrSize;
#endif

typedef struct {
  const char* name;
#if NET_LAYOUT >= 11
  ncclResult_t (*init)(void** ctx, uint64_t commId, CommConfig* config, Logger log, ProfilerCallback prof);
#elif NET_LAYOUT == 10
  ncclResult_t (*init)(Logger log, ProfilerCallback prof);
#else
  ncclResult_t (*init)(Logger log);
#endif
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, Props* props);
#if NET_LAYOUT >= 11
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, DevHandle** sendDevComm);
#elif NET_LAYOUT == 10
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, CommConfig* config, void* handle, void** sendComm, DevHandle** sendDevComm);
#elif NET_LAYOUT >= 7
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, DevHandle** sendDevComm);
#else
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
#endif
#if NET_LAYOUT >= 7
  ncclResult_t (*accept)(void* listenComm, void** recvComm, DevHandle** recvDevComm);
#else
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
#endif
  ncclResult_t (*regMr)(void* comm, void* data, MrSize size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
#if NET_LAYOUT >= 10
  ncclResult_t (*isend)(void* sendComm, void* data, MsgSize size, int tag, void* mhandle, void* phandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, MsgSize* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
#else
  ncclResult_t (*isend)(void* sendComm, void* data, MsgSize size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, MsgSize* sizes, int* tags, void** mhandles, void** request);
#endif
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
#if NET_LAYOUT >= 7
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
#endif
#if NET_LAYOUT >= 9
  ncclResult_t (*makeVDevice)(int* d, VDeviceProps* props);
#endif
#if NET_LAYOUT >= 11
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, void* netAttr);
#endif
} Net;

/* ---- State. ---- */

enum { kHandleMagic = 0x43544e31, kMrMagic = 0x43544d52 };

/* What listen() writes and connect() reads. The stage and fd are connect()'s progress, kept in the caller's copy. */
typedef struct {
  uint32_t magic;
  struct sockaddr_in addr;
  int stage; /* 0: not started; 1: connecting on fd */
  int fd;
} Handle;
_Static_assert(sizeof(Handle) <= kHandleMax, "the handle must fit NCCL_NET_HANDLE_MAXSIZE");

typedef struct {
  uint32_t magic;
  char* base;
  size_t size;
  int type; /* kPtrHost or kPtrCuda */
} Mr;

struct Comm;

/* One isend or irecv, from posting until test() reports it done. */
typedef struct {
  struct Comm* comm;
  int used;
  char* data;
  size_t size; /* send: the message; receive: the buffer's size */
  unsigned char header[8];
  size_t headerDone;
  size_t length; /* the message's length (a receive learns it from the header) */
  size_t dataDone;
  int done;
  int64_t postedMs; /* CLOCK_MONOTONIC ms at posting */
} Req;

typedef struct Comm {
  int fd;
  int isSend;
  int dev;
  int failed; /* sticky: the connection is broken */
  Req reqs[kMaxReqs];
  int order[kMaxReqs]; /* slots in posting order (a ring indexed by sequence number) */
  uint64_t posted;     /* requests posted so far */
  uint64_t head;       /* the oldest request whose bytes have not all moved */
  Req flush;           /* the request iflush returns: done at once */
} Comm;

typedef struct {
  int fd;
  int dev;
} ListenComm;

static Logger gLog;
static int gInits;
static char gIfName[IF_NAMESIZE + 1] = "lo";
enum { kMaxDevs = 16 };
static char gDevNames[kMaxDevs][32]; /* CHORUS_TEST_NET_DEVICES's names; none: one device named gIfName */
static int gNdevs = 1;
static int gNamedDevs = 0;
/* CHORUS_TEST_NET_PTR_CUDA=1: the devices say they register GPU memory (NCCL_PTR_CUDA), as a GPUDirect RDMA net
   does. The emulated runtime's "GPU memory" is host memory, which this net reads and writes like any other. */
static int gPtrCuda = 0;
/* CHORUS_TEST_NET_PTR_DMABUF=1 (with CHORUS_TEST_NET_PTR_CUDA=1): they also take GPU memory as a dma-buf
   (NCCL_PTR_DMABUF, regMrDmaBuf), which must be the buffer's own memory (checked against /proc/self/maps). */
static int gPtrDmaBuf = 0;
/* CHORUS_TEST_NET_FORCE_FLUSH=1 (v9 and later): the devices say receives into GPU memory always need a flush. */
static int gForceFlush = 0;
/* CHORUS_TEST_NET_STALL_DEV: the device whose connects never complete; -1 none. */
static int gStallDev = -1;
/* CHORUS_TEST_NET_UNREACHABLE_DEV: the device whose connects fail at once; -1 none. */
static int gUnreachableDev = -1;
/* CHORUS_TEST_NET_SLOW_CONNECT_S: how long the first connect() holds its caller; 0 none. */
static int gSlowConnectS = 0;
/* CHORUS_TEST_NET_SLOW_TEST_S: how long the first test() holds its caller; 0 none. */
static int gSlowTestS = 0;
/* CHORUS_TEST_NET_SLOW_DEV: the device whose first connect() or test() is held; -1 any. */
static int gSlowDev = -1;
/* CHORUS_TEST_NET_FAIL=test:N: the test() call that fails (counted from 1 by gTests); 0 none. */
static long gFailTest = 0;
static long gTests = 0;
/* chorusTestNetFailStaleReceives: when it was called (CLOCK_MONOTONIC ms; 0 never) and its ms; whether it fired. */
static int64_t gStaleArmedMs = 0;
static int gStaleMs = 0;
static int gStaleFired = 0;

static int64_t nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void say(int level, int line, const char* fmt, ...) {
  char text[256];
  va_list ap;
  if (gLog == NULL) return;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  gLog(level, kSubsysNet, __FILE__, line, "ChorusTestNet: %s", text);
}

/* ---- Addresses. ---- */

/* Whether interface `name` is selected by NCCL_SOCKET_IFNAME's value `spec` (an empty spec selects nothing). */
static int ifSelected(const char* name, const char* spec) {
  int exclude = 0, exact = 0, match = 0;
  char list[256];
  char* save = NULL;
  if (spec[0] == '^') exclude = 1, spec++;
  if (spec[0] == '=') exact = 1, spec++;
  snprintf(list, sizeof(list), "%s", spec);
  for (char* item = strtok_r(list, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
    if (exact ? strcmp(name, item) == 0 : strncmp(name, item, strlen(item)) == 0) match = 1;
  }
  return exclude ? !match : match;
}

/* The IPv4 address peers reach this host at, and its device's name in ifName (IF_NAMESIZE + 1 bytes). listen calls it
 * from several communicators' threads at once, so it writes no global. */
static struct in_addr pickAddress(char* ifName) {
  struct in_addr found;
  struct ifaddrs* list = NULL;
  const char* spec = getenv("NCCL_SOCKET_IFNAME");
  found.s_addr = htonl(INADDR_LOOPBACK);
  snprintf(ifName, IF_NAMESIZE + 1, "lo");
  if (getifaddrs(&list) != 0) return found;
  for (struct ifaddrs* i = list; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (spec != NULL && spec[0] != '\0' ? !ifSelected(i->ifa_name, spec) : (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    found = ((struct sockaddr_in*)i->ifa_addr)->sin_addr;
    snprintf(ifName, IF_NAMESIZE + 1, "%s", i->ifa_name);
    break;
  }
  freeifaddrs(list);
  return found;
}

/* ---- Moving bytes. ---- */

static int wouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

static void fail(Comm* c, int line, const char* what, int err) {
  if (!c->failed) say(kLogWarn, line, "%s: %s", what, err ? strerror(err) : "connection closed by the peer");
  c->failed = 1;
}

/* Sends what the socket takes of r's header and payload, both in one call (one segment for a small message, as a
 * net that sends a message whole); sets r->done when all is sent. */
static void sendSome(Comm* c, Req* r) {
  while (!c->failed && !r->done) {
    struct iovec iov[2];
    int n = 0;
    if (r->headerDone < sizeof(r->header))
      iov[n++] = (struct iovec){(char*)r->header + r->headerDone, sizeof(r->header) - r->headerDone};
    if (r->dataDone < r->length) iov[n++] = (struct iovec){r->data + r->dataDone, r->length - r->dataDone};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = iov;
    m.msg_iovlen = (size_t)n;
    ssize_t sent = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (!wouldBlock(errno)) fail(c, __LINE__, "send", errno);
      return;
    }
    const size_t inHeader = sizeof(r->header) - r->headerDone;
    const size_t toHeader = (size_t)sent < inHeader ? (size_t)sent : inHeader;
    r->headerDone += toHeader;
    r->dataDone += (size_t)sent - toHeader;
    if (r->headerDone == sizeof(r->header) && r->dataDone == r->length) r->done = 1;
  }
}

/* Receives what the socket has of r's header and payload; sets r->done when the whole message is in. */
static void recvSome(Comm* c, Req* r) {
  while (!c->failed && !r->done) {
    const int inHeader = r->headerDone < sizeof(r->header);
    char* to = inHeader ? (char*)r->header + r->headerDone : r->data + r->dataDone;
    const size_t left = inHeader ? sizeof(r->header) - r->headerDone : r->length - r->dataDone;
    ssize_t n = left == 0 ? 0 : recv(c->fd, to, left, MSG_DONTWAIT);
    if (left != 0 && n == 0) {
      fail(c, __LINE__, "recv", 0);
      return;
    }
    if (n < 0) {
      if (!wouldBlock(errno)) fail(c, __LINE__, "recv", errno);
      return;
    }
    if (inHeader) {
      r->headerDone += (size_t)n;
      if (r->headerDone == sizeof(r->header)) {
        r->length = 0;
        for (int b = 7; b >= 0; b--) r->length = (r->length << 8) | r->header[b];
        if (r->length > r->size) {
          say(kLogWarn, __LINE__, "a message of %zu bytes arrived for a receive of %zu bytes", r->length, r->size);
          c->failed = 1;
          return;
        }
      }
    } else {
      r->dataDone += (size_t)n;
    }
    if (r->headerDone == sizeof(r->header) && r->dataDone == r->length) r->done = 1;
  }
}

/* Moves the comm's requests forward in posting order, as far as the socket allows. */
static void progress(Comm* c) {
  while (!c->failed && c->head < c->posted) {
    Req* r = &c->reqs[c->order[c->head % kMaxReqs]];
    if (c->isSend) {
      sendSome(c, r);
    } else {
      recvSome(c, r);
    }
    if (!r->done) return;
    c->head++;
  }
}

/* A free request slot of c, or NULL when the comm has as many requests as it holds. */
static Req* newReq(Comm* c, char* data, size_t size) {
  for (int s = 0; s < kMaxReqs; s++) {
    Req* r = &c->reqs[s];
    if (r->used) continue;
    memset(r, 0, sizeof(*r));
    r->comm = c;
    r->used = 1;
    r->data = data;
    r->size = size;
    r->postedMs = nowMs();
    c->order[c->posted % kMaxReqs] = s;
    c->posted++;
    return r;
  }
  return NULL;
}

/* Whether [data, data + size) lies in the region mhandle registered. */
static int inRegion(void* mhandle, const void* data, size_t size) {
  const Mr* mr = (const Mr*)mhandle;
  if (mr == NULL || mr->magic != kMrMagic) return 0;
  if (size == 0) return 1;
  return (const char*)data >= mr->base && (size_t)((const char*)data - mr->base) <= mr->size &&
         size <= mr->size - (size_t)((const char*)data - mr->base);
}

/* ---- The entry points, in their widest form (the exported table wraps them for its layout). ---- */

static const char* devName(int dev) { return gNamedDevs > 0 ? gDevNames[dev] : gIfName; }

static int badDev(int dev) { return dev < 0 || dev >= __atomic_load_n(&gNdevs, __ATOMIC_ACQUIRE); }

#if NET_LAYOUT >= 9
/* Merged devices (makeVDevice, v9 and later): appended after the named devices, each with the devices it spans and a
 * name joining theirs with '+'. Like the named devices, they all run over the one interface. */
static VDeviceProps gVProps[kMaxDevs];

static ncclResult_t netMakeVDevice(int* d, VDeviceProps* props) {
  if (gNamedDevs == 0 || props->ndevs < 1 || props->ndevs > 4) return ncclInvalidArgument;
  for (int i = 0; i < props->ndevs; i++)
    if (props->devs[i] < 0 || props->devs[i] >= gNamedDevs) return ncclInvalidArgument;
  if (props->ndevs == 1) {
    *d = props->devs[0];
    return ncclSuccess;
  }
  const int n = __atomic_load_n(&gNdevs, __ATOMIC_ACQUIRE);
  for (int v = gNamedDevs; v < n; v++) {
    if (gVProps[v].ndevs == props->ndevs && memcmp(gVProps[v].devs, props->devs, sizeof(int) * props->ndevs) == 0) {
      *d = v;
      return ncclSuccess;
    }
  }
  if (n == kMaxDevs) return ncclInternalError;
  gVProps[n] = *props;
  gDevNames[n][0] = '\0';
  for (int i = 0; i < props->ndevs; i++) {
    size_t len = strlen(gDevNames[n]);
    snprintf(gDevNames[n] + len, sizeof(gDevNames[0]) - len, "%s%s", i > 0 ? "+" : "", gDevNames[props->devs[i]]);
  }
  __atomic_store_n(&gNdevs, n + 1, __ATOMIC_RELEASE); /* filled before it is counted */
  say(kLogInfo, __LINE__, "makeVDevice: device %d (%s)", n, gDevNames[n]);
  *d = n;
  return ncclSuccess;
}
#endif

/* With named devices, which one a listen or connect was given (tests read it in the log). */
static void sayDevice(const char* what, int dev) {
  if (gNamedDevs > 0) say(kLogInfo, __LINE__, "%s on device %d (%s)", what, dev, devName(dev));
}

/* NCCL calls a net's init, devices and finalize one at a time, however many threads make communicators (its
 * netPluginMutex), so plugins written for it need not guard their set-up. This one holds each such call a moment and
 * fails one that finds another in progress, so that a library calling them at once fails the tests. */
static int gInSetup;
static int enterSetup(const char* what) {
  if (__atomic_fetch_add(&gInSetup, 1, __ATOMIC_ACQ_REL) != 0) {
    __atomic_fetch_sub(&gInSetup, 1, __ATOMIC_ACQ_REL);
    fprintf(stderr, "ChorusTestNet: %s called while another thread was in init, devices or finalize\n", what);
    return 0;
  }
  usleep(2000);
  return 1;
}
static void leaveSetup(void) { __atomic_fetch_sub(&gInSetup, 1, __ATOMIC_ACQ_REL); }

/* Initializes the plugin; `again` says whether a second call is allowed (v11) or refused (older layouts). */
static ncclResult_t netInit(Logger log, int again) {
  const char* failWhat = getenv("CHORUS_TEST_NET_FAIL");
  gLog = log;
  if (failWhat != NULL && strcmp(failWhat, "init") == 0) return ncclSystemError;
  if (gInits > 0) {
    if (again) return ncclSuccess;
    say(kLogWarn, __LINE__, "init called again: a v%d plugin is initialized once per process", NET_VERSION);
    return ncclInternalError;
  }
  gInits++;
  struct in_addr a = pickAddress(gIfName);
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, text, sizeof(text));
  say(kLogInfo, __LINE__, "init (v%d): device %s, address %s", NET_VERSION, gIfName, text);
  const char* names = getenv("CHORUS_TEST_NET_DEVICES");
  gNdevs = 1;
  gNamedDevs = 0;
  for (const char* p = names; p != NULL && *p != '\0' && gNamedDevs < kMaxDevs;) {
    size_t n = strcspn(p, ",");
    snprintf(gDevNames[gNamedDevs++], sizeof(gDevNames[0]), "%.*s", (int)n, p);
    p += n + (p[n] == ',');
  }
  if (gNamedDevs > 0) gNdevs = gNamedDevs;
  const char* cuda = getenv("CHORUS_TEST_NET_PTR_CUDA");
  gPtrCuda = cuda != NULL && strcmp(cuda, "1") == 0;
  const char* dmaBuf = getenv("CHORUS_TEST_NET_PTR_DMABUF");
  gPtrDmaBuf = gPtrCuda && dmaBuf != NULL && strcmp(dmaBuf, "1") == 0;
  const char* forceFlush = getenv("CHORUS_TEST_NET_FORCE_FLUSH");
  gForceFlush = forceFlush != NULL && strcmp(forceFlush, "1") == 0;
  const char* stall = getenv("CHORUS_TEST_NET_STALL_DEV");
  gStallDev = stall != NULL && *stall != '\0' ? atoi(stall) : -1;
  const char* unreachable = getenv("CHORUS_TEST_NET_UNREACHABLE_DEV");
  gUnreachableDev = unreachable != NULL && *unreachable != '\0' ? atoi(unreachable) : -1;
  const char* slow = getenv("CHORUS_TEST_NET_SLOW_CONNECT_S");
  gSlowConnectS = slow != NULL ? atoi(slow) : 0;
  const char* slowTest = getenv("CHORUS_TEST_NET_SLOW_TEST_S");
  gSlowTestS = slowTest != NULL ? atoi(slowTest) : 0;
  const char* slowDev = getenv("CHORUS_TEST_NET_SLOW_DEV");
  gSlowDev = slowDev != NULL && *slowDev != '\0' ? atoi(slowDev) : -1;
  gFailTest = failWhat != NULL && strncmp(failWhat, "test:", 5) == 0 ? atol(failWhat + 5) : 0;
  return ncclSuccess;
}

static ncclResult_t netDevices(int* ndev) {
  if (!enterSetup("devices")) return ncclInternalError;
  *ndev = gNdevs;
  leaveSetup();
  return ncclSuccess;
}

/* init in any layout, held as enterSetup says. */
static ncclResult_t netInitOnce(Logger log, int again) {
  if (!enterSetup("init")) return ncclInternalError;
  ncclResult_t rc = netInit(log, again);
  leaveSetup();
  return rc;
}

static ncclResult_t netGetProperties(int dev, Props* props) {
  if (badDev(dev)) return ncclInvalidArgument;
  memset(props, 0, sizeof(*props));
  props->name = (char*)devName(dev);
  props->pciPath = NULL;
  props->guid = 0xC0DE0000u + NET_VERSION; /* tells tests which build they reached */
  props->ptrSupport = kPtrHost | (gPtrCuda ? kPtrCuda : 0) | (gPtrDmaBuf ? kPtrDmaBuf : 0);
  props->speed = 10000;
  props->port = 1;
  props->latency = 1.5f;
  props->maxComms = 1024;
  props->maxRecvs = 1;
#if NET_LAYOUT >= 8
  props->regIsGlobal = 1; /* a registration is not tied to its comm */
#endif
#if NET_LAYOUT >= 9
  props->forceFlush = gForceFlush;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  if (gNamedDevs > 0 && dev >= gNamedDevs) props->vProps = gVProps[dev];
  props->maxP2pBytes = (size_t)1 << 30;
  props->maxCollBytes = (size_t)1 << 30;
#endif
#if NET_LAYOUT >= 11
  props->maxMultiRequestSize = 1;
#endif
  return ncclSuccess;
}

static ncclResult_t netListen(int dev, void* handle, void** listenComm) {
  Handle* h = (Handle*)handle;
  struct sockaddr_in any;
  socklen_t len = sizeof(any);
  const int one = 1;
  *listenComm = NULL;
  if (badDev(dev)) return ncclInvalidArgument;
  sayDevice("listen", dev);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  memset(&any, 0, sizeof(any));
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr*)&any, sizeof(any)) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr*)&any, &len) != 0) {
    say(kLogWarn, __LINE__, "listen: %s", strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  ListenComm* l = (ListenComm*)calloc(1, sizeof(ListenComm));
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  l->dev = dev;
  memset(h, 0, sizeof(*h));
  h->magic = kHandleMagic;
  h->addr.sin_family = AF_INET;
  char ifName[IF_NAMESIZE + 1];
  h->addr.sin_addr = pickAddress(ifName);
  h->addr.sin_port = any.sin_port;
  h->fd = -1;
  *listenComm = l;
  return ncclSuccess;
}

/* The hold a CHORUS_TEST_NET_SLOW_* knob sets for a call on device `dev`, taken once (a plain read first, since every
   test() passes here): 0 when it was taken already, or is for another device (CHORUS_TEST_NET_SLOW_DEV). */
static int takeHold(int* seconds, int dev) {
  if (__atomic_load_n(seconds, __ATOMIC_RELAXED) <= 0 || (gSlowDev >= 0 && dev != gSlowDev)) return 0;
  return __atomic_exchange_n(seconds, 0, __ATOMIC_ACQ_REL);
}

static Comm* newComm(int fd, int isSend, int dev) {
  const int one = 1;
  Comm* c = (Comm*)calloc(1, sizeof(Comm));
  if (c == NULL) return NULL;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  c->fd = fd;
  c->isSend = isSend;
  c->dev = dev;
  return c;
}

static ncclResult_t netConnect(int dev, void* handle, void** sendComm) {
  Handle* h = (Handle*)handle;
  *sendComm = NULL;
  if (badDev(dev) || h->magic != kHandleMagic) return ncclInvalidArgument;
  if (dev == gStallDev) return ncclSuccess; /* never connects: called again, and again */
  if (dev == gUnreachableDev) {
    say(kLogWarn, __LINE__, "connect on device %d: no route to the peer (CHORUS_TEST_NET_UNREACHABLE_DEV)", dev);
    return ncclSystemError;
  }
  const int slowS = takeHold(&gSlowConnectS, dev);
  if (slowS > 0) {
    say(kLogInfo, __LINE__, "connect: held for %d s (CHORUS_TEST_NET_SLOW_CONNECT_S)", slowS);
    sleep((unsigned)slowS);
  }
  if (h->stage == 0) {
    sayDevice("connect", dev);
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0) return ncclSystemError;
    if (connect(h->fd, (struct sockaddr*)&h->addr, sizeof(h->addr)) != 0 && errno != EINPROGRESS) {
      say(kLogWarn, __LINE__, "connect to %s:%d: %s", inet_ntoa(h->addr.sin_addr), ntohs(h->addr.sin_port),
          strerror(errno));
      close(h->fd);
      h->fd = -1;
      return ncclSystemError;
    }
    h->stage = 1;
  }
  struct pollfd p = {h->fd, POLLOUT, 0};
  if (poll(&p, 1, 0) <= 0) return ncclSuccess; /* still connecting (or interrupted): called again */
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  const int fd = h->fd;
  h->stage = 0; /* done either way: the handle may start a new connection */
  h->fd = -1;
  if (err != 0) {
    say(kLogWarn, __LINE__, "connect to %s:%d: %s", inet_ntoa(h->addr.sin_addr), ntohs(h->addr.sin_port),
        strerror(err));
    close(fd);
    return ncclSystemError;
  }
  Comm* c = newComm(fd, 1, dev);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *sendComm = c;
  return ncclSuccess;
}

static ncclResult_t netAccept(void* listenComm, void** recvComm) {
  ListenComm* l = (ListenComm*)listenComm;
  *recvComm = NULL;
  int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (wouldBlock(errno) || errno == ECONNABORTED) return ncclSuccess; /* nobody yet: called again */
    say(kLogWarn, __LINE__, "accept: %s", strerror(errno));
    return ncclSystemError;
  }
  Comm* c = newComm(fd, 0, l->dev);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *recvComm = c;
  return ncclSuccess;
}

static ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)comm;
  *mhandle = NULL;
  if (type != kPtrHost && !(type == kPtrCuda && gPtrCuda)) return ncclInvalidArgument; /* as ptrSupport says */
  Mr* mr = (Mr*)calloc(1, sizeof(Mr));
  if (mr == NULL) return ncclSystemError;
  mr->magic = kMrMagic;
  mr->base = (char*)data;
  mr->size = size;
  mr->type = type;
  if (type == kPtrCuda) say(kLogInfo, __LINE__, "regMr: GPU memory, %zu bytes", size);
  *mhandle = mr;
  return ncclSuccess;
}

/* Whether [data, data + size) is mapped from the file fd refers to, at offset within it: the mapping that holds data
   (in /proc/self/maps) has that file's inode and the matching file offset. */
static int mappedFrom(int fd, const char* data, size_t size, uint64_t offset) {
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < offset + size) return 0;
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof(line), maps) != NULL) {
    unsigned long start = 0, end = 0, fileOff = 0, inode = 0;
    if (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &start, &end, &fileOff, &inode) != 4) continue;
    const uintptr_t at = (uintptr_t)data;
    if (at < start || at + size > end) continue;
    found = inode == (unsigned long)st.st_ino && fileOff + (at - start) == offset ? 1 : -1;
  }
  fclose(maps);
  return found == 1;
}

static ncclResult_t netRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                   void** mhandle) {
  *mhandle = NULL;
  if (fd == -1) return netRegMr(comm, data, size, type, mhandle);
  if (!gPtrDmaBuf || type != kPtrCuda) return ncclInvalidArgument; /* as ptrSupport says */
  if (!mappedFrom(fd, (const char*)data, size, offset)) {
    say(kLogWarn, __LINE__, "regMrDmaBuf: fd %d at offset %llu is not the memory at %p", fd,
        (unsigned long long)offset, data);
    return ncclInvalidArgument;
  }
  ncclResult_t res = netRegMr(comm, data, size, kPtrHost, mhandle); /* reached by address, as any memory here */
  if (res != ncclSuccess) return res;
  ((Mr*)*mhandle)->type = kPtrCuda;
  say(kLogInfo, __LINE__, "regMrDmaBuf: GPU memory, %zu bytes, the buffer's own dma-buf at offset %llu", size,
      (unsigned long long)offset);
  return ncclSuccess;
}

static ncclResult_t netDeregMr(void* comm, void* mhandle) {
  Mr* mr = (Mr*)mhandle;
  (void)comm;
  if (mr == NULL || mr->magic != kMrMagic) return ncclInvalidArgument;
  mr->magic = 0;
  free(mr);
  return ncclSuccess;
}

static ncclResult_t netIsend(void* sendComm, void* data, size_t size, void* mhandle, void** request) {
  Comm* c = (Comm*)sendComm;
  *request = NULL;
  if (!c->isSend || !inRegion(mhandle, data, size)) return ncclInvalidArgument;
  if (c->failed) return ncclSystemError;
  Req* r = newReq(c, (char*)data, size);
  if (r == NULL) return ncclSuccess; /* queue full: called again */
  r->length = size;
  for (int b = 0; b < 8; b++) r->header[b] = (unsigned char)(size >> (8 * b));
  progress(c);
  *request = r;
  return ncclSuccess;
}

static ncclResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, void** mhandles, void** request) {
  Comm* c = (Comm*)recvComm;
  *request = NULL;
  if (n != 1 || c->isSend || !inRegion(mhandles[0], data[0], sizes[0])) return ncclInvalidArgument;
  if (c->failed) return ncclSystemError;
  Req* r = newReq(c, (char*)data[0], sizes[0]);
  if (r == NULL) return ncclSuccess;
  progress(c);
  *request = r;
  return ncclSuccess;
}

/* Flushes receives into GPU memory (a GPUDirect RDMA net makes them visible to the GPU); the request is done at once. */
static ncclResult_t netIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  Comm* c = (Comm*)recvComm;
  static int said = 0;
  *request = NULL;
  if (c->isSend || n != 1 || sizes[0] < 0 || !inRegion(mhandles[0], data[0], (size_t)sizes[0])) return ncclInvalidArgument;
  if (((Mr*)mhandles[0])->type != kPtrCuda) return ncclSuccess; /* host memory: nothing to flush */
  if (c->flush.used) return ncclInvalidArgument;                  /* one at a time, as chorus's proxy posts them */
  if (!said) say(kLogInfo, __LINE__, "iflush of GPU memory"), said = 1;
  memset(&c->flush, 0, sizeof(c->flush));
  c->flush.comm = c;
  c->flush.used = 1;
  c->flush.done = 1;
  c->flush.length = (size_t)sizes[0];
  *request = &c->flush;
  return ncclSuccess;
}

__attribute__((visibility("default"))) void chorusTestNetFailStaleReceives(int ms) {
  __atomic_store_n(&gStaleMs, ms, __ATOMIC_RELAXED);
  __atomic_store_n(&gStaleArmedMs, nowMs(), __ATOMIC_RELEASE);
}

/* Whether receive r is the first to have waited chorusTestNetFailStaleReceives's ms since it was armed. */
static int staleReceive(const Req* r) {
  const int64_t armed = __atomic_load_n(&gStaleArmedMs, __ATOMIC_ACQUIRE);
  if (armed == 0 || __atomic_load_n(&gStaleFired, __ATOMIC_RELAXED)) return 0;
  const int64_t since = r->postedMs > armed ? r->postedMs : armed;
  if (nowMs() - since < gStaleMs) return 0;
  return !__atomic_exchange_n(&gStaleFired, 1, __ATOMIC_ACQ_REL);
}

static ncclResult_t netTest(void* request, int* done, int* sizes) {
  Req* r = (Req*)request;
  *done = 0;
  const int slowS = takeHold(&gSlowTestS, r->comm->dev);
  if (slowS > 0) {
    say(kLogInfo, __LINE__, "test: held for %d s (CHORUS_TEST_NET_SLOW_TEST_S)", slowS);
    sleep((unsigned)slowS);
  }
  if (gFailTest > 0 && __atomic_add_fetch(&gTests, 1, __ATOMIC_RELAXED) == gFailTest) {
    r->comm->failed = 1;
    say(kLogWarn, __LINE__, "test: call %ld failed the connection (CHORUS_TEST_NET_FAIL=test:%ld)", gFailTest,
        gFailTest);
    return ncclSystemError;
  }
  progress(r->comm);
  if (!r->done && !r->comm->isSend && staleReceive(r)) {
    r->comm->failed = 1;
    say(kLogWarn, __LINE__, "test: a receive waited %d ms for its data (chorusTestNetFailStaleReceives)", gStaleMs);
    return ncclSystemError;
  }
  if (!r->done) return r->comm->failed ? ncclSystemError : ncclSuccess;
  *done = 1;
  if (sizes != NULL) *sizes = (int)r->length;
  r->used = 0;
  return ncclSuccess;
}

static ncclResult_t netClose(void* comm) {
  if (comm == NULL) return ncclSuccess;
  close(((Comm*)comm)->fd);
  free(comm);
  return ncclSuccess;
}

static ncclResult_t netCloseListen(void* listenComm) {
  if (listenComm == NULL) return ncclSuccess;
  close(((ListenComm*)listenComm)->fd);
  free(listenComm);
  return ncclSuccess;
}

/* ---- The exported table, in NET_LAYOUT's shape. ---- */

#if NET_LAYOUT >= 11
static int gCtxToken;
static ncclResult_t initV(void** ctx, uint64_t commId, CommConfig* config, Logger log, ProfilerCallback prof) {
  (void)commId, (void)config, (void)prof;
  *ctx = &gCtxToken;
  return netInitOnce(log, 1);
}
static ncclResult_t finalizeV(void* ctx) {
  if (!enterSetup("finalize")) return ncclInternalError;
  leaveSetup();
  return ctx == &gCtxToken ? ncclSuccess : ncclInvalidArgument;
}
#elif NET_LAYOUT == 10
static ncclResult_t initV(Logger log, ProfilerCallback prof) {
  (void)prof;
  return netInitOnce(log, 0);
}
#else
static ncclResult_t initV(Logger log) { return netInitOnce(log, 0); }
#endif

#if NET_LAYOUT >= 11
static ncclResult_t listenV(void* ctx, int dev, void* handle, void** listenComm) {
  if (ctx != &gCtxToken) return ncclInvalidArgument;
  return netListen(dev, handle, listenComm);
}
static ncclResult_t connectV(void* ctx, int dev, void* handle, void** sendComm, DevHandle** devComm) {
  (void)devComm;
  if (ctx != &gCtxToken) return ncclInvalidArgument;
  return netConnect(dev, handle, sendComm);
}
#elif NET_LAYOUT == 10
static ncclResult_t connectV(int dev, CommConfig* config, void* handle, void** sendComm, DevHandle** devComm) {
  (void)devComm;
  if (config == NULL) return ncclInvalidArgument; /* v10 always passes one */
  return netConnect(dev, handle, sendComm);
}
#elif NET_LAYOUT >= 7
static ncclResult_t connectV(int dev, void* handle, void** sendComm, DevHandle** devComm) {
  (void)devComm;
  return netConnect(dev, handle, sendComm);
}
#else
static ncclResult_t connectV(int dev, void* handle, void** sendComm) { return netConnect(dev, handle, sendComm); }
#endif
#if NET_LAYOUT < 11
#define listenV netListen
#endif

/* An int size (v6-v8 messages, v6-v7 registrations) must not be negative; a size_t cannot be. */
#if NET_LAYOUT >= 9
static int negativeMsg(MsgSize s) { return (void)s, 0; }
#else
static int negativeMsg(MsgSize s) { return s < 0; }
#endif
#if NET_LAYOUT >= 8
static int negativeMr(MrSize s) { return (void)s, 0; }
#else
static int negativeMr(MrSize s) { return s < 0; }
#endif

#if NET_LAYOUT >= 7
static ncclResult_t acceptV(void* listenComm, void** recvComm, DevHandle** devComm) {
  (void)devComm;
  return netAccept(listenComm, recvComm);
}
#else
#define acceptV netAccept
#endif

static ncclResult_t regMrV(void* comm, void* data, MrSize size, int type, void** mhandle) {
  if (negativeMr(size)) return ncclInvalidArgument;
  return netRegMr(comm, data, (size_t)size, type, mhandle);
}

#if NET_LAYOUT >= 10
static ncclResult_t isendV(void* comm, void* data, MsgSize size, int tag, void* mhandle, void* phandle,
                           void** request) {
  (void)tag, (void)phandle;
#else
static ncclResult_t isendV(void* comm, void* data, MsgSize size, int tag, void* mhandle, void** request) {
  (void)tag;
#endif
  if (negativeMsg(size)) return ncclInvalidArgument;
  return netIsend(comm, data, (size_t)size, mhandle, request);
}

#if NET_LAYOUT >= 10
static ncclResult_t irecvV(void* comm, int n, void** data, MsgSize* sizes, int* tags, void** mhandles, void** phandles,
                           void** request) {
  (void)tags, (void)phandles;
#else
static ncclResult_t irecvV(void* comm, int n, void** data, MsgSize* sizes, int* tags, void** mhandles, void** request) {
  (void)tags;
#endif
  if (n != 1 || negativeMsg(sizes[0])) return ncclInvalidArgument; /* maxRecvs is 1 */
  const size_t size = (size_t)sizes[0];
  return netIrecv(comm, n, data, &size, mhandles, request);
}

#define CONCAT2(a, b) a##b
#define CONCAT(a, b) CONCAT2(a, b)

__attribute__((visibility("default"))) Net CONCAT(ncclNetPlugin_v, NET_VERSION) = {
  .name = "ChorusTestNet",
  .init = initV,
  .devices = netDevices,
  .getProperties = netGetProperties,
  .listen = listenV,
  .connect = connectV,
  .accept = acceptV,
  .regMr = regMrV,
  .regMrDmaBuf = netRegMrDmaBuf,
  .deregMr = netDeregMr,
  .isend = isendV,
  .irecv = irecvV,
  .iflush = netIflush,
  .test = netTest,
  .closeSend = netClose,
  .closeRecv = netClose,
  .closeListen = netCloseListen,
#if NET_LAYOUT >= 9
  .makeVDevice = netMakeVDevice,
#endif
#if NET_LAYOUT >= 11
  .finalize = finalizeV,
  .setNetAttr = NULL,
#endif
};
