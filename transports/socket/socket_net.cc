// The socket net: the ncclNet_v11_t table socketNet() returns (transports/socket/socket_net.h has the design).
#include "transports/socket/socket_net.h"

#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>

#include "core/checks.h"
#include "core/debug.h"
#include "core/params.h"
#include "core/process.h"
#include "transports/net/net.h"

namespace chorus {

IntParam kSocketNThreads{"NCCL_SOCKET_NTHREADS", -2,
                         "Helper threads per socket-net connection (1-16). With NCCL_NSOCKS_PERTHREAD, a connection is "
                         "striped over NTHREADS x NSOCKS_PERTHREAD data sockets (at most 64); 1 x 1 sends everything "
                         "on one socket from the proxy thread, as does 0. -2: as NCCL picks it by the interface's PCI "
                         "vendor (2 on AWS's ENA, 4 on Google's gVNIC, else 0).",
                         "network"};
IntParam kSocketNsocksPerThread{"NCCL_NSOCKS_PERTHREAD", -2,
                                "Data sockets per helper thread of a socket-net connection (1-64; see "
                                "NCCL_SOCKET_NTHREADS). -2: as NCCL picks it by the interface's PCI vendor (8 on "
                                "AWS's ENA, else 1).",
                                "network"};
IntParam kSocketTwoWay{"CHORUS_SOCKET_TWO_WAY", 1,
                       "1: when a socket-net connection has one socket and its receiving end later connects back to "
                       "the sender's communicator, the new connection runs over the same socket, so that each "
                       "direction's ACKs ride on the other's data. 0: one socket each way, as NCCL's socket net.",
                       "network"};
IntParam kSocketDelayedAcks{
    "CHORUS_SOCKET_DELAYED_ACKS", 1,
    "1: a socket-net connection's receiving end lets the kernel hold its ACKs back (TCP_QUICKACK "
    "off), so a run of small messages is acknowledged every second segment instead of every "
    "one (connections are one-way: no reply carries the ACK). 0: the kernel's default.",
    "network"};

namespace socknet {

int dataSockets(int nThreads, int nPerThread, int* threads) {
  // As NCCL: no threads, or no sockets a thread, is no data socket.
  if (nThreads <= 0 || nPerThread <= 0) {
    *threads = 0;
    return 0;
  }
  int nt = std::min(nThreads, 16);
  int ns = std::min(std::max(nPerThread, 1), kMaxDataSocks);
  if (nt * ns > kMaxDataSocks) ns = kMaxDataSocks / nt;
  if (nt * ns == 1) {
    *threads = 0;
    return 0;
  }
  *threads = nt;
  return nt * ns;
}

const char* socketStriping(const std::string& vendor, int64_t nThreads, int64_t nPerThread, int* threadsOut,
                           int* perThreadOut) {
  // NCCL's choice for the NICs whose single TCP flow is capped below the NIC's speed.
  int autoThreads = 0, autoPerThread = 1;  // no helper thread: one socket
  const char* nic = nullptr;
  if (vendor == "0x1d0f") {
    autoThreads = 2, autoPerThread = 8, nic = "AWS ENA";
  } else if (vendor == "0x1ae0") {
    autoThreads = 4, autoPerThread = 1, nic = "Google gVNIC";
  }
  const bool used = nThreads == -2 || nPerThread == -2;
  *threadsOut = static_cast<int>(nThreads == -2 ? autoThreads : std::clamp<int64_t>(nThreads, 0, 1 << 20));
  *perThreadOut = static_cast<int>(nPerThread == -2 ? autoPerThread : std::clamp<int64_t>(nPerThread, 0, 1 << 20));
  return used ? nic : nullptr;
}

size_t chunkBytes(size_t size, int nData) {
  size_t even = (size + nData - 1) / static_cast<size_t>(nData);
  return std::max(kMinChunk, (even + 4095) / 4096 * 4096);
}

namespace {

/// The interfaces NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY select, one net device each, as found by the latest
/// init() (or the first devices() call). getProperties hands out their names, which stay valid for the process.
struct DeviceList {
  std::mutex mu;
  std::vector<Device> devs;     ///< empty until a probe finds an interface (a probe that finds none fails)
  std::set<std::string> names;  ///< every name and PCI path ever listed: the pointers getProperties gave stay valid
};

DeviceList& deviceList() {
  static DeviceList* l = new DeviceList;  // never destroyed: plugins and proxies may outlive static destruction
  return *l;
}

/// Looks up the interfaces again and makes them the process's device list; fails when there is none.
ncclResult_t probeDevices(std::vector<Device>* out) {
  std::vector<IfAddr> found;
  std::string why;
  if (findInterfaces(&found, kMaxDevices, &why) != ncclSuccess)
    CHORUS_FAIL(nullptr, ncclSystemError, "NET/Socket : no interface: %s", why.c_str());
  std::vector<Device> devs;
  for (const IfAddr& f : found) {
    Device d;
    d.name = f.name;
    d.addr = f.addr;
    std::ifstream in("/sys/class/net/" + f.name + "/speed");
    int speed = 0;
    if (in >> speed && speed > 0) d.speedMbps = speed;
    char buf[PATH_MAX];
    std::string dev = "/sys/class/net/" + f.name + "/device";
    if (::realpath(dev.c_str(), buf) != nullptr) d.pciPath = buf;
    std::ifstream vendor(dev + "/vendor");
    if (!(vendor >> d.vendor)) d.vendor.clear();
    devs.push_back(d);
  }
  DeviceList& l = deviceList();
  std::lock_guard<std::mutex> lock(l.mu);
  l.devs = devs;
  *out = std::move(devs);
  return ncclSuccess;
}

/// The data sockets and helper threads of a connection on device `dev` of context `x` (dataSockets); *nic names the
/// NIC whose automatic choice was taken, or is null.
int deviceDataSockets(const Context* x, int dev, int* threads, const char** nic = nullptr) {
  int nt = 1, ns = 1;
  const std::string& vendor = dev >= 0 && static_cast<size_t>(dev) < x->devs.size() ? x->devs[dev].vendor : "";
  const char* chosen = socketStriping(vendor, x->nThreads, x->nPerThread, &nt, &ns);
  if (nic != nullptr) *nic = chosen;
  return dataSockets(nt, ns, threads);
}

/// Records a comm's first failure; later ones are dropped (they follow from it).
void failComm(Comm* c, const std::string& why) {
  std::lock_guard<std::mutex> lock(c->whyMu);
  if (c->failed.load(std::memory_order_relaxed)) return;
  c->why = why;
  c->failed.store(true, std::memory_order_release);
}

ncclResult_t commError(Comm* c) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(c->whyMu);
    why = c->why;
  }
  setThreadLastError(("NET/Socket : " + why).c_str());
  return ncclRemoteError;
}

uint64_t newNonce() { return randomNonce(); }

// ---- helper threads (striped comms) ----

/// Wakes the proxy, if it registered a waker (NetProgressHooks::setWaker).
void wakeProxy(Comm* c) {
  if (c->ctx->wake != nullptr) c->ctx->wake(c->ctx->wakeArg);
}

void helperLoop(Comm* c, Helper* h) {
  pthread_setname_np(pthread_self(), "chorus-socknet");
  std::vector<pollfd> fds;
  std::vector<int> which;
  bool dead = false;
  while (!h->stop.load(std::memory_order_acquire)) {
    fds.assign(1, pollfd{h->wake.fd(), POLLIN, 0});
    which.clear();
    if (!dead) {
      std::lock_guard<std::mutex> lock(h->mu);
      for (size_t k = 0; k < h->socks.size(); k++) {
        if (h->queues[k].empty()) continue;
        fds.push_back(pollfd{c->data[h->socks[k]].fd(), static_cast<short>(c->isSend ? POLLOUT : POLLIN), 0});
        which.push_back(static_cast<int>(k));
      }
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) {
      failComm(c, std::string("poll failed in a helper thread: ") + strerror(errno));
      dead = true;
    }
    if (fds[0].revents != 0) h->wake.drain();
    for (size_t i = 1; i < fds.size() && !dead; i++) {
      if (fds[i].revents == 0) continue;
      const int k = which[i - 1];
      Socket& s = c->data[h->socks[k]];
      for (;;) {
        Task* t = nullptr;
        {
          std::lock_guard<std::mutex> lock(h->mu);
          if (h->queues[k].empty()) break;
          t = &h->queues[k].front();  // deque pushes keep references valid
        }
        IoResult io = c->isSend ? s.sendSome(t->data, t->size, &t->done) : s.recvSome(t->data, t->size, &t->done);
        if (!io.ok()) {
          failComm(c, io.what);
          dead = true;
          wakeProxy(c);
          break;
        }
        if (t->done < t->size) break;
        Request* r = t->req;
        // Read before this chunk counts: once the last one does, the proxy may complete the request and reuse it.
        const int nChunks = r->nChunks;
        {
          std::lock_guard<std::mutex> lock(h->mu);
          h->queues[k].pop_front();
        }
        if (r->chunksDone.fetch_add(1, std::memory_order_acq_rel) + 1 == nChunks) wakeProxy(c);
      }
    }
  }
}

ncclResult_t startHelpers(Comm* c) {
  if (c->data.empty()) return ncclSuccess;
  // The receiver's settings fix the data sockets (they travel in the handle); how many helpers move them is this
  // end's own setting, so a sender set to 1 x 1 still gets one.
  int threads = 0;
  deviceDataSockets(c->ctx, c->dev, &threads);
  threads = std::min(std::max(threads, 1), static_cast<int>(c->data.size()));
  for (int t = 0; t < threads; t++) {
    auto h = std::make_unique<Helper>();
    if (!h->wake.open()) CHORUS_FAIL(nullptr, ncclSystemError, "NET/Socket : eventfd failed: %s", strerror(errno));
    for (size_t k = t; k < c->data.size(); k += threads) h->socks.push_back(static_cast<int>(k));
    h->queues.resize(h->socks.size());
    c->helpers.push_back(std::move(h));
  }
  for (auto& h : c->helpers) h->thread = std::thread(helperLoop, c, h.get());
  return ncclSuccess;
}

/// Whether every chunk queued on a comm's helpers has been moved.
bool helpersIdle(Comm* c) {
  for (auto& h : c->helpers) {
    std::lock_guard<std::mutex> lock(h->mu);
    for (auto& q : h->queues)
      if (!q.empty()) return false;
  }
  return true;
}

void stopHelpers(Comm* c) {
  // A send comm closed right after its last isend (a failure notice before an abort, say) still delivers the
  // chunks its helpers hold, as a single socket's kernel buffer would: bounded, and not past a failure.
  auto until = std::chrono::steady_clock::now() + kCloseFlush;
  while (c->isSend && !c->helpers.empty() && !c->failed.load(std::memory_order_acquire) && !helpersIdle(c) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  for (auto& h : c->helpers) {
    h->stop.store(true, std::memory_order_release);
    h->wake.wake();
  }
  for (auto& h : c->helpers)
    if (h->thread.joinable()) h->thread.join();
  c->helpers.clear();
}

/// Whether request r's payload travels on the control socket after its header: always without data sockets, and for
/// small messages (at most kInlineBytes; a receive knows once its header came), which a chunk's hand-off to a helper
/// would cost more than it saves.
bool inlined(const Comm* c, const Request* r) { return c->data.empty() || r->size <= kInlineBytes; }

/// Queues request r's chunks on the data sockets, in order (both ends call this in message order).
void queueChunks(Comm* c, Request* r) {
  const int nData = static_cast<int>(c->data.size());
  const int threads = static_cast<int>(c->helpers.size());
  const size_t chunk = chunkBytes(r->size, nData);
  r->nChunks = r->size == 0 ? 0 : static_cast<int>((r->size + chunk - 1) / chunk);
  r->chunksDone.store(0, std::memory_order_relaxed);
  uint64_t touched = 0;  // helpers to signal (threads <= 16)
  for (int j = 0; j < r->nChunks; j++) {
    const int sock = static_cast<int>(c->nextSock++ % nData);
    Helper* h = c->helpers[sock % threads].get();
    size_t off = j * chunk;
    std::lock_guard<std::mutex> lock(h->mu);
    h->queues[sock / threads].push_back(Task{r, r->data + off, std::min(chunk, r->size - off), 0});
    touched |= 1ull << (sock % threads);
  }
  for (int t = 0; t < threads; t++)
    if ((touched >> t) & 1) c->helpers[t]->wake.wake();
}

/// Checks a receive's header once it arrived whole; queues its chunks when striped.
ncclResult_t headerArrived(Comm* c, Request* r) {
  if (r->hdr.magic != kMsgMagic) {
    failComm(c, "garbage on the connection from " + c->peer + " (not a message header)");
    return commError(c);
  }
  if (r->hdr.size > r->cap) {
    failComm(c, "a message of " + std::to_string(r->hdr.size) + " bytes from " + c->peer +
                    " is larger than the receive posted for it (" + std::to_string(r->cap) + " bytes)");
    return commError(c);
  }
  if (r->hdr.tag != r->tag) {
    failComm(c, "a message with tag " + std::to_string(r->hdr.tag) + " from " + c->peer +
                    " met a receive posted with tag " + std::to_string(r->tag));
    return commError(c);
  }
  r->size = r->hdr.size;
  if (!inlined(c, r)) queueChunks(c, r);
  r->hdrComplete = true;
  return ncclSuccess;
}

/// Send side: every queued request's header (and payload, inline) in one sendmsg, as far as the socket takes it.
ncclResult_t progressSend(Comm* c) {
  constexpr int kMaxIov = 64;
  for (;;) {
    iovec iov[kMaxIov];
    int n = 0;
    for (Request* r : c->queue) {
      if (n + 2 > kMaxIov) break;
      if (r->hdrDone < sizeof(MsgHeader))
        iov[n++] = {reinterpret_cast<char*>(&r->hdr) + r->hdrDone, sizeof(MsgHeader) - r->hdrDone};
      if (inlined(c, r) && r->payDone < r->size) iov[n++] = {r->data + r->payDone, r->size - r->payDone};
    }
    if (n == 0) return ncclSuccess;
    size_t moved = 0;
    IoResult io = c->ctrl->sendv(iov, n, &moved);
    if (!io.ok()) {
      failComm(c, io.what);
      return commError(c);
    }
    if (moved == 0) return ncclSuccess;
    for (Request* r : c->queue) {
      size_t h = std::min(moved, sizeof(MsgHeader) - r->hdrDone);
      r->hdrDone += h;
      moved -= h;
      if (r->hdrDone == sizeof(MsgHeader)) r->hdrComplete = true;
      if (inlined(c, r)) {
        size_t p = std::min(moved, r->size - r->payDone);
        r->payDone += p;
        moved -= p;
      }
      if (moved == 0) break;
    }
  }
}

/// Receive side: fills [dst, dst + need) as far as the control socket has bytes, first from the bytes an earlier
/// read left in the comm's stage; else, when *mayRead, with one recvmsg whose overflow - the next messages' headers
/// and small payloads, which follow on the stream - lands in the stage. So a FIFO slot (its header's message and its
/// payload's, sent in one sendmsg) is usually read with one recvmsg. A read that comes back short of what it could
/// take emptied the socket: it clears *mayRead, so that the caller's next request does not read again at once, a
/// system call that would find nothing (its bytes come with a later progress). *got: the bytes placed at dst (0:
/// none there yet).
IoResult ctrlRead(Comm* c, char* dst, size_t need, size_t* got, bool* mayRead) {
  *got = 0;
  if (c->stageBeg < c->stageEnd) {
    *got = std::min(need, c->stageEnd - c->stageBeg);
    std::memcpy(dst, c->stage.get() + c->stageBeg, *got);
    c->stageBeg += *got;
    return IoResult();
  }
  c->stageBeg = c->stageEnd = 0;
  if (!*mayRead) return IoResult();
  iovec iov[2] = {{dst, need}, {c->stage.get(), kStageBytes}};
  size_t moved = 0;
  IoResult io = c->ctrl->recvv(iov, 2, &moved);
  if (!io.ok()) return io;
  if (moved > 0 && c->ctx->delayAcks && c->dataReads++ % kDelayAcksEvery == 0) c->ctrl->delayAcks();
  c->readEmptied = moved < need + kStageBytes;
  *mayRead = !c->readEmptied;
  *got = std::min(moved, need);
  c->stageEnd = moved - *got;
  return io;
}

/// Receive side, in request order: a header, then its payload (inline), each through ctrlRead; at most one read
/// that empties the socket.
ncclResult_t progressRecv(Comm* c) {
  bool mayRead = true;
  for (Request* r : c->queue) {
    if (!r->hdrComplete) {
      if (c->ctrlClosed) return ncclSuccess;
      while (r->hdrDone < sizeof(MsgHeader)) {
        size_t got = 0;
        IoResult io =
            ctrlRead(c, reinterpret_cast<char*>(&r->hdr) + r->hdrDone, sizeof(MsgHeader) - r->hdrDone, &got, &mayRead);
        if (io.status == IoStatus::kEof && r->hdrDone == 0) {
          // The sender closed between messages: what it sent before still arrives on the data sockets.
          c->ctrlClosed = true;
          c->closedWhy = io.what;
          return ncclSuccess;
        }
        if (!io.ok()) {
          failComm(c, io.what + " (within a message header)");
          return commError(c);
        }
        if (got == 0) return ncclSuccess;
        r->hdrDone += got;
      }
      CHORUS_CHECK(headerArrived(c, r));
    }
    if (!inlined(c, r)) continue;
    while (r->payDone < r->size) {
      size_t got = 0;
      IoResult io = ctrlRead(c, r->data + r->payDone, r->size - r->payDone, &got, &mayRead);
      if (!io.ok()) {
        failComm(c, io.what + " (within a message of " + std::to_string(r->size) + " bytes)");
        return commError(c);
      }
      if (got == 0) return ncclSuccess;
      r->payDone += got;
    }
  }
  return ncclSuccess;
}

/// Moves what the control socket can take or give now, in request order.
ncclResult_t progress(Comm* c) {
  if (c->failed.load(std::memory_order_acquire)) return commError(c);
  return c->isSend ? progressSend(c) : progressRecv(c);
}

/// Whether request r still has bytes to move on the control socket.
bool ctrlPending(const Comm* c, const Request* r) { return !r->hdrComplete || (inlined(c, r) && r->payDone < r->size); }

Request* takeRequest(Comm* c) {
  for (Request& r : c->reqs) {
    if (r.used) continue;
    r.used = true;
    r.comm = c;
    r.hdrDone = 0;
    r.hdrComplete = false;
    r.payDone = 0;
    r.nChunks = 0;
    r.chunksDone.store(0, std::memory_order_relaxed);
    c->queue.push_back(&r);
    return &r;
  }
  return nullptr;
}

void releaseRequest(Request* r) {
  Comm* c = r->comm;
  for (auto it = c->queue.begin(); it != c->queue.end(); ++it) {
    if (*it == r) {
      c->queue.erase(it);
      break;
    }
  }
  r->used = false;
}

ncclResult_t startComm(Comm* c);

/// Finishes a connection's sockets into a comm: control first, data after; starts its helpers.
ncclResult_t openComm(Comm* c, std::vector<Socket>* socks) {
  c->ctrl = std::make_shared<Socket>(std::move((*socks)[0]));
  for (size_t i = 1; i < socks->size(); i++) c->data.push_back(std::move((*socks)[i]));
  socks->clear();
  return startComm(c);
}

/// Whether a connection of x to or from context `peerCtx` may come to carry both directions: one socket (`nData`
/// 0), and both contexts share sockets (CHORUS_SOCKET_TWO_WAY).
bool mayShare(const Context* x, uint32_t nData, uint64_t peerCtx) { return nData == 0 && peerCtx != 0 && x->id != 0; }

/// An open receive comm of x whose one socket came from context `peerCtx` and may carry the other direction too.
Comm* reversibleFrom(Context* x, uint64_t peerCtx) {
  for (Comm* r : x->comms) {
    if (!r->isSend && r->reversible && r->peerCtx == peerCtx && !r->ctrlClosed &&
        !r->failed.load(std::memory_order_acquire))
      return r;
  }
  return nullptr;
}

/// Makes c the other direction of `r`'s socket.
ncclResult_t openPaired(Comm* c, Comm* r) {
  c->ctrl = r->ctrl;
  c->partner = r;
  r->partner = c;
  c->reversible = r->reversible = false;
  return startComm(c);
}

/// The rest of opening a comm once its control socket is set: its stage, its helpers, its place in the context.
ncclResult_t startComm(Comm* c) {
  c->peer = c->ctrl->peer().str();
  if (!c->isSend) c->stage.reset(new char[kStageBytes]);
  CHORUS_CHECK(startHelpers(c));
  c->ctx->comms.push_back(c);
  return ncclSuccess;
}

void destroyComm(Comm* c) {
  stopHelpers(c);
  if (c->partner != nullptr) {
    // The other direction goes on over the socket: end this one only. A send comm's end is what its peer reads as the
    // sender's close, after everything it sent.
    if (c->isSend) c->ctrl->shutdownWrite();
    c->partner->partner = nullptr;
  }
  for (Comm* k : c->ctx->connecting) {
    if (k->claim == c) k->claim = nullptr;  // that connect() fails: the socket it was to share is gone
  }
  auto& v = c->ctx->comms;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (*it == c) {
      v.erase(it);
      break;
    }
  }
  delete c;
}

// ---- the table ----

ncclResult_t init(void** ctx, uint64_t, ncclNetCommConfig_v11_t*, ncclDebugLogger_t, ncclProfilerCallback_t) {
  auto c = std::make_unique<Context>();
  CHORUS_CHECK(probeDevices(&c->devs));
  c->nThreads = kSocketNThreads.get();
  c->nPerThread = kSocketNsocksPerThread.get();
  c->delayAcks = kSocketDelayedAcks.get() != 0;
  c->id = kSocketTwoWay.get() != 0 ? newNonce() | 1 : 0;
  std::string ifs;
  bool oneSocket = true;
  for (size_t i = 0; i < c->devs.size(); i++) {
    const Device& d = c->devs[i];
    int threads = 0;
    const char* nic = nullptr;
    const int nData = deviceDataSockets(c.get(), static_cast<int>(i), &threads, &nic);
    ifs += (ifs.empty() ? "" : ", ") + d.name + " (" + d.addr.hostStr();
    if (nData > 0) {
      ifs += ", each connection striped over " + std::to_string(nData) + " data sockets, " + std::to_string(threads) +
             " helper thread(s)" + (nic != nullptr ? std::string(" as NCCL sets them for ") + nic : "");
    }
    ifs += ")";
    oneSocket = oneSocket && nData == 0;
  }
  INFO(kNet | kInit, "NET/Socket : %s %s%s", c->devs.size() == 1 ? "interface" : "interfaces", ifs.c_str(),
       oneSocket ? "; one socket per connection (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = 1)" : "");
  *ctx = c.release();
  return ncclSuccess;
}

ncclResult_t devices(int* ndev) {
  DeviceList& l = deviceList();
  {
    std::lock_guard<std::mutex> lock(l.mu);
    *ndev = static_cast<int>(l.devs.size());
  }
  std::vector<Device> devs;
  if (*ndev == 0 && probeDevices(&devs) == ncclSuccess) *ndev = static_cast<int>(devs.size());
  return ncclSuccess;
}

/// Fails unless `dev` is one of the `n` devices.
ncclResult_t checkDevice(int dev, size_t n) {
  if (dev < 0 || static_cast<size_t>(dev) >= n)
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/Socket : no device %d (%zu interfaces)", dev, n);
  return ncclSuccess;
}

ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) {
  int ndev = 0;
  CHORUS_CHECK(devices(&ndev));
  DeviceList& l = deviceList();
  std::lock_guard<std::mutex> lock(l.mu);
  CHORUS_CHECK(checkDevice(dev, l.devs.size()));
  const Device& d = l.devs[dev];
  *props = ncclNetProperties_v11_t{};
  props->name = const_cast<char*>(l.names.insert(d.name).first->c_str());
  props->pciPath = d.pciPath.empty() ? nullptr : const_cast<char*>(l.names.insert(d.pciPath).first->c_str());
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 1;  // registration is a no-op: any comm may use any handle
  props->speed = d.speedMbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = static_cast<size_t>(INT_MAX);
  props->maxCollBytes = static_cast<size_t>(INT_MAX);
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
  Context* x = static_cast<Context*>(ctx);
  *listenComm = nullptr;
  CHORUS_CHECK(checkDevice(dev, x->devs.size()));
  auto l = std::make_unique<ListenComm>();
  l->ctx = x;
  IoResult io = Socket::listen(x->devs[dev].addr, &l->sock);
  if (!io.ok()) CHORUS_FAIL(nullptr, ncclSystemError, "NET/Socket : %s", io.what.c_str());
  int threads = 0;
  l->dev = dev;
  l->nData = static_cast<uint32_t>(deviceDataSockets(x, dev, &threads));
  l->nonce = newNonce();
  l->have.resize(1 + l->nData);
  Handle h;
  h.magic = kHandleMagic;
  h.nData = l->nData;
  h.nonce = l->nonce;
  h.addr = packAddr(l->sock.local());
  h.ctxId = x->id;
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(handle, &h, sizeof(h));
  *listenComm = l.release();
  return ncclSuccess;
}

ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** devComm) {
  Context* x = static_cast<Context*>(ctx);
  *sendComm = nullptr;
  if (devComm != nullptr) *devComm = nullptr;
  Handle h;
  std::memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic) CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/Socket : not a socket-net handle");
  // The connection goes wherever the kernel routes the listener's address (the device that listener chose); the
  // sending device only has to exist, as in NCCL's socket net.
  CHORUS_CHECK(checkDevice(dev, x->devs.size()));
  Comm* c = reinterpret_cast<Comm*>(static_cast<uintptr_t>(h.pending));
  auto forget = [&]() {
    auto& v = x->connecting;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == c) {
        v.erase(it);
        break;
      }
    }
  };
  auto drop = [&](const std::string& why) {
    forget();
    delete c;
    h.pending = 0;
    std::memcpy(handle, &h, sizeof(h));
    setThreadLastError(("NET/Socket : " + why).c_str());
    return ncclRemoteError;
  };
  if (c == nullptr) {
    SockAddr to;
    if (!unpackAddr(h.addr, &to) || h.nData > static_cast<uint32_t>(kMaxDataSocks))
      CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/Socket : malformed handle");
    c = new Comm;
    c->ctx = x;
    c->dev = dev;
    c->isSend = true;
    c->reversible = mayShare(x, h.nData, h.ctxId);
    // A one-socket connection from the listener's context that this one accepted carries this direction too.
    Comm* r = c->reversible ? reversibleFrom(x, h.ctxId) : nullptr;
    if (r != nullptr) {
      r->reversible = false;  // claimed
      c->reversible = false;
      c->claim = r;
      c->sharing = true;
      c->revOut.nonce = h.nonce;
      h.pending = reinterpret_cast<uintptr_t>(c);
      std::memcpy(handle, &h, sizeof(h));
      x->connecting.push_back(c);
    }
  }
  if (c->sharing) {
    if (c->claim == nullptr) return drop("the connection this one was to share was closed");
    IoResult io = c->claim->ctrl->sendSome(&c->revOut, sizeof(ReverseHello), &c->revOutDone);
    if (!io.ok()) return drop(io.what);
    if (c->revOutDone < sizeof(ReverseHello)) return ncclSuccess;
    forget();
    h.pending = 0;
    std::memcpy(handle, &h, sizeof(h));
    Comm* r = c->claim;
    c->claim = nullptr;
    INFO(kNet, "NET/Socket : connection to %s runs over the socket of the one from it", r->peer.c_str());
    ncclResult_t rc = openPaired(c, r);
    if (rc != ncclSuccess) {
      destroyComm(c);
      return rc;
    }
    *sendComm = c;
    return ncclSuccess;
  }
  if (c->connecting.empty()) {
    SockAddr to;
    unpackAddr(h.addr, &to);  // checked above
    const size_t n = 1 + h.nData;
    c->connecting.resize(n);
    c->helloDone.assign(n, 0);
    c->hellos.resize(n);
    for (size_t i = 0; i < n; i++) {
      IoResult io = Socket::startConnect(to, &c->connecting[i]);
      if (!io.ok()) return drop(io.what);
      c->hellos[i].nonce = h.nonce;
      c->hellos[i].index = static_cast<uint32_t>(i);
      c->hellos[i].nData = h.nData;
      c->hellos[i].ctxId = x->id;
    }
    h.pending = reinterpret_cast<uintptr_t>(c);
    std::memcpy(handle, &h, sizeof(h));
    x->connecting.push_back(c);
  }
  bool all = true;
  for (size_t i = 0; i < c->connecting.size(); i++) {
    if (c->helloDone[i] == sizeof(Hello)) continue;
    if (c->helloDone[i] == 0) {
      bool up = false;
      IoResult io = c->connecting[i].connected(&up);
      if (!io.ok()) return drop(io.what);
      if (!up) {
        all = false;
        continue;
      }
    }
    IoResult io = c->connecting[i].sendSome(&c->hellos[i], sizeof(Hello), &c->helloDone[i]);
    if (!io.ok()) return drop(io.what);
    if (c->helloDone[i] < sizeof(Hello)) all = false;
  }
  if (!all) return ncclSuccess;
  forget();
  h.pending = 0;
  std::memcpy(handle, &h, sizeof(h));
  ncclResult_t rc = openComm(c, &c->connecting);
  if (rc != ncclSuccess) {
    destroyComm(c);
    return rc;
  }
  *sendComm = c;
  return ncclSuccess;
}

