// HostTopology from hwloc: probing this host, loading a topology file (hwloc XML with chorus's facts as info
// attributes of the root object) and writing one. docs/topology.md describes the file and the distance classes.
//
// Only this file includes hwloc. A build without hwloc (CHORUS_HAVE_HWLOC unset) gets the stubs at the end: every
// probe and load fails with a message saying so, and communicators start with an empty view.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "core/files.h"
#include "topo/topology.h"

#if CHORUS_HAVE_HWLOC
#include <dirent.h>
#include <hwloc.h>

#if HWLOC_API_VERSION < 0x00020100 || HWLOC_API_VERSION >= 0x00030000
#error "chorus needs hwloc 2.x, 2.1 or later (cmake/components.cmake checks this)"
#endif
#endif

namespace chorus {

namespace {
// hwloc XML (a dump, a synthetic node, `lstopo --of xml`): the build's part below, with hwloc or without.
bool loadHwlocTopologyXml(const std::string& xml, const std::string& source, HostTopology* out, std::string* err);
}  // namespace

bool loadHostTopologyXml(const std::string& xml, const std::string& source, HostTopology* out, std::string* err) {
  // NCCL's own format needs no hwloc.
  if (xml.find("<topology") == std::string::npos && xml.find("<system") != std::string::npos)
    return loadNcclTopologyXml(xml, source, out, err);
  return loadHwlocTopologyXml(xml, source, out, err);
}

bool loadHostTopology(const std::string& path, HostTopology* out, std::string* err) {
  std::string xml;
  if (!readFileText(path, &xml, err)) {
    *err = "cannot read topology file " + *err;
    return false;
  }
  return loadHostTopologyXml(xml, path, out, err);
}

bool dumpHostTopology(const HostTopology& t, const std::string& path, std::string* err) {
  std::string xml;
  if (!topologyToXml(t, &xml, err)) return false;
  // Write then rename: ranks of several processes may dump the same path at once.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    *err = "cannot write topology dump " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(xml.data(), 1, xml.size(), f) == xml.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    *err = "cannot write topology dump " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

#if CHORUS_HAVE_HWLOC

bool topologyHasHwloc() { return true; }

namespace {

// NCCL's GPU vendors, and the PCI classes a GPU shows up as: VGA, 3D controller, other display, processing
// accelerator (AMD Instinct MI300 is 0x1200).
constexpr uint16_t kVendorNvidia = 0x10de;
constexpr uint16_t kVendorAmd = 0x1002;
bool isGpuClass(uint16_t c) { return c == 0x0300 || c == 0x0302 || c == 0x0380 || c == 0x1200; }
// A device the runtime names is taken as a GPU only in a class a GPU can have: display (0x03), processor (0x0b) or
// accelerator (0x12). This keeps a runtime that numbers its devices its own way (a test's emulated runtime, whose
// "bus ids" are 0, 1, ...) from turning a disk or NIC into a GPU.
bool isRuntimeGpuClass(uint16_t c) { return (c >> 8) == 0x03 || (c >> 8) == 0x0b || (c >> 8) == 0x12; }

// The hwloc components a library must not run at communicator init: x86 binds the calling thread to every CPU in
// turn to read CPUID (the Linux backend reads the same from sysfs); the GPU backends open drivers or an X display,
// and the GPU runtime already gives chorus its GPUs. Names hwloc does not know are ignored.
const char* const kSkippedComponents[] = {"x86", "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero"};

// hwloc's root info attribute names for chorus's facts (docs/topology.md).
constexpr char kInfoVersion[] = "ChorusVersion";
constexpr char kInfoSummary[] = "ChorusSummary";
constexpr char kInfoGpu[] = "ChorusGPU";
constexpr char kInfoNic[] = "ChorusNIC";
constexpr char kInfoGpuLink[] = "ChorusGPULink";
constexpr char kInfoGpuNic[] = "ChorusGPUNIC";
constexpr int kFormatVersion = 1;

struct PciAddr {
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  bool operator<(const PciAddr& o) const {
    return std::tie(domain, bus, dev, func) < std::tie(o.domain, o.bus, o.dev, o.func);
  }
};

std::string busIdText(const PciAddr& a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.func);
  return buf;
}

bool parseBusId(const std::string& s, PciAddr* a) {
  char tail = 0;
  return std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &a->domain, &a->bus, &a->dev, &a->func, &tail) == 4;
}

PciAddr pciAddr(hwloc_obj_t o) {
  return PciAddr{o->attr->pcidev.domain, o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func};
}

// key=value tokens of a chorus info value; unknown keys are ignored so that later versions may add some.
std::map<std::string, std::string> parseFields(const std::string& value) {
  std::map<std::string, std::string> kv;
  std::istringstream in(value);
  std::string tok;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  return s.substr(b);
}

// A sysfs attribute, "" when absent or unreadable (many are, for virtual or down interfaces).
std::string sysfsRead(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return "";
  return trim(s);
}

// Port speed in Mb/s: an RDMA device's first port rate ("400 Gb/sec (4X NDR)"), else the interface's speed.
int64_t sysfsSpeedMbps(const std::string& rdma, const std::string& netdev) {
  if (!rdma.empty()) {
    double gbps = 0;
    std::string rate = sysfsRead("/sys/class/infiniband/" + rdma + "/ports/1/rate");
    if (std::sscanf(rate.c_str(), "%lf", &gbps) == 1 && gbps > 0) return static_cast<int64_t>(gbps * 1000 + 0.5);
  }
  if (!netdev.empty()) {
    long long mbps = std::atoll(sysfsRead("/sys/class/net/" + netdev + "/speed").c_str());
    if (mbps > 0) return mbps;
  }
  return 0;
}

// The facts a topology file adds to its hwloc tree (the root's Chorus* info attributes).
struct FileFacts {
  std::map<PciAddr, bool> gpus;                                    // bus id -> found through the runtime
  std::map<std::string, std::map<std::string, std::string>> nics;  // name -> fields
  std::vector<std::map<std::string, std::string>> links;
};

bool readFacts(hwloc_topology_t topo, const std::string& source, FileFacts* facts, std::string* err) {
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  for (unsigned i = 0; i < root->infos_count; i++) {
    std::string name = root->infos[i].name ? root->infos[i].name : "";
    std::string value = root->infos[i].value ? root->infos[i].value : "";
    auto kv = parseFields(value);
    if (name == kInfoVersion) {
      if (std::atoi(value.c_str()) > kFormatVersion) {
        *err = source + ": written by a newer chorus (" + kInfoVersion + " " + value + ", this one reads " +
               std::to_string(kFormatVersion) + ")";
        return false;
      }
    } else if (name == kInfoGpu) {
      PciAddr a;
      if (!parseBusId(kv["busid"], &a)) {
        *err = source + ": " + kInfoGpu + " \"" + value + "\" has no valid busid=dddd:bb:dd.f";
        return false;
      }
      facts->gpus[a] = kv["by"] == "runtime";
    } else if (name == kInfoNic) {
      if (kv["name"].empty()) {
        *err = source + ": " + kInfoNic + " \"" + value + "\" has no name=";
        return false;
      }
      facts->nics[kv["name"]] = kv;
    } else if (name == kInfoGpuLink) {
      facts->links.push_back(kv);
    }
  }
  return true;
}

// The first normal (CPU-side) object above an I/O object.
hwloc_obj_t cpuSide(hwloc_obj_t o) {
  while (o != nullptr && hwloc_obj_type_is_io(o->type)) o = o->parent;
  return o;
}

// Where an endpoint sits: NUMA node, package and CPUs of the CPU-side object its PCI tree hangs from.
template <typename T>
void locate(hwloc_topology_t topo, hwloc_obj_t pci, T* e) {
  hwloc_obj_t anc = cpuSide(pci);
  if (anc == nullptr) return;
  if (anc->nodeset != nullptr && hwloc_bitmap_weight(anc->nodeset) == 1) e->numa = hwloc_bitmap_first(anc->nodeset);
  hwloc_obj_t pkg = nullptr;
  while ((pkg = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pkg)) != nullptr) {
    if (anc->cpuset != nullptr && hwloc_bitmap_isincluded(anc->cpuset, pkg->cpuset)) {
      e->package = static_cast<int>(pkg->os_index);
      break;
    }
  }
  if (anc->cpuset != nullptr) {
    char* list = nullptr;
    if (hwloc_bitmap_list_asprintf(&list, anc->cpuset) >= 0 && list != nullptr) e->cpus = list;
    std::free(list);
  }
}

