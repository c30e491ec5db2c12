// The socket net (NCCL_NET=Socket, the default between hosts; docs/net.md): TCP behind NCCL's ncclNet_v11_t
// interface, driven by the net proxy (transports/net/net_proxy.h) like every other net.
//
// A connection (a sendComm and the recvComm it reaches) is one control socket, plus, when striping is on,
// D = NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets moved by NCCL_SOCKET_NTHREADS helper threads of the
// comm (socket k belongs to thread k mod NTHREADS), as NCCL lays out its socket net.
//
// Wire (both ends run the same build; structs travel in host byte order):
//  - every socket opens with a Hello: magic, the listen's nonce (from the handle), its index (0 control, 1..D data).
//  - control socket: a MsgHeader per message. Without data sockets (NTHREADS x NSOCKS_PERTHREAD = 1: the default),
//    and for messages of at most kInlineBytes, the payload follows its header on the control socket.
//  - data sockets: a message of S bytes is cut into ceil(S / C) chunks of C = max(kMinChunk, ceil(S / D)) bytes;
//    chunk j goes on data socket (first + j) mod D, where `first` carries on from the previous message's last chunk.
//    Both ends count alike, so chunks carry no header.
//
// Threads: every call but the helpers' I/O comes from the proxy thread that owns the context. The proxy hands a
// chunk to a helper through the helper's queue (mutex, eventfd); a helper that finishes the last chunk of a request
// wakes the proxy through the waker the proxy registered (NetProgressHooks::setWaker).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chorus/net.h"
#include "core/socket.h"
#include "transports/remote.h"