/// Reads the reverse hellos that have come on x's send sockets that may carry the other direction: one poll of them
/// all, then a read of each that has bytes. A hello for a listen stays with its socket until that listen's accept().
void readReverseHellos(Context* x) {
  std::vector<Comm*> comms;
  std::vector<pollfd> fds;
  for (Comm* s : x->comms) {
    if (!s->isSend || !s->reversible || s->revInGot == sizeof(ReverseHello) ||
        s->failed.load(std::memory_order_acquire))
      continue;
    comms.push_back(s);
    fds.push_back(pollfd{s->ctrl->fd(), POLLIN, 0});
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t i = 0; i < fds.size(); i++) {
    if (fds[i].revents == 0) continue;
    Comm* s = comms[i];
    IoResult io = s->ctrl->recvSome(&s->revIn, sizeof(ReverseHello), &s->revInGot);
    if (!io.ok()) {  // the peer closed its end, or the link failed: the send comm finds out when it sends
      s->reversible = false;
    } else if (s->revInGot == sizeof(ReverseHello) && s->revIn.magic != kReverseMagic) {
      WARN("NET/Socket : unexpected bytes from %s on a connection to it; it stays one-way", s->peer.c_str());
      s->reversible = false;
    }
  }
}

/// The send comm of l's context over whose socket the peer has opened l's connection (its reverse hello names l), or
/// null. The sockets are read at most every kReverseScan: a rank accepting many connections at once (an all-to-all)
/// polls its send sockets once, not once for each listen.
Comm* reversedTo(ListenComm* l) {
  Context* x = l->ctx;
  if (x->id == 0) return nullptr;
  const auto now = std::chrono::steady_clock::now();
  if (now >= x->revScanAt) {
    x->revScanAt = now + kReverseScan;
    readReverseHellos(x);
  }
  for (Comm* s : x->comms) {
    if (s->isSend && s->reversible && s->revInGot == sizeof(ReverseHello) && s->revIn.nonce == l->nonce) return s;
  }
  return nullptr;
}

ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** devComm) {
  ListenComm* l = static_cast<ListenComm*>(listenComm);
  *recvComm = nullptr;
  if (devComm != nullptr) *devComm = nullptr;
  for (;;) {
    PendingSock p;
    IoResult io = l->sock.tryAccept(&p.sock);
    if (!io.ok()) CHORUS_FAIL(nullptr, ncclSystemError, "NET/Socket : %s", io.what.c_str());
    if (!p.sock.valid()) break;
    l->pending.push_back(std::move(p));
  }
  for (size_t i = 0; i < l->pending.size();) {
    PendingSock& p = l->pending[i];
    IoResult io = p.sock.recvSome(&p.hello, sizeof(Hello), &p.got);
    bool drop = !io.ok();
    if (drop) INFO(kNet, "NET/Socket : dropped a connection before its hello: %s", io.what.c_str());
    if (!drop && p.got == sizeof(Hello)) {
      const Hello& hh = p.hello;
      if (hh.magic != kHelloMagic || hh.nonce != l->nonce || hh.nData != l->nData || hh.index > l->nData ||
          l->have[hh.index].valid()) {
        WARN("NET/Socket : refused a connection from %s on %s: not a chorus socket-net hello for this connection",
             p.sock.peer().str().c_str(), l->sock.local().str().c_str());
        drop = true;
      } else {
        l->have[hh.index] = std::move(p.sock);
        l->nHave++;
        if (hh.index == 0) l->ctrlCtx = hh.ctxId;
        drop = true;  // taken: remove from pending
      }
    }
    if (drop) {
      l->pending.erase(l->pending.begin() + i);
      continue;
    }
    i++;
  }
  if (Comm* s = reversedTo(l)) {  // a peer we connected to came back over that socket
    auto c = std::make_unique<Comm>();
    c->ctx = l->ctx;
    c->dev = l->dev;
    c->isSend = false;
    CHORUS_CHECK(openPaired(c.get(), s));
    *recvComm = c.release();
    return ncclSuccess;
  }
  if (l->nHave < static_cast<int>(l->have.size())) return ncclSuccess;
  auto c = std::make_unique<Comm>();
  c->ctx = l->ctx;
  c->dev = l->dev;
  c->isSend = false;
  c->peerCtx = l->ctrlCtx;
  c->reversible = mayShare(l->ctx, l->nData, l->ctrlCtx);
  l->nHave = 0;
  std::vector<Socket> socks = std::move(l->have);
  l->have.clear();
  l->have.resize(1 + l->nData);
  CHORUS_CHECK(openComm(c.get(), &socks));
  *recvComm = c.release();
  return ncclSuccess;
}