// NCCL's class of the PCI path between two PCI functions, from their parent chains. hwloc's own common-ancestor
// helper is not used: it is meant for CPU-side objects and does not walk I/O parents reliably.
PathClass classify(hwloc_obj_t a, hwloc_obj_t b) {
  if (a == nullptr || b == nullptr) return PathClass::kNone;
  if (a == b) return PathClass::kPIX;
  // Each chain: the I/O parents (bridges) up to and including the first CPU-side object.
  auto chain = [](hwloc_obj_t o) {
    std::vector<hwloc_obj_t> c;
    for (hwloc_obj_t p = o->parent; p != nullptr; p = p->parent) {
      c.push_back(p);
      if (!hwloc_obj_type_is_io(p->type)) break;
    }
    return c;
  };
  std::vector<hwloc_obj_t> ca = chain(a), cb = chain(b);
  for (size_t i = 0; i < ca.size(); i++) {
    auto it = std::find(cb.begin(), cb.end(), ca[i]);
    if (it == cb.end()) continue;
    size_t j = static_cast<size_t>(it - cb.begin());
    hwloc_obj_t common = ca[i];
    if (common->type == HWLOC_OBJ_BRIDGE) {
      // A host bridge (root complex) between them is PHB. Below a PCI-PCI bridge: a PCIe switch is an upstream
      // port with a downstream port per device, so one switch puts at most one bridge on each side of the common
      // one (PIX, as NCCL, which merges the two levels of a switch); more means nested switches (PXB).
      if (common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return PathClass::kPHB;
      return i <= 1 && j <= 1 ? PathClass::kPIX : PathClass::kPXB;
    }
    break;  // the first common ancestor is CPU-side: compare NUMA nodes below
  }
  hwloc_obj_t sa = ca.empty() ? nullptr : ca.back(), sb = cb.empty() ? nullptr : cb.back();
  if (sa == nullptr || sb == nullptr || sa->nodeset == nullptr || sb->nodeset == nullptr) return PathClass::kSYS;
  return hwloc_bitmap_isequal(sa->nodeset, sb->nodeset) ? PathClass::kPHB : PathClass::kSYS;
}

struct GpuFound {
  TopoGpu gpu;
  hwloc_obj_t pci = nullptr;
};

struct NicFound {
  TopoNic nic;
  hwloc_obj_t pci = nullptr;  // its PCI function, null for interfaces hwloc does not have
};

// GPUs: by class and vendor, or at a bus id the runtime gave (domain, bus, device: the first function that has a
// GPU-like class), in bus id order.
std::vector<GpuFound> findGpus(hwloc_topology_t topo, const std::set<PciAddr>& runtime) {
  std::vector<GpuFound> gpus;
  std::set<PciAddr> runtimeSeen;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(topo, o)) != nullptr;) {
    const auto& p = o->attr->pcidev;
    PciAddr dev{p.domain, p.bus, p.dev, 0};
    bool byClass = isGpuClass(p.class_id) && (p.vendor_id == kVendorNvidia || p.vendor_id == kVendorAmd);
    bool byRuntime = !byClass && runtime.count(dev) && isRuntimeGpuClass(p.class_id) && !runtimeSeen.count(dev);
    if (!byClass && !byRuntime) continue;
    if (byRuntime) runtimeSeen.insert(dev);
    GpuFound f;
    f.pci = o;
    f.gpu.busId = busIdText(pciAddr(o));
    f.gpu.vendor = p.vendor_id;
    f.gpu.device = p.device_id;
    f.gpu.pciClass = p.class_id;
    f.gpu.byRuntime = byRuntime;
    const char* name = hwloc_obj_get_info_by_name(o, "PCIDevice");
    f.gpu.name = name ? name : "";
    f.gpu.linkGBps = p.linkspeed;
    locate(topo, o, &f.gpu);
    gpus.push_back(f);
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuFound& x, const GpuFound& y) { return pciAddr(x.pci) < pciAddr(y.pci); });
  return gpus;
}

