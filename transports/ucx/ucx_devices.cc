// The UCX net's device list (ucx_devices.h, docs/net_ucx.md "Devices").
#include "transports/ucx/ucx_devices.h"

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "core/params.h"
#include "topo/topology.h"
#include "transports/ib/ib_select.h"

namespace chorus {
namespace ucx {
namespace {

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  closedir(d);
  return out;
}

}  // namespace

bool tlsAllowsRdma(const std::string& tls) {
  // UCX's transports and aliases that never leave the host or never use an RDMA device.
  static const std::set<std::string> kNotRdma = {"tcp",      "self",      "sm",      "shm",      "posix",
                                                 "sysv",     "cma",       "knem",    "xpmem",    "cuda",
                                                 "cuda_copy", "cuda_ipc", "gdr_copy", "rocm",    "rocm_copy",
                                                 "rocm_ipc", "rocm_gdr"};
  std::vector<std::string> items = splitList(tls);
  if (items.empty() || items[0][0] == '^') return true;
  for (const std::string& t : items)
    if (t == "all" || kNotRdma.count(t) == 0) return true;
  return false;
}

std::vector<DeviceSpec> listUcxDevices(const std::string& netDevices, const std::string& tls, const HostNets& host,
                                       size_t max) {
  std::vector<DeviceSpec> out;
  auto add = [&](const std::string& name, bool verbs) {
    if (out.size() >= max) return;
    for (const DeviceSpec& d : out)
      if (d.name == name) return;
    DeviceSpec d;
    d.name = name;
    d.verbs = verbs;
    std::string ifName = name;
    if (verbs) {
      auto it = host.portInterfaces.find(name);
      ifName = it != host.portInterfaces.end() ? it->second : "";
    }
    if (std::find(host.addressedIfs.begin(), host.addressedIfs.end(), ifName) != host.addressedIfs.end())
      d.listenIf = ifName;
    out.push_back(d);
  };
  std::vector<std::string> items = splitList(netDevices);
  if (!items.empty() && !(items.size() == 1 && items[0] == "all")) {
    for (const std::string& i : items) add(i, i.find(':') != std::string::npos);
  } else if (tlsAllowsRdma(tls) && !host.verbsPorts.empty()) {
    for (const std::string& p : host.verbsPorts) add(p, true);
  } else {
    for (const std::string& i : host.selectedIfs) add(i, false);
  }
  return out;
}

std::vector<std::string> filterVerbsPorts(const std::vector<std::string>& ports, const std::string& hcaSpec) {
  IbHcaFilter filter = parseIbHcaFilter(hcaSpec);
  std::vector<std::string> out;
  for (const std::string& p : ports) {
    size_t colon = p.rfind(':');
    if (colon == std::string::npos) continue;
    if (ibHcaSelected(filter, p.substr(0, colon), atoi(p.c_str() + colon + 1))) out.push_back(p);
  }
  return out;
}

std::vector<std::string> activeVerbsPorts(const std::string& sysClassInfiniband,
                                          std::map<std::string, std::string>* interfaces) {
  std::vector<std::string> out;
  for (const std::string& dev : listDir(sysClassInfiniband)) {
    std::string base = sysClassInfiniband + "/" + dev;
    std::vector<std::string> ports = listDir(base + "/ports");
    std::vector<std::string> nets = listDir(base + "/device/net");
    std::sort(nets.begin(), nets.end(), naturalNameLess);
    for (const std::string& port : ports) {
      std::ifstream in(base + "/ports/" + port + "/state");
      int state = 0;  // "4: ACTIVE"
      if (!(in >> state) || state != 4) continue;
      out.push_back(dev + ":" + port);
      if (interfaces == nullptr) continue;
      for (const std::string& n : nets) {
        std::ifstream devPort(base + "/device/net/" + n + "/dev_port");
        int dp = -1;
        bool known = static_cast<bool>(devPort >> dp);
        if (known ? dp == atoi(port.c_str()) - 1 : ports.size() == 1) {
          (*interfaces)[out.back()] = n;
          break;
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), naturalNameLess);
  return out;
}

}  // namespace ucx
}  // namespace chorus