ncclResult_t regMr(void*, void*, size_t, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != NCCL_PTR_HOST)
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/Socket : only host memory can be registered (type %d)", type);
  *mhandle = reinterpret_cast<void*>(static_cast<uintptr_t>(1));
  return ncclSuccess;
}

ncclResult_t regMrDmaBuf(void*, void*, size_t, int, uint64_t, int, void** mhandle) {
  *mhandle = nullptr;
  CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/Socket : dmabuf registration is not supported");
}

ncclResult_t deregMr(void*, void*) { return ncclSuccess; }

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void*, void*, void** request) {
  Comm* c = static_cast<Comm*>(sendComm);
  *request = nullptr;
  if (c->failed.load(std::memory_order_acquire)) return commError(c);
  Request* r = takeRequest(c);
  if (r == nullptr) return ncclSuccess;  // all busy: the caller tries again
  r->data = static_cast<char*>(data);
  r->size = size;
  r->cap = size;
  r->tag = tag;
  r->hdr = MsgHeader{size, tag, kMsgMagic};
  if (!inlined(c, r)) queueChunks(c, r);
  *request = r;
  // Moves what it can now (unless the proxy holds this comm's sends, holdSends); a failure it finds is the
  // request's, reported by test().
  if (!c->held) progress(c);
  return ncclSuccess;
}

ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void**, void**, void** request) {
  Comm* c = static_cast<Comm*>(recvComm);
  *request = nullptr;
  if (n != 1) CHORUS_FAIL(nullptr, ncclInvalidArgument, "NET/Socket : %d receives grouped (maxRecvs is 1)", n);
  if (c->failed.load(std::memory_order_acquire)) return commError(c);
  Request* r = takeRequest(c);
  if (r == nullptr) return ncclSuccess;
  r->data = static_cast<char*>(data[0]);
  r->cap = sizes[0];
  r->size = 0;
  r->tag = tags != nullptr ? tags[0] : 0;
  *request = r;
  // Data moves at test(): a receive is posted when its slot is freed, before any data for it can have come, and a
  // recvmsg here would find nothing.
  return ncclSuccess;
}