// NICs: the network and RDMA OS devices, grouped by their PCI function (an InfiniBand port is both mlx5_0 and its
// IPoIB interface: one NIC, named by the RDMA device).
std::vector<NicFound> findNics(hwloc_topology_t topo) {
  std::vector<NicFound> nics;
  std::map<hwloc_obj_t, size_t> byParent;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(topo, o)) != nullptr;) {
    hwloc_obj_osdev_type_t type = o->attr->osdev.type;
    if ((type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) || o->name == nullptr) continue;
    hwloc_obj_t pci = o->parent != nullptr && o->parent->type == HWLOC_OBJ_PCI_DEVICE ? o->parent : nullptr;
    auto it = pci != nullptr ? byParent.find(pci) : byParent.end();
    size_t idx = it != byParent.end() ? it->second : nics.size();
    if (idx == nics.size()) {
      NicFound f;
      f.pci = pci;
      if (pci != nullptr) {
        byParent[pci] = idx;
        f.nic.busId = busIdText(pciAddr(pci));
        f.nic.vendor = pci->attr->pcidev.vendor_id;
        f.nic.device = pci->attr->pcidev.device_id;
        f.nic.linkGBps = pci->attr->pcidev.linkspeed;
      }
      locate(topo, pci != nullptr ? pci : o, &f.nic);
      nics.push_back(f);
    }
    TopoNic& n = nics[idx].nic;
    if (type == HWLOC_OBJ_OSDEV_OPENFABRICS && !n.rdma) {
      n.rdma = true;
      n.name = o->name;
    } else if (type == HWLOC_OBJ_OSDEV_NETWORK && n.netdev.empty()) {
      n.netdev = o->name;
      if (!n.rdma) n.name = o->name;
    }
  }
  return nics;
}