namespace chorus {
namespace socknet {

/// "SCK1": the first word of every handle, so that a handle of another net is refused, not misread.
constexpr uint32_t kHandleMagic = 0x314b4353u;
/// Opens every socket of a connection ("chsnet01").
constexpr uint64_t kHelloMagic = 0x313074656e736863ull;
/// Opens the second direction of a shared connection ("chsnrev1").
constexpr uint64_t kReverseMagic = 0x3176657276736e63ull;
/// Marks every message header.
constexpr uint32_t kMsgMagic = 0x4d534e43u;
/// Smallest chunk on a data socket (NCCL's minimum task size).
constexpr size_t kMinChunk = 64 * 1024;
/// Largest message sent on the control socket even when the connection has data sockets (FIFO slot headers, failure
/// notices).
constexpr size_t kInlineBytes = 4096;
/// Receive side: bytes a read of the control socket may take beyond what the request being filled needs (the
/// stream's next headers and small payloads), kept in the comm's stage for the requests after it.
constexpr size_t kStageBytes = 8192;
/// A receive comm sets delayed ACKs on its control socket at its first read that brings bytes and every this many
/// after (the kernel drops back to quick ACKs after a quiet spell).
constexpr uint64_t kDelayAcksEvery = 64;
/// How often accept() looks for reverse hellos on a context's send sockets (docs/net.md, "Two ways over one socket").
constexpr std::chrono::milliseconds kReverseScan{1};
/// Most data sockets a connection may have (NCCL's limit).
constexpr int kMaxDataSocks = 64;
/// Requests a comm may have outstanding (NCCL_NET_MAX_REQUESTS).
constexpr int kMaxRequests = 32;
/// How long closing a striped send comm waits for its helpers to move the chunks they still hold.
constexpr std::chrono::milliseconds kCloseFlush{1000};

/// What listen() hands the peer. `pending` is the sender's own: connect() keeps the comm it is building there
/// between calls (the proxy passes the same handle memory until connect returns a comm), as NCCL's nets do.
struct Handle {
  uint32_t magic = 0;
  uint32_t nData = 0;    ///< data sockets the receiver expects (0: inline)
  uint64_t nonce = 0;    ///< the listen's identity, echoed by every hello
  PackedAddr addr;       ///< where the listen socket is
  uint64_t pending = 0;  ///< sender-local: the comm connect() started
  uint64_t ctxId = 0;    ///< the listening context (Context::id; 0: it shares no connection)
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "a socket-net handle must fit NCCL's handle");

struct Hello {
  uint64_t magic = kHelloMagic;
  uint64_t nonce = 0;
  uint32_t index = 0;  ///< 0 control, 1..nData data
  uint32_t nData = 0;
  uint64_t ctxId = 0;  ///< the connecting context (Context::id; 0: it shares no connection)
};
static_assert(sizeof(Hello) == 32, "Hello is a wire format");

/// What a context that accepted a one-socket connection from context P sends on that socket when it connects to a
/// listen of P's: the listen's nonce. The socket then carries both directions (docs/net.md, "The socket net").
struct ReverseHello {
  uint64_t magic = kReverseMagic;
  uint64_t nonce = 0;
};
static_assert(sizeof(ReverseHello) == 16, "ReverseHello is a wire format");

struct MsgHeader {
  uint64_t size = 0;
  int32_t tag = 0;
  uint32_t magic = kMsgMagic;
};
static_assert(sizeof(MsgHeader) == 16, "MsgHeader is a wire format");

struct Comm;

/// One isend/irecv. Belongs to its comm's pool.
struct Request {
  Comm* comm = nullptr;
  bool used = false;
  char* data = nullptr;
  size_t cap = 0;  ///< receive: the posted size
  size_t size = 0;
  int tag = 0;
  MsgHeader hdr;
  size_t hdrDone = 0;
  bool hdrComplete = false;
  size_t payDone = 0;  ///< inline payload moved
  int nChunks = 0;
  std::atomic<int> chunksDone{0};  ///< chunks the helpers finished
};

/// One chunk of a request on one data socket.
struct Task {
  Request* req = nullptr;
  char* data = nullptr;
  size_t size = 0;
  size_t done = 0;
};

/// A helper thread of a striped comm: it moves the chunks queued on its data sockets.
struct Helper {
  std::thread thread;
  ProxyWake wake;                        ///< new tasks and stop
  std::mutex mu;                         ///< guards queues' pushes and pops (a popped task's bytes are the helper's)
  std::vector<int> socks;                ///< the comm's data socket indexes this helper owns
  std::vector<std::deque<Task>> queues;  ///< per owned socket, in order
  std::atomic<bool> stop{false};
};

struct Context;

/// A send or receive comm: one connection.
struct Comm {
  Context* ctx = nullptr;
  int dev = 0;  ///< the net device it runs on
  bool isSend = false;
  bool held = false;             ///< send side: isend queues without moving (holdSends)
  std::shared_ptr<Socket> ctrl;  ///< shared with `partner` when the connection carries both directions
  std::vector<Socket> data;      ///< D data sockets (empty: inline)
  std::vector<std::unique_ptr<Helper>> helpers;
  Request reqs[kMaxRequests];
  std::deque<Request*> queue;  ///< requests in posting order, until test() reports them done
  uint64_t nextSock = 0;       ///< data socket of the next chunk (both ends count alike)
  std::atomic<bool> failed{false};
  std::mutex whyMu;
  std::string why;   ///< the first failure (helpers or proxy), under whyMu
  std::string peer;  ///< the peer's address, for errors
  /// Receive side: the control socket ended cleanly between messages (the sender closed). Messages whose header came
  /// still finish on the data sockets; later receives fail with `closedWhy`.
  bool ctrlClosed = false;
  std::string closedWhy;
  /// Receive side: control-socket bytes read past the request that was being filled, [stageBeg, stageEnd) not yet
  /// taken by a request (kStageBytes).
  std::unique_ptr<char[]> stage;
  size_t stageBeg = 0;
  size_t stageEnd = 0;
  /// Receive side: reads of the control socket that brought bytes (to set delayed ACKs again every kDelayAcksEvery).
  uint64_t dataReads = 0;
  /// Receive side: the last read of the control socket came back short of what it could take, so it left the socket
  /// empty (NetProgressHooks::recvEmptied while the stage is empty too).
  bool readEmptied = false;
  /// Two ways over one socket: receive side, the context at the other end (0: unknown); whether this comm's socket may
  /// still carry the other direction (one socket, not yet claimed or shared: false once `partner` is set); the comm of
  /// the other direction sharing it.
  uint64_t peerCtx = 0;
  bool reversible = false;
  Comm* partner = nullptr;
  /// Send side, reversible: the reverse hello arriving on this socket (read by accept()).
  ReverseHello revIn;
  size_t revInGot = 0;
  /// Send side, connect() in progress over a receive comm's socket: that comm, and the reverse hello going out.
  Comm* claim = nullptr;
  bool sharing = false;  ///< connect() goes over `claim`'s socket (claim turns null if that comm closes first)
  ReverseHello revOut;
  size_t revOutDone = 0;
  // connect() in progress (send side): sockets not yet connected or whose hello is not yet written.
  std::vector<Socket> connecting;
  std::vector<size_t> helloDone;
  std::vector<Hello> hellos;
};

/// An accepted socket whose hello has not arrived whole.
struct PendingSock {
  Socket sock;
  Hello hello;
  size_t got = 0;
};

struct ListenComm {
  Context* ctx = nullptr;
  int dev = 0;
  Socket sock;
  uint64_t nonce = 0;
  uint32_t nData = 0;
  std::vector<PendingSock> pending;
  std::vector<Socket> have;  ///< by index: 0 control, 1..nData data (invalid until its hello arrived)
  int nHave = 0;
  uint64_t ctrlCtx = 0;  ///< the connecting context, from the control socket's hello
};

/// Most interfaces the net offers as devices (NCCL's MAX_IFS).
constexpr size_t kMaxDevices = 16;

/// A net device: one interface NCCL_SOCKET_IFNAME selects (docs/net.md, "The socket net").
struct Device {
  std::string name;
  SockAddr addr;  ///< where listen() on this device binds (port 0)
  std::string pciPath;
  int speedMbps = 10000;  ///< /sys/class/net/NAME/speed where it says
  std::string vendor;     ///< /sys/class/net/NAME/device/vendor ("0x1d0f"), empty where there is none
};

/// One init(): the devices and striping settings of one communicator's proxy.
struct Context {
  std::vector<Device> devs;
  int64_t nThreads = 1;    ///< NCCL_SOCKET_NTHREADS as set (-2: by the device, socketStriping)
  int64_t nPerThread = 1;  ///< NCCL_NSOCKS_PERTHREAD as set
  bool delayAcks = true;  ///< CHORUS_SOCKET_DELAYED_ACKS
  uint64_t id = 0;        ///< names this context to its peers when connections may carry both ways (else 0)
  /// When accept() next looks for reverse hellos on the send sockets (one poll of them all at most every
  /// kReverseScan, however many listens are being accepted).
  std::chrono::steady_clock::time_point revScanAt{};
  std::vector<Comm*> comms;       ///< open comms, for pollFds
  std::vector<Comm*> connecting;  ///< comms connect() started and has not returned (freed by finalize if abandoned)
  void (*wake)(void*) = nullptr;
  void* wakeArg = nullptr;
};

/// Data sockets a connection gets for NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (0 when that is 1, or either is
/// 0: inline), and the helper threads that move them (*threads).
int dataSockets(int nThreads, int nPerThread, int* threads);

/// NCCL_SOCKET_NTHREADS (`nThreads`) and NCCL_NSOCKS_PERTHREAD (`nPerThread`) on an interface whose PCI vendor is
/// `vendor`: each as set, or where it is -2 (the default) as NCCL picks it by the vendor: 2 threads of 8 sockets on
/// AWS's ENA (0x1d0f), 4 threads of 1 on Google's gVNIC (0x1ae0), no thread (one socket) elsewhere. Returns the NIC
/// whose choice was taken ("AWS ENA"), or null.
const char* socketStriping(const std::string& vendor, int64_t nThreads, int64_t nPerThread, int* threadsOut,
                           int* perThreadOut);

/// Chunk size of a message of `size` bytes over `nData` data sockets.
size_t chunkBytes(size_t size, int nData);

}  // namespace socknet
}  // namespace chorus
