// The InfiniBand verbs net (NCCL_NET=IB): an ncclNet_v11_t over RC queue pairs (docs/net_ib.md).
//
// An IbNet is one verbs backend plus the devices discovered through it and the HCAs opened so far. The process has
// one, over libibverbs, made by the table's init(); tests make their own over the fake backend and pass it as the
// `ctx` of listen()/connect(). Every comm remembers its IbNet, so that only init/devices/getProperties/finalize
// use the process's one.
//
// Threading: discovery runs once, before the net is used; openHca() may be called from several proxy threads and
// is serialized by a mutex. Comms are owned by one thread at a time (the proxy's).
//
// Asynchronous events, as NCCL's IB net takes them: from the first HCA it opens, an IbNet runs one watcher thread
// that sleeps in poll() on the asynchronous event descriptors of its open HCAs. Every event is logged (WARN; a
// queue pair's "communication established" aside). A fatal one, the device's (IBV_EVENT_DEVICE_FATAL) or a queue
// pair's or CQ's, is kept: the comms it concerns fail at their next isend, irecv, iflush or test, with the event named
// (NCCL_IB_RETURN_ASYNC_EVENTS=1, the default), rather than wait for completions a dead HCA never produces.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chorus/net.h"
#include "transports/ib/ib_select.h"
#include "transports/ib/ib_verbs.h"
#include "transports/remote.h"

namespace chorus {

struct IbComm;

/// One verbs backend, its net devices and its opened HCAs.
class IbNet {
 public:
  /// A net over `verbs` (discover() fills the devices).
  explicit IbNet(std::unique_ptr<IbVerbs> verbs);
  ~IbNet();
  IbNet(const IbNet&) = delete;
  IbNet& operator=(const IbNet&) = delete;

  /// Lists the backend's ports and keeps the usable ones NCCL_IB_HCA and NCCL_IB_GID_INDEX select, and finds what
  /// GPUDirect RDMA each offers (opening its HCA to probe dma-buf support); all logged at INFO.
  /// Fails with *why only when the backend cannot list devices; zero devices is a success.
  ncclResult_t discover(std::string* why);
  /// Net devices: the ports discover() kept (0 .. nports() - 1), then those makeVDevice() merged from several.
  int ndev() const;
  /// Ports discover() kept.
  int nports() const { return static_cast<int>(devices_.size()); }
  /// Port `port` (0 <= port < nports()).
  const IbDevice& device(int port) const { return devices_[port]; }
  /// The ports of net device `dev` (one for a port, 2-4 for a merged device), or empty when there is no such device.
  std::vector<int> ports(int dev) const;
  /// "mlx5_0:1", or "mlx5_0:1+mlx5_1:1" for a merged device.
  std::string deviceText(int dev) const;
  /// NCCL's makeVDevice: the net device spanning the ports props.devs (port indices): the port itself for one, else
  /// a merged device (the same one again for the same ports in the same order). Refuses an empty or too long list,
  /// a port that does not exist or repeats, and ports of different link layers.
  ncclResult_t makeVDevice(const ncclNetVDeviceProps_v11_t& props, int* dev);
  /// NCCL's properties of net device `dev`; a merged device's speed is the sum of its ports', its pointer support
  /// what all of them offer.
  ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) const;
  /// Whether regMr takes GPU memory on net device `dev` (a peer-memory module is loaded), on every port of a merged
  /// device, since its registrations are made on each.
  bool peerMemory(int dev) const;
  /// Whether regMrDmaBuf takes dma-buf file descriptors on net device `dev`: the HCAs of all its ports support them and
  /// NCCL_DMABUF_ENABLE is not 0.
  bool dmaBuf(int dev) const;
  /// Whether data registrations (regMr, regMrDmaBuf) ask for PCIe relaxed ordering: NCCL_IB_PCI_RELAXED_ORDERING is 1
  /// or 2 (the default) and the backend offers it, as NCCL decides. The comms' control memory never does: its
  /// receive descriptors rely on the HCA's writes landing in order.
  bool relaxedOrdering() const { return relaxedOrdering_; }
  /// The opened HCA of port `port`, opened on first use and shared by that HCA's ports until the net goes.
  ncclResult_t openHca(int port, IbHca** out);
  /// The backend.
  IbVerbs& verbs() { return *verbs_; }
  /// One line on what discover() found: the devices, or why there are none.
  const std::string& summary() const { return summary_; }