NicFound virtualNic(const std::string& name, int64_t speedMbps) {
  NicFound f;
  f.nic.name = name;
  f.nic.netdev = name;
  f.nic.isVirtual = true;
  f.nic.speedMbps = speedMbps;
  return f;
}

// What hwloc has no notion of, from this host's sysfs: port speeds, and the interfaces without a device (bridges,
// veth, tunnels), listed when up.
void addSysfsFacts(std::vector<NicFound>* nics) {
  std::set<std::string> netdevs;
  for (NicFound& f : *nics) {
    f.nic.speedMbps = sysfsSpeedMbps(f.nic.rdma ? f.nic.name : "", f.nic.netdev);
    netdevs.insert(f.nic.netdev);
  }
  DIR* d = opendir("/sys/class/net");
  if (d == nullptr) return;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || name == "lo" || netdevs.count(name)) continue;
    std::string base = "/sys/class/net/" + name;
    if (access((base + "/device").c_str(), F_OK) == 0) continue;  // a device hwloc left out: not virtual
    unsigned long flags = std::strtoul(sysfsRead(base + "/flags").c_str(), nullptr, 16);
    if ((flags & 0x1) == 0) continue;  // IFF_UP
    nics->push_back(virtualNic(name, sysfsSpeedMbps("", name)));
  }
  closedir(d);
}

// The file's NIC facts: speeds of the NICs its tree has, and the virtual ones it lists.
bool addNicFacts(const FileFacts& facts, const std::string& source, std::vector<NicFound>* nics, std::string* err) {
  std::set<std::string> known;
  for (NicFound& f : *nics) {
    known.insert(f.nic.name);
    auto it = facts.nics.find(f.nic.name);
    if (it != facts.nics.end() && it->second.count("speed_mbps")) {
      f.nic.speedMbps = std::atoll(it->second.at("speed_mbps").c_str());
    }
  }
  for (const auto& [name, kv] : facts.nics) {
    if (known.count(name)) continue;
    if (kv.count("virtual") == 0 || kv.at("virtual") != "1") {
      *err = source + ": " + kInfoNic + " names " + name +
             ", which its hwloc tree does not have (virtual=1 for an "
             "interface without a PCI device)";
      return false;
    }
    nics->push_back(virtualNic(name, kv.count("speed_mbps") ? std::atoll(kv.at("speed_mbps").c_str()) : 0));
  }
  return true;
}