ncclResult_t iflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory only: nothing to flush
  return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes) {
  Request* r = static_cast<Request*>(request);
  Comm* c = r->comm;
  *done = 0;
  auto complete = [&]() {
    return r->hdrComplete &&
           (inlined(c, r) ? r->payDone == r->size : r->chunksDone.load(std::memory_order_acquire) == r->nChunks);
  };
  // A request that finished before the connection failed (a sender that closed after its last message) is done.
  if (!complete()) {
    ncclResult_t rc = progress(c);
    if (rc != ncclSuccess && !complete()) {
      releaseRequest(r);
      return rc;
    }
    if (!complete() && !r->hdrComplete && c->ctrlClosed) {
      releaseRequest(r);
      setThreadLastError(("NET/Socket : " + c->closedWhy).c_str());
      return ncclRemoteError;
    }
    if (!complete()) return ncclSuccess;
  }
  *done = 1;
  if (sizes != nullptr) *sizes = static_cast<int>(r->size);
  releaseRequest(r);
  return ncclSuccess;
}

ncclResult_t closeComm(void* comm) {
  if (comm != nullptr) destroyComm(static_cast<Comm*>(comm));
  return ncclSuccess;
}

ncclResult_t closeListen(void* listenComm) {
  delete static_cast<ListenComm*>(listenComm);
  return ncclSuccess;
}

