// The host topology as chorus sees it: packages, NUMA nodes, cores, the GPUs and NICs on the PCI tree, how far each
// GPU is from each NIC (NCCL's PCI distance classes), and the GPU-GPU links hwloc cannot see (NVLink, xGMI).
//
// Plain data, independent of hwloc: the rest of chorus and the tests use it without hwloc's headers. It is filled
// by probing this host through hwloc (topology_hwloc.cc) or by loading a file written by a dump, so that a user's
// node can be replayed on any machine (docs/topology.md has the file format).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chorus {

/// How far apart two PCI endpoints are, nearest first (NCCL's path types between a GPU and a NIC).
enum class PathClass : uint8_t {
  kPIX,   ///< one PCI switch: each side at most one bridge below the common bridge
  kPXB,   ///< several PCI bridges, no CPU host bridge in between
  kPHB,   ///< through a CPU host bridge, both on the same NUMA node
  kSYS,   ///< across NUMA nodes or sockets (the SMP interconnect)
  kNone,  ///< no PCI path: an endpoint is a virtual interface
};

/// "PIX", "PXB", "PHB", "SYS" or "-".
const char* pathClassName(PathClass c);

/// A direct GPU-GPU link kind.
enum class GpuLinkKind : uint8_t { kNVLink, kXGMI };

/// "NVLink" or "xGMI".
const char* gpuLinkKindName(GpuLinkKind k);

/// Names in natural order, as NICs are listed: mlx5_2 before mlx5_10 (digit runs compare as numbers).
bool naturalNameLess(const std::string& a, const std::string& b);

/// A GPU: a PCI function of a GPU class with NVIDIA's or AMD's vendor id, or one the GPU runtime named by bus id.
struct TopoGpu {
  std::string busId;       ///< "dddd:bb:dd.f"
  uint16_t vendor = 0;     ///< PCI vendor id
  uint16_t device = 0;     ///< PCI device id
  uint16_t pciClass = 0;   ///< PCI class (0x0302 3D controller, 0x0300 VGA, 0x1200 accelerator, ...)
  bool byRuntime = false;  ///< found through the runtime's bus id rather than by class and vendor
  std::string name;        ///< hwloc's PCIDevice name, "" when unknown
  int numa = -1;           ///< OS index of the NUMA node it is attached to, -1 when not one node
  int package = -1;        ///< OS index of its package, -1 when not one package
  std::string cpus;        ///< the CPUs near it, as a list ("0-55,112-167")
  float linkGBps = 0;      ///< PCI link speed in GB/s as hwloc reports it (0: unknown)
  /// Its NVLink or xGMI links are known: a GPU of a topology file, or one NVML or ROCm SMI answered for when probing.
  /// Not part of a view's identity (a dump of a probe, loaded, has every GPU's links known).
  bool linksKnown = false;
};

/// A NIC: a PCI network function (named by its RDMA device when it has one), or a virtual interface without PCI.
struct TopoNic {
  std::string name;        ///< RDMA device ("mlx5_0") if any, else the interface ("eth0")
  std::string netdev;      ///< network interface of the function ("ibp24s0"), "" when none
  bool rdma = false;       ///< has an RDMA (OpenFabrics) device
  bool isVirtual = false;  ///< no PCI device (bridge, veth, tunnel): busId empty, no distance class
  std::string busId;       ///< "dddd:bb:dd.f", "" when virtual
  uint16_t vendor = 0;
  uint16_t device = 0;
  int numa = -1;
  int package = -1;
  std::string cpus;
  float linkGBps = 0;     ///< PCI link speed in GB/s (0: unknown)
  int64_t speedMbps = 0;  ///< port speed in Mb/s from sysfs or the file (0: unknown); hwloc has none
};

/// A direct link between two GPUs (indices into HostTopology::gpus), from a topology file or, when probing, from NVML
/// (NVLink) or ROCm SMI (xGMI).
struct TopoGpuLink {
  int a = 0;
  int b = 0;
  GpuLinkKind kind = GpuLinkKind::kNVLink;
  int count = 1;  ///< links (NVLink lanes to the peer or through NVSwitch; 1 for an xGMI link)
};

