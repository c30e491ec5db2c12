// Small TCP helpers shared by the bootstrap and the socket net (transports/socket/).
//
// Every socket is non-blocking; waits use poll() in slices of at most 100 ms so that a
// deadline (core/timeout.h) and an optional abort flag are always honoured, and no
// thread spins. Failures come back as an IoResult whose status tells EOF, reset, timeout
// and abort apart, and whose text names the peer address; callers turn that into an
// ncclResult_t with the rank they were talking to.
//
// Threading: a Socket is owned by one thread at a time, except shutdown(), which another
// thread may call to wake a blocked owner (used on abort).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/timeout.h"
#include "nccl.h"

namespace chorus {

/// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};  ///< the address (sockaddr_in or sockaddr_in6)
  socklen_t len = 0;           ///< its length; 0 when empty

  /// AF_INET, AF_INET6, or AF_UNSPEC when empty.
  int family() const { return len == 0 ? AF_UNSPEC : storage.ss_family; }
  /// Port in host byte order (0 when empty).
  int port() const;
  /// Sets the port (host byte order).
  void setPort(int port);
  /// "1.2.3.4:5" or "[fd00::1]:5" ("(none)" when empty).
  std::string str() const;
  /// The address without the port ("1.2.3.4" or "fd00::1").
  std::string hostStr() const;
  /// Whether the address is a loopback one.
  bool isLoopback() const;
  /// Same family, address and port.
  bool operator==(const SockAddr& o) const;
};

/// A SockAddr in a fixed, pointer-free 24-byte form that can travel in ids and messages.
struct PackedAddr {
  uint16_t family = 0;   ///< 0 empty, 4 IPv4, 6 IPv6 (our own codes, not the OS's AF_*)
  uint16_t port = 0;     ///< host byte order
  uint32_t scopeId = 0;  ///< IPv6 scope (interface index) for link-local addresses
  uint8_t addr[16] = {0};
};
static_assert(sizeof(PackedAddr) == 24, "PackedAddr is part of wire formats");

/// Packs an address for the wire.
PackedAddr packAddr(const SockAddr& a);
/// Unpacks an address; false when the family code is unknown.
bool unpackAddr(const PackedAddr& p, SockAddr* out);

/// Parses "host:port", "[v6addr]:port" or "v4addr:port"; host names are resolved.
ncclResult_t parseAddress(const std::string& text, SockAddr* out, std::string* why);

/// Whether interface `name` is selected by an NCCL_SOCKET_IFNAME-style `spec`:
/// comma-separated prefixes; a leading `^` excludes the listed ones; `=` (after any `^`) makes them exact names.
bool ifNameMatches(const std::string& spec, const std::string& name);

/// One interface address seen by getifaddrs.
struct IfAddr {
  std::string name;
  unsigned flags;  ///< IFF_*
  SockAddr addr;
};
/// This host's IPv4 and routable IPv6 interface addresses, in discovery order.
std::vector<IfAddr> listInterfaces();

/// The interfaces of `all` that chorus uses, as NCCL finds them, at most `maxIfs`: those NCCL_SOCKET_IFNAME-style
/// `spec` selects when it is set; else the non-loopback ones that are not container bridges (docker*, virbr*), else
/// those bridges, else loopback. Only interfaces that are up; each once, with its first address of `family`
/// (AF_UNSPEC: IPv4 where it has one, else IPv6), port 0. IPv4 interfaces come first, each family in `all`'s order.
std::vector<IfAddr> selectInterfaces(const std::vector<IfAddr>& all, const std::string& spec, int family,
                                     size_t maxIfs);

/// selectInterfaces over this host's interfaces, NCCL_SOCKET_IFNAME and NCCL_SOCKET_FAMILY; fails (with the
/// interfaces seen in `why`) when none is usable.
ncclResult_t findInterfaces(std::vector<IfAddr>* out, size_t maxIfs, std::string* why);
/// The same over `all`, this host's interfaces as listInterfaces() gave them (for a caller that needs that list too).
ncclResult_t findInterfaces(const std::vector<IfAddr>& all, std::vector<IfAddr>* out, size_t maxIfs,
                            std::string* why);

/// The first interface findInterfaces gives: the local address the bootstrap listens on. `ifName` (may be null)
/// gets its name.
ncclResult_t findInterface(SockAddr* out, std::string* ifName, std::string* why);

/// How an I/O operation ended.
enum class IoStatus : int {
  kOk = 0,
  kEof,      ///< the peer closed the connection
  kReset,    ///< ECONNRESET / EPIPE: the peer went away abruptly
  kTimeout,  ///< the deadline passed
  kAborted,  ///< the abort flag was set
  kRefused,  ///< connection refused until the deadline
  kError,    ///< any other system error (errno in `err`)
};

