#include "topo/affinity.h"

#include <pthread.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

bool bindThreadNear(const std::string& cpus, std::string* result) {
  cpu_set_t near, now, both;
  if (!parseCpuList(cpus, &near)) {
    *result = "CPU list \"" + cpus + "\" does not parse";
    return false;
  }
  if (pthread_getaffinity_np(pthread_self(), sizeof(now), &now) != 0) {
    *result = std::string("cannot read the thread's affinity: ") + strerror(errno);
    return false;
  }
  CPU_AND(&both, &near, &now);
  if (CPU_COUNT(&both) == 0) {
    *result = "CPUs " + cpus + " are outside this thread's affinity " + formatCpuList(now);
    return false;
  }
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

}  // namespace chorus
