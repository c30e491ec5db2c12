// The net proxy (see net_proxy.h): connection setup, the slot loops of both sides, failures, and the thread.
#include "transports/net/net_proxy.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "core/checks.h"
#include "core/debug.h"
#include "core/params.h"
#include "core/timeout.h"
#include "kernels/device_work.h"
#include "topo/affinity.h"
#include "topo/nic_choice.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

// How long a setup may wait before one INFO line says what it waits for (the executor's deadline decides failure).
constexpr double kSlowSetupS = 10.0;

IntParam kProxyBind{"CHORUS_PROXY_BIND", 1,
                    "1: each net proxy thread, and the socket net's helper threads it starts, runs on the CPUs the "
                    "host topology places near the NICs it drives (within the caller's affinity); 0: wherever the "
                    "thread that created the communicator may run.",
                    "transports"};

StrParam kProxyCpuset{"NCCL_PROXY_CPUSET", "",
                      "CPUs each net proxy thread, and the socket net's helper threads it starts, runs on, whatever "
                      "the affinity of the thread that created the communicator and CHORUS_PROXY_BIND, as in NCCL: a "
                      "comma-separated list (\"2,3\"; ranges such as \"2-5\" too). A list that does not parse or "
                      "names no CPU this process may use is ignored, with an INFO line. Unset: CHORUS_PROXY_BIND.",
                      "transports"};

IntParam kNetNearGpu{"CHORUS_NET_NEAR_GPU", 1,
                     "1: a rank's connections between hosts use the net devices the host topology places nearest its "
                     "GPU, as many as NCCL_NETDEVS_POLICY says (GPUs sharing those devices start at different ones; "
                     "channels take them in turn), as NCCL "
                     "picks a NIC by PCI distance; every device when the rank has no GPU or the topology places none "
                     "of them. 0: channel c uses device c mod ndev.",
                     "transports"};

IntParam kNetByAddress{"CHORUS_NET_SEND_BY_ADDRESS", 0,
                       "Host buffers, connections to other hosts over the socket net: 1: the proxy sends a slice "
                       "from the operation's own buffer, and the rank does not copy it into the FIFO first (an "
                       "operation then returns once the proxy has handed its data to the net); 0: always through the "
                       "FIFO. Other nets always take the FIFO. Off by default: on the 2-core test machine it moved "
                       "the copy onto the proxy thread, and allgather measured slower (docs/perf/net.md).",
                       "transports"};

IntParam kRankProgress{"CHORUS_NET_RANK_PROGRESS", 1,
                       "Host buffers, connections to other hosts over the socket or UCX net: 1: a rank's thread that "
                       "publishes a slot (data to send, or a slot it has read) hands it to the net at once itself, "
                       "where it can without waiting, so that a small message does not wait for the proxy thread "
                       "to be scheduled (4 hosts x 2 ranks on 2 cores: 11-15% faster at 8 B - 8 KB, "
                       "docs/perf/net.md); the proxy thread does the rest. 0: the proxy thread alone. IB and plugin "
                       "nets always take the proxy alone (their calls are not promised to be safe from another "
                       "thread).",
                       "transports"};

IntParam kSlotMessageMax{"CHORUS_NET_SLOT_MESSAGE_MAX_BYTES", 65536,
                         "UCX net: a FIFO slot whose payload is in host memory and at most this many bytes goes as "
                         "one message with its header, where it went as two (over UCX's tcp transport each message is "
                         "a send of its own, with its own segments and ACKs); larger payloads, and payloads in GPU "
                         "memory, follow their header as a message of their own. 0: always two. Receivers take "
                         "either, so ranks may differ. Other nets are not affected.",
                         "transports"};

/// Slot messages: the NCCL tag of a payload that follows its header as a message of its own (headers, and headers
/// with their payload, go with tag 0).
constexpr int kApartTag = 1;

/// A FIFO slot's gap over a net whose slots carry their header after the payload (NetConn::trailer): room for the
/// header, and slots that stay 64-byte aligned.
constexpr uint32_t kTrailerGap = 64;
static_assert(sizeof(SlotHeader) <= kTrailerGap, "a slot header fits in the gap");

/// Slot messages into GPU memory: where slot `slot`'s payload lands when it comes with its header (NetConn::bounce);
/// null where the connection has no bounce.
char* bounceSlot(const NetConn& c, uint32_t slot) {
  return c.bounce ? c.bounce.get() + static_cast<size_t>(slot) * c.fifo.geo.slotBytes : nullptr;
}

/// Posts the receive of slot `slot`'s payload as a message of its own, with `tag`, into the slot itself: through the
/// registration of the slots' GPU memory where the connection has one (GPUDirect RDMA), else the FIFO's. *req stays
/// null where the net cannot take it now.
ncclResult_t irecvPayload(const ncclNet_v11_t* n, NetConn& c, uint32_t slot, int tag, void** req) {
  void* data = c.fifo.slotData(slot);
  size_t bytes = c.fifo.geo.slotBytes;
  return n->irecv(c.comm, 1, &data, &bytes, &tag, c.dataMhandle != nullptr ? &c.dataMhandle : &c.mhandle, nullptr,
                  req);
}

}  // namespace

bool NetProxy::sendsByAddress() const { return net_.sendsUnregistered && kNetByAddress.get() != 0; }

void NetProxy::chooseDevices() {
  deviceNames_.clear();
  ptrSupport_.clear();
  forceFlush_.clear();
  for (int d : net_.devs) {
    ncclNetProperties_v11_t props{};
    if (net_.api->getProperties(d, &props) != ncclSuccess) props = ncclNetProperties_v11_t{};
    deviceNames_.emplace_back(props.name != nullptr ? props.name : "", props.pciPath != nullptr ? props.pciPath : "");
    ptrSupport_.push_back(props.ptrSupport);
    forceFlush_.push_back(props.forceFlush != 0);
  }
  const int64_t gpu = comm_->peers.empty() ? -1 : comm_->peers[rank_].busId;
  NicChoice choice = kNetNearGpu.get() != 0 ? chooseNics(processTopology(), gpu, deviceNames_)
                                            : chooseNics(HostTopology{}, -1, deviceNames_);
  if (kNetNearGpu.get() == 0) choice.why = "CHORUS_NET_NEAR_GPU=0";
  devices_ = choice.order;
  deviceClasses_.clear();
  for (size_t i = 0; i < devices_.size(); i++)
    deviceClasses_.push_back(choice.byTopology && i < choice.classes.size() && choice.classes[i] != PathClass::kNone
                                 ? static_cast<int>(choice.classes[i])
                                 : -1);
  if (devices_.empty()) devices_.push_back(0), deviceClasses_.push_back(-1);  // a net reports at least one device
  // A rank listens on a channel's device, and its peers connect to that device's address. Where some rank's net
  // offers fewer devices (a NIC down, an interface missing), its peers may not reach the others: every rank keeps
  // to as many devices as every rank has.
  if (static_cast<int>(devices_.size()) > net_.commonDevices) {
    devices_.resize(static_cast<size_t>(net_.commonDevices));  // at least 1 (createRemoteTransport)
    deviceClasses_.resize(devices_.size());
    choice.order = devices_;
    choice.why += std::string(choice.why.empty() ? "" : "; ") + "the first " + std::to_string(devices_.size()) +
                  ": some rank's net offers only " + std::to_string(net_.commonDevices);
  }
  if (net_.ndev() > 1 || choice.byTopology)
    INFO(kNet | kInit, "rank %d: %s devices by channel: %s (%s)", rank_, name(),
         describeNicChoice(choice, deviceNames_).c_str(), choice.why.c_str());
}

void NetProxy::bindThread() {
  if (const std::string set = kProxyCpuset.get(); !set.empty()) {
    std::string result;
    if (bindThreadTo(set, &result)) {
      INFO(kNet | kEnv, "rank %d: %s proxy on CPUs %s (NCCL_PROXY_CPUSET)", rank_, name(), result.c_str());
      return;
    }
    INFO(kNet | kEnv, "rank %d: NCCL_PROXY_CPUSET=%s ignored: %s", rank_, set.c_str(), result.c_str());
  }
  if (kProxyBind.get() == 0) return;
  std::vector<std::pair<std::string, std::string>> used;
  for (int d : devices_)
    if (d >= 0 && d < static_cast<int>(deviceNames_.size())) used.push_back(deviceNames_[static_cast<size_t>(d)]);
  const std::string cpus = cpusNearNics(processTopology(), used);
  if (cpus.empty()) return;  // the topology places none of them (virtual interfaces): nothing to be near
  std::string result;
  if (bindThreadNear(cpus, &result)) {
    INFO(kNet, "rank %d: %s proxy on CPUs %s, near its NICs", rank_, name(), result.c_str());
  } else {
    INFO(kNet, "rank %d: %s proxy left where it was: %s", rank_, name(), result.c_str());
  }
}