/// One host's topology. GPUs are in PCI bus id order (as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them), NICs with PCI
/// first in natural name order (mlx5_2 before mlx5_10), then the virtual ones.
struct HostTopology {
  int packages = 0;
  int numaNodes = 0;
  int cores = 0;
  int pus = 0;  ///< hardware threads
  std::string cpuArch;    ///< "x86_64", "aarch64", ... (hwloc's Architecture, an NCCL file's arch); "" unknown
  std::string cpuVendor;  ///< its first package's CPUVendor ("GenuineIntel", "AuthenticAMD", ...); "" unknown
  std::vector<TopoGpu> gpus;
  std::vector<TopoNic> nics;
  std::vector<TopoGpuLink> gpuLinks;
  /// Distance classes between every pair of endpoints, endpoints being the GPUs then the NICs: row-major,
  /// (gpus + nics)^2 entries, symmetric; the diagonal is kPIX.
  std::vector<PathClass> classes;
  std::string source;  ///< "probe", "file <path>", or "none..." (empty view)
  std::string gpuLinksFrom;  ///< a probe's: what NVML or ROCm SMI said of the GPU links (addNvmlLinks...), for INFO
  /// The hwloc topology it came from (opaque, shared by copies; null for an empty view). Dumps export it.
  std::shared_ptr<void> hwloc;

  /// Class between GPU g and NIC n.
  PathClass gpuNic(int g, int n) const { return classAt(g, static_cast<int>(gpus.size()) + n); }
  /// Class of the PCI path between GPUs a and b (a direct link, if any, is in gpuLinks).
  PathClass gpuGpu(int a, int b) const { return classAt(a, b); }
  /// Class between NICs a and b.
  PathClass nicNic(int a, int b) const {
    return classAt(static_cast<int>(gpus.size()) + a, static_cast<int>(gpus.size()) + b);
  }
  /// The direct link between GPUs a and b, null when none.
  const TopoGpuLink* gpuLink(int a, int b) const;
  /// NICs with a PCI device.
  int pciNics() const;
  /// "2 packages, 2 NUMA, 112 cores, 224 PUs, 8 GPUs, 8 NICs" (plus ", N virtual NICs" when there are).
  std::string summary() const;
  /// "x86_64 GenuineIntel": the CPUs' architecture and vendor, "?" for either where unknown.
  std::string cpuText() const;

 private:
  PathClass classAt(int i, int j) const;
};

/// The speed a host's nets can use, in Mb/s: its slowest PCI NIC with a known port speed (a host's ranks spread over
/// its NICs, so the slowest bounds them), else its fastest virtual interface with one (a veth of a network namespace
/// says 10000), else 0 (unknown: a VM's virtio NIC reports none).
int64_t topologyNicMbps(const HostTopology& t);

/// The index in t.gpus of the GPU at `runtimeBusId` (GpuRuntime::busId numbering: domain << 32 | bus << 8 | device),
/// -1 when the topology has no such GPU (or the id is negative: a rank without a GPU).
int topologyGpuIndex(const HostTopology& t, int64_t runtimeBusId);

/// The index in t.nics of the NIC a net names by its device or interface name ("mlx5_0", "eth0"), or by its PCI path
/// (a sysfs path ending in the NIC's bus id, as a net's properties give it); -1 when the topology places neither.
int topologyNicIndex(const HostTopology& t, const std::string& name, const std::string& pciPath);

/// The NUMA node of the GPU at `runtimeBusId` (GpuRuntime::busId numbering: domain << 32 | bus << 8 | device), -1
/// when the topology has no such GPU or it is not on one node.
int topologyGpuNuma(const HostTopology& t, int64_t runtimeBusId);

/// What NVLink gives each pair of a host's GPUs in bytes a microsecond (MB/s): the fewest links between any pair at
/// 20.5 GB/s a link (NCCL reaches about 370 GB/s over an H100's 18); 0 unless every pair has NVLink.
double topologyNvlinkBytesPerUs(const HostTopology& t);

/// Same host view: every field but `source` and `hwloc` (PCI link speeds to 1 MB/s, as a file keeps them).
bool operator==(const HostTopology& a, const HostTopology& b);
inline bool operator!=(const HostTopology& a, const HostTopology& b) { return !(a == b); }

/// The full report chorus-topo prints: counts, the GPUs and NICs, and the GPU/NIC matrix of distance classes (as
/// `nvidia-smi topo -m` prints it, NV# or XGMI for direct GPU links), with its legend.
std::string formatTopology(const HostTopology& t);

