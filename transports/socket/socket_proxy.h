// The socket transport's implementation: local FIFOs, and one proxy thread per communicator that
// moves their slots over non-blocking TCP sockets (see socket_transport.h and socket_wire.h).
//
// Threads and ownership:
//  - The executor thread calls connectSend/connectRecv: it allocates a SocketConn (and its FIFO
//    memory), connects, and hands the conn to the proxy through newConns_ (under newMutex_).
//  - The proxy thread owns every adopted SocketConn's stream state and socket, the listen socket,
//    and the accepted connections that wait for a hello or for their connectRecv (pending_, stash_).
//  - shutdown() may come from any thread (the executor after a failure, ncclCommAbort's thread, the
//    destructor): it stops and joins the proxy and only then closes sockets. FIFO memory is freed
//    by the destructor alone, because the executor's views of it (and Connections::poisonAll) stay
//    in use until the communicator is destroyed.
// Lock order: shutdownMutex_ before newMutex_; neither is held while waiting on a socket.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/socket.h"
#include "transports/socket/socket_transport.h"
#include "transports/socket/socket_wire.h"

struct pollfd;

namespace chorus {

/// Where a connection's stream stands (proxy thread only).
enum class SockConnState {
  kUnpaired,   ///< receive side registered; its sender's connection has not arrived yet
  kOpen,       ///< moving slots
  kEofSeen,    ///< receive side: clean EOF between frames; poisoned once the executor drained what arrived
  kNotifying,  ///< this rank poisoned the FIFO: telling the peer (best effort, bounded), then closing
  kClosed,     ///< socket closed; the FIFO is poisoned
};

/// One end of one socket connection: a local FIFO and its stream state.
struct SocketConn {
  bool isSend = false;
  int channel = 0;
  int peer = -1;
  void* mem = nullptr;  ///< the FIFO memory (4096-aligned, zeroed)
  Fifo fifo;            ///< the proxy's view (its step is unused: `done` counts instead)
  // Proxy thread only, once adopted:
  Socket sock;
  SockConnState state = SockConnState::kUnpaired;
  uint64_t done = 0;     ///< slots fully sent (send side) or received and published (receive side)
  size_t off = 0;        ///< bytes of the current frame already moved (header first, then payload)
  bool blocked = false;  ///< send side: the socket is full; wait for POLLOUT before writing again
  uint64_t word = 0;     ///< back channel: poison word being read (send side) or written (receive side)
  size_t wordOff = 0;
  SlotHeader notice{};  ///< send side, kNotifying: the failure-notice frame
  size_t noticeOff = 0;
  std::chrono::steady_clock::time_point closeBy{};        ///< kNotifying: give up telling the peer then
  std::chrono::steady_clock::time_point nextLiveCheck{};  ///< kUnpaired: when to check again that the peer lives
  SlowWait unpaired;  ///< kUnpaired: how long the sender has been awaited (started when the conn is made)
};

/// An accepted connection whose hello is incomplete, or complete but waiting for its connectRecv.
struct PendingHello {
  Socket sock;
  SocketHello hello{};
  size_t got = 0;
  std::chrono::steady_clock::time_point giveUpAt{};  ///< incomplete hellos are dropped then
};

/// SocketTransport over one proxy thread (created by SocketTransport::create).
class SocketProxy : public SocketTransport {
 public:
  /// Takes the listen socket and every rank's listen address (index = rank).
  SocketProxy(ncclComm* comm, Socket listen, std::vector<SockAddr> addrs);
  ~SocketProxy() override;
  /// Starts the proxy thread.
  ncclResult_t start();
  ncclResult_t connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out) override;
  ncclResult_t connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out) override;
  void shutdown() override;
  void markFailed(uint64_t word) override;
  void kick() override { wake_.kick(); }

 private:
  // ---- executor-thread side (socket_transport.cc) ----
  ncclResult_t newConn(bool isSend, int channel, int peer, const FifoGeometry& geo, std::unique_ptr<SocketConn>* out);
  ncclResult_t handOver(std::unique_ptr<SocketConn> conn, Fifo* out);

  // ---- proxy thread (socket_proxy.cc) ----
  void run();
  void adopt();
  bool stepConn(SocketConn& c);
  bool checkUnpaired(SocketConn& c);
  /// Asks rank `peer`'s listener for its poison word (status query). Returns false when it did not answer:
  /// *refused then says whether the listener is closed.
  bool queryPeer(int peer, uint64_t* word, bool* refused);
  /// Answers a connection with this rank's poison word and closes it (this rank failed).
  void answerFailed(Socket& s);
  bool sendFrames(SocketConn& c);
  bool recvFrames(SocketConn& c);
  bool readBackChannel(SocketConn& c);
  void beginNotify(SocketConn& c);
  bool notify(SocketConn& c);
  void failConn(SocketConn& c, PoisonReason reason, bool loud, const std::string& why);
  void closeConn(SocketConn& c);
  void acceptAll();
  void readHello(PendingHello& p);
  void pair(PendingHello p);
  bool tryPair(SocketConn& c);
  bool drained() const;
  bool needsTimedPoll() const;
  void buildPollSet(std::vector<pollfd>* fds, std::vector<SocketConn*>* conns) const;
  std::string connName(const SocketConn& c) const;
  /// The hello this rank sends to rank `to` on `channel` (geometry zero: a status query).
  SocketHello hello(int channel, int to, const FifoGeometry* geo) const;

  ncclComm* comm_;
  int rank_;
  int nranks_;
  uint64_t commHash_;
  std::vector<SockAddr> addrs_;  // immutable after construction
  ProxyWake wake_;               // new conns, kicks and shutdown wake a proxy blocked in poll()

  // Owned by the proxy thread while it runs; by shutdown()'s caller after the join.
  Socket listen_;
  std::vector<std::unique_ptr<SocketConn>> conns_;
  std::vector<PendingHello> pending_;
  std::vector<PendingHello> stash_;
  std::chrono::steady_clock::time_point acceptPausedUntil_{};
  bool acceptWarned_ = false;

  std::mutex newMutex_;  // guards newConns_ and the refusal of new conns after stop_
  std::vector<std::unique_ptr<SocketConn>> newConns_;
  std::atomic<bool> haveNew_{false};

  std::mutex shutdownMutex_;  // makes shutdown() idempotent across threads
  bool shutDown_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> failedWord_{0};  ///< this rank's poison word once it failed (markFailed), else 0
  std::thread thread_;
};

}  // namespace chorus
