// Nets: what carries bytes between hosts, behind one interface (include/chorus/net.h, NCCL's ncclNet_v11_t).
//
// Built-in nets and external NCCL net plugins both appear to the proxy (transports/net/net_proxy.h) as an
// ncclNet_v11_t table: a built-in fills one directly, a plugin of an older version (v6-v10) is wrapped by an adapter
// (transports/net/net_plugin.cc). Which net a communicator uses is decided once, at init, by selectNet() below and
// logged (NCCL_NET, NCCL_NET_PLUGIN, NCCL_IB_DISABLE; docs/net.md).
//
// The engine sees none of this: it gets a RemoteTransport (transports/remote.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/net.h"
#include "core/params.h"

struct pollfd;

namespace chorus {

/// NCCL_DMABUF_ENABLE: GPU memory may be registered with a net through dma-buf (0: never). Read by the IB net (whether
/// it offers NCCL_PTR_DMABUF) and by the device path (whether it exports the FIFO's GPU memory as a dma-buf).
extern IntParam kDmaBufEnable;
/// NCCL_GDR_FLUSH_DISABLE: 1: receives into GPU memory are not flushed (the IB and UCX nets' iflush completes at once).
extern IntParam kGdrFlushDisable;

/// What a built-in net may offer its proxy beyond NCCL's interface, so that an idle proxy sleeps until the net can
/// progress instead of polling it. External plugins have none.
struct NetProgressHooks {
  /// Fills up to `max` descriptors that become ready when a pending request of `ctx` can progress; returns how many.
  int (*pollFds)(void* ctx, struct pollfd* fds, int max);
  /// Gives the net a function that wakes its proxy (for the net's own threads); `arg` is passed to it.
  void (*setWaker)(void* ctx, void (*wake)(void* arg), void* arg);
  /// With hold 1, isend on `sendComm` only queues; hold 0 moves what was queued, together (the socket net: one
  /// sendmsg for a FIFO slot's header and payload, so they leave as one segment). Null: isend moves at once.
  void (*holdSends)(void* sendComm, int hold);
  /// Nonzero when a connection this context connects to a peer that already connected to it runs over that
  /// connection (the socket net's socket, CHORUS_SOCKET_TWO_WAY; the UCX net's endpoint, CHORUS_UCX_TWO_WAY): how many
  /// milliseconds the proxy of the higher rank of a pair may wait, before it connects, for the lower rank's
  /// connection to it to be accepted (NetProxy::setup; about what the net takes to set a connection up). Bounded: the
  /// lower rank may connect only after data this connection is to carry (a tree's child sends up before its parent
  /// sends down). Null or 0: never.
  int (*shareWaitMs)(void* ctx);
  /// Slot messages (the UCX net, where each message costs the transport a round of its own): isendv sends `n` host
  /// buffers (at most 2) as one message with NCCL tag `tag`; irecvv receives one message into `n` host buffers in
  /// turn, and test() gives its whole length. With both, the proxy sends a FIFO slot's header and a small host
  /// payload as one message, and a receiver learns from the length whether the payload came with the header or
  /// follows as a message of its own (NetProxy::sendSlots). Null: a header and a payload message a slot.
  ncclResult_t (*isendv)(void* sendComm, int n, void** data, size_t* sizes, int tag, void** request);
  ncclResult_t (*irecvv)(void* recvComm, int n, void** data, size_t* sizes, int tag, void** request);
  /// Nonzero when the last read of `recvComm`'s data left nothing to take (the socket net: a read came back short,
  /// nothing staged): a receive completed, the next one's test right after would be a system call that finds nothing,
  /// so the proxy leaves it to its next step (NetProxy::recvSlots). Null: always test on.
  int (*recvEmptied)(void* recvComm);
};

/// The socket net (transports/socket/socket_net.cc): always built.
const ncclNet_v11_t* socketNet();
/// Its hooks.
const NetProgressHooks* socketNetHooks();

/// The UCX net (transports/ucx/ucx_net.cc), or null when chorus was built without UCX.
const ncclNet_v11_t* ucxNet();
/// Whether the UCX net's iflush reads GPU memory back (its context handles CUDA memory and NCCL_GDR_FLUSH_DISABLE is
/// 0), so that receives may go to GPU memory; false without UCX.
bool ucxFlushesGpuMemory();
/// Its hooks (null without UCX): an idle proxy sleeps on the worker's event descriptor.
const NetProgressHooks* ucxNetHooks();
/// The InfiniBand verbs net (transports/ib/ib_net.cc), or null when chorus was built without libibverbs.
const ncclNet_v11_t* ibNet();

/// The process's external net plugin (NCCL_NET_PLUGIN, else libnccl-net.so), loaded once and adapted to v11: null
/// when none was found or it is not usable, with *why saying so (one line, for INFO or the error of NCCL_NET=name).
/// *version is the plugin version found (6-11).
const ncclNet_v11_t* pluginNet(std::string* why, int* version);

/// Held around a net's init, devices and finalize: communicators made at once by several threads of a process call
/// them one at a time, as NCCL's netPluginMutex does, so a plugin written for NCCL need not guard its own set-up.
std::mutex& netSetupMutex();

/// One net chosen for a communicator, initialized: its table and the context init returned.
struct NetChoice {
  const ncclNet_v11_t* api = nullptr;
  void* ctx = nullptr;
  std::string name;    ///< the net's name ("UCX", "IB", a plugin's name)
  std::string reason;  ///< why it was chosen, for NCCL_DEBUG=INFO
  /// The net's devices the communicator uses, by the net's index: every device, or after NIC fusion
  /// (NCCL_NET_MERGE_LEVEL, NCCL_NET_FORCE_MERGE) a merged device in place of the devices it spans.
  std::vector<int> devs;
  int commonDevices = 1;  ///< the fewest devices any rank's net offers (agreed at setup: the same on every rank)
  const NetProgressHooks* hooks = nullptr;  ///< a built-in net's, or null
  uint32_t inflightSlots = 4;               ///< FIFO slots the proxy keeps in flight per connection (at most 8)
  /// The net sends from any memory of this process, unregistered (the built-in socket net: sendmsg), so the proxy
  /// can send a slot passed by address from that address. Nets that need registered memory (IB, UCX's memory
  /// handles, a plugin) get the data in the FIFO.
  bool sendsUnregistered = false;
  /// The net's iflush makes what it received into GPU memory visible to the GPU, so GPUDirect RDMA may receive
  /// there. External plugins are trusted to (NCCL calls their iflush alike); chorus's UCX net's iflush completes at
  /// once without reading the GPU memory back, so its receives stay staged (its sends may read GPU memory).
  bool flushesGpuMemory = true;
  /// The net takes calls from any thread, one at a time, so a rank's thread may hand it what it has just published
  /// (RemoteTransport::progress): the built-in socket net (no per-thread state) and UCX net (its worker in
  /// UCS_THREAD_MODE_SERIALIZED). IB's and plugins' calls are not promised to be safe from another thread: their
  /// proxy alone calls them, as NCCL's proxy does.
  bool anyThread = false;
  /// CHORUS_NET_SLOT_TRAILER as it applies, the same on every rank: set only over a net that takesTrailers() (IB, a
  /// plugin), where a host channel's slot goes as one message, its payload and then its header (the FIFO's slotGap
  /// holds the header).
  bool slotTrailer = false;

  /// How many devices the communicator uses.
  int ndev() const { return static_cast<int>(devs.size()); }
  /// The net sends a FIFO slot's header and a small payload as one message itself (NetProgressHooks::isendv/irecvv:
  /// the UCX net).
  bool slotMessages() const { return hooks != nullptr && hooks->isendv != nullptr && hooks->irecvv != nullptr; }
  /// The net's proxy may send a host channel's slot with its header after the payload (slotTrailer): a net without
  /// hooks. The built-in nets frame slots their own way: the socket net sends a slot's two messages with one sendmsg
  /// (NetProgressHooks::holdSends) and may send a slot's data from the operation's buffer (sendsUnregistered), the
  /// UCX net has slot messages.
  bool takesTrailers() const { return hooks == nullptr; }
};

}  // namespace chorus