NetProxy::NetProxy(ncclComm* comm, NetChoice net)
    : comm_(comm),
      rank_(comm->rank),
      net_(std::move(net)),
      label_("net " + net_.name),
      rankProgress_(net_.anyThread && kRankProgress.get() != 0),
      slotMsgs_(net_.slotMessages()) {}

NetProxy::~NetProxy() {
  shutdown();
  for (auto* list : {&conns_, &newConns_})
    for (auto& c : *list) {
      std::free(c->mem);
      releaseRemoteData(std::move(c->data));
    }
}

size_t NetProxy::deviceSlot(int channel) const {
  const size_t n = std::max<size_t>(1, devices_.size());
  if (channel < kDeviceNetChannelBase) return static_cast<size_t>(channel) % n;
  const int c = channel - kDeviceNetChannelBase;  // devLaneChannel(channel, lane) = channel + lane x kDevMaxChannels
  return static_cast<size_t>(c % kDevMaxChannels + c / kDevMaxChannels) % n;
}

bool NetProxy::deviceInfo(int channel, RemoteDeviceInfo* out) const {
  if (devices_.empty() || channel < 0) return false;
  const size_t i = deviceSlot(channel);
  const int dev = devices_[i];
  if (dev < 0 || dev >= static_cast<int>(ptrSupport_.size())) return false;
  out->ptrSupport = ptrSupport_[static_cast<size_t>(dev)];
  out->forceFlush = forceFlush_[static_cast<size_t>(dev)];
  out->gpuDistance = i < deviceClasses_.size() ? deviceClasses_[i] : -1;
  out->name = deviceNames_[static_cast<size_t>(dev)].first;
  out->flushesGpuMemory = net_.flushesGpuMemory;
  return true;
}

ncclResult_t NetProxy::start() {
  chooseDevices();
  if (!wake_.open())
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: %s: eventfd failed: %s", rank_, name(), strerror(errno));
  if (net_.hooks != nullptr && net_.hooks->setWaker != nullptr)
    net_.hooks->setWaker(
        net_.ctx, [](void* w) { static_cast<ProxyWake*>(w)->kick(); }, &wake_);
  try {
    thread_ = std::thread([this]() { run(); });
  } catch (const std::system_error& e) {
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: %s: cannot start the proxy thread: %s", rank_, name(), e.what());
  }
  return ncclSuccess;
}

std::string NetProxy::connName(const NetConn& c) const {
  char buf[200];
  snprintf(buf, sizeof(buf), "rank %d: %s dev %d channel %d %s rank %d (%s)", rank_, name(), c.dev, c.channel,
           c.isSend ? "->" : "<-", c.peer, comm_->peers[c.peer].hostname);
  return buf;
}

// ---- executor side ----------------------------------------------------------------------------

ncclResult_t NetProxy::newConn(bool isSend, int channel, int peer, const FifoGeometry& geo, Fifo* out,
                               const RemoteData* data) {
  if (peer < 0 || peer >= comm_->nranks || peer == rank_) {
    if (data != nullptr) releaseRemoteData(RemoteData(*data));
    CHORUS_FAIL(comm_, ncclInternalError, "rank %d: %s: invalid peer %d", rank_, name(), peer);
  }
  const bool apart = data != nullptr && data->ptr != nullptr;
  // A host channel's slot over IB or a plugin goes as one message: its header follows the payload, in a gap after the
  // slot that no payload uses. (The device path's channels keep the geometry their kernels were given.)
  const bool trailer = net_.slotTrailer && !apart && channel < kDeviceNetChannelBase;
  FifoGeometry g = geo;
  if (trailer) g.slotGap = kTrailerGap;
  void* mem = allocRemoteFifo(g, apart);
  if (mem == nullptr) {
    if (data != nullptr) releaseRemoteData(RemoteData(*data));  // the transport owns it from the call on
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: %s: cannot allocate a %zu-byte FIFO for rank %d", rank_, name(),
                remoteHostBytes(g, apart), peer);
  }
  auto c = std::make_unique<NetConn>();
  c->isSend = isSend;
  c->trailer = trailer;
  c->channel = channel;
  c->peer = peer;
  // Each end picks its own device (a net connects any two of its devices); channels take this rank's in turn.
  c->dev = net_.devs[static_cast<size_t>(devices_[deviceSlot(channel)])];
  c->mem = mem;
  if (apart) c->data = *data;
  c->fifo.attach(mem, g, c->data.ptr);
  c->fifo.peer = peer;
  c->state = isSend ? NetConn::State::kAwaitHandle : NetConn::State::kListen;
  c->since = Clock::now();
  Fifo view;
  view.attach(mem, g, c->data.ptr);
  view.peer = peer;
  {
    std::lock_guard<std::mutex> lock(newMutex_);
    if (stop_.load(std::memory_order_acquire)) {
      std::free(mem);
      releaseRemoteData(std::move(c->data));
      CHORUS_FAIL(comm_, ncclInvalidUsage,
                  "rank %d: %s: connection %s rank %d requested after the transport was shut "
                  "down (the communicator failed or was aborted)",
                  rank_, name(), isSend ? "to" : "from", peer);
    }
    newConns_.push_back(std::move(c));
    haveNew_.store(true, std::memory_order_release);
  }
  wake_.wake();
  *out = view;
  return ncclSuccess;
}

ncclResult_t NetProxy::connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out, const RemoteData* data) {
  return newConn(true, channel, peer, geo, out, data);
}

ncclResult_t NetProxy::connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out, const RemoteData* data) {
  return newConn(false, channel, peer, geo, out, data);
}

void NetProxy::markFailedCalls(const uint64_t* calls) {
  if (failedWord_.load(std::memory_order_acquire) != 0) return;  // the first failure is the cause
  for (int i = 0; i < 7; i++) failedCalls_[i] = calls[i];
}

void NetProxy::markFailed(uint64_t word) {
  uint64_t zero = 0;
  failedWord_.compare_exchange_strong(zero, word, std::memory_order_acq_rel);
  wake_.wake();
}

void NetProxy::shutdown() {
  std::lock_guard<std::mutex> guard(shutdownMutex_);
  if (shutDown_) return;
  shutDown_ = true;
  {
    std::lock_guard<std::mutex> lock(newMutex_);
    stop_.store(true, std::memory_order_release);
  }
  if (wake_.fd() >= 0) wake_.wake();
  if (thread_.joinable()) thread_.join();  // the proxy first flushes what was published (NetProxy::run)
  // A rank's thread that took the lock before stop_ was set may still be stepping a connection (progress()): wait
  // for it. Any later one sees stop_ and leaves.
  std::lock_guard<std::mutex> pass(passMu_);
  for (auto& c : conns_) closeConn(*c);
  if (net_.api != nullptr && net_.api->finalize != nullptr && net_.ctx != nullptr) {
    std::lock_guard<std::mutex> setup(netSetupMutex());
    net_.api->finalize(net_.ctx);
  }
  net_.ctx = nullptr;
  INFO(kNet,
       "rank %d: %s shut down; the rank's thread moved data itself %llu times (CHORUS_NET_RANK_PROGRESS=%d), and drove "
       "the net through %llu calls while the proxy slept %llu times",
       rank_, name(), static_cast<unsigned long long>(rankMoves_.load(std::memory_order_relaxed)),
       rankProgress_ ? 1 : 0, static_cast<unsigned long long>(drivenOps_.load(std::memory_order_relaxed)),
       static_cast<unsigned long long>(asideSleeps_));
}

// ---- proxy thread: setup ----------------------------------------------------------------------

void NetProxy::adopt() {
  const size_t first = conns_.size();
  {
    std::lock_guard<std::mutex> lock(newMutex_);
    for (auto& c : newConns_) conns_.push_back(std::move(c));
    newConns_.clear();
    haveNew_.store(false, std::memory_order_relaxed);
  }
  // A peer that already reported a failure will not set this connection up: the executor, which opens connections
  // as its steps need them, would otherwise wait on it until its deadline.
  for (size_t i = first; i < conns_.size(); i++) {
    NetConn& c = *conns_[i];
    auto it = peerNotices_.find(c.peer);
    if (it == peerNotices_.end()) continue;
    const std::array<uint64_t, 8>& n = it->second;
    INFO(kNet, "%s: rank %d reported a failure before this connection was opened", connName(c).c_str(), c.peer);
    poisonPeerConn(c, n[0], n[7] != 0 ? n.data() + 1 : nullptr);
  }
}

