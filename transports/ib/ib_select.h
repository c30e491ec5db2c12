// Which HCA ports the IB net offers, and how each is addressed: pure functions over discovered attributes
// (IbPortDesc), so that NCCL_IB_HCA filtering, GID selection and speed are tested on made-up device lists.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/params.h"
#include "transports/ib/ib_verbs.h"

namespace chorus {

/// NCCL_IB_HCA (transports/ib/ib_net.cc): the HCA ports the IB net, and the UCX net on RDMA ports, may use.
extern StrParam kIbHca;

/// An integer setting's value within [lo, hi].
int64_t clampParam(const IntParam& p, int64_t lo, int64_t hi);

/// How ibv_modify_qp is retried, as NCCL's NCCL_IB_MQP_RETRY_* say: a move that fails with ETIMEDOUT (a RoCE port
/// still resolving the peer's address, say), or with any error when `all`, is tried again up to `retries` times, the
/// n-th retry after n x `sleepMs` ms.
struct IbModifyRetry {
  int retries = 34;
  int sleepMs = 100;
  bool all = false;
};
/// The settings now (NCCL_IB_MQP_RETRY_CNT, NCCL_IB_MQP_RETRY_SLEEP_MSEC, NCCL_IB_MQP_RETRY_ALL).
IbModifyRetry ibModifyRetry();
/// Runs `modify` (one ibv_modify_qp: 0, or an errno) as `policy` says, calling `wait(ms, err)` before each retry
/// (sleeping there is the caller's); returns the last result, and in *attempts how many calls ran.
int ibRetryModifyQp(const IbModifyRetry& policy, const std::function<int()>& modify,
                    const std::function<void(int ms, int err)>& wait, int* attempts);

/// One entry of NCCL_IB_HCA: a device name (prefix unless the list is exact) and an optional port.
struct IbHcaEntry {
  std::string name;
  int port = -1;  ///< -1: any port
};

/// A parsed NCCL_IB_HCA: "mlx5_0:1,mlx5_1" selects by name prefix (and port), a leading "^" excludes the listed
/// ones instead, and "=" (after any "^") makes names exact.
struct IbHcaFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<IbHcaEntry> entries;  ///< empty: every device is selected
};

/// Parses NCCL_IB_HCA. Entries with a port that is not a positive number are kept without a port; empty entries are
/// dropped.
IbHcaFilter parseIbHcaFilter(const std::string& spec);

/// Whether port `port` of device `hca` passes the filter.
bool ibHcaSelected(const IbHcaFilter& filter, const std::string& hca, int port);

/// Whether a GID is set: not all zero and not a bare link-local prefix (fe80::).
bool ibGidConfigured(const IbGid& gid);
/// Whether a GID is an IPv4-mapped address (::ffff:a.b.c.d).
bool ibGidIsIpv4(const IbGid& gid);

/// Which RoCE GID addresses a port when NCCL_IB_GID_INDEX does not say: NCCL_IB_ADDR_FAMILY (AF_INET, the default:
/// IPv4-mapped GIDs; AF_INET6), NCCL_IB_ADDR_RANGE (a CIDR range the GID's address must be in) and
/// NCCL_IB_ROCE_VERSION_NUM (1 or 2, the default), as NCCL reads them.
struct IbGidPrefs {
  bool ipv6 = false;
  int roceVersion = 2;
  bool hasRange = false;
  IbGid range{};          ///< the range's base as a GID (an IPv4 range IPv4-mapped)
  int prefixLen = 0;      ///< bits of the address the range fixes (of 32 for IPv4, of 128 for IPv6)
  std::string rangeText;  ///< as set, for messages
  /// InfiniBand: the GID index taken when its GID has a FLID (NCCL_IB_ROUTABLE_FLID_GID_INDEX), else 0.
  int routableFlidIndex = 1;
};

/// An InfiniBand GID's FLID (bytes 4-5, big-endian): the LID routers forward to for a port on another subnet; 0 when
/// it has none.
int ibGidFlid(const IbGid& gid);
/// The low 16 bits of a GID's subnet prefix (bytes 6-7), which tell InfiniBand subnets apart, as NCCL compares them.
int ibGidLocalSubnet(const IbGid& gid);

/// Parses the three settings; a value NCCL would ignore is ignored, with a line in *notes saying so.
IbGidPrefs parseIbGidPrefs(const std::string& family, const std::string& range, int64_t roceVersion,
                           std::vector<std::string>* notes);

/// Whether `gid`'s address is of the preferred family and, when a range is set, in it.
bool ibGidMatches(const IbGidPrefs& prefs, const IbGid& gid);

/// The GID index a port is addressed by, or -1 (with *why) when none is usable.
/// `forced` >= 0 is NCCL_IB_GID_INDEX: used as is when inside the table. Otherwise InfiniBand uses index 0, and
/// Ethernet (RoCE) takes the first routable (configured, not link-local) GID of `prefs`' family and range and RoCE
/// version, then one of that family and range of any version, as NCCL's selection prefers. Where none is in the family
/// and a range is set, the port has no usable GID (NCCL falls back to index 0, which such a setting means to avoid);
/// without a range, the first routable RoCE v2 GID, then any routable one, then any configured one.
int selectIbGidIndex(IbLinkLayer linkLayer, const std::vector<IbGidEntry>& gids, int64_t forced, std::string* why,
                     const IbGidPrefs& prefs = IbGidPrefs());

/// Port speed in Mbit/s from ibv_port_attr's active_speed and active_width bits (lane rate x lanes).
int ibPortSpeedMbps(int activeSpeed, int activeWidth);

/// Bytes of a verbs MTU code (1 = 256 .. 5 = 4096; 0 for an unknown code).
int ibMtuBytes(int mtu);

/// One port the IB net offers as a net device.
struct IbDevice {
  IbPortDesc port;   ///< what discovery saw
  std::string name;  ///< the HCA name, for properties and logs
  int gidIndex = 0;  ///< the GID used to address this port
  IbGid gid;         ///< port.gids[gidIndex] (zero when the table is empty, as on plain IB)
  int speedMbps = 0;
  // GPUDirect RDMA, filled by IbNet::discover (not by selectIbDevices).
  bool peerMemory = false;  ///< regMr takes GPU memory (a peer-memory module is loaded)
  bool dmaBuf = false;      ///< the HCA takes dma-buf registrations (whatever NCCL_DMABUF_ENABLE says)
};

/// The net devices among `ports`: active, with an InfiniBand or Ethernet link layer, selected by `hcaSpec`
/// (NCCL_IB_HCA) and with a usable GID (`gidIndex` is NCCL_IB_GID_INDEX, -1 for automatic). `skipped` (may be
/// null) gets one line per selected-but-unusable port, saying why.
std::vector<IbDevice> selectIbDevices(const std::vector<IbPortDesc>& ports, const std::string& hcaSpec,
                                      int64_t gidIndex, std::vector<std::string>* skipped,
                                      const IbGidPrefs& prefs = IbGidPrefs());

/// "fe80::1" or "::ffff:10.0.0.1" style text of a GID, for logs.
std::string ibGidText(const IbGid& gid);

}  // namespace chorus