// The file's GPU facts: every GPU it lists is one of the tree's, and its links join two of them.
bool addGpuFacts(const FileFacts& facts, const std::string& source, HostTopology* t, std::string* err) {
  std::map<std::string, int> gpuIndex;
  for (size_t i = 0; i < t->gpus.size(); i++) gpuIndex[t->gpus[i].busId] = static_cast<int>(i);
  for (const auto& [addr, byRuntime] : facts.gpus) {
    if (!gpuIndex.count(busIdText(addr))) {
      *err = source + ": " + kInfoGpu + " names " + busIdText(addr) +
             ", which is not a GPU-class PCI device of its hwloc tree";
      return false;
    }
  }
  for (const auto& kv : facts.links) {
    auto get = [&](const char* k) { return kv.count(k) ? kv.at(k) : std::string(); };
    PciAddr a, b;
    std::string kind = get("kind");
    std::transform(kind.begin(), kind.end(), kind.begin(), [](unsigned char c) { return std::tolower(c); });
    if (!parseBusId(get("a"), &a) || !parseBusId(get("b"), &b) || !gpuIndex.count(busIdText(a)) ||
        !gpuIndex.count(busIdText(b)) || (kind != "nvlink" && kind != "xgmi")) {
      *err = source + ": " + kInfoGpuLink + " needs a=<GPU bus id> b=<GPU bus id> kind=NVLink|xGMI [count=N]; got \"" +
             get("a") + "\" \"" + get("b") + "\" \"" + get("kind") + "\"";
      return false;
    }
    TopoGpuLink l;
    l.a = std::min(gpuIndex[busIdText(a)], gpuIndex[busIdText(b)]);
    l.b = std::max(gpuIndex[busIdText(a)], gpuIndex[busIdText(b)]);
    l.kind = kind == "xgmi" ? GpuLinkKind::kXGMI : GpuLinkKind::kNVLink;
    l.count = get("count").empty() ? 1 : std::max(1, std::atoi(get("count").c_str()));
    t->gpuLinks.push_back(l);
  }
  std::sort(t->gpuLinks.begin(), t->gpuLinks.end(),
            [](const TopoGpuLink& x, const TopoGpuLink& y) { return std::tie(x.a, x.b) < std::tie(y.a, y.b); });
  return true;
}

// chorus's view of a loaded hwloc topology. runtime: the bus ids the GPU runtime (or the file) names as GPUs. A
// probe (facts null) reads speeds and virtual interfaces from this host's sysfs; a file (source: its path) gives
// them in its facts.
bool derive(hwloc_topology_t topo, const std::set<PciAddr>& runtime, const FileFacts* facts, const std::string& source,
            HostTopology* out, std::string* err) {
  HostTopology t;
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.numaNodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  if (const char* arch = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "Architecture")) t.cpuArch = arch;
  for (int p = 0; p < t.packages && t.cpuVendor.empty(); p++) {
    const char* vendor = hwloc_obj_get_info_by_name(hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, p), "CPUVendor");
    if (vendor != nullptr) t.cpuVendor = vendor;
  }
  std::vector<GpuFound> gpus = findGpus(topo, runtime);
  std::vector<NicFound> nics = findNics(topo);
  if (facts == nullptr) {
    addSysfsFacts(&nics);
  } else if (!addNicFacts(*facts, source, &nics, err)) {
    return false;
  }
  std::stable_sort(nics.begin(), nics.end(), [](const NicFound& x, const NicFound& y) {
    if (x.nic.isVirtual != y.nic.isVirtual) return !x.nic.isVirtual;
    return naturalNameLess(x.nic.name, y.nic.name);
  });

  std::vector<hwloc_obj_t> ends;
  for (GpuFound& f : gpus) {
    t.gpus.push_back(f.gpu);
    t.gpus.back().linksKnown = facts != nullptr;  // a file states the links there are
    ends.push_back(f.pci);
  }
  for (NicFound& f : nics) {
    t.nics.push_back(f.nic);
    ends.push_back(f.pci);
  }
  size_t n = ends.size();
  t.classes.assign(n * n, PathClass::kPIX);
  for (size_t i = 0; i < n; i++) {
    for (size_t j = i + 1; j < n; j++) t.classes[i * n + j] = t.classes[j * n + i] = classify(ends[i], ends[j]);
  }
  if (facts != nullptr && !addGpuFacts(*facts, source, &t, err)) return false;
  t.source = facts == nullptr ? source : "file " + source;
  *out = std::move(t);
  return true;
}