// "its connection over net NAME (dev D, channel C, to rank P)": for a wait's error, which names the rank and host.
static std::string pendingName(const NetConn& c, const char* net) {
  char buf[160];
  snprintf(buf, sizeof(buf), "its connection over %s (dev %d, channel %d, %s rank %d)", net, c.dev, c.channel,
           c.isSend ? "to" : "from", c.peer);
  return buf;
}

// "<call> failed (<result>)", then what the net said of it (the thread's last error, which every net sets with its
// error), as each failed net call is reported: the communicator's error then carries the net's own words.
static std::string netCallFailed(const char* call, ncclResult_t rc) {
  std::string why = std::string(call) + " failed (" + ncclGetErrorString(rc) + ")";
  const char* said = threadLastError();
  if (said != nullptr && said[0] != '\0') why += std::string(": ") + said;
  return why;
}

void NetProxy::setupFailed(NetConn& c, const char* what, ncclResult_t rc) {
  // The net's own text says what the peer's failure notice cannot: which address or device did not answer (an
  // interface the peer's host cannot reach, a firewall). The communicator's error names the peer; this line, once a
  // connection, names the cause.
  const std::string why = netCallFailed(what, rc);
  // Once this rank failed or is closing, its peers close their ends too: a setup that then fails is not news.
  if (failedWord_.load(std::memory_order_acquire) == 0 && !stop_.load(std::memory_order_acquire))
    WARN("%s: %s", connName(c).c_str(), why.c_str());
  fail(c, why);
}

void NetProxy::fail(NetConn& c, const std::string& why) {
  const std::string text = connName(c) + ": " + why;
  INFO(kNet, "%s", text.c_str());
  {
    std::lock_guard<std::mutex> lock(failMu_);
    if (firstFailure_.empty()) firstFailure_ = text;
  }
  const bool open = c.state == NetConn::State::kOpen;
  closeConn(c);
  if (!open) c.setupFailed = true;
  c.state = NetConn::State::kSuspect;
  c.suspectUntil = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kSuspectS));
  c.nextLiveCheck = Clock::now();
}

// A net error says that the connection broke, not who failed: a peer that failed for another reason (a third rank
// died) closes its connections too. Its failure notice names the real culprit; without one, the peer is named: as
// dead when its process is gone, else as failed once kSuspectS passed.
bool NetProxy::judge(NetConn& c) {
  // A notice may be waiting: a peer that failed sends it before it exits, so it is read before the peer's death is.
  if (loadAcquire(&c.fifo.ctrl->poison) == 0) takeNotice(c.peer);
  if (loadAcquire(&c.fifo.ctrl->poison) != 0) {  // a notice (or this rank) already said why
    judged(c);
    return true;
  }
  const Clock::time_point now = Clock::now();
  std::string gone;
  bool dead = false;
  if (now >= c.nextLiveCheck) {
    c.nextLiveCheck = now + std::chrono::milliseconds(250);
    dead = comm_->bootstrap->peerGone(c.peer, &gone);
  }
  if (!dead && now < c.suspectUntil) return false;
  if (dead && takeNotice(c.peer)) {  // it sent its notice just before it went
    judged(c);
    return true;
  }
  INFO(kNet, "%s: %s", connName(c).c_str(), dead ? gone.c_str() : "no failure notice from the peer: naming it");
  recordSetupFailure(c);  // before the poison: a wait that sees the poison finds the record
  poisonFifo(c.fifo, makePoison(dead ? PoisonReason::kPeerDied : PoisonReason::kError, c.peer));
  judged(c);
  return true;
}

void NetProxy::recordSetupFailure(NetConn& c) {
  if (!c.setupFailed || setupFailedFifo_.load(std::memory_order_acquire) != nullptr) return;
  {
    std::lock_guard<std::mutex> lock(failMu_);
    setupFailedName_ = pendingName(c, name());
  }
  setupFailedFifo_.store(&c.fifo, std::memory_order_release);
}

void NetProxy::judged(NetConn& c) {
  c.state = NetConn::State::kFailed;
  recordSetupFailure(c);
  if (setupFailedFifo_.load(std::memory_order_acquire) != &c.fifo) return;
  // The device path's kernels wait on their FIFOs alone, where the host path's waits also ask failedSetup(): a lane or
  // channel of the launch that waits on another connection would wait for the deadline. Every other staging FIFO of
  // the rank takes the failed one's word, so that each of its kernels' waits ends with it (and this rank's failure
  // notice then tells its peers, as for a failed kernel).
  if (c.channel < kDeviceNetChannelBase) return;
  const uint64_t word = loadAcquire(&c.fifo.ctrl->poison);
  int culprit = -1;
  if (word == 0 || poisonReason(word, &culprit) != PoisonReason::kError) return;  // the net's failure, not a peer's
  for (auto& o : conns_)
    if (o.get() != &c && o->channel >= kDeviceNetChannelBase && loadAcquire(&o->fifo.ctrl->poison) == 0)
      poisonFifo(o->fifo, word);
}

const Fifo* NetProxy::failedSetup(std::string* conn) const {
  const Fifo* f = setupFailedFifo_.load(std::memory_order_acquire);
  if (f != nullptr) {
    std::lock_guard<std::mutex> lock(failMu_);
    *conn = setupFailedName_;
  }
  return f;
}

void NetProxy::poisonPeerConn(NetConn& c, uint64_t word, const uint64_t* calls) {
  poisonFifo(c.fifo, word, calls);
  closeConn(c);
  judged(c);  // a connection whose setup failed may take the peer's notice before its own verdict
}

void NetProxy::poisonPeer(int peer, uint64_t word, const uint64_t* calls) {
  std::array<uint64_t, 8> kept = {word};
  if (calls != nullptr) std::copy(calls, calls + 7, kept.begin() + 1);
  peerNotices_.emplace(peer, kept);  // the first notice is the cause
  // A connection with the peer that the net failed in its setup is the cause a wait names, whichever it waits on.
  for (auto& c : conns_)
    if (c->peer == peer && c->state != NetConn::State::kFailed) recordSetupFailure(*c);
  for (auto& c : conns_)
    if (c->peer == peer && c->state != NetConn::State::kFailed) poisonPeerConn(*c, word, calls);
}

bool NetProxy::exchangeNotices() {
  bool progress = false;
  const uint64_t mine = failedWord_.load(std::memory_order_acquire);
  if (mine != 0) {
    uint64_t notice[8] = {mine};
    for (int i = 0; i < 7; i++) notice[1 + i] = failedCalls_[i];
    // Once, to every rank this one has a connection with, however far its setup got: a peer blocked on this rank
    // learns the cause (the culprit) rather than only that the connection closed. Then every other rank: one may be
    // setting up a connection from this rank, which connects only when a step first sends to it (recursive doubling's
    // later rounds), and wait for data that will never come. Bounded, best effort.
    if (noticeSentTo_.empty()) noticeSentTo_.assign(comm_->nranks, false);
    auto tell = [&](int peer, const char* how) {
      if (peer == rank_ || noticeSentTo_[peer]) return;
      noticeSentTo_[peer] = true;
      std::string why;
      bool sent = comm_->bootstrap->sendQuiet(peer, kNetFailTag, notice, sizeof(notice), 0.5, &why, false);
      INFO(kNet, "rank %d: %s: failure notice to rank %d%s %s%s", rank_, name(), peer, how,
           sent ? "sent" : "not sent: ", sent ? "" : why.c_str());
      progress = true;
    };
    for (auto& c : conns_) tell(c->peer, "");
    for (int p = 0; p < comm_->nranks; p++) tell(p, " (no connection yet)");
  }
  const Clock::time_point now = Clock::now();
  if (now < nextNoticePoll_) return progress;
  nextNoticePoll_ = now + std::chrono::milliseconds(20);
  std::vector<bool> asked(comm_->nranks, false);
  for (auto& c : conns_) {
    if (c->state == NetConn::State::kFailed || asked[c->peer]) continue;
    asked[c->peer] = true;
    progress |= takeNotice(c->peer);
  }
  return progress;
}

