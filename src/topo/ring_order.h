// Ring order from where the ranks run: the ranks of each host next to each other, so that a ring enters and leaves
// each host once, and within a host those of each NUMA node (socket) next to each other. In rank order a ring crosses
// hosts at every hop where neighbouring ranks sit on different hosts (ranks placed round-robin, as `srun
// --distribution=cyclic` does, cross at every hop), and each crossing loads a host's network link with another full
// share of the ring's traffic.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus {

/// The ranks in ring order: hosts in the order of their lowest rank, each host's ranks in rank order. hostOf[r] is
/// rank r's host (PeerInfo::hostHash). Empty when that is rank order itself (every host's ranks already adjacent).
/// With numaOf (PeerInfo::gpuNuma, -1 unknown; empty: none known), each host's ranks are grouped by the NUMA node of
/// their GPU, in rank order within a node and nodes in the order of their lowest rank, so that the ring crosses
/// between a host's sockets as few times as it can: twice, whatever the GPUs' numbering.
std::vector<int> ringOrderByHost(const std::vector<uint64_t>& hostOf, const std::vector<int>& numaOf = {});

/// CHORUS_RING_BY_HOST: 1 (default) lays rings host by host; 0 keeps rank order. Every rank must agree.
bool ringByHostSetting();

/// NCCL_CROSS_NIC: anything but 1 (default 2) lays rail-aligned rings over hosts (ScheduleRequest::railAligned); 1
/// does not. Every rank must agree.
bool railAlignedRingsSetting();

}  // namespace chorus
