// The devices the UCX net offers (docs/net_ucx.md, "Devices"): which network devices become chorus net devices, each
// with a UCP context of its own restricted to it. Pure logic over what the host has; built with or without UCX.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace chorus {
namespace ucx {

/// One device of the UCX net.
struct DeviceSpec {
  std::string name;      ///< the UCX device: its context gets UCX_NET_DEVICES=name ("eth0", "mlx5_0:1")
  std::string listenIf;  ///< the interface whose address its listeners bind; empty: chorus's socket interface
  bool verbs = false;    ///< an RDMA port ("dev:port"), described from /sys/class/infiniband
};

/// What the host has, as listUcxDevices reads it.
struct HostNets {
  std::vector<std::string> selectedIfs;  ///< the interfaces NCCL_SOCKET_IFNAME / _FAMILY select, in their order
  std::vector<std::string> addressedIfs;  ///< every interface with an address (to listen on a named one)
  std::vector<std::string> verbsPorts;    ///< active RDMA ports, "mlx5_0:1"
  /// The IP interface of each RDMA port that has one (IPoIB, or RoCE's Ethernet interface), by port.
  std::map<std::string, std::string> portInterfaces;
};

/// Whether a UCX_TLS value lets UCX use RDMA transports: unset, "all", an exclusion list ("^..."), or any transport
/// that is not one of UCX's TCP, shared-memory, loopback or GPU-copy transports.
bool tlsAllowsRdma(const std::string& tls);

/// The devices, at most `max`:
///  - UCX_NET_DEVICES (`netDevices`) set and not "all": each of its comma-separated items, in order, once;
///  - else, when UCX_TLS allows RDMA and the host has active RDMA ports: each port (as NCCL's UCX plugin does);
///  - else each interface chorus's socket code selects (the socket net's devices).
/// A device that is an interface with an address listens on it; so does an RDMA port on its IP interface, as UCX's
/// connection set-up resolves the device from the listener's address (else the port would get no transport).
std::vector<DeviceSpec> listUcxDevices(const std::string& netDevices, const std::string& tls, const HostNets& host,
                                       size_t max);

/// The ports of `ports` ("mlx5_0:1") that NCCL_IB_HCA-style `hcaSpec` selects, in their order.
std::vector<std::string> filterVerbsPorts(const std::vector<std::string>& ports, const std::string& hcaSpec);

/// The active RDMA ports under `sysClassInfiniband` (normally /sys/class/infiniband), "dev:port", naturally sorted;
/// with `interfaces`, each port's IP interface: of the interfaces under the port's PCI device (`<dev>/device/net`),
/// the one whose dev_port is the port's number less one (one-port devices: the first).
std::vector<std::string> activeVerbsPorts(const std::string& sysClassInfiniband,
                                          std::map<std::string, std::string>* interfaces = nullptr);

}  // namespace ucx
}  // namespace chorus
