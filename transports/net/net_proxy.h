// The net proxy: one thread per communicator that moves FIFO slots between hosts over any net behind NCCL's
// ncclNet interface (transports/net/net.h): UCX, IB verbs, an external plugin.
//
// Each one-way connection (channel, from -> to) is a local FIFO at both ends, as with every transport. The proxy:
//  - setup: the receive side listens on the net and sends the handle to the sender over the bootstrap (tag
//    kNetHandleTag + channel); the send side picks it up (Bootstrap::tryRecv, never waiting) and connects; both
//    poll connect/accept until the net says the connection is up, then register the FIFO memory once.
//  - send side: for every slot the executor produced (tail), two isends: the 32-byte SlotHeader, then the payload;
//    when both completed, in order, the slot is freed (head).
//  - receive side: for every free slot (head + nSlots), two irecvs into the slot's header and payload; when both
//    completed, in order, the slot is published (tail).
//  At most NetChoice::inflightSlots slots (two requests each) are outstanding per connection.
//
// Failures: an error from the net fails the connection: its FIFO is poisoned naming the peer (as dead when the
// bootstrap finds it gone), and the executor's wait reports it. A rank that fails (markFailed) sends a failure
// notice - a header whose bytes field is kPoisonFrameBytes and whose seq is its poison word - on every send
// connection at a slot boundary, so receivers learn the cause; a receiver that fails has no way back to its sender
// (connections are one-way), which then learns only through the net or its own deadline.
//
// Threads and ownership: the executor calls connectSend/connectRecv (allocating the FIFO and handing the NetConn
// over through newConns_ under newMutex_); the proxy thread owns every adopted NetConn and makes every net call
// but init (the selector's, before the proxy starts); shutdown() joins the proxy, then closes the comms and
// finalizes the net from the caller's thread. FIFO memory is freed by the destructor alone (a kernel may still touch
// a failed connection's FIFO until the communicator is destroyed), GPU memory given with RemoteData too.
//
// GPUDirect RDMA (RemoteData): the device path may give a connection GPU memory for its slot data. The proxy then
// registers it with the net as that memory (NCCL_PTR_CUDA) beside the FIFO's host memory, which keeps the control
// words, the headers and a page for a failure notice's payload; payloads go to and from the GPU memory in place, and a
// received payload is flushed (the net's iflush) before its slot is published to the kernel.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transports/net/net.h"
#include "transports/remote.h"