  /// Records that `obj` (a queue pair or CQ) is comm `c`'s, so that a fatal event on it fails `c`.
  void own(const void* obj, const IbComm* c);
  /// Forgets comm `c`'s objects and the fatal event kept for it (before it destroys them).
  void disown(const IbComm* c);
  /// Whether a fatal asynchronous event concerns comm `c`: one on its queue pairs or CQs, or the device fatal error of
  /// an HCA of its ports (c's owner thread only); *why names the event.
  bool asyncFatal(const IbComm* c, std::string* why) const;
  /// Whether HCA `hca` reported a device fatal error; *why names it.
  bool hcaFatal(const IbHca* hca, std::string* why) const;
  /// Asynchronous events the watcher has taken and handled so far (tests wait for theirs).
  uint64_t asyncEventsTaken() const { return eventsTaken_.load(std::memory_order_acquire); }

 private:
  /// The watcher thread's body: takes the events of every open HCA until the net goes.
  void watchAsyncEvents();
  /// Logs one event of HCA `hca` (named `name`) and keeps it when it is fatal.
  void onAsyncEvent(const std::string& name, const IbHca* hca, const IbAsyncEvent& ev);
  /// The device fatal error HCA `hca` reported, or null (fatalMu_ held).
  const std::string* deadHcaText(const IbHca* hca) const;

  std::unique_ptr<IbVerbs> verbs_;
  std::vector<IbDevice> devices_;
  std::string summary_;
  bool relaxedOrdering_ = false;
  std::mutex mu_;  // guards hcas_
  std::unordered_map<std::string, std::unique_ptr<IbHca>> hcas_;
  /// A device makeVDevice merged: its ports and its name ("mlx5_0+mlx5_1", which getProperties hands out).
  struct Merged {
    std::vector<int> ports;
    std::string name;
  };
  mutable std::mutex mergedMu_;  // guards merged_ (a deque: names handed out stay where they are)
  std::deque<Merged> merged_;

  std::thread watcher_;  // started by the first openHca(), stopped by the destructor
  ProxyWake wake_;       // wakes the watcher: a new HCA to watch, or the end
  std::atomic<bool> stopWatcher_{false};
  mutable std::mutex fatalMu_;  // guards owners_, deadHcas_, fatalComms_
  std::unordered_map<const void*, const IbComm*> owners_;
  std::unordered_map<const IbHca*, std::string> deadHcas_;
  std::unordered_map<const IbComm*, std::string> fatalComms_;
  std::atomic<int> fatalEvents_{0};  // entries ever put in deadHcas_ or fatalComms_: 0 spares comms the lock
  std::atomic<uint64_t> eventsTaken_{0};
};

/// The IB net's function table. init/devices/getProperties/finalize use the process's IbNet over libibverbs; the
/// other functions work with any IbNet passed as `ctx` (so tests drive them over the fake backend).
const ncclNet_v11_t* ibNetTable();

/// What the process's IB net (the table's init) found: its devices, or why it has none or failed; empty before the
/// first init.
std::string ibProcessNetSummary();

/// Makes `net` the process's IB net, the one the table's init() hands to communicators made from now on (tests: an
/// IbNet over the fake verbs, so that whole communicators run the IB net through the net proxy); null makes the next
/// init() open libibverbs again. Returns the net it replaces (null if none), which the caller destroys once no
/// communicator that used it is left.
std::unique_ptr<IbNet> replaceIbProcessNet(std::unique_ptr<IbNet> net);

}  // namespace chorus