bool NetProxy::takeNotice(int peer) {
  uint64_t notice[8] = {};
  bool got = false;
  std::string why;
  if (comm_->bootstrap->tryRecv(peer, kNetFailTag, notice, sizeof(notice), &got, &why) != ncclSuccess || !got)
    return false;
  const uint64_t word = notice[0];
  bool valid = poisonWordValid(word, comm_->nranks);
  int culprit = -1;
  bool calls = valid && poisonReason(word, &culprit) == PoisonReason::kMismatch && notice[7] != 0;
  INFO(kNet, "rank %d: %s: rank %d reports a failure%s", rank_, name(), peer, valid ? "" : " (malformed)");
  poisonPeer(peer, valid ? word : makePoison(PoisonReason::kError, peer), calls ? notice + 1 : nullptr);
  return true;
}

void NetProxy::closeConn(NetConn& c) {
  const ncclNet_v11_t* n = net_.api;
  if (c.mhandle != nullptr && c.comm != nullptr) n->deregMr(c.comm, c.mhandle);
  if (c.dataMhandle != nullptr && c.comm != nullptr) n->deregMr(c.comm, c.dataMhandle);
  c.mhandle = c.dataMhandle = nullptr;
  c.flushReq = nullptr;
  if (c.comm != nullptr) (c.isSend ? n->closeSend : n->closeRecv)(c.comm);
  c.comm = nullptr;
  if (c.listenComm != nullptr) n->closeListen(c.listenComm);
  c.listenComm = nullptr;
  // Requests of a closed comm are gone with it (the net frees them); forget them.
  for (auto& r : c.reqs) r[0] = r[1] = nullptr;
  c.noticeReq = nullptr;
  c.noticeBodyReq = nullptr;
}

std::chrono::milliseconds NetProxy::shareWait() const {
  const bool has = net_.hooks != nullptr && net_.hooks->shareWaitMs != nullptr;
  return std::chrono::milliseconds(has ? net_.hooks->shareWaitMs(net_.ctx) : 0);
}

bool NetProxy::awaitingFrom(int peer) const {
  if (shareWait().count() == 0) return false;
  // A receive connection from the peer that is not there yet counts: the executor opens connections as its steps
  // need them, so this rank's may come only after the peer has connected.
  for (const auto& r : conns_) {
    if (!r->isSend && r->peer == peer && r->state != NetConn::State::kListen && r->state != NetConn::State::kAccepting)
      return false;
  }
  return true;
}

bool NetProxy::setup(NetConn& c) {
  const ncclNet_v11_t* n = net_.api;
  const int tag = kNetHandleTag + c.channel;
  ncclNetDeviceHandle_v11_t* devHandle = nullptr;
  ncclResult_t rc = ncclSuccess;
  // A peer that is gone never completes the setup: look every half second, so that the executor's wait fails
  // naming it at once rather than at its deadline. (On this host a pid check; on another, one probe of its port.)
  const Clock::time_point now = Clock::now();
  if (now >= c.nextLiveCheck) {
    c.nextLiveCheck = now + std::chrono::milliseconds(500);
    std::string gone;
    if (comm_->bootstrap->peerGone(c.peer, &gone)) {
      fail(c, "setup cannot finish");
      return true;
    }
  }
  switch (c.state) {
    case NetConn::State::kListen:
      rc = n->listen(net_.ctx, c.dev, c.handle, &c.listenComm);
      if (rc != ncclSuccess) {
        fail(c, netCallFailed("listen", rc));
        return true;
      }
      // The handle goes to the sender over the bootstrap; a small write that does not wait for the peer to read.
      {
        std::string why;
        if (!comm_->bootstrap->sendQuiet(c.peer, tag, c.handle, sizeof(c.handle), Deadline::fromEnv().seconds(),
                                         &why)) {
          fail(c, "cannot send the connection handle over the bootstrap: " + why);
          return true;
        }
      }
      c.state = NetConn::State::kAccepting;
      return true;
    case NetConn::State::kAwaitHandle: {
      bool got = false;
      std::string why;
      rc = comm_->bootstrap->tryRecv(c.peer, tag, c.handle, sizeof(c.handle), &got, &why);
      if (rc != ncclSuccess) {
        fail(c, "cannot receive the connection handle over the bootstrap: " + why);
        return true;
      }
      if (!got) break;
      c.state = NetConn::State::kConnecting;
      c.shareUntil = Clock::now() + shareWait();
      return true;
    }
    case NetConn::State::kConnecting:
      // Where the net runs a pair's two directions over one connection, the lower rank connects first and the
      // higher shares that connection: it waits (briefly) until its receive connection from the peer is accepted.
      if (rank_ > c.peer && Clock::now() < c.shareUntil && awaitingFrom(c.peer)) break;
      rc = n->connect(net_.ctx, c.dev, c.handle, &c.comm, &devHandle);
      if (rc != ncclSuccess) {
        setupFailed(c, "connect", rc);
        return true;
      }
      break;
    case NetConn::State::kAccepting:
      rc = n->accept(c.listenComm, &c.comm, &devHandle);
      if (rc != ncclSuccess) {
        setupFailed(c, "accept", rc);
        return true;
      }
      break;
    default:
      return false;
  }
  if (c.comm == nullptr) {
    if (!c.slowWarned && Clock::now() - c.since > std::chrono::duration<double>(kSlowSetupS)) {
      c.slowWarned = true;
      INFO(kNet, "%s: still setting up after %.0f s (%s)", connName(c).c_str(), kSlowSetupS,
           c.state == NetConn::State::kAwaitHandle ? "the peer has not sent its handle: it has not reached this step"
                                                   : "the net has not completed the connection");
    }
    return false;
  }
  if (c.listenComm != nullptr) {
    n->closeListen(c.listenComm);
    c.listenComm = nullptr;
  }
  // One registration covers the FIFO: headers and payloads (and a failure notice, sent from a free header). With
  // GPUDirect RDMA the payloads are in GPU memory, registered apart.
  const bool apart = c.data.ptr != nullptr;
  rc = n->regMr(c.comm, c.mem, remoteHostBytes(c.fifo.geo, apart), NCCL_PTR_HOST, &c.mhandle);
  if (rc != ncclSuccess) {
    fail(c, netCallFailed("registering the FIFO memory (regMr)", rc));
    return true;
  }
  if (apart) {
    const size_t bytes = c.fifo.geo.slotStride() * c.fifo.geo.nSlots;  // as the device path allocated it
    if (c.data.dmaBufFd >= 0) {  // the net said it takes dma-bufs (NCCL_PTR_DMABUF), so it has regMrDmaBuf
      rc = n->regMrDmaBuf != nullptr ? n->regMrDmaBuf(c.comm, c.data.ptr, bytes, c.data.ptrType, c.data.dmaBufOffset,
                                                      c.data.dmaBufFd, &c.dataMhandle)
                                     : ncclInternalError;
      close(c.data.dmaBufFd);  // the registration holds the memory (as NCCL closes it after regMrDmaBuf)
      c.data.dmaBufFd = -1;
    } else {
      rc = n->regMr(c.comm, c.data.ptr, bytes, c.data.ptrType, &c.dataMhandle);
    }
    if (rc != ncclSuccess) {
      const char* said = threadLastError();
      std::string why = "cannot register the FIFO's GPU memory with the net for GPUDirect RDMA (" +
                        std::string(ncclGetErrorString(rc)) +
                        (said != nullptr && said[0] ? std::string(": ") + said : "") +
                        "); NCCL_NET_GDR_LEVEL=LOC stages through host memory instead";
      WARN("%s: %s", connName(c).c_str(), why.c_str());
      fail(c, why);
      return true;
    }
    if (!c.isSend && slotMsgs_) {
      c.bounce.reset(new (std::nothrow) char[bytes]);
      if (!c.bounce) {
        fail(c, "cannot allocate " + std::to_string(bytes) +
                    " bytes of host memory for the payloads that come with "
                    "their slot headers");
        return true;
      }
    }
  }
  c.state = NetConn::State::kOpen;
  INFO(kNet, "%s: connected%s", connName(c).c_str(),
       apart       ? " (GPUDirect RDMA: payloads in GPU memory)"
       : c.trailer ? " (a slot as one message, its header after its payload)"
                   : "");
  return true;
}

// ---- proxy thread: data -----------------------------------------------------------------------

int NetProxy::testReq(NetConn& c, void** req, int* size) {
  int done = 0;
  *size = 0;
  ncclResult_t rc = net_.api->test(*req, &done, size);
  if (rc != ncclSuccess) {
    *req = nullptr;  // a failed request is finished from the net's point of view
    c.endWhy = netCallFailed("transfer", rc);
    return -1;
  }
  if (done == 0) return 0;
  *req = nullptr;
  return 1;
}