// A new hwloc topology with chorus's settings: the I/O objects that matter (GPUs, NICs, the bridges above them).
hwloc_topology_t newTopology(bool forProbe) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return nullptr;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (forProbe) {
    for (const char* c : kSkippedComponents) {
      (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, c);
    }
  }
  return topo;
}

std::shared_ptr<void> own(hwloc_topology_t topo) {
  return std::shared_ptr<void>(topo, [](void* p) { hwloc_topology_destroy(static_cast<hwloc_topology_t>(p)); });
}

std::string xmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

bool probeHostTopology(const std::vector<int64_t>& runtimeBusIds, HostTopology* out, std::string* err) {
  hwloc_topology_t topo = newTopology(true);
  if (topo == nullptr) {
    *err = std::string("hwloc_topology_init failed: ") + std::strerror(errno);
    return false;
  }
  std::shared_ptr<void> owner = own(topo);
  if (hwloc_topology_load(topo) != 0) {
    *err = std::string("hwloc could not probe this host: ") + std::strerror(errno);
    return false;
  }
  std::set<PciAddr> runtime;
  for (int64_t id : runtimeBusIds) {
    if (id < 0) continue;
    runtime.insert(PciAddr{static_cast<unsigned>(id >> 32), static_cast<unsigned>((id >> 8) & 0xff),
                           static_cast<unsigned>(id & 0xff), 0});
  }
  if (!derive(topo, runtime, nullptr, "probe", out, err)) return false;
  out->hwloc = owner;
  // hwloc sees no NVLink or xGMI: NVML and ROCm SMI tell them where there are such GPUs to ask about.
  std::string nvml, rsmi;
  if (addNvmlLinks(out, &nvml) != 0) out->gpuLinksFrom = nvml;
  if (addRsmiLinks(out, &rsmi) != 0) out->gpuLinksFrom += (out->gpuLinksFrom.empty() ? "" : "; ") + rsmi;
  return true;
}

namespace {

bool loadHwlocTopologyXml(const std::string& xml, const std::string& source, HostTopology* out, std::string* err) {
  if (trim(xml).empty()) {
    *err = source + ": empty topology file";
    return false;
  }
  if (xml.find("<topology") == std::string::npos) {
    *err = source + ": not a topology file (no hwloc <topology> or NCCL <system> element)";
    return false;
  }
  hwloc_topology_t topo = newTopology(false);
  if (topo == nullptr) {
    *err = std::string("hwloc_topology_init failed: ") + std::strerror(errno);
    return false;
  }
  std::shared_ptr<void> owner = own(topo);
  // set_xmlbuffer wants the length with the final NUL. A failure here or in load is a file hwloc cannot parse;
  // hwloc says where with HWLOC_XML_VERBOSE=1.
  if (hwloc_topology_set_xmlbuffer(topo, xml.c_str(), static_cast<int>(xml.size() + 1)) != 0 ||
      hwloc_topology_load(topo) != 0) {
    *err = source + ": hwloc cannot parse this XML (HWLOC_XML_VERBOSE=1 shows why)";
    return false;
  }
  FileFacts facts;
  if (!readFacts(topo, source, &facts, err)) return false;
  std::set<PciAddr> runtime;
  for (const auto& [addr, byRuntime] : facts.gpus) {
    if (byRuntime) runtime.insert(PciAddr{addr.domain, addr.bus, addr.dev, 0});
  }
  if (!derive(topo, runtime, &facts, source, out, err)) return false;
  out->hwloc = owner;
  return true;
}

}  // namespace

