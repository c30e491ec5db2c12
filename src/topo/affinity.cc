#include "topo/affinity.h"

#include <pthread.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/params.h"

namespace chorus {

std::string cpusNearNics(const HostTopology& t, const std::vector<std::pair<std::string, std::string>>& namesAndPaths) {
  cpu_set_t all;
  CPU_ZERO(&all);
  bool any = false;
  for (const auto& [name, path] : namesAndPaths) {
    const int n = topologyNicIndex(t, name, path);
    cpu_set_t near;
    if (n < 0 || t.nics[static_cast<size_t>(n)].cpus.empty() ||
        !parseCpuList(t.nics[static_cast<size_t>(n)].cpus, &near)) {
      continue;
    }
    CPU_OR(&all, &all, &near);
    any = true;
  }
  return any ? formatCpuList(all) : "";
}

bool parseCpuList(const std::string& list, cpu_set_t* out) {
  CPU_ZERO(out);
  if (list.empty()) return false;
  const char* p = list.c_str();
  while (*p != 0) {
    char* end = nullptr;
    errno = 0;
    long lo = std::strtol(p, &end, 10), hi = lo;
    if (end == p || errno != 0 || lo < 0) return false;
    p = end;
    if (*p == '-') {
      hi = std::strtol(p + 1, &end, 10);
      if (end == p + 1 || hi < lo) return false;
      p = end;
    }
    if (hi >= CPU_SETSIZE) return false;
    for (long c = lo; c <= hi; c++) CPU_SET(static_cast<int>(c), out);
    if (*p == ',') {
      if (*++p == 0) return false;  // a trailing comma
    } else if (*p != 0) {
      return false;
    }
  }
  return true;
}

std::string formatCpuList(const cpu_set_t& set) {
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) last++;
    if (!out.empty()) out += ",";
    out += std::to_string(c);
    if (last > c) out += "-" + std::to_string(last);
    c = last;
  }
  return out;
}

namespace {

IntParam kIgnoreCpuAffinity{"NCCL_IGNORE_CPU_AFFINITY", 0,
                            "1: a communicator's init, and the setup of its GPU connections, run on the CPUs near its "
                            "GPU whatever the thread's affinity; 0: on those of them within the thread's affinity "
                            "(none: the thread stays where it is).",
                            "general"};

// The calling thread's affinity (*now) and the CPUs of `cpus` it is to run on (*target): those within *now, or with
// `ignoreNow` all of them. False and *why when the list does not parse, the affinity cannot be read, or no CPU is left.
bool targetAffinity(const std::string& cpus, bool ignoreNow, cpu_set_t* now, cpu_set_t* target, std::string* why) {
  cpu_set_t near;
  if (!parseCpuList(cpus, &near)) {
    *why = "CPU list \"" + cpus + "\" does not parse";
    return false;
  }
  if (pthread_getaffinity_np(pthread_self(), sizeof(*now), now) != 0) {
    *why = std::string("cannot read the thread's affinity: ") + strerror(errno);
    return false;
  }
  if (ignoreNow) {
    *target = near;
  } else {
    CPU_AND(target, &near, now);
  }
  if (CPU_COUNT(target) == 0) {
    *why = "CPUs " + cpus + " are outside this thread's affinity " + formatCpuList(*now);
    return false;
  }
  return true;
}

}  // namespace

bool bindThreadNear(const std::string& cpus, std::string* result) {
  cpu_set_t now, both;
  if (!targetAffinity(cpus, false, &now, &both, result)) return false;
  if (CPU_EQUAL(&both, &now)) {
    *result = "already on CPUs " + formatCpuList(now);
    return false;
  }
  if (int rc = pthread_setaffinity_np(pthread_self(), sizeof(both), &both); rc != 0) {
    *result = std::string("cannot set the thread's affinity: ") + strerror(rc);
    return false;
  }
  *result = formatCpuList(both);
  return true;
}

bool bindThreadTo(const std::string& cpus, std::string* result) {
  cpu_set_t now, set;
  if (!targetAffinity(cpus, /*ignoreNow=*/true, &now, &set, result)) return false;
  if (int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); rc != 0) {
    *result = "cannot run the thread on CPUs " + formatCpuList(set) + ": " + strerror(rc) +
              (rc == EINVAL ? " (none of them is one this process may use)" : "");
    return false;
  }
  *result = formatCpuList(set);
  return true;
}

NearGpuScope::NearGpuScope(int64_t runtimeBusId) {
  const HostTopology& t = processTopology();
  const int g = topologyGpuIndex(t, runtimeBusId);
  const std::string gpuCpus = g < 0 ? std::string() : t.gpus[static_cast<size_t>(g)].cpus;
  const bool ignoreThreadAffinity = kIgnoreCpuAffinity.get() == 1;
  if (gpuCpus.empty()) {
    said_ = "stays: the topology does not say which CPUs are near the GPU";
    return;
  }
  cpu_set_t now, target;
  std::string why;
  if (!targetAffinity(gpuCpus, ignoreThreadAffinity, &now, &target, &why)) {
    said_ = "stays: " + why + " (NCCL_IGNORE_CPU_AFFINITY=1 uses the GPU's CPUs whatever the thread's)";
    return;
  }
  if (CPU_EQUAL(&target, &now)) {
    said_ = "stays: the thread's CPUs " + formatCpuList(now) + " are all near the GPU";
    return;
  }
  if (int rc = pthread_setaffinity_np(pthread_self(), sizeof(target), &target); rc != 0) {
    said_ = std::string("stays: cannot set the thread's affinity: ") + strerror(rc);
    return;
  }
  saved_ = now;
  restore_ = true;
  said_ = "CPUs " + formatCpuList(target) + " (the GPU's " + gpuCpus +
          (ignoreThreadAffinity ? ", NCCL_IGNORE_CPU_AFFINITY=1" : "") + "; the thread's " + formatCpuList(now) + ")";
}

NearGpuScope::~NearGpuScope() {
  if (restore_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
}

}  // namespace chorus