ncclResult_t getDeviceMr(void*, void*, void** dptr) {
  *dptr = nullptr;
  return ncclSuccess;
}

ncclResult_t irecvConsumed(void*, int, void*) { return ncclSuccess; }

ncclResult_t makeVDevice(int*, ncclNetVDeviceProps_v11_t*) {
  CHORUS_FAIL(nullptr, ncclInvalidUsage, "NET/Socket : virtual devices are not supported");
}

ncclResult_t finalize(void* ctx) {
  Context* x = static_cast<Context*>(ctx);
  while (!x->comms.empty()) destroyComm(x->comms.back());
  for (Comm* c : x->connecting) delete c;  // connections the proxy gave up on before they were made
  delete x;
  return ncclSuccess;
}

ncclResult_t setNetAttr(void*, ncclNetAttr_v11_t*) { return ncclSuccess; }

int pollFds(void* ctx, pollfd* fds, int max) {
  Context* x = static_cast<Context*>(ctx);
  int n = 0;
  for (Comm* c : x->comms) {
    if (n == max) break;
    if (c->ctrlClosed || c->failed.load(std::memory_order_acquire)) continue;  // test() reports these at once
    bool want = false;
    for (const Request* r : c->queue) want |= ctrlPending(c, r);
    if (want) fds[n++] = pollfd{c->ctrl->fd(), static_cast<short>(c->isSend ? POLLOUT : POLLIN), 0};
  }
  return n;
}