/// Adds to t->gpuLinks the NVLink NVML (CHORUS_NVML_LIBRARY, loaded at run time) reports between t's NVIDIA GPUs, as
/// NCCL's topology does: a link's far end is another GPU, or an NVSwitch, through which two GPUs with switch links
/// get the fewer of their two counts; a pair with both adds them. Pairs t already links are left as they are.
/// Returns the pairs added, 0 when there are fewer than two NVIDIA GPUs (NVML is not asked), -1 when NVML cannot be
/// loaded or fails; *said tells which, for INFO.
int addNvmlLinks(HostTopology* t, std::string* said);

/// Adds to t->gpuLinks the xGMI links ROCm SMI (CHORUS_ROCM_SMI_LIBRARY, loaded at run time) reports between t's AMD
/// GPUs, as RCCL's topology does: an xGMI path of link weight 13, 15 or 41 (one hop where the library gives no
/// weights) is a direct link. Pairs t already links are left as they are. Returns as addNvmlLinks does.
int addRsmiLinks(HostTopology* t, std::string* said);

/// Whether this build can probe and load topologies (built with hwloc).
bool topologyHasHwloc();

/// Probes this host through hwloc. runtimeBusIds are the GPU runtime's devices (GpuRuntime::busId numbering:
/// domain << 32 | bus << 8 | device): a PCI device at one of them is a GPU whatever its vendor, provided its class
/// is a display, processor or accelerator class. False + *err when hwloc fails or is not built in.
bool probeHostTopology(const std::vector<int64_t>& runtimeBusIds, HostTopology* out, std::string* err);

/// Loads a topology file (hwloc XML, chorus facts as info attributes; a plain `lstopo --of xml` file loads too).
/// False + *err naming the file when it is missing, unreadable or not hwloc XML.
bool loadHostTopology(const std::string& path, HostTopology* out, std::string* err);

/// Same as loadHostTopology from the file's content; `source` names it in messages and in out->source. NCCL's own
/// format (a <system> element) goes to loadNcclTopologyXml.
bool loadHostTopologyXml(const std::string& xml, const std::string& source, HostTopology* out, std::string* err);

/// Reads NCCL's topology XML (<system>, as NVIDIA's NCCL_TOPO_DUMP_FILE writes it and cloud images ship it for
/// NCCL_TOPO_FILE) without hwloc: GPUs and NICs from its <pci>, <gpu> and <net> elements, classes from its
/// flattened PCI tree, NVLink and xGMI from <nvlink> and <xgmi>. The view has no hwloc topology, so it cannot be
/// dumped again. False + *err naming `source` when the XML cannot be read or names nothing.
bool loadNcclTopologyXml(const std::string& xml, const std::string& source, HostTopology* out, std::string* err);

/// The file form of a topology: its hwloc XML with chorus's facts added. False + *err for an empty view.
bool topologyToXml(const HostTopology& t, std::string* xml, std::string* err);

/// Writes topologyToXml's text to path (through a temporary file and a rename, so that a reader never sees half a
/// file and two ranks writing at once leave one whole file). False + *err naming the file on failure.
bool dumpHostTopology(const HostTopology& t, const std::string& path, std::string* err);

/// The topology this process uses: `file` (CHORUS_TOPO_FILE or NCCL_TOPO_FILE) when set, else a probe. Never fails:
/// a file that does not load falls back to the probe, a failed probe gives an empty view, and *warning receives
/// what went wrong (the caller logs it) or "" when nothing did (a build without hwloc gives an empty view quietly).
HostTopology resolveHostTopology(const std::string& file, const std::vector<int64_t>& runtimeBusIds,
                                 std::string* warning);

/// The process's topology, resolved on first use for each value of CHORUS_TOPO_FILE / NCCL_TOPO_FILE (thread-safe)
/// from the parameters and the GPU runtime.
const HostTopology& processTopology();

/// Communicator init's hook: resolves the process topology (logging its summary once, at INFO INIT, and any
/// problem once, as a WARN) and, on the rank NCCL_TOPO_DUMP_FILE_RANK names, writes NCCL_TOPO_DUMP_FILE once.
void topologyAtCommInit(int rank);

}  // namespace chorus
