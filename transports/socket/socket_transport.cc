// Socket transport, executor-thread side: the collective setup, connecting the ends of a
// connection, and shutdown. The proxy thread's loop is in socket_proxy.cc.
#include "transports/socket/socket_transport.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "core/checks.h"
#include "core/comm.h"
#include "core/timeout.h"
#include "transports/socket/socket_proxy.h"

namespace chorus {
namespace {

// Connect failures the peer is to blame for (it is gone or unreachable) versus local ones.
ncclResult_t connectError(const IoResult& r) {
  switch (r.status) {
    case IoStatus::kAborted:
      return ncclInternalError;
    case IoStatus::kEof:
    case IoStatus::kReset:
    case IoStatus::kRefused:
    case IoStatus::kTimeout:
      return ncclRemoteError;
    default:
      return ncclSystemError;
  }
}

}  // namespace

ncclResult_t SocketTransport::create(ncclComm* comm, std::unique_ptr<RemoteTransport>* out) {
  out->reset();
  // Every rank enters the allgather even when its own listen socket failed (with an empty
  // address), so that the others fail naming it instead of waiting for the bootstrap deadline.
  SockAddr addr;
  std::string ifName, why;
  Socket listen;
  if (findInterface(&addr, &ifName, &why) == ncclSuccess) {
    IoResult r = Socket::listen(addr, &listen);
    if (!r.ok()) why = r.what;
  }
  std::vector<PackedAddr> all(comm->nranks);
  if (listen.valid()) all[comm->rank] = packAddr(listen.local());
  CHORUS_CHECK(comm->bootstrap->allGather(all.data(), sizeof(PackedAddr)));
  if (!listen.valid())
    CHORUS_FAIL(comm, ncclSystemError, "rank %d: socket transport: cannot listen: %s", comm->rank, why.c_str());
  std::vector<SockAddr> addrs(comm->nranks);
  for (int r = 0; r < comm->nranks; r++) {
    if (!unpackAddr(all[r], &addrs[r]))
      CHORUS_FAIL(comm, ncclSystemError,
                  "rank %d: socket transport: rank %d could not open its listen socket (see "
                  "its log)",
                  comm->rank, r);
  }
  INFO(kNet | kInit, "rank %d: socket transport listening on %s (%s)", comm->rank, listen.local().str().c_str(),
       ifName.c_str());
  auto proxy = std::make_unique<SocketProxy>(comm, std::move(listen), std::move(addrs));
  CHORUS_CHECK(proxy->start());
  *out = std::move(proxy);
  return ncclSuccess;
}

SocketProxy::SocketProxy(ncclComm* comm, Socket listen, std::vector<SockAddr> addrs)
    : comm_(comm),
      rank_(comm->rank),
      nranks_(comm->nranks),
      commHash_(comm->commHash),
      addrs_(std::move(addrs)),
      listen_(std::move(listen)) {}

SocketProxy::~SocketProxy() {
  shutdown();
  for (auto& c : conns_) std::free(c->mem);
  for (auto& c : newConns_) std::free(c->mem);
}

ncclResult_t SocketProxy::start() {
  if (!wake_.open())
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: socket transport: eventfd failed: %s", rank_, strerror(errno));
  try {
    thread_ = std::thread([this]() { run(); });
  } catch (const std::system_error& e) {
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: socket transport: cannot start the proxy thread: %s", rank_,
                e.what());
  }
  return ncclSuccess;
}

ncclResult_t SocketProxy::newConn(bool isSend, int channel, int peer, const FifoGeometry& geo,
                                  std::unique_ptr<SocketConn>* out) {
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    CHORUS_FAIL(comm_, ncclInternalError, "rank %d: socket transport: invalid peer %d", rank_, peer);
  void* mem = allocRemoteFifo(geo);
  if (mem == nullptr)
    CHORUS_FAIL(comm_, ncclSystemError, "rank %d: socket transport: cannot allocate a %zu-byte FIFO for rank %d", rank_,
                geo.totalBytes(), peer);
  auto c = std::make_unique<SocketConn>();
  c->isSend = isSend;
  c->channel = channel;
  c->peer = peer;
  c->mem = mem;
  c->fifo.attach(mem, geo);
  c->fifo.peer = peer;
  *out = std::move(c);
  return ncclSuccess;
}

