// Where a net proxy runs: on the CPUs near the NICs it drives, as NCCL runs its proxy near the GPU's NIC, so that
// the copies into and out of its FIFOs and the NIC's interrupts stay on one socket.
#pragma once

#include <sched.h>

#include <cstdint>
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

/// Moves the calling thread to exactly `cpus`, whatever its current affinity (as NCCL applies NCCL_PROXY_CPUSET). True
/// and *result the CPUs it now runs on; false and *result why not: the list does not parse, or the kernel refuses it
/// (no CPU of it is one this process may use).
bool bindThreadTo(const std::string& cpus, std::string* result);

/// While it lives, the calling thread runs on the CPUs near the GPU at `runtimeBusId` (GpuRuntime::busId) in this
/// process's topology (processTopology), as NCCL runs a communicator's init (ncclTopoGetCpuAffinity): the GPU's CPUs
/// within the thread's affinity, or, with NCCL_IGNORE_CPU_AFFINITY=1, the GPU's CPUs whatever the thread's. So the
/// host memory the init first touches and the threads it starts are on the GPU's NUMA node. The destructor gives the
/// thread its affinity back. Nothing moves for a rank without a GPU, a GPU the topology does not place, or CPUs
/// outside the thread's affinity.
class NearGpuScope {
 public:
  explicit NearGpuScope(int64_t runtimeBusId);
  ~NearGpuScope();
  NearGpuScope(const NearGpuScope&) = delete;
  NearGpuScope& operator=(const NearGpuScope&) = delete;
  /// One phrase for INFO: the CPUs the thread now runs on and why, or why it stayed.
  const std::string& said() const { return said_; }

 private:
  bool restore_ = false;
  cpu_set_t saved_;
  std::string said_;
};

}  // namespace chorus
