// NCCL's own topology XML (<system>: what NVIDIA's NCCL_TOPO_DUMP_FILE writes, and what cloud images ship for
// NCCL_TOPO_FILE) read into chorus's view. It needs no hwloc: the file is NCCL's flattened PCI tree with the GPUs,
// NICs and links NCCL found, so the view comes straight from it (docs/topology.md, "NCCL's format").
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "topo/topology.h"

namespace chorus {

namespace {

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<std::unique_ptr<XmlNode>> children;
  XmlNode* parent = nullptr;

  std::string attr(const std::string& k) const {
    auto it = attrs.find(k);
    return it == attrs.end() ? "" : it->second;
  }
};

std::string unescape(const std::string& s) {
  static const std::pair<const char*, char> kEntities[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    bool done = false;
    for (const auto& [text, c] : kEntities) {
      if (s.compare(i, std::char_traits<char>::length(text), text) == 0) {
        out += c;
        i += std::char_traits<char>::length(text) - 1;
        done = true;
        break;
      }
    }
    if (!done) out += s[i];
  }
  return out;
}

bool isNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':'; }

// The elements and attributes of a small XML file (no text content, CDATA or DTD is needed for NCCL's format).
// False + *err with the offset of what it cannot read.
bool parseXml(const std::string& x, XmlNode* root, std::string* err) {
  XmlNode* cur = root;
  size_t i = 0;
  auto fail = [&](const std::string& what) {
    *err = what + " at byte " + std::to_string(i);
    return false;
  };
  auto skipSpace = [&] {
    while (i < x.size() && std::isspace(static_cast<unsigned char>(x[i]))) i++;
  };
  while (true) {
    size_t lt = x.find('<', i);
    if (lt == std::string::npos) break;
    i = lt;
    if (x.compare(i, 4, "<!--") == 0 || x.compare(i, 2, "<?") == 0 || x.compare(i, 2, "<!") == 0) {
      const char* end = x.compare(i, 4, "<!--") == 0 ? "-->" : ">";
      size_t e = x.find(end, i);
      if (e == std::string::npos) return fail("unterminated markup");
      i = e + std::char_traits<char>::length(end);
      continue;
    }
    if (x.compare(i, 2, "</") == 0) {
      i += 2;
      size_t s = i;
      while (i < x.size() && isNameChar(x[i])) i++;
      std::string name = x.substr(s, i - s);
      skipSpace();
      if (i >= x.size() || x[i] != '>') return fail("bad closing tag");
      if (cur == root) return fail("</" + name + "> closes nothing open");
      if (cur->name != name) return fail("</" + name + "> where </" + cur->name + "> was expected");
      cur = cur->parent;
      i++;
      continue;
    }
    i++;
    size_t s = i;
    while (i < x.size() && isNameChar(x[i])) i++;
    if (i == s) return fail("an element without a name");
    auto node = std::make_unique<XmlNode>();
    node->name = x.substr(s, i - s);
    node->parent = cur;
    bool selfClosed = false;
    while (true) {
      skipSpace();
      if (i >= x.size()) return fail("unterminated <" + node->name + ">");
      if (x[i] == '>') {
        i++;
        break;
      }
      if (x.compare(i, 2, "/>") == 0) {
        i += 2;
        selfClosed = true;
        break;
      }
      size_t k = i;
      while (i < x.size() && isNameChar(x[i])) i++;
      if (i == k) return fail("a bad attribute in <" + node->name + ">");
      std::string key = x.substr(k, i - k);
      skipSpace();
      if (i >= x.size() || x[i] != '=') return fail("attribute " + key + " without a value");
      i++;
      skipSpace();
      if (i >= x.size() || (x[i] != '"' && x[i] != '\'')) return fail("attribute " + key + " without quotes");
      char q = x[i++];
      size_t e = x.find(q, i);
      if (e == std::string::npos) return fail("unterminated attribute " + key);
      node->attrs[key] = unescape(x.substr(i, e - i));
      i = e + 1;
    }
    XmlNode* raw = node.get();
    cur->children.push_back(std::move(node));
    if (!selfClosed) cur = raw;
  }
  if (cur != root) return fail("<" + cur->name + "> is not closed");
  return true;
}