bool NetProxy::sendSlots(NetConn& c) {
  const ncclNet_v11_t* n = net_.api;
  Fifo& f = c.fifo;
  bool progress = false;
  int size = 0;
  // Completions, oldest first: a slot is freed once both its messages went.
  while (c.done < c.posted) {
    void** r = c.reqs[c.done % net_.inflightSlots];
    int t = 1;
    if (r[0] != nullptr) t = testReq(c, &r[0], &size);
    if (t == 1 && r[1] != nullptr) t = testReq(c, &r[1], &size);
    if (t < 0) {
      fail(c, c.endWhy);
      return true;
    }
    if (t == 0) return progress;
    storeRelease(&f.ctrl->head, ++c.done);
    progress = true;
  }
  if (c.halfPosted && c.reqs[c.posted % net_.inflightSlots][0] != nullptr) {
    // Keep the half-posted slot's header moving (some nets progress only requests they are asked about).
    if (testReq(c, &c.reqs[c.posted % net_.inflightSlots][0], &size) < 0) {
      fail(c, c.endWhy);
      return true;
    }
  }
  const uint64_t poison = loadAcquire(&f.ctrl->poison);
  if (poison != 0) {  // this rank failed: nothing more goes out
    // A kernel that failed poisons its FIFOs and nothing else: its peers on other hosts, which may wait for slots that
    // will never come, learn why from this rank's failure notice, as they do from a failed host-path operation.
    if (c.channel >= kDeviceNetChannelBase) {
      uint64_t zero = 0;
      if (failedWord_.compare_exchange_strong(zero, poison, std::memory_order_acq_rel))
        INFO(kNet, "%s: this rank's kernel failed; passing it on", connName(c).c_str());
    }
    return progress;
  }
  const uint64_t tail = loadAcquire(&f.ctrl->tail);
  // Slots posted together go to the net together where it can hold them (NetProgressHooks::holdSends).
  const bool hold = c.posted < tail && net_.hooks != nullptr && net_.hooks->holdSends != nullptr;
  if (hold) net_.hooks->holdSends(c.comm, 1);
  while (c.posted < tail && c.posted - c.done < net_.inflightSlots) {
    const uint32_t slot = static_cast<uint32_t>(c.posted % f.geo.nSlots);
    void** r = c.reqs[c.posted % net_.inflightSlots];
    ncclResult_t rc = ncclSuccess;
    char* slotData = f.slotData(slot);
    // A slot passed by address names where its data is: the data goes from there, and the header that goes with it
    // loses the mark, since the receiver gets the data itself. The address is kept for the posts still to come.
    if (c.fromSlot != c.posted && (f.hdrs[slot].step & kDescribedSlot) != 0) {
      std::memcpy(&c.from, slotData, sizeof(c.from));
      f.hdrs[slot].step &= ~kDescribedSlot;
      c.fromSlot = c.posted;
    }
    const bool byAddress = c.fromSlot == c.posted;
    void* data = byAddress ? const_cast<char*>(c.from) : slotData;
    void* mh = c.dataMhandle != nullptr && !byAddress ? c.dataMhandle : c.mhandle;
    const uint32_t bytes = f.hdrs[slot].bytes;
    // Slot messages: the header and a small payload in host memory (not data.ptr's GPU memory) as one message. An
    // empty payload always goes with its header: the receiver expects a payload apart only when its header has bytes.
    const bool whole = slotMsgs_ && !c.halfPosted &&
                       (bytes == 0 || (mh == c.mhandle && static_cast<int64_t>(bytes) <= kSlotMessageMax.get()));
    if (whole) {
      void* bufs[2] = {&f.hdrs[slot], data};
      size_t sizes[2] = {sizeof(SlotHeader), bytes};
      rc = net_.hooks->isendv(c.comm, bytes > 0 ? 2 : 1, bufs, sizes, 0, &r[0]);
      if (rc == ncclSuccess && r[0] == nullptr) break;
      r[1] = nullptr;
    } else if (c.trailer) {  // one message: the payload, then the header in the slot's gap
      std::memcpy(slotData + bytes, &f.hdrs[slot], sizeof(SlotHeader));
      rc = n->isend(c.comm, slotData, bytes + sizeof(SlotHeader), 0, c.mhandle, nullptr, &r[0]);
      if (rc == ncclSuccess && r[0] == nullptr) break;
      r[1] = nullptr;
    } else {
      if (!c.halfPosted) {
        rc = n->isend(c.comm, &f.hdrs[slot], sizeof(SlotHeader), 0, c.mhandle, nullptr, &r[0]);
        if (rc == ncclSuccess && r[0] == nullptr) break;
        if (rc == ncclSuccess) c.halfPosted = true;
      }
      if (rc == ncclSuccess) {
        rc = n->isend(c.comm, data, bytes, slotMsgs_ ? kApartTag : 0, mh, nullptr, &r[1]);
        if (rc == ncclSuccess && r[1] == nullptr) break;
      }
    }
    if (rc != ncclSuccess) {
      fail(c, netCallFailed("isend", rc));
      return true;
    }
    c.halfPosted = false;
    c.posted++;
    progress = true;
  }
  if (hold) net_.hooks->holdSends(c.comm, 0);
  return progress;
}

