// Where a net proxy runs: on the CPUs near the NICs it drives, as NCCL runs its proxy near the GPU's NIC, so that
// the copies into and out of its FIFOs and the NIC's interrupts stay on one socket.
#pragma once

#include <sched.h>

#include <string>
#include <utility>
#include <vector>

#include "topo/topology.h"

namespace chorus {

/// The CPUs near the NICs a net names, each by its device name ("mlx5_0", "eth0") or its PCI path (a sysfs path
/// ending in the NIC's bus id), as a list ("0-55,112-167"): the union over the NICs the topology places. "" when it
/// places none (virtual interfaces, an empty view).
std::string cpusNearNics(const HostTopology& t, const std::vector<std::pair<std::string, std::string>>& namesAndPaths);

/// Parses a CPU list ("0-3,8,10-11"); false when it is malformed or names a CPU past CPU_SETSIZE.
bool parseCpuList(const std::string& list, cpu_set_t* out);

/// Formats a CPU set as a list ("0-3,8").
std::string formatCpuList(const cpu_set_t& set);

/// Restricts the calling thread to `cpus` within its current affinity (a user's taskset stays respected). True and
/// *result the CPUs it now runs on when that narrowed it; false and *result why not: the list does not parse, it
/// shares no CPU with the current affinity, or it covers all of it already.
bool bindThreadNear(const std::string& cpus, std::string* result);

}  // namespace chorus