ncclResult_t SocketProxy::handOver(std::unique_ptr<SocketConn> conn, Fifo* out) {
  Fifo view;
  view.attach(conn->mem, conn->fifo.geo);
  view.peer = conn->peer;
  {
    std::lock_guard<std::mutex> lock(newMutex_);
    if (stop_.load(std::memory_order_acquire)) {
      std::free(conn->mem);
      CHORUS_FAIL(comm_, ncclInvalidUsage,
                  "rank %d: socket transport: connection %s rank %d requested after the "
                  "transport was shut down (the communicator failed or was aborted)",
                  rank_, conn->isSend ? "to" : "from", conn->peer);
    }
    newConns_.push_back(std::move(conn));
    haveNew_.store(true, std::memory_order_release);
  }
  wake_.wake();
  *out = view;
  return ncclSuccess;
}

ncclResult_t SocketProxy::connectSend(int channel, int peer, const FifoGeometry& geo, Fifo* out) {
  std::unique_ptr<SocketConn> c;
  CHORUS_CHECK(newConn(true, channel, peer, geo, &c));
  const SockAddr& to = addrs_[peer];
  Deadline deadline = Deadline::fromEnv();
  // The peer listened before its address was shared (SocketTransport::create), so a refusal means its listener
  // closed for good (a peer that failed keeps listening until destroyed, and answers with its failure): stop at once
  // and name it.
  SlowWait slow;
  IoResult r = Socket::connect(to, deadline, &comm_->abortFlag, &c->sock, [&](int err) {
    if (err == ECONNREFUSED) return true;
    slow.check([&]() {
      return "socket transport: " + commLabel(comm_) + " has tried for " + slow.elapsedText() +
             " s to connect channel " + std::to_string(channel) + " to " + comm_->bootstrap->describePeer(peer) +
             " at " + to.str() + " (" + strerror(err) + "; CHORUS_TIMEOUT_S " + secondsText(deadline.seconds()) + " s)";
    });
    return false;
  });
  SocketHello h = hello(channel, peer, &geo);
  if (r.ok()) r = c->sock.sendAll(&h, sizeof(h), deadline, &comm_->abortFlag);
  if (r.status == IoStatus::kRefused) {
    std::free(c->mem);
    std::string why;
    if (!comm_->bootstrap->peerGone(peer, &why))
      why = comm_->bootstrap->describePeer(peer) +
            " has closed its socket transport (its communicator was aborted "
            "or destroyed)";
    CHORUS_FAIL(comm_, ncclRemoteError, "rank %d: socket transport: channel %d: %s; %s", rank_, channel, why.c_str(),
                r.what.c_str());
  }
  if (!r.ok()) {
    std::free(c->mem);
    CHORUS_FAIL(comm_, connectError(r),
                "rank %d: socket transport: cannot connect channel %d to rank %d (%s) at %s: %s", rank_, channel, peer,
                comm_->peers[peer].hostname, to.str().c_str(), r.what.c_str());
  }
  c->state = SockConnState::kOpen;
  INFO(kNet, "rank %d: socket channel %d -> rank %d connected %s -> %s", rank_, channel, peer,
       c->sock.local().str().c_str(), to.str().c_str());
  return handOver(std::move(c), out);
}

ncclResult_t SocketProxy::connectRecv(int channel, int peer, const FifoGeometry& geo, Fifo* out) {
  // The sender connects to our listen socket on its own schedule; the proxy pairs its hello
  // with this FIFO whenever it arrives (before or after this call).
  std::unique_ptr<SocketConn> c;
  CHORUS_CHECK(newConn(false, channel, peer, geo, &c));
  c->state = SockConnState::kUnpaired;
  return handOver(std::move(c), out);
}

void SocketProxy::markFailed(uint64_t word) {
  uint64_t zero = 0;
  failedWord_.compare_exchange_strong(zero, word, std::memory_order_acq_rel);
  wake_.wake();
}

void SocketProxy::shutdown() {
  std::lock_guard<std::mutex> guard(shutdownMutex_);
  if (shutDown_) return;
  shutDown_ = true;
  {
    std::lock_guard<std::mutex> lock(newMutex_);
    stop_.store(true, std::memory_order_release);
  }
  if (wake_.fd() >= 0) wake_.wake();
  // The proxy flushes what the executor already published (a finished operation may still have
  // bytes in flight) and tells peers about poisoned FIFOs before it returns; see SocketProxy::run.
  if (thread_.joinable()) thread_.join();
  listen_.close();
  for (auto& p : pending_) p.sock.close();
  for (auto& p : stash_) p.sock.close();
  pending_.clear();
  stash_.clear();
  for (auto& c : conns_) c->sock.close();
  std::lock_guard<std::mutex> lock(newMutex_);
  for (auto& c : newConns_) c->sock.close();
  INFO(kNet, "rank %d: socket transport shut down", rank_);
}

}  // namespace chorus