// A receive side whose connection ended (an error from the net: the peer closed, died, or the link failed) still
// publishes every slot that arrived whole, and poisons its FIFO only once the executor has consumed them: a peer
// that sent everything and destroyed its communicator looks the same, and must not fail the last operation.
bool NetProxy::recvSlots(NetConn& c, bool test) {
  const ncclNet_v11_t* n = net_.api;
  Fifo& f = c.fifo;
  bool progress = false;
  int size = 0;
  while (test && c.done < c.posted && !c.testFailed) {
    const uint32_t slot = static_cast<uint32_t>(c.done % f.geo.nSlots);
    void** r = c.reqs[c.done % net_.inflightSlots];
    int paySize = -1;       // the payload's size, once its receive completed in this pass
    bool inBounce = false;  // and it came with its header into c.bounce (GPUDirect RDMA), not yet in GPU memory
    char* const bounce = bounceSlot(c, slot);
    if (r[0] != nullptr) {
      int t = testReq(c, &r[0], &size);
      if (t < 0) c.testFailed = true;
      if (t <= 0) break;
      progress = true;
      const SlotHeader& h = f.hdrs[slot];
      const int hdrSize = static_cast<int>(sizeof(SlotHeader));
      if (c.trailer) {  // the payload, then its header: the header goes where the executor reads it
        if (size < hdrSize || static_cast<size_t>(size) > f.geo.slotBytes + sizeof(SlotHeader)) {
          fail(c, "protocol error: a slot message of " + std::to_string(size) + " bytes arrived");
          return true;
        }
        std::memcpy(&f.hdrs[slot], f.slotData(slot) + size - hdrSize, sizeof(SlotHeader));
        paySize = size - hdrSize;
      } else if (slotMsgs_ ? size < hdrSize : size != hdrSize) {
        fail(c, "protocol error: a slot header of " + std::to_string(size) + " bytes arrived");
        return true;
      }
      if (h.bytes == kPoisonFrameBytes) {  // the sender failed and says why; a mismatch's calls follow
        bool valid = poisonWordValid(h.seq, comm_->nranks);
        INFO(kNet, "%s: the peer reports a failure (%s)", connName(c).c_str(), valid ? "passed on" : "malformed");
        c.noticeWord = valid ? h.seq : makePoison(PoisonReason::kError, c.peer);
      }
      if (slotMsgs_) {  // the payload came with the header (a notice's calls too), or follows apart
        const int with = size - hdrSize;
        if (with == 0 && h.bytes != 0 && c.noticeWord == 0) {
          c.payloadApart = true;
        } else if (c.noticeWord != 0 || static_cast<uint32_t>(with) == h.bytes) {
          paySize = with;
          inBounce = bounce != nullptr;
        } else {
          fail(c, "protocol error: a slot of " + std::to_string(with) + " payload bytes arrived where its header " +
                      "announced " + std::to_string(h.bytes));
          return true;
        }
      }
    }
    if (c.payloadApart) {
      ncclResult_t rc = irecvPayload(n, c, slot, kApartTag, &r[1]);
      if (rc != ncclSuccess) {
        c.endWhy = netCallFailed("irecv", rc);
        c.testFailed = true;
        break;
      }
      if (r[1] == nullptr) break;  // not now: posted on a later pass
      c.payloadApart = false;
    }
    if (r[1] != nullptr) {
      int t = testReq(c, &r[1], &size);
      if (t < 0) c.testFailed = true;
      if (t == 0 || (t < 0 && c.noticeWord == 0)) break;
      paySize = t > 0 ? size : 0;  // a failed notice payload: the notice without its calls
    }
    if (c.noticeWord != 0) {
      const char* data = inBounce ? bounce : f.slotData(slot);
      uint64_t calls[7];
      bool haveCalls = paySize == static_cast<int>(sizeof(calls));
      if (haveCalls && c.data.ptr != nullptr && !inBounce) {
        haveCalls = c.data.toHost && c.data.toHost(calls, data, sizeof(calls));  // it arrived in GPU memory
      } else if (haveCalls) {
        memcpy(calls, data, sizeof(calls));
      }
      poisonPeerConn(c, c.noticeWord, haveCalls && calls[6] != 0 ? calls : nullptr);
      return true;
    }
    if (paySize >= 0 && static_cast<uint32_t>(paySize) != f.hdrs[slot].bytes) {
      fail(c, "protocol error: a payload of " + std::to_string(paySize) + " bytes arrived where the header announced " +
                  std::to_string(f.hdrs[slot].bytes));
      return true;
    }
    // GPUDirect RDMA, a payload that came with its header: into the slot's GPU memory (a copy needs no flush).
    if (inBounce && paySize > 0 && !(c.data.toDevice && c.data.toDevice(f.slotData(slot), bounce, paySize))) {
      fail(c, "copying a slot's payload of " + std::to_string(paySize) + " bytes to GPU memory failed");
      return true;
    }
    // GPUDirect RDMA: what the NIC wrote into GPU memory is flushed before the kernel may read it, where it needs one
    // (RemoteData::flush, netNeedsFlush).
    // (A payload that completed in an earlier pass left its flush in flight: flushReq.)
    if (c.data.ptr != nullptr && c.data.flush && !inBounce && (paySize > 0 || c.flushReq != nullptr) &&
        n->iflush != nullptr) {
      if (c.flushReq == nullptr) {
        void* data = f.slotData(slot);
        int bytes = paySize;
        ncclResult_t rc = n->iflush(c.comm, 1, &data, &bytes, &c.dataMhandle, &c.flushReq);
        if (rc != ncclSuccess) {
          c.endWhy = netCallFailed("iflush", rc);
          c.testFailed = true;
          break;
        }
      }
      if (c.flushReq != nullptr) {  // null: the net needs no flush for it
        int t = testReq(c, &c.flushReq, &size);
        if (t < 0) c.testFailed = true;
        if (t <= 0) break;
      }
    }
    storeRelease(&f.ctrl->tail, ++c.done);
    progress = true;
    // The read that brought this slot left the net with nothing more: the next slot's test would find nothing.
    if (net_.hooks != nullptr && net_.hooks->recvEmptied != nullptr && net_.hooks->recvEmptied(c.comm)) break;
  }
  const uint64_t head = loadAcquire(&f.ctrl->head);
  if (!c.endWhy.empty()) {
    // Ended: nothing more is posted. Once nothing else can arrive and the executor took what did, say so.
    if ((c.testFailed || c.done == c.posted) && head >= c.done) {
      fail(c, c.endWhy);
      return true;
    }
    return progress;
  }
  while (c.posted < head + f.geo.nSlots && c.posted - c.done < net_.inflightSlots) {
    const uint32_t slot = static_cast<uint32_t>(c.posted % f.geo.nSlots);
    void** r = c.reqs[c.posted % net_.inflightSlots];
    int tag = 0;
    ncclResult_t rc = ncclSuccess;
    if (slotMsgs_) {  // one receive for the header and whatever payload comes with it
      // (Into host memory: with GPUDirect RDMA the bounce, whence the payload is copied to GPU memory.)
      char* const bounce = bounceSlot(c, slot);
      void* bufs[2] = {&f.hdrs[slot], bounce != nullptr ? bounce : f.slotData(slot)};
      size_t sizes[2] = {sizeof(SlotHeader), f.geo.slotBytes};
      rc = net_.hooks->irecvv(c.comm, 2, bufs, sizes, 0, &r[0]);
      if (rc == ncclSuccess && r[0] == nullptr) break;
    } else if (c.trailer) {  // the payload and its header after it, into the slot and its gap
      void* data = f.slotData(slot);
      size_t bytes = f.geo.slotBytes + sizeof(SlotHeader);
      rc = n->irecv(c.comm, 1, &data, &bytes, &tag, &c.mhandle, nullptr, &r[0]);
      if (rc == ncclSuccess && r[0] == nullptr) break;
      r[1] = nullptr;
    } else {
      if (!c.halfPosted) {
        void* hdr = &f.hdrs[slot];
        size_t hdrBytes = sizeof(SlotHeader);
        rc = n->irecv(c.comm, 1, &hdr, &hdrBytes, &tag, &c.mhandle, nullptr, &r[0]);
        if (rc == ncclSuccess && r[0] == nullptr) break;
        if (rc == ncclSuccess) c.halfPosted = true;
      }
      if (rc == ncclSuccess) {
        rc = irecvPayload(n, c, slot, tag, &r[1]);
        if (rc == ncclSuccess && r[1] == nullptr) break;
      }
    }
    if (rc != ncclSuccess) {
      c.endWhy = netCallFailed("irecv", rc);
      return true;
    }
    c.halfPosted = false;
    c.posted++;
    progress = true;
  }
  return progress;
}

// This rank failed: tell the receiver why, at a slot boundary (the next header it expects), once.
bool NetProxy::sendNotice(NetConn& c) {
  int size = 0;
  if (c.noticeReq != nullptr || c.noticeBodyReq != nullptr) {
    int t = 1;
    if (c.noticeReq != nullptr) t = testReq(c, &c.noticeReq, &size);
    if (t > 0 && c.noticeBodyReq != nullptr) t = testReq(c, &c.noticeBodyReq, &size);
    if (t < 0) c.noticeReq = c.noticeBodyReq = nullptr;
    if (t != 0 && c.noticeReq == nullptr && c.noticeBodyReq == nullptr)
      INFO(kNet, "%s: failure %s", connName(c).c_str(), t > 0 ? "passed on" : "not passed on");
    if (t == 0 || !c.noticeBodySent) return t != 0;
  }
  if (c.noticeSent && c.noticeBodySent) return false;
  // A slot boundary, and a header no request in flight uses.
  if (c.halfPosted || c.posted - c.done >= c.fifo.geo.nSlots) return false;
  // The notice is a SlotHeader in registered memory: the FIFO's header of the next slot to go, which the executor
  // no longer writes (it failed).
  // Its payload, in the same slot's data, is a mismatch's 7 call words (zero otherwise): the receiver has that
  // slot's receives posted, so the notice matches them as a slot's messages always do (with slot messages, one
  // message: header and calls; with a trailer, one message: calls and header).
  const uint32_t slot = static_cast<uint32_t>(c.posted % c.fifo.geo.nSlots);
  // (With GPUDirect RDMA the slots' data is GPU memory: the payload goes from the FIFO's host page for it.)
  char* body = c.data.ptr != nullptr ? remoteNoticeArea(c.mem, c.fifo.geo) : c.fifo.slotData(slot);
  ncclResult_t rc = ncclSuccess;
  if (!c.noticeSent) {
    SlotHeader& h = c.fifo.hdrs[slot];
    h = SlotHeader{};
    h.seq = failedWord_.load(std::memory_order_acquire);
    h.bytes = kPoisonFrameBytes;
    memcpy(body, failedCalls_, sizeof(failedCalls_));
    if (slotMsgs_) {  // header and calls as one message, as a small slot goes
      void* bufs[2] = {&h, body};
      size_t sizes[2] = {sizeof(SlotHeader), sizeof(failedCalls_)};
      rc = net_.hooks->isendv(c.comm, 2, bufs, sizes, 0, &c.noticeReq);
      c.noticeBodySent = rc != ncclSuccess || c.noticeReq != nullptr;
    } else if (c.trailer) {  // the calls and the header after them, as a slot goes
      std::memcpy(body + sizeof(failedCalls_), &h, sizeof(SlotHeader));
      rc = net_.api->isend(c.comm, body, sizeof(failedCalls_) + sizeof(SlotHeader), 0, c.mhandle, nullptr,
                           &c.noticeReq);
      c.noticeBodySent = rc != ncclSuccess || c.noticeReq != nullptr;
    } else {
      rc = net_.api->isend(c.comm, &h, sizeof(SlotHeader), 0, c.mhandle, nullptr, &c.noticeReq);
    }
    if (rc == ncclSuccess && c.noticeReq == nullptr) return false;
    c.noticeSent = true;
  }
  if (rc == ncclSuccess && c.noticeBodyReq == nullptr && !c.noticeBodySent) {
    rc = net_.api->isend(c.comm, body, sizeof(failedCalls_), 0, c.mhandle, nullptr, &c.noticeBodyReq);
    if (rc == ncclSuccess && c.noticeBodyReq == nullptr) return true;  // the header went; the body next time
    c.noticeBodySent = true;
  }
  if (rc != ncclSuccess) {
    c.noticeSent = c.noticeBodySent = true;
    INFO(kNet, "%s: could not pass on the failure (%s)", connName(c).c_str(), ncclGetErrorString(rc));
  }
  return true;
}

