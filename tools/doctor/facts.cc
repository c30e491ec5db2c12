// chorus-doctor: what one rank can find out about its host on its own, and its wire form.
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/bootstrap_internal.h"
#include "core/params.h"
#include "core/socket.h"
#include "engine/engine.h"
#include "nccl.h"
#include "runtime/device_probe.h"
#include "runtime/runtime.h"
#include "tools/doctor/doctor.h"
#include "topo/topology.h"

extern char** environ;

namespace chorus {
namespace doctor {
namespace {

// Tabs and newlines separate fields on the wire.
std::string clean(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (c == '\t' || c == '\n') c = ' ';
  return out;
}

}  // namespace

double cpuStallMicros() {
  FILE* fp = fopen("/proc/pressure/cpu", "r");
  if (fp == nullptr) return -1;
  char line[256];
  double total = -1;
  while (fgets(line, sizeof(line), fp) != nullptr) {
    const char* t = strstr(line, "total=");
    if (strncmp(line, "some", 4) == 0 && t != nullptr) total = strtod(t + 6, nullptr);
  }
  fclose(fp);
  return total;
}

Facts collectFacts(int rank) {
  Facts f;
  f.rank = rank;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  f.hostname = host;
  f.hostHash = localHostHash();
  f.pid = static_cast<int>(getpid());
  int v = 0;
  ncclGetVersion(&v);
  f.version = "chorus " + std::to_string(CHORUS_MAJOR) + "." + std::to_string(CHORUS_MINOR) + "." +
              std::to_string(CHORUS_PATCH) + ", NCCL API " + std::to_string(v);
  SockAddr addr;
  std::string why;
  if (findInterface(&addr, &f.ifName, &why) == ncclSuccess) {
    f.ifAddr = addr.hostStr();
  } else {
    f.ifName.clear();
    f.ifWhy = why;
  }
  const char* spec = getenv("NCCL_SOCKET_IFNAME");
  f.ifChoice = spec ? std::string("NCCL_SOCKET_IFNAME=") + spec : "the first interface that is up, not loopback";
  for (const IfAddr& a : listInterfaces()) f.interfaces.push_back(a.name + "=" + a.addr.hostStr());
  GpuRuntime* rt = gpuRuntime();
  f.gpus = rt ? rt->deviceCount() : visibleCudaDevices();
  const HostTopology& topo = processTopology();
  f.topo = topo.source.rfind("none", 0) == 0 ? "unknown (" + topo.source + ")" : topo.summary();
  if (!topo.gpuLinksFrom.empty()) f.topo += "; GPU links: " + topo.gpuLinksFrom;  // NVML's or ROCm SMI's answer
  if (topo.pciNics() > 0) {
    for (size_t g = 0; g < topo.gpus.size(); g++) {
      bool nearer = false;
      for (size_t n = 0; n < topo.nics.size(); n++)
        nearer |= !topo.nics[n].isVirtual && topo.gpuNic(static_cast<int>(g), static_cast<int>(n)) < PathClass::kSYS;
      if (!nearer) f.farGpus += (f.farGpus.empty() ? "" : ",") + std::to_string(g);
    }
  }
  struct statvfs sv;
  if (statvfs("/dev/shm", &sv) == 0) f.shmFree = static_cast<int64_t>(sv.f_bavail) * static_cast<int64_t>(sv.f_frsize);
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) f.memlock = rl.rlim_cur == RLIM_INFINITY ? -1 : int64_t(rl.rlim_cur);
  // Pinned memory: the device path's status words and, across hosts, its staging FIFOs.
  f.memlockNeed = f.gpus > 0 ? 64ll << 20 : 0;
  f.settingsHash = engineEnvHash();
  for (char** e = environ; e != nullptr && *e != nullptr; e++) {
    std::string kv = *e;
    if (kv.rfind("NCCL_", 0) != 0 && kv.rfind("CHORUS_", 0) != 0) continue;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    f.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return f;
}

void encodeFacts(const Facts& f, char* out) {
  std::ostringstream o;
  o << "rank\t" << f.rank << "\nhost\t" << clean(f.hostname) << "\nhash\t" << f.hostHash << "\npid\t" << f.pid
    << "\nversion\t" << clean(f.version) << "\nifname\t" << clean(f.ifName) << "\nifaddr\t" << clean(f.ifAddr)
    << "\nifwhy\t" << clean(f.ifWhy) << "\nifchoice\t" << clean(f.ifChoice) << "\ngpus\t" << f.gpus << "\ntopo\t"
    << clean(f.topo) << "\nfargpus\t" << clean(f.farGpus) << "\nshm\t" << f.shmFree << "\nmemlock\t" << f.memlock
    << "\nmemlockneed\t" << f.memlockNeed << "\nsettings\t" << f.settingsHash << "\n";
  for (const std::string& i : f.interfaces) o << "if\t" << clean(i) << "\n";
  for (const auto& [k, v] : f.env) o << "env\t" << clean(k) << "=" << clean(v) << "\n";
  std::string s = o.str();
  if (s.size() >= kFactsBytes) s.resize(kFactsBytes - 1);  // a huge environment loses its tail, not the rest
  std::memset(out, 0, kFactsBytes);
  std::memcpy(out, s.data(), s.size());
}

Facts decodeFacts(const char* in) {
  Facts f;
  std::istringstream is(std::string(in, strnlen(in, kFactsBytes)));
  std::string line;
  while (std::getline(is, line)) {
    size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    std::string k = line.substr(0, tab), v = line.substr(tab + 1);
    auto num = [&]() { return std::strtoll(v.c_str(), nullptr, 10); };
    if (k == "rank")
      f.rank = static_cast<int>(num());
    else if (k == "host")
      f.hostname = v;
    else if (k == "hash")
      f.hostHash = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "pid")
      f.pid = static_cast<int>(num());
    else if (k == "version")
      f.version = v;
    else if (k == "ifname")
      f.ifName = v;
    else if (k == "ifaddr")
      f.ifAddr = v;
    else if (k == "ifwhy")
      f.ifWhy = v;
    else if (k == "ifchoice")
      f.ifChoice = v;
    else if (k == "gpus")
      f.gpus = static_cast<int>(num());
    else if (k == "topo")
      f.topo = v;
    else if (k == "fargpus")
      f.farGpus = v;
    else if (k == "shm")
      f.shmFree = num();
    else if (k == "memlock")
      f.memlock = num();
    else if (k == "memlockneed")
      f.memlockNeed = num();
    else if (k == "settings")
      f.settingsHash = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "if")
      f.interfaces.push_back(v);
    else if (k == "env") {
      size_t eq = v.find('=');
      if (eq != std::string::npos) f.env[v.substr(0, eq)] = v.substr(eq + 1);
    }
  }
  return f;
}

std::string hostName(const Facts& f) {
  std::string addr = f.ifAddr;
  if (addr.empty()) {
    // No interface chosen: the first address that is not loopback says which host this is.
    for (const std::string& i : f.interfaces) {
      std::string a = i.substr(i.find('=') + 1);
      if (a != "127.0.0.1" && a != "::1") {
        addr = a;
        break;
      }
    }
  }
  return f.hostname + " (" + (addr.empty() ? "no address" : addr) + ")";
}

std::string rankName(const Facts& f) { return "rank " + std::to_string(f.rank) + " on " + hostName(f); }

}  // namespace doctor
}  // namespace chorus