/// Result of a socket operation: status plus a message naming the peer address.
struct IoResult {
  IoStatus status = IoStatus::kOk;
  int err = 0;       ///< errno when relevant
  std::string what;  ///< human-readable cause, names the peer address
  bool ok() const { return status == IoStatus::kOk; }
};

/// Maps an I/O failure to NCCL's codes: EOF/reset -> ncclRemoteError, abort -> ncclInternalError, others ->
/// ncclSystemError.
ncclResult_t ioToNccl(const IoResult& r);
/// Short name of a status ("EOF", "reset", "timeout", ...).
const char* ioStatusName(IoStatus s);

/// Longest single poll() slice: waits re-check the abort flag at least this often.
constexpr int kPollSliceMs = 100;

/// A non-blocking TCP socket (listening or connected). Move-only; closes on destruction.
class Socket {
 public:
  Socket() = default;
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept;
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  /// Listens on `bindAddr` (port 0: an ephemeral port). local() then holds the bound address.
  static IoResult listen(const SockAddr& bindAddr, Socket* out);
  /// Connects to `to`, retrying refused/timed-out attempts with backoff until `deadline`; sets TCP_NODELAY.
  /// `stopRetrying` (may be empty) is asked with the errno after each attempt that would be retried: true ends the
  /// wait at once (kRefused for a refusal: the caller knows the listener is gone for good, not starting up).
  static IoResult connect(const SockAddr& to, const Deadline& deadline, std::atomic<int>* abortFlag, Socket* out,
                          const std::function<bool(int err)>& stopRetrying = {});

  /// Starts a connect to `to` without waiting (one attempt, no retry); finish it with connected().
  static IoResult startConnect(const SockAddr& to, Socket* out);
  /// Whether a startConnect() finished, without waiting: *done true once connected (TCP_NODELAY set); an error when
  /// it failed (refused, unreachable).
  IoResult connected(bool* done);

  /// Accepts one connection, waiting until `deadline`.
  IoResult accept(Socket* out, const Deadline& deadline, std::atomic<int>* abortFlag);
  /// Accepts one connection if one is pending; *out stays invalid when none is.
  IoResult tryAccept(Socket* out);

  /// Sends all `len` bytes, waiting until `deadline`.
  IoResult sendAll(const void* data, size_t len, const Deadline& deadline, std::atomic<int>* abortFlag);
  /// Receives exactly `len` bytes, waiting until `deadline`.
  IoResult recvAll(void* data, size_t len, const Deadline& deadline, std::atomic<int>* abortFlag);
  /// Sends what the socket accepts now; *done (bytes of `len` already sent) advances. Never waits.
  IoResult sendSome(const void* data, size_t len, size_t* done);
  /// Receives what is available now; *done advances. Never waits; EOF is an error.
  IoResult recvSome(void* data, size_t len, size_t* done);
  /// One sendmsg of the `n` buffers of `iov` without waiting: *moved gets the bytes taken (0 when the socket is full).
  IoResult sendv(const iovec* iov, int n, size_t* moved);
  /// One recvmsg into the `n` buffers of `iov` without waiting: *moved gets the bytes read (0 when none are there);
  /// kEof when the peer closed.
  IoResult recvv(const iovec* iov, int n, size_t* moved);
  /// Lets the kernel hold back the ACKs of what arrives here until they can go together or with data (Linux:
  /// TCP_QUICKACK off), not one ACK per small segment the moment it is read, which a one-way connection otherwise
  /// gets. The kernel drops back to quick ACKs when a held ACK's timer fires (after a quiet spell), so a caller sets
  /// it again from time to time. No effect where the system has no such option.
  void delayAcks();

  /// Wakes any thread blocked on this socket and tells the peer we are gone (fd stays open).
  void shutdown();
  /// Ends our direction only: the peer reads the end after what was sent; it may still send to us.
  void shutdownWrite();
  /// Closes the descriptor.
  void close();

  /// Whether the socket holds a descriptor.
  bool valid() const { return fd_ >= 0; }
  /// The descriptor (for poll()); -1 when invalid.
  int fd() const { return fd_; }
  /// The peer's address (connected sockets).
  const SockAddr& peer() const { return peer_; }
  /// Our own address (listening sockets: the bound one).
  const SockAddr& local() const { return local_; }

 private:
  int fd_ = -1;
  SockAddr peer_;
  SockAddr local_;
};

/// Waits until `fd` has any of `events` (POLLIN/POLLOUT) or the deadline/abort flag ends the wait, in slices of
/// at most kPollSliceMs. `peerText` names the other side in the timeout message. `eachSlice` (may be empty) runs
/// after every slice that ended without readiness (a SlowWait check, say).
IoResult waitFd(int fd, short events, const Deadline& deadline, std::atomic<int>* abortFlag,
                const std::string& peerText, const std::function<void()>& eachSlice = {});

}  // namespace chorus