bool NetProxy::step(NetConn& c) {
  if (c.state == NetConn::State::kFailed) return false;
  if (c.state == NetConn::State::kSuspect) return judge(c);
  if (c.state != NetConn::State::kOpen) return setup(c);
  if (!c.isSend) return recvSlots(c);
  bool progress = false;
  if (failedWord_.load(std::memory_order_acquire) != 0) {
    // Finish what is in flight, then the notice.
    progress |= sendSlots(c);
    if (c.state == NetConn::State::kOpen &&
        (!c.noticeSent || !c.noticeBodySent || c.noticeReq != nullptr || c.noticeBodyReq != nullptr))
      progress |= sendNotice(c);
    return progress;
  }
  return sendSlots(c);
}

// Every published slot has gone (and every notice in flight; with `notices`, every notice this rank owes too): the
// proxy may stop.
bool NetProxy::flushed(bool notices) const {
  const bool failed = failedWord_.load(std::memory_order_acquire) != 0;
  for (const auto& c : conns_) {
    if (!c->isSend || c->state == NetConn::State::kFailed || c->state == NetConn::State::kSuspect) continue;
    if (c->state != NetConn::State::kOpen) {
      if (loadAcquire(&c->fifo.ctrl->tail) > 0) return false;  // data waits for a connection still being made
      continue;
    }
    if (c->done < loadAcquire(&c->fifo.ctrl->tail) && loadAcquire(&c->fifo.ctrl->poison) == 0) return false;
    if (c->noticeReq != nullptr || c->noticeBodyReq != nullptr) return false;
    if (notices && failed && (!c->noticeSent || !c->noticeBodySent)) return false;
  }
  return true;
}

bool NetProxy::pass() {
  if (haveNew_.load(std::memory_order_acquire)) adopt();
  bool work = false;
  bool quiet = failedWord_.load(std::memory_order_acquire) == 0;
  for (auto& c : conns_) {
    work |= step(*c);
    quiet &= c->state == NetConn::State::kOpen;
  }
  quiet_.store(quiet, std::memory_order_release);
  return work;
}

bool NetProxy::engage(bool on) {
  if (!rankProgress_) return false;
  if (on) {
    drivenOps_.fetch_add(1, std::memory_order_relaxed);
    engaged_.store(true, std::memory_order_release);
    return true;
  }
  stepDriven(nullptr, false);
  engaged_.store(false, std::memory_order_release);
  // Slots not yet handed to the net are the proxy's again: wake it if it sleeps.
  if (rankPending_) wake_.kick();
  return false;
}

// What a connection still being set up waits for; null once it is open or failed.
static const char* setupWait(NetConn::State state) {
  switch (state) {
    case NetConn::State::kListen:
    case NetConn::State::kAccepting:
      return "the net has not accepted the peer's connection";
    case NetConn::State::kAwaitHandle:
      return "the peer has not sent its handle: it has not reached this step";
    case NetConn::State::kConnecting:
      return "the net has not completed the connection";
    default:
      return nullptr;
  }
}

// Where an open connection stands: what the executor published or freed, what the net was given and completed.
std::string NetProxy::progressText(const NetConn& c) const {
  const uint64_t tail = loadAcquire(&c.fifo.ctrl->tail), head = loadAcquire(&c.fifo.ctrl->head);
  int inNet = 0;
  for (uint64_t s = c.done; s < c.posted + (c.halfPosted ? 1 : 0); s++)
    for (void* r : c.reqs[s % net_.inflightSlots]) inNet += r != nullptr;
  char buf[256];
  if (c.isSend) {
    snprintf(buf, sizeof(buf),
             "open; slots published by the executor %llu, given to the net %llu%s, sent %llu (%d requests pending "
             "in the net)",
             static_cast<unsigned long long>(tail), static_cast<unsigned long long>(c.posted),
             c.halfPosted ? " and a half" : "", static_cast<unsigned long long>(c.done), inNet);
  } else {
    snprintf(buf, sizeof(buf),
             "open; slots received %llu, posted to the net %llu%s (%d requests pending in the net), consumed by the "
             "executor %llu",
             static_cast<unsigned long long>(c.done), static_cast<unsigned long long>(c.posted),
             c.halfPosted ? " and a half" : "", inNet, static_cast<unsigned long long>(head));
  }
  return buf;
}

std::string NetProxy::netFailure() const {
  std::lock_guard<std::mutex> lock(failMu_);
  return firstFailure_;
}

// A wait that finds its connection suspect waits kVerdictS for judge(), which names the culprit after kSuspectS (and
// a check of the peer's process every 250 ms).
static_assert(kSuspectS + 0.25 < RemoteTransport::kVerdictS, "a wait gives up before the proxy's verdict");

std::string NetProxy::waitState(const Fifo* f, Stall* stall) {
  *stall = Stall::kUnknown;
  // The proxy holds passMu_ for a pass, which may be in a net call: wait for it a moment, not indefinitely.
  std::unique_lock<std::mutex> lock(passMu_, std::defer_lock);
  // By the clock, not by a count of 1 ms sleeps: on a loaded machine a thousand of them took seconds, until a test's
  // 8 s hold of a net call ended, and the wait then found the proxy free and the peer's notice taken, not the hold.
  const Clock::time_point giveUp = Clock::now() + std::chrono::seconds(1);
  while (!lock.try_lock() && Clock::now() < giveUp) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool held = !lock.owns_lock();
  // A net call that does not return for a second (a plugin's connect that allocates hundreds of MB, say) is news,
  // and the reason a connection behind it was not taken up.
  const char* busy = "busy in one pass over its connections, which may be a call into the net, for over 1 s";
  if (held) INFO(kNet, "rank %d: %s: at a wait's deadline the proxy was busy in one pass for over 1 s", rank_, name());
  {
    std::lock_guard<std::mutex> guard(newMutex_);
    for (const auto& c : newConns_)
      if (c->fifo.ctrl == f->ctrl) {
        *stall = Stall::kSettingUp;
        return pendingName(*c, name()) + " is not set up: the proxy has not taken it up yet" +
               (held ? std::string("; the proxy was ") + busy : std::string());
      }
  }
  if (held) {
    *stall = Stall::kProxyHeld;
    return "its " + std::string(name()) + " proxy was " + busy;
  }
  // Every connection's state at INFO: a stall that the net, not a peer, caused shows as sends the net completed on
  // one rank and receives it never completed on the other.
  std::string mine;
  for (const auto& c : conns_) {
    const char* notSetUp = setupWait(c->state);  // for a connection still being set up: what it waits for
    std::string text;
    if (notSetUp != nullptr)
      text = std::string("not set up: ") + notSetUp;
    else if (c->state == NetConn::State::kOpen)
      text = progressText(*c);
    else if (c->state == NetConn::State::kSuspect)
      text = "failed in the net" + (c->endWhy.empty() ? std::string() : " (" + c->endWhy + ")") +
             "; waiting for the peer's failure notice";
    else
      text = "failed";
    INFO(kNet, "%s: at a wait's deadline, %s", connName(*c).c_str(), text.c_str());
    if (c->fifo.ctrl != f->ctrl) continue;
    if (c->state == NetConn::State::kOpen) {
      mine = pendingName(*c, name()) + " is " + text;  // "... is open; slots received ..."
    } else if (c->state == NetConn::State::kSuspect || c->state == NetConn::State::kFailed) {
      // Failed: judge() names the culprit within kSuspectS; a failed one's FIFO is poisoned already.
      if (c->state == NetConn::State::kSuspect) *stall = Stall::kFailing;
      mine = pendingName(*c, name()) + " " + text;
    } else if (notSetUp != nullptr) {
      *stall = Stall::kSettingUp;
      char buf[64];
      snprintf(buf, sizeof(buf), " is not set up after %.1f s: ",
               std::chrono::duration<double>(Clock::now() - c->since).count());
      mine = pendingName(*c, name()) + buf + notSetUp;
    }
  }
  return mine;
}