namespace chorus {

/// Bootstrap tag of a net handle for channel c: kNetHandleTag + c.
constexpr int kNetHandleTag = 0x4e000;
/// Bootstrap tag of a failure notice: the failed rank's FIFO poison word, then a mismatch's 7 call words (zero
/// otherwise), 64 bytes.
constexpr int kNetFailTag = 0x4dfff;
/// How long a connection the net failed waits for the peer's failure notice before naming the peer itself.
constexpr double kSuspectS = 1.0;
/// Slots in flight per connection (two net requests each) for a net that says no more: within NCCL_NET_MAX_REQUESTS
/// of a v6 plugin (8).
constexpr uint32_t kInflightSlots = 4;
/// The most slots in flight per connection any net gets (NetChoice::inflightSlots).
constexpr uint32_t kMaxInflightSlots = 8;

/// One end of one net connection.
struct NetConn {
  /// kSuspect: the net failed the connection and the peer still runs: the proxy waits (kSuspectS) for the peer's
  /// failure notice, or for its process to be gone, before naming it.
  enum class State { kListen, kAccepting, kAwaitHandle, kConnecting, kOpen, kSuspect, kFailed };
  bool isSend = false;
  int channel = 0;
  int peer = -1;
  int dev = 0;
  void* mem = nullptr;  ///< the FIFO memory (allocRemoteFifo)
  RemoteData data;      ///< GPUDirect RDMA: the slot data in GPU memory (data.ptr null: the data is in mem)
  Fifo fifo;            ///< the proxy's view
  // Once adopted, under NetProxy::passMu_: the proxy thread's, or a rank's thread's in NetProxy::progress():
  State state = State::kListen;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  void* comm = nullptr;  ///< the sendComm or recvComm
  void* mhandle = nullptr;
  void* dataMhandle = nullptr;  ///< data.ptr's registration
  void* flushReq = nullptr;     ///< receive side, GPUDirect RDMA: the iflush of slot `done` (arrived), in flight
  uint64_t posted = 0;          ///< slots whose requests are all posted
  uint64_t done = 0;            ///< slots completed: freed (send side) or published (receive side)
  bool halfPosted = false;      ///< slot `posted` has its header request posted, not its payload's yet
  /// A slot goes as one message, its payload and then its header, in the slot's gap (NetChoice::slotTrailer; a host
  /// channel over IB or a plugin). Both ends of a connection agree: the setting is checked across ranks.
  bool trailer = false;
  /// Receive side, slot messages: slot `done`'s header came alone and its payload follows as a message of its own,
  /// whose receive is still to be posted.
  bool payloadApart = false;
  /// Receive side, slot messages into GPU memory (GPUDirect RDMA): host memory, a slot's worth a slot, for the payloads
  /// that come with their header (a net's one-message receive takes host memory); each is copied to the slot's GPU
  /// memory once it arrived. Payloads apart go to GPU memory directly.
  std::unique_ptr<char[]> bounce;
  uint64_t fromSlot = UINT64_MAX;         ///< send side: the slot passed by address whose requests are being posted
  const char* from = nullptr;             ///< and the address its data is sent from
  void* reqs[kMaxInflightSlots][2] = {};  ///< [slot % inflight][0 header, 1 payload]; null once completed
  std::string endWhy;  ///< the net failed this connection (receive side: ends once what arrived is consumed)
  std::chrono::steady_clock::time_point suspectUntil{};  ///< kSuspect: name the peer itself then
  bool setupFailed = false;  ///< the net failed it before it opened (fail() in a setup state): see failedSetup()
  bool testFailed = false;  ///< receive side: the oldest request failed, so nothing more completes
  bool noticeSent = false;  ///< send side: the failure notice went out (or cannot)
  void* noticeReq = nullptr;
  bool noticeBodySent = false;  ///< send side: the notice's payload (a mismatch's calls) was posted
  void* noticeBodyReq = nullptr;
  uint64_t noticeWord = 0;  ///< receive side: the peer's failure notice arrived; its payload (calls) is awaited
  std::chrono::steady_clock::time_point since{};          ///< when setup started (for slow-setup messages)
  std::chrono::steady_clock::time_point nextLiveCheck{};  ///< setup: when to check again that the peer lives
  /// Send side, a net that shares sockets, this rank above the peer: until when connect() waits for this rank's
  /// receive connection from the peer to be accepted, whose socket it would then share (NetProxy::setup).
  std::chrono::steady_clock::time_point shareUntil{};
  bool slowWarned = false;
};

/// RemoteTransport over a net (created by createRemoteTransport).
class NetProxy : public RemoteTransport {
 public:
  /// Takes an initialized net (NetChoice::ctx from its init).
  NetProxy(ncclComm* comm, NetChoice net);
  ~NetProxy() override;
  /// Starts the proxy thread.
  ncclResult_t start();
  ncclResult_t connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out,
                           const RemoteData* data = nullptr) override;
  ncclResult_t connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out,
                           const RemoteData* data = nullptr) override;
  bool deviceInfo(int channel, RemoteDeviceInfo* out) const override;
  void shutdown() override;
  void markFailed(uint64_t word) override;
  void markFailedCalls(const uint64_t* calls) override;
  void kick() override { wake_.kick(); }
  bool progress(const Fifo* f) override;
  bool engage(bool on) override;
  bool progressAll(const Fifo* waitingOn) override;
  std::string waitState(const Fifo* f, Stall* stall) override;
  Setup setupState(std::string* why) override;
  std::string netFailure() const override;
  const Fifo* failedSetup(std::string* conn) const override;
  const char* name() const override { return label_.c_str(); }
  bool sendsByAddress() const override;
  int commonDevices() const override { return net_.commonDevices; }

 private:
  ncclResult_t newConn(bool isSend, int channel, int peer, const FifoGeometry& geo, Fifo* out, const RemoteData* data);
  // ---- proxy thread ----
  void run();
  /// Where in devices_ channel `channel`'s connections go: c mod the devices for the host path's channel c, and (c +
  /// j) mod the devices for lane j of the device path's channel c (kDeviceNetChannelBase + devLaneChannel(c, j)), so
  /// that a launch's lanes, which share one channel's tiles (its sends and receives run on one channel), spread over
  /// the NICs as its channels do.
  size_t deviceSlot(int channel) const;
  /// Picks the devices this rank's channels use (devices_, CHORUS_NET_NEAR_GPU) and logs them at INFO NET.
  void chooseDevices();
  /// The proxy thread moves to NCCL_PROXY_CPUSET's CPUs where it is set, else (CHORUS_PROXY_BIND) to those near the
  /// devices it uses.
  void bindThread();
  void adopt();
  /// A rank's thread that drives the net (progressAll, engage): under passMu_ if free, steps the open send
  /// connections with slots in hand, the receive connection of `waitingOn`, and with `everyRecv` every receive
  /// connection; true if something moved.
  bool stepDriven(const Fifo* waitingOn, bool everyRecv);
  /// The proxy's pass: adopts new connections and steps every one; true if one made progress. Under passMu_.
  bool pass();
  /// One step of one connection; true if it made progress.
  bool step(NetConn& c);
  /// Whether the net shares connections and no receive connection from `peer` has been accepted yet (none may exist
  /// yet, or it is still being accepted).
  bool awaitingFrom(int peer) const;
  /// How long the higher rank of a pair may wait to share its peer's connection (NetProgressHooks::shareWaitMs).
  std::chrono::milliseconds shareWait() const;
  bool setup(NetConn& c);
  bool sendSlots(NetConn& c);
  /// A receive connection: tests its receives in order, freeing the slots they filled to the executor, then posts
  /// the receives of the slots the executor freed. With `test` false, only posts (NetProxy::progress: a freed slot's
  /// receive; the next slot's data is read by whoever waits for it).
  bool recvSlots(NetConn& c, bool test = true);
  bool sendNotice(NetConn& c);
  /// Tests request *req: 1 when it completed (*req null, *size the bytes moved), 0 while pending, -1 when it failed
  /// (*req null, c.endWhy says why).
  int testReq(NetConn& c, void** req, int* size);
  /// The net failed the connection: closes it and suspects the peer (kSuspect), logging why at INFO and keeping it
  /// for netFailure (the executor reports the failure if an operation waits on this FIFO).
  void fail(NetConn& c, const std::string& why);
  /// connect or accept (`what`) returned `rc`: fail(), with the net's text (the thread's last error) in a WARN.
  void setupFailed(NetConn& c, const char* what, ncclResult_t rc);
  /// kSuspect: poisons the FIFO naming the peer once its process is gone (died) or kSuspectS passed (failed).
  bool judge(NetConn& c);
  /// c's FIFO names the culprit (judge(), or a peer's notice): kFailed, and the first connection that failed in its
  /// setup kept for failedSetup(); a device-path one also poisons every other staging FIFO of the rank with its word.
  void judged(NetConn& c);
  /// Keeps c for failedSetup() when the net failed it in its setup and none was kept before; called before c's FIFO
  /// is poisoned, so that a wait that sees the poison finds it.
  void recordSetupFailure(NetConn& c);
  /// Poisons every connection with `peer` with `word` (a failure the peer reported over the bootstrap) and closes
  /// them; `calls` (7 words, or null) are a mismatch's two calls, written first as Connections::poisonAll does. The
  /// notice is kept: a connection with that peer opened later (adopt) is poisoned with it at once, since the peer
  /// sends it only once and will never complete that connection's setup.
  void poisonPeer(int peer, uint64_t word, const uint64_t* calls);
  /// The same for one connection.
  void poisonPeerConn(NetConn& c, uint64_t word, const uint64_t* calls);
  /// Failure notices from peers over the bootstrap (every kNoticePollMs), and this rank's own once it failed.
  bool exchangeNotices();
  /// Reads a failure notice from `peer` if one is there, and poisons every connection with it; true if one was.
  bool takeNotice(int peer);
  void closeConn(NetConn& c);
  bool flushed(bool notices) const;
  std::string connName(const NetConn& c) const;
  /// An open connection's progress, for waitState.
  std::string progressText(const NetConn& c) const;

  ncclComm* comm_;
  int rank_;
  NetChoice net_;
  std::string label_;                                             ///< "net NAME"
  /// Each of the communicator's devices' (NetChoice::devs) name and PCI path.
  std::vector<std::pair<std::string, std::string>> deviceNames_;
  /// The devices channels use, as positions in NetChoice::devs: channel c's connections use devices_[deviceSlot(c)].
  std::vector<int> devices_;
  std::vector<int> deviceClasses_;  ///< devices_[i]'s PCI distance class to this rank's GPU (PathClass), or -1
  std::vector<int> ptrSupport_;     ///< each of NetChoice::devs' NCCL_PTR_* (its properties)
  std::vector<bool> forceFlush_;    ///< each one's forceFlush (its properties)
  ProxyWake wake_;

  std::vector<std::unique_ptr<NetConn>> conns_;  ///< the proxy's (the caller's after the join)
  /// Held by whichever thread makes a pass over conns_: the proxy thread, or a rank's thread in progress().
  std::mutex passMu_;
  std::atomic<uint64_t> rankMoves_{0};  ///< progress() calls that moved data
  const bool rankProgress_;             ///< CHORUS_NET_RANK_PROGRESS and a net that takes calls from any thread
  /// The net sends a slot as one message where it can (NetProgressHooks::isendv/irecvv; sendSlots says the framing).
  const bool slotMsgs_;
  std::atomic<bool> engaged_{false};    ///< a rank's thread drives the open connections (engage)
  std::atomic<uint64_t> drivenOps_{0};  ///< operations whose rank's thread drove the net (engage)
  uint64_t asideSleeps_ = 0;  ///< proxy thread: its sleeps while a rank's thread drove the net (read after the join)
  std::atomic<bool> quiet_{false};  ///< at the last pass every connection was open and nothing failed
  bool rankPending_ = false;        ///< the rank's thread: its last progressAll left a send connection with slots to go

  std::mutex newMutex_;  ///< guards newConns_ and the refusal of new conns after stop_
  std::vector<std::unique_ptr<NetConn>> newConns_;
  std::atomic<bool> haveNew_{false};

  std::mutex shutdownMutex_;
  bool shutDown_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> failedWord_{0};
  uint64_t failedCalls_[7] = {};    ///< written by markFailedCalls before failedWord_ (whose release publishes them)
  std::vector<bool> noticeSentTo_;  ///< proxy thread: this rank's failure was sent to the rank over the bootstrap
  /// Proxy thread: each peer's failure notice taken over the bootstrap (word, then 7 words of calls or zeros), for
  /// the connections with it that come after (poisonPeer).
  std::map<int, std::array<uint64_t, 8>> peerNotices_;
  std::chrono::steady_clock::time_point nextNoticePoll_{};
  mutable std::mutex failMu_;  ///< guards firstFailure_ (fail() writes, netFailure() reads) and setupFailedName_
  std::string firstFailure_;   ///< the first connection that failed in the net, and why
  /// The first connection the net failed in its setup, once judge() poisoned its FIFO (failedSetup()); its name.
  std::atomic<const Fifo*> setupFailedFifo_{nullptr};
  std::string setupFailedName_;
  std::thread thread_;
};

}  // namespace chorus