long hexOrDec(const std::string& s, long dflt) {
  if (s.empty()) return dflt;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 0);
  return end != nullptr && *end == '\0' ? v : dflt;
}

// "dddd:bb:dd.f" in lower case (NCCL writes bus ids as the kernel does; some files use capitals).
std::string normBusId(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An affinity mask as NCCL writes it (sysfs cpumap: 32-bit hex words, most significant first, comma-separated) as
// the CPU numbers it holds.
std::vector<int> maskCpus(const std::string& mask) {
  std::vector<std::string> words;
  size_t s = 0;
  while (s <= mask.size()) {
    size_t e = mask.find(',', s);
    if (e == std::string::npos) e = mask.size();
    words.push_back(mask.substr(s, e - s));
    s = e + 1;
  }
  std::vector<int> cpus;
  for (size_t w = 0; w < words.size(); w++) {
    unsigned long v = std::strtoul(words[w].c_str(), nullptr, 16);
    const int base = static_cast<int>((words.size() - 1 - w) * 32);
    for (int b = 0; b < 32; b++)
      if ((v >> b) & 1) cpus.push_back(base + b);
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

// "0-55,112-167".
std::string cpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) j++;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

// GB/s of a PCI link from NCCL's "32.0 GT/s PCIe" and its width, as hwloc computes it (128b/130b from 8 GT/s on).
float linkGBps(const std::string& speed, const std::string& width) {
  const double gts = std::atof(speed.c_str());
  const long lanes = hexOrDec(width, 0);
  if (gts <= 0 || lanes <= 0) return 0;
  return static_cast<float>(gts * static_cast<double>(lanes) * (gts >= 8 ? 128.0 / 130.0 : 0.8) / 8.0);
}

// Where an endpoint sits: the cpu element above it and the pci elements between (nearest first), excluding its own.
struct Place {
  const XmlNode* cpu = nullptr;
  int cpuIndex = -1;
  std::vector<const XmlNode*> bridges;
};

Place placeOf(const XmlNode* own, const std::map<const XmlNode*, int>& cpuIndex) {
  Place p;
  for (const XmlNode* n = own->parent; n != nullptr; n = n->parent) {
    if (n->name == "pci") p.bridges.push_back(n);
    if (n->name == "cpu") {
      p.cpu = n;
      p.cpuIndex = cpuIndex.at(n);
      break;
    }
  }
  return p;
}

// NCCL's classes over its flattened tree, where a PCIe switch is one pci element: endpoints directly below the same
// switch are PIX, below a common switch further up PXB; with no common switch, the same CPU (NUMA node) is PHB and
// different ones SYS. An endpoint under no CPU (a NIC outside every <cpu>) has no path: "-".
PathClass classify(const Place& a, const Place& b) {
  if (a.cpu == nullptr || b.cpu == nullptr) return PathClass::kNone;
  for (size_t i = 0; i < a.bridges.size(); i++) {
    auto it = std::find(b.bridges.begin(), b.bridges.end(), a.bridges[i]);
    if (it == b.bridges.end()) continue;
    return i == 0 && it == b.bridges.begin() ? PathClass::kPIX : PathClass::kPXB;
  }
  return a.cpu == b.cpu ? PathClass::kPHB : PathClass::kSYS;
}

void collect(const XmlNode* n, const std::string& name, std::vector<const XmlNode*>* out) {
  for (const auto& c : n->children) {
    if (c->name == name) out->push_back(c.get());
    collect(c.get(), name, out);
  }
}

const uint32_t kNvSwitchClass = 0x0680;

}  // namespace

bool loadNcclTopologyXml(const std::string& xml, const std::string& source, HostTopology* out, std::string* err) {
  XmlNode doc;
  std::string perr;
  if (!parseXml(xml, &doc, &perr)) {
    *err = source + ": cannot read this NCCL topology XML: " + perr;
    return false;
  }
  const XmlNode* system = nullptr;
  for (const auto& c : doc.children)
    if (c->name == "system") system = c.get();
  if (system == nullptr) {
    *err = source + ": no <system> element (not an NCCL topology file)";
    return false;
  }
  HostTopology t;
  t.source = "file " + source + " (NCCL format)";
  std::vector<const XmlNode*> cpus;
  collect(system, "cpu", &cpus);
  std::map<const XmlNode*, int> cpuIndex;
  std::vector<std::string> cpuLists;
  std::vector<int> allCpus;
  for (size_t i = 0; i < cpus.size(); i++) {
    cpuIndex[cpus[i]] = static_cast<int>(i);
    std::vector<int> mine = maskCpus(cpus[i]->attr("affinity"));
    cpuLists.push_back(cpuList(mine));
    allCpus.insert(allCpus.end(), mine.begin(), mine.end());
  }
  std::sort(allCpus.begin(), allCpus.end());
  allCpus.erase(std::unique(allCpus.begin(), allCpus.end()), allCpus.end());
  // The format has a CPU element per NUMA node and tells neither packages nor cores from hardware threads.
  t.packages = t.numaNodes = static_cast<int>(cpus.size());
  for (const XmlNode* c : cpus) {  // the first CPU that says
    if (t.cpuArch.empty()) t.cpuArch = c->attr("arch");
    if (t.cpuVendor.empty()) t.cpuVendor = c->attr("vendor");
  }
  t.cores = t.pus = static_cast<int>(allCpus.size());

  struct GpuFound {
    TopoGpu gpu;
    Place place;
    const XmlNode* elem;  // its <gpu>, whose children are its links
  };
  struct NicFound {
    TopoNic nic;
    Place place;
  };
  std::vector<GpuFound> gpus;
  std::vector<NicFound> nics;
  std::vector<const XmlNode*> gpuElems;
  collect(system, "gpu", &gpuElems);
  for (const XmlNode* g : gpuElems) {
    const XmlNode* pci = g->parent != nullptr && g->parent->name == "pci" ? g->parent : nullptr;
    if (pci == nullptr) {
      *err = source + ": a <gpu> outside a <pci> element";
      return false;
    }
    Place place = placeOf(pci, cpuIndex);
    if (place.cpu == nullptr) {
      *err = source + ": GPU " + pci->attr("busid") + " is not under a <cpu> element";
      return false;
    }
    TopoGpu gpu;
    gpu.busId = normBusId(pci->attr("busid"));
    gpu.vendor = static_cast<uint16_t>(hexOrDec(pci->attr("vendor"), 0));
    gpu.device = static_cast<uint16_t>(hexOrDec(pci->attr("device"), 0));
    gpu.pciClass = static_cast<uint16_t>(hexOrDec(pci->attr("class"), 0) >> 8);
    gpu.numa = static_cast<int>(hexOrDec(place.cpu->attr("numaid"), -1));
    gpu.package = place.cpuIndex;
    gpu.cpus = cpuLists[static_cast<size_t>(place.cpuIndex)];
    gpu.linkGBps = linkGBps(pci->attr("link_speed"), pci->attr("link_width"));
    gpu.linksKnown = true;  // the file states its NVLinks
    gpus.push_back(GpuFound{gpu, place, g});
  }
  std::vector<const XmlNode*> nets;
  collect(system, "net", &nets);
  for (const XmlNode* net : nets) {
    const XmlNode* nic = net->parent;
    if (nic == nullptr || nic->name != "nic") continue;
    const XmlNode* pci = nic->parent != nullptr && nic->parent->name == "pci" ? nic->parent : nullptr;
    Place place = placeOf(pci != nullptr ? pci : nic, cpuIndex);
    TopoNic n;
    n.name = net->attr("name");
    // Sockets write a zero GUID; verbs devices their port's.
    n.rdma = hexOrDec(net->attr("guid"), 0) != 0;
    n.speedMbps = hexOrDec(net->attr("speed"), 0);
    if (pci != nullptr) {
      n.busId = normBusId(pci->attr("busid"));
      n.vendor = static_cast<uint16_t>(hexOrDec(pci->attr("vendor"), 0));
      n.device = static_cast<uint16_t>(hexOrDec(pci->attr("device"), 0));
      n.linkGBps = linkGBps(pci->attr("link_speed"), pci->attr("link_width"));
    }
    // A NIC NCCL attached to a CPU (a VM's virtio NIC) has no bus id but a place: the CPU, as NCCL counts it.
    n.isVirtual = place.cpu == nullptr;
    if (place.cpu != nullptr) {
      n.numa = static_cast<int>(hexOrDec(place.cpu->attr("numaid"), -1));
      n.package = place.cpuIndex;
      n.cpus = cpuLists[static_cast<size_t>(place.cpuIndex)];
    }
    nics.push_back(NicFound{n, place});
  }
  if (gpus.empty() && nics.empty() && cpus.empty()) {
    *err = source + ": the NCCL topology names no CPU, GPU or NIC";
    return false;
  }
  // GPUs in bus id order and NICs in name order, as a probe lists them; the endpoints of the class matrix are the
  // GPUs, then the NICs.
  std::sort(gpus.begin(), gpus.end(), [](const GpuFound& a, const GpuFound& b) { return a.gpu.busId < b.gpu.busId; });
  std::stable_sort(nics.begin(), nics.end(), [](const NicFound& a, const NicFound& b) {
    if (a.nic.isVirtual != b.nic.isVirtual) return !a.nic.isVirtual;
    return naturalNameLess(a.nic.name, b.nic.name);
  });
  std::vector<Place> ends;
  for (const GpuFound& f : gpus) {
    t.gpus.push_back(f.gpu);
    ends.push_back(f.place);
  }
  for (const NicFound& f : nics) {
    t.nics.push_back(f.nic);
    ends.push_back(f.place);
  }
  const size_t n = ends.size();
  t.classes.assign(n * n, PathClass::kPIX);
  for (size_t a = 0; a < n; a++)
    for (size_t b = 0; b < n; b++)
      if (a != b) t.classes[a * n + b] = classify(ends[a], ends[b]);
  // Links: NVLink (<nvlink>) and xGMI (<xgmi>) to another GPU count directly; links to NVSwitches join every pair of
  // GPUs that have them, at the fewer of the two GPUs' switch links.
  std::vector<int> switchLinks(gpus.size(), 0);
  std::map<std::pair<int, int>, TopoGpuLink> direct;
  for (size_t g = 0; g < gpus.size(); g++) {
    for (const auto& l : gpus[g].elem->children) {
      if (l->name != "nvlink" && l->name != "xgmi") continue;
      const int count = static_cast<int>(hexOrDec(l->attr("count"), 1));
      if (static_cast<uint32_t>(hexOrDec(l->attr("tclass"), 0) >> 8) == kNvSwitchClass) {
        switchLinks[g] += count;
        continue;
      }
      const std::string target = normBusId(l->attr("target"));
      for (size_t h = 0; h < t.gpus.size(); h++) {
        if (h == g || t.gpus[h].busId != target) continue;
        TopoGpuLink link;
        link.a = static_cast<int>(std::min(g, h));
        link.b = static_cast<int>(std::max(g, h));
        link.kind = l->name == "xgmi" ? GpuLinkKind::kXGMI : GpuLinkKind::kNVLink;
        link.count = count;
        direct[{link.a, link.b}] = link;  // both ends list it: once
      }
    }
  }
  for (size_t a = 0; a < gpus.size(); a++)
    for (size_t b = a + 1; b < gpus.size(); b++) {
      if (switchLinks[a] == 0 || switchLinks[b] == 0 || direct.count({static_cast<int>(a), static_cast<int>(b)}))
        continue;
      TopoGpuLink link;
      link.a = static_cast<int>(a);
      link.b = static_cast<int>(b);
      link.count = std::min(switchLinks[a], switchLinks[b]);
      direct[{link.a, link.b}] = link;
    }
  for (const auto& [k, link] : direct) t.gpuLinks.push_back(link);
  *out = std::move(t);
  return true;
}

}  // namespace chorus