RemoteTransport::Setup NetProxy::setupState(std::string* why) {
  {
    std::lock_guard<std::mutex> guard(newMutex_);
    if (!newConns_.empty()) {
      *why = pendingName(*newConns_.front(), name()) + " is not set up: the proxy has not taken it up yet";
      return Setup::kPending;
    }
  }
  std::unique_lock<std::mutex> lock(passMu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    *why = std::string("the ") + name() + " proxy is in a pass over its connections";
    return Setup::kPending;
  }
  Setup at = Setup::kOpen;
  for (const auto& c : conns_) {
    if (c->state == NetConn::State::kSuspect || c->state == NetConn::State::kFailed) {
      *why = pendingName(*c, name()) + " failed" + (c->endWhy.empty() ? std::string() : " (" + c->endWhy + ")");
      return Setup::kFailed;
    }
    const char* wait = setupWait(c->state);
    if (wait != nullptr && at == Setup::kOpen) {
      *why = pendingName(*c, name()) + " is not set up: " + wait;
      at = Setup::kPending;
    }
  }
  return at;
}

bool NetProxy::progressAll(const Fifo* waitingOn) { return stepDriven(waitingOn, waitingOn == nullptr); }

bool NetProxy::stepDriven(const Fifo* waitingOn, bool everyRecv) {
  if (!rankProgress_ || stop_.load(std::memory_order_acquire)) return false;
  std::unique_lock<std::mutex> lock(passMu_, std::try_to_lock);
  if (!lock.owns_lock() || stop_.load(std::memory_order_acquire)) return false;
  bool moved = false;
  bool pending = false;
  bool allOpen = true;
  for (auto& c : conns_) {
    if (c->state != NetConn::State::kOpen) {
      allOpen = false;
      continue;
    }
    // A step of a receive connection is a system call or more, whether or not data came: only the one waited on
    // (every one when the caller cannot say). A send connection is stepped while it has slots in hand.
    const bool busy = c->isSend ? c->posted < loadAcquire(&c->fifo.ctrl->tail) || c->done < c->posted
                                : everyRecv || (waitingOn != nullptr && c->fifo.ctrl == waitingOn->ctrl);
    if (!busy) continue;
    moved |= step(*c);
    allOpen &= c->state == NetConn::State::kOpen;
    if (c->isSend && c->state == NetConn::State::kOpen && c->posted < loadAcquire(&c->fifo.ctrl->tail)) pending = true;
  }
  rankPending_ = pending;
  if (!allOpen) {  // a connection that failed on this thread (judging it is the proxy's) or is still being set up
    quiet_.store(false, std::memory_order_release);
    wake_.wake();
  }
  if (moved) rankMoves_.fetch_add(1, std::memory_order_relaxed);
  return moved;
}

bool NetProxy::progress(const Fifo* f) {
  if (!rankProgress_ || stop_.load(std::memory_order_acquire)) return false;
  std::unique_lock<std::mutex> lock(passMu_, std::try_to_lock);
  // Once shutdown began the proxy thread drains alone, and after its join the connections are shutdown()'s.
  if (!lock.owns_lock() || stop_.load(std::memory_order_acquire)) return false;
  // Only an open connection's data: setup (and the helper threads it starts, CHORUS_PROXY_BIND), failure notices and
  // the judging of failed peers stay on the proxy thread.
  // A receive connection only posts the receive of the slot just freed: the executor reads the next slot's data
  // when it waits for it (progressAll), and a test here, right after the last one emptied the net, would find none.
  bool moved = false;
  for (auto& c : conns_)
    if (c->fifo.ctrl == f->ctrl) {
      if (c->state == NetConn::State::kOpen) moved = c->isSend ? step(*c) : recvSlots(*c, false);
      break;
    }
  if (!moved) return false;
  rankMoves_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void NetProxy::run() {
  // "chorus-net-" and the net's name, cut to the 15 characters a thread name holds ("chorus-net-Sock").
  pthread_setname_np(pthread_self(), ("chorus-net-" + net_.name).substr(0, 15).c_str());
  bindThread();
  bool draining = false;
  Deadline drainBy;
  Clock::time_point drainStart{};
  int idle = 0;
  constexpr int kMaxNetFds = 256;
  constexpr std::chrono::microseconds kSpin{1000};
  // A built-in net may name descriptors that wake the proxy as soon as it can progress (NetProgressHooks).
  const bool netWakes = net_.hooks != nullptr && net_.hooks->pollFds != nullptr;
  Clock::time_point idleSince = Clock::now();
  std::vector<pollfd> pfds;
  uint64_t seenMoves = 0;
  for (;;) {
    if (stop_.load(std::memory_order_acquire) && !draining) {
      draining = true;
      drainBy = Deadline::fromEnv();
      drainStart = Clock::now();
    }
    if (!draining && quiet_.load(std::memory_order_acquire) && engaged_.load(std::memory_order_acquire)) {
      // A rank's thread drives the connections in its waits: sleep on the wake-up descriptor alone, and make a pass
      // every 1 ms for what only the proxy does (failure notices; a connection that failed is the proxy's again).
      wake_.sleeping(true);
      if (engaged_.load(std::memory_order_acquire) && !haveNew_.load(std::memory_order_acquire) &&
          !stop_.load(std::memory_order_acquire)) {
        pollfd wfd{wake_.fd(), POLLIN, 0};
        timespec ts = {0, 1000 * 1000};
        if (ppoll(&wfd, 1, &ts, nullptr) > 0) wake_.drain();
        asideSleeps_++;
      }
      wake_.sleeping(false);
      std::unique_lock<std::mutex> lock(passMu_, std::try_to_lock);
      if (lock.owns_lock()) {
        exchangeNotices();
        pass();
      }
      idle = 0;
      continue;
    }
    // A rank's thread in a pass holds the lock for a moment: yield rather than block on it (a futex wait and wake
    // cost more than the pass).
    std::unique_lock<std::mutex> lock(passMu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      sched_yield();
      continue;
    }
    bool work = exchangeNotices();
    work |= pass();
    if (draining) {
      // A rank that failed gives its notices a moment to go out (a peer that stopped receiving never takes them).
      const bool notices = Clock::now() < drainStart + std::chrono::duration_cast<Clock::duration>(
                                                           std::chrono::duration<double>(kSuspectS));
      if (comm_->abortFlag.load(std::memory_order_relaxed) != 0 || flushed(notices)) break;
      if (drainBy.expired()) {
        WARN(
            "rank %d: %s: closing with data not yet delivered after %.0f s (CHORUS_TIMEOUT_S): a peer stopped "
            "receiving",
            rank_, name(), drainBy.seconds());
        break;
      }
    }
    lock.unlock();
    // What a rank's thread moved counts as the proxy's own progress: data is flowing, so no sleep yet.
    const uint64_t moves = rankMoves_.load(std::memory_order_relaxed);
    if (moves != seenMoves) work = true, seenMoves = moves;
    if (work) {
      idle = 0;
      continue;
    }
    // Nets give no descriptor to sleep on, so an idle proxy polls them: yielding at first, then sleeping a little
    // longer each time, up to 100 us (1 ms after a second of quiet). The executor's kick() ends a sleep at once.
    // A net with descriptors wakes the proxy itself: the proxy yields for kSpin after its last progress (a wakeup
    // costs more than a yield while data streams), then sleeps on those descriptors.
    if (idle++ == 0) idleSince = Clock::now();
    if (netWakes ? Clock::now() - idleSince < kSpin : idle < 64) {
      sched_yield();
      continue;
    }
    long us = idle < 10000 ? (netWakes ? 100 : std::min(100, (idle - 63) * 5)) : 1000;
    wake_.sleeping(true);
    bool more = haveNew_.load(std::memory_order_acquire) || stop_.load(std::memory_order_acquire);
    if (lock.try_lock()) {
      for (auto& c : conns_) more |= step(*c);
    } else {
      more = true;  // a rank's thread is moving data: no sleep now
    }
    if (!more) {
      pfds.assign(1, pollfd{wake_.fd(), POLLIN, 0});
      if (netWakes) {
        pfds.resize(1 + kMaxNetFds);
        pfds.resize(1 + net_.hooks->pollFds(net_.ctx, pfds.data() + 1, kMaxNetFds));
      }
    }
    if (lock.owns_lock()) lock.unlock();
    if (!more) {
      timespec ts = {0, us * 1000};
      if (ppoll(pfds.data(), pfds.size(), &ts, nullptr) > 0) {
        if (pfds[0].revents != 0) wake_.drain();
        idle = 0;
      }
    } else {
      idle = 0;
    }
    wake_.sleeping(false);
  }
  INFO(kNet | kProxy, "rank %d: %s proxy thread exits", rank_, name());
}

}  // namespace chorus
