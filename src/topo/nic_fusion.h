// Which of a net's devices are merged into one ("NIC fusion", NCCL's virtual NICs): ports of one NIC by default, so
// that a dual-port NIC is one net device whose connections use both ports, as NCCL 2.28 makes them through the net's
// makeVDevice. NCCL_NET_MERGE_LEVEL sets how near devices must be to merge, NCCL_NET_FORCE_MERGE names groups.
#pragma once

#include <string>
#include <vector>

#include "core/params.h"
#include "topo/topology.h"

namespace chorus {

/// NCCL_NET_MERGE_LEVEL and NCCL_NET_FORCE_MERGE (read where a communicator chooses its net, transports/remote.cc, and
/// by chorus-topo).
extern StrParam kNetMergeLevel;
extern StrParam kNetForceMerge;

/// One device of a net as its properties give it.
struct NetDeviceDesc {
  std::string name;     ///< "mlx5_0"
  std::string pciPath;  ///< its sysfs path, ending in its PCI bus id; empty when unknown
  int port = 0;         ///< its port number
};

/// How near two devices must be to merge: NCCL_NET_MERGE_LEVEL's values, nearest first.
enum class MergeLevel : int {
  kLoc,   ///< LOC: never
  kPort,  ///< PORT (NCCL's default): ports of one NIC (one PCI device, any function)
  kPix,   ///< PIX: also NICs under one PCI switch
  kPxb,   ///< PXB (and NCCL's P2C, PXN): across PCI bridges, no CPU between
  kPhb,   ///< PHB: through one CPU's host bridge
  kSys,   ///< SYS: anywhere in the host
};

/// Parses NCCL_NET_MERGE_LEVEL (LOC, PORT, PIX, PXB, P2C, PXN, PHB, SYS, in any case); false when it is none of them.
bool parseMergeLevel(const std::string& text, MergeLevel* level);

/// The devices of a net grouped as NCCL merges them.
struct NicFusion {
  /// Every device exactly once: each group is one net device to be, its members in order (a group of one is the
  /// device itself). Groups are in the order of their first member.
  std::vector<std::vector<int>> groups;
  std::vector<bool> forced;  ///< groups[i] is one NCCL_NET_FORCE_MERGE named
  std::string error;         ///< why NCCL_NET_FORCE_MERGE cannot be honoured ("" when it can, or is unset)
};

/// Groups `devs` (index i is net device i): first the groups `force` names (NCCL_NET_FORCE_MERGE: groups separated by
/// ';', each a ','-separated list of name[:port] matching devices by exact name, and port where given; every entry
/// must match a device), then, as NCCL does, each device not yet grouped takes every later one within `level` of it
/// (ports of one NIC: the same PCI device, any function; other levels: the PCI distance the host topology `t` gives
/// between the two NICs, unknown distances never merging), at most `maxPerGroup` to a group.
NicFusion fuseNics(const HostTopology& t, const std::vector<NetDeviceDesc>& devs, MergeLevel level,
                   const std::string& force, int maxPerGroup);

/// NCCL_NET_MERGE_LEVEL as set: PORT when unset or not a level (with *valid false then, when given).
MergeLevel mergeLevelSetting(bool* valid = nullptr);

/// chorus-topo's section on NIC fusion: the host's PCI NICs merged as NCCL_NET_MERGE_LEVEL and NCCL_NET_FORCE_MERGE
/// say, supposing a net that offers each as a device and merges (as IB does, a port a NIC), one line a merged device
/// ("mlx5_0 + mlx5_1"); "" when the host has fewer than two PCI NICs.
std::string formatNicFusion(const HostTopology& t);

}  // namespace chorus