bool topologyToXml(const HostTopology& t, std::string* xml, std::string* err) {
  if (t.hwloc == nullptr) {
    // A view from a file without an hwloc tree can only have come from NCCL's format.
    *err = t.source.rfind("file ", 0) != 0 ? "no topology to write (the probe failed or this view is empty)"
                                           : "no topology to write: this view was read from an NCCL topology file (" +
                                                 t.source + "), which has no hwloc tree; the file itself is the dump";
    return false;
  }
  char* buf = nullptr;
  int len = 0;
  hwloc_topology_t topo = static_cast<hwloc_topology_t>(t.hwloc.get());
  if (hwloc_topology_export_xmlbuffer(topo, &buf, &len, 0) != 0 || buf == nullptr) {
    *err = std::string("hwloc could not export the topology: ") + std::strerror(errno);
    return false;
  }
  std::string hw(buf, len > 0 ? static_cast<size_t>(len - 1) : 0);
  hwloc_free_xmlbuffer(topo, buf);

  // chorus's facts as info attributes of the root object, written as text rather than through hwloc_obj_add_info
  // so that the shared topology stays untouched and a loaded file's old facts (exported again with its tree) are
  // replaced, not repeated. hwloc's writers put each <info> on its own line.
  std::vector<std::pair<std::string, std::string>> infos;
  infos.emplace_back(kInfoVersion, std::to_string(kFormatVersion));
  infos.emplace_back(kInfoSummary, t.summary());
  for (size_t i = 0; i < t.gpus.size(); i++) {
    infos.emplace_back(kInfoGpu, "index=" + std::to_string(i) + " busid=" + t.gpus[i].busId +
                                     " by=" + (t.gpus[i].byRuntime ? "runtime" : "class"));
  }
  for (size_t i = 0; i < t.nics.size(); i++) {
    const TopoNic& n = t.nics[i];
    infos.emplace_back(kInfoNic, "index=" + std::to_string(i) + " name=" + n.name +
                                     (n.isVirtual ? std::string(" virtual=1") : " busid=" + n.busId) +
                                     " speed_mbps=" + std::to_string(n.speedMbps));
  }
  for (const TopoGpuLink& l : t.gpuLinks) {
    infos.emplace_back(kInfoGpuLink, "a=" + t.gpus[l.a].busId + " b=" + t.gpus[l.b].busId +
                                         " kind=" + gpuLinkKindName(l.kind) + " count=" + std::to_string(l.count));
  }
  for (size_t g = 0; g < t.gpus.size() && !t.nics.empty(); g++) {
    std::string row = "GPU" + std::to_string(g) + ":";
    for (size_t n = 0; n < t.nics.size(); n++) row += std::string(" ") + pathClassName(t.gpuNic(g, n));
    infos.emplace_back(kInfoGpuNic, row);
  }

  std::istringstream in(hw);
  std::string line, text;
  bool inserted = false;
  while (std::getline(in, line)) {
    if (trim(line).rfind("<info name=\"Chorus", 0) == 0) continue;
    text += line + "\n";
    if (!inserted && line.find("<object type=\"Machine\"") != std::string::npos) {
      std::string indent = line.substr(0, line.find('<')) + "  ";
      for (const auto& [name, value] : infos) {
        text += indent + "<info name=\"" + name + "\" value=\"" + xmlEscape(value) + "\"/>\n";
      }
      inserted = true;
    }
  }
  if (!inserted) {
    *err = "hwloc's XML has no Machine object to attach chorus's facts to";
    return false;
  }
  *xml = std::move(text);
  return true;
}

#else  // !CHORUS_HAVE_HWLOC

bool topologyHasHwloc() { return false; }

namespace {
const char kNoHwloc[] = "chorus was built without hwloc (install libhwloc-dev and reconfigure)";
}

bool probeHostTopology(const std::vector<int64_t>&, HostTopology*, std::string* err) {
  *err = kNoHwloc;
  return false;
}

namespace {
bool loadHwlocTopologyXml(const std::string&, const std::string& source, HostTopology*, std::string* err) {
  *err = "cannot load " + source + ": " + kNoHwloc;
  return false;
}
}  // namespace

bool topologyToXml(const HostTopology&, std::string*, std::string* err) {
  *err = kNoHwloc;
  return false;
}

#endif  // CHORUS_HAVE_HWLOC

}  // namespace chorus