void setWaker(void* ctx, void (*wake)(void*), void* arg) {
  Context* x = static_cast<Context*>(ctx);
  x->wake = wake;
  x->wakeArg = arg;
}

const ncclNet_v11_t kTable = {
    "Socket",    init,        devices,       getProperties, listen,   connect,    accept,    regMr,
    regMrDmaBuf, deregMr,     isend,         irecv,         iflush,   test,       closeComm, closeComm,
    closeListen, getDeviceMr, irecvConsumed, makeVDevice,   finalize, setNetAttr,
};

void holdSends(void* sendComm, int hold) {
  Comm* c = static_cast<Comm*>(sendComm);
  c->held = hold != 0;
  if (!c->held) progress(c);  // everything queued meanwhile, in one sendmsg; a failure is a request's, for test()
}

/// NetProgressHooks::shareWaitMs: a socket connects within a few milliseconds on a LAN.
int shareWaitMs(void* ctx) { return static_cast<Context*>(ctx)->id != 0 ? 10 : 0; }

/// NetProgressHooks::recvEmptied: the control socket's last read left it empty, and nothing read is left over.
int recvEmptied(void* recvComm) {
  const Comm* c = static_cast<const Comm*>(recvComm);
  return c->readEmptied && c->stageBeg == c->stageEnd ? 1 : 0;
}

const NetProgressHooks kHooks = {pollFds, setWaker, holdSends, shareWaitMs, nullptr, nullptr, recvEmptied};

}  // namespace
}  // namespace socknet

const ncclNet_v11_t* socketNet() { return &socknet::kTable; }
const NetProgressHooks* socketNetHooks() { return &socknet::kHooks; }

}  // namespace chorus
