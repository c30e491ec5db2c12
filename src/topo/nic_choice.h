// Which of a net's devices a rank's connections use: the NICs nearest its GPU, as NCCL picks a NIC by its PCI
// distance to the GPU. On a node with a NIC per GPU (or per pair of GPUs under one PCI switch) each GPU's traffic
// then leaves through its own NIC and never crosses the CPUs' interconnect, and GPU i of every host uses the same
// rail.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "topo/topology.h"

namespace chorus {

/// A rank's net devices in the order its channels take them: channel c's connections use order[c % order.size()].
struct NicChoice {
  std::vector<int> order;          ///< device indices of the net
  std::vector<PathClass> classes;  ///< each one's distance to the GPU (kNone when not by topology)
  bool byTopology = false;         ///< false: every device, in index order (`channel mod ndev`)
  std::string why;                 ///< one phrase for INFO: the GPU and its devices, or why the topology was not used
};

/// How many of its nearest NICs a GPU uses (NCCL_NETDEVS_POLICY, as NCCL 2.28 reads it).
struct NetDevsPolicy {
  enum class Kind { kAuto, kAll, kMax };
  Kind kind = Kind::kAuto;
  int max = 0;       ///< kMax: at most this many (> 0)
  std::string note;  ///< "" or why the setting was not taken ("... not recognized: AUTO")
  /// "AUTO", "ALL" or "MAX:2".
  std::string name() const;
};

/// Parses a NCCL_NETDEVS_POLICY value as NCCL does: AUTO, ALL or MAX:N with N > 0, case-insensitive; "" is AUTO;
/// anything else is AUTO with a note.
NetDevsPolicy parseNetDevsPolicy(const std::string& text);

/// NCCL_NETDEVS_POLICY as set now.
NetDevsPolicy netDevsPolicy();

/// The devices of a net (each named by device name and PCI path, as its properties give them) that the GPU at
/// `gpuBusId` (GpuRuntime::busId numbering, -1 for a rank without a GPU) uses. By topology, as NCCL's
/// ncclTopoGetLocalNet: of the devices at the GPU's nearest PCI distance class (PIX, then PXB, PHB, SYS), in the
/// topology's NIC order, as many as the policy says: AUTO, as many as there are divided by the GPUs nearest the first
/// of them (rounded up; two GPUs under one switch with two NICs take one each), ALL every one, MAX:N at most N. GPUs
/// that share the same nearest NICs start at different ones (the i-th of them, in PCI order, at the i-th), so each of
/// those two GPUs takes its own. Every device in index order when the GPU is unknown, not in the topology, or the
/// topology places none of the devices (virtual interfaces, an empty view).
NicChoice chooseNics(const HostTopology& t, int64_t gpuBusId,
                     const std::vector<std::pair<std::string, std::string>>& namesAndPaths,
                     const NetDevsPolicy& policy = netDevsPolicy());

/// "0 (mlx5_0, PIX), 1 (mlx5_1, PIX)": the chosen devices with their names (from namesAndPaths) and classes.
std::string describeNicChoice(const NicChoice& c,
                              const std::vector<std::pair<std::string, std::string>>& namesAndPaths);

/// chorus-topo's section on NIC choice: for each GPU of the host, the NICs its channels take in turn, supposing a
/// net that offers every PCI NIC of the topology (as IB does with an HCA port each). "" when the host has no GPU or
/// no PCI NIC.
std::string formatNicChoices(const HostTopology& t, const NetDevsPolicy& policy = netDevsPolicy());

}  // namespace chorus
