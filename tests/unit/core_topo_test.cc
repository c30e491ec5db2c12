// The host topology (topo/topology.h): the synthetic nodes of topo/ load with the counts and distance classes their
// PCI trees imply, a dump reloads to the same view (this host's probe and every synthetic node), bad files give a
// clear error, and communicator init logs the summary, falls back to probing with a WARN naming a bad file, and
// writes NCCL_TOPO_DUMP_FILE.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "core/params.h"
#include "harness/ranks.h"
#include "harness/source_dir.h"
#include "nccl.h"
#include "topo/topology.h"

namespace chorus {
namespace {

using chorus_test::sourceDir;

std::string node(const char* name) { return sourceDir() + "/topo/" + name; }

std::string tempPath(const char* tag) {
  return "/tmp/chorus-topo-test-" + std::to_string(getpid()) + "-" + tag + ".xml";
}

HostTopology load(const std::string& path) {
  HostTopology t;
  std::string err;
  EXPECT_TRUE(loadHostTopology(path, &t, &err)) << err;
  return t;
}

// A copy of an XML text with `infos` (whole <info .../> lines) added to the root object.
std::string withRootInfos(const std::string& xml, const std::string& infos) {
  size_t machine = xml.find("<object type=\"Machine\"");
  size_t eol = xml.find('\n', machine);
  return xml.substr(0, eol + 1) + infos + xml.substr(eol + 1);
}

class Topo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  }
};

TEST_F(Topo, DgxH100) {
  HostTopology t = load(node("dgx-h100.xml"));
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.numaNodes, 2);
  EXPECT_EQ(t.cores, 112);
  EXPECT_EQ(t.pus, 224);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 8u);
  for (int i = 0; i < 8; i++) {
    EXPECT_EQ(t.gpus[i].vendor, 0x10de);
    EXPECT_EQ(t.gpus[i].pciClass, 0x0302);
    EXPECT_FALSE(t.gpus[i].byRuntime);
    EXPECT_EQ(t.gpus[i].numa, i < 4 ? 0 : 1);
    EXPECT_EQ(t.gpus[i].package, i < 4 ? 0 : 1);
    EXPECT_EQ(t.nics[i].name, "mlx5_" + std::to_string(i));
    EXPECT_TRUE(t.nics[i].rdma);
    EXPECT_FALSE(t.nics[i].isVirtual);
    EXPECT_EQ(t.nics[i].speedMbps, 400000);
  }
  EXPECT_EQ(t.gpus[0].busId, "0000:19:00.0");
  EXPECT_EQ(t.gpus[0].cpus, "0-55,112-167");
  EXPECT_NEAR(t.gpus[0].linkGBps, 63.0, 0.1);
  // Each switch holds two GPUs and their two NICs; two switches a socket.
  EXPECT_EQ(t.gpuNic(0, 0), PathClass::kPIX);
  EXPECT_EQ(t.gpuNic(0, 1), PathClass::kPIX);
  EXPECT_EQ(t.gpuNic(0, 2), PathClass::kPHB);  // same socket, the other switch's host bridge
  EXPECT_EQ(t.gpuNic(0, 4), PathClass::kSYS);
  EXPECT_EQ(t.gpuNic(7, 7), PathClass::kPIX);
  EXPECT_EQ(t.gpuNic(7, 0), PathClass::kSYS);
  EXPECT_EQ(t.gpuNic(5, 6), PathClass::kPHB);
  EXPECT_EQ(t.gpuGpu(0, 1), PathClass::kPIX);
  // NVSwitch: every pair has 18 NVLinks.
  EXPECT_EQ(t.gpuLinks.size(), 28u);
  for (int a = 0; a < 8; a++) {
    for (int b = 0; b < 8; b++) {
      if (a == b) continue;
      const TopoGpuLink* l = t.gpuLink(a, b);
      ASSERT_NE(l, nullptr) << a << "-" << b;
      EXPECT_EQ(l->kind, GpuLinkKind::kNVLink);
      EXPECT_EQ(l->count, 18);
    }
  }
  EXPECT_EQ(t.summary(), "2 packages, 2 NUMA, 112 cores, 224 PUs, 8 GPUs, 8 NICs");
  // The CPUs, for NCCL's default P2P level; a file states its GPUs' links.
  EXPECT_EQ(t.cpuArch, "x86_64");
  EXPECT_EQ(t.cpuVendor, "GenuineIntel");
  for (const TopoGpu& g : t.gpus) EXPECT_TRUE(g.linksKnown) << g.busId;
}

// A rank's GPU is found by the runtime's bus id (domain << 32 | bus << 8 | device) for its NUMA node, which orders a
// host's ranks in rings (topo/ring_order.h).
TEST_F(Topo, GpuNumaByRuntimeBusId) {
  HostTopology t = load(node("dgx-h100.xml"));
  EXPECT_EQ(topologyGpuNuma(t, 0x19 << 8), 0);  // 0000:19:00.0, GPU0
  EXPECT_EQ(topologyGpuNuma(t, 0x45 << 8), 0);  // GPU3
  EXPECT_EQ(topologyGpuNuma(t, 0x99 << 8), 1);  // GPU4
  EXPECT_EQ(topologyGpuNuma(t, 0xc5 << 8), 1);  // GPU7
  EXPECT_EQ(topologyGpuNuma(t, 0x18 << 8), -1) << "a NIC's bus id is no GPU";
  EXPECT_EQ(topologyGpuNuma(t, (int64_t{1} << 32) | 0x19 << 8), -1) << "another PCI domain";
  EXPECT_EQ(topologyGpuNuma(t, -1), -1) << "a rank without a GPU";
  EXPECT_EQ(topologyGpuNuma(HostTopology{}, 0x19 << 8), -1) << "an empty view";
}

TEST_F(Topo, Mi300x) {
  HostTopology t = load(node("mi300x.xml"));
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.numaNodes, 2);
  EXPECT_EQ(t.cores, 192);
  EXPECT_EQ(t.pus, 384);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 8u);
  for (const TopoGpu& g : t.gpus) {
    EXPECT_EQ(g.vendor, 0x1002);
    EXPECT_EQ(g.pciClass, 0x1200);  // processing accelerator, not a display class
  }
  // A lower switch holds a GPU and its NIC, an upper switch two lower ones, two upper switches a socket.
  EXPECT_EQ(t.gpuNic(0, 0), PathClass::kPIX);
  EXPECT_EQ(t.gpuNic(0, 1), PathClass::kPXB);
  EXPECT_EQ(t.gpuNic(1, 0), PathClass::kPXB);
  EXPECT_EQ(t.gpuNic(0, 2), PathClass::kPHB);
  EXPECT_EQ(t.gpuNic(0, 4), PathClass::kSYS);
  EXPECT_EQ(t.gpuNic(6, 7), PathClass::kPXB);
  EXPECT_EQ(t.gpuLinks.size(), 28u);
  ASSERT_NE(t.gpuLink(2, 5), nullptr);
  EXPECT_EQ(t.gpuLink(2, 5)->kind, GpuLinkKind::kXGMI);
  EXPECT_EQ(t.cpuArch, "x86_64");
  EXPECT_EQ(t.cpuVendor, "AuthenticAMD");
  // The DRM devices of the GPUs are not NICs.
  for (const TopoNic& n : t.nics) EXPECT_EQ(n.name.rfind("mlx5_", 0), 0u) << n.name;
}

TEST_F(Topo, CpuHost) {
  HostTopology t = load(node("cpu-2socket.xml"));
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.numaNodes, 2);
  EXPECT_EQ(t.cores, 32);
  EXPECT_EQ(t.pus, 64);
  EXPECT_TRUE(t.gpus.empty()) << "the BMC's ASPEED VGA is a display device but not a GPU";
  ASSERT_EQ(t.nics.size(), 3u);
  EXPECT_EQ(t.nics[0].name, "eno1");
  EXPECT_EQ(t.nics[0].speedMbps, 10000);
  EXPECT_EQ(t.nics[1].name, "ens801f0");
  EXPECT_EQ(t.nics[1].numa, 1);
  EXPECT_EQ(t.nics[2].name, "docker0");
  EXPECT_TRUE(t.nics[2].isVirtual);
  EXPECT_TRUE(t.nics[2].busId.empty());
  EXPECT_EQ(t.nicNic(0, 1), PathClass::kSYS);
  EXPECT_EQ(t.nicNic(0, 2), PathClass::kNone);
  EXPECT_EQ(t.pciNics(), 2);
  EXPECT_EQ(t.summary(), "2 packages, 2 NUMA, 32 cores, 64 PUs, 0 GPUs, 2 NICs, 1 virtual NIC");
}

TEST_F(Topo, SyntheticNodesSurviveDumpAndReload) {
  for (const char* name : {"dgx-h100.xml", "mi300x.xml", "cpu-2socket.xml"}) {
    HostTopology a = load(node(name));
    std::string path = tempPath("synthetic"), err, xml;
    ASSERT_TRUE(dumpHostTopology(a, path, &err)) << err;
    HostTopology b = load(path);
    EXPECT_EQ(a, b) << name;
    EXPECT_EQ(formatTopology(a).substr(formatTopology(a).find('\n')),
              formatTopology(b).substr(formatTopology(b).find('\n')));
    // A loaded file's facts are replaced in the dump, not written twice.
    xml = chorus_test::readFile(path);
    EXPECT_EQ(xml.find("ChorusVersion"), xml.rfind("ChorusVersion")) << name;
    std::remove(path.c_str());
  }
}

TEST_F(Topo, ProbeDumpsAndReloadsToTheSameView) {
  HostTopology probed, loaded;
  std::string err, path = tempPath("probe");
  ASSERT_TRUE(probeHostTopology({}, &probed, &err)) << err;
  EXPECT_GE(probed.packages, 1);
  EXPECT_GE(probed.cores, 1);
  EXPECT_GE(probed.pus, probed.cores);
  ASSERT_TRUE(dumpHostTopology(probed, path, &err)) << err;
  ASSERT_TRUE(loadHostTopology(path, &loaded, &err)) << err;
  EXPECT_EQ(probed, loaded) << formatTopology(probed) << "\n---\n" << formatTopology(loaded);
  EXPECT_EQ(loaded.source, "file " + path);
  std::remove(path.c_str());
}

// A GPU the runtime named by bus id (here the BMC's VGA, as a runtime of another vendor might) is kept as one by the
// file, and survives a dump; a bus id whose device has no GPU class is refused.
TEST_F(Topo, RuntimeNamedGpuIsRecorded) {
  std::string xml = chorus_test::readFile(node("cpu-2socket.xml")), err;
  HostTopology t;
  ASSERT_TRUE(loadHostTopologyXml(
      withRootInfos(xml, "<info name=\"ChorusGPU\" value=\"busid=0000:03:00.0 by=runtime\"/>\n"), "vga", &t, &err))
      << err;
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_TRUE(t.gpus[0].byRuntime);
  EXPECT_EQ(t.gpus[0].vendor, 0x1a03);
  std::string path = tempPath("runtime");
  ASSERT_TRUE(dumpHostTopology(t, path, &err)) << err;
  EXPECT_EQ(load(path), t);
  std::remove(path.c_str());

  EXPECT_FALSE(loadHostTopologyXml(
      withRootInfos(xml, "<info name=\"ChorusGPU\" value=\"busid=0000:3d:00.0 by=runtime\"/>\n"), "nic", &t, &err));
  EXPECT_NE(err.find("0000:3d:00.0"), std::string::npos) << err;
}

TEST_F(Topo, BadFilesGiveClearErrors) {
  HostTopology t;
  std::string err;
  EXPECT_FALSE(loadHostTopology("/nonexistent/chorus-topo.xml", &t, &err));
  EXPECT_NE(err.find("/nonexistent/chorus-topo.xml"), std::string::npos) << err;
  EXPECT_NE(err.find("No such file"), std::string::npos) << err;

  EXPECT_FALSE(loadHostTopologyXml("", "empty.xml", &t, &err));
  EXPECT_NE(err.find("empty.xml: empty"), std::string::npos) << err;
  EXPECT_FALSE(loadHostTopologyXml("garbage \x01\x02 not xml", "garbage.xml", &t, &err));
  EXPECT_NE(err.find("garbage.xml: not a topology file"), std::string::npos) << err;
  EXPECT_FALSE(loadHostTopologyXml("<?xml version=\"1.0\"?>\n<system version=\"1\"><cpu numaid=\"0\"></system>\n",
                                   "nccl.xml", &t, &err));
  EXPECT_NE(err.find("nccl.xml: cannot read this NCCL topology XML"), std::string::npos) << err;

  std::string dgx = chorus_test::readFile(node("dgx-h100.xml"));
  EXPECT_FALSE(loadHostTopologyXml(dgx.substr(0, dgx.size() / 2), "half.xml", &t, &err));
  EXPECT_NE(err.find("half.xml: hwloc cannot parse"), std::string::npos) << err;
  EXPECT_FALSE(loadHostTopologyXml(withRootInfos(dgx, "<info name=\"ChorusVersion\" value=\"9\"/>\n"), "v9", &t, &err));
  EXPECT_NE(err.find("newer chorus"), std::string::npos) << err;
  EXPECT_FALSE(
      loadHostTopologyXml(withRootInfos(dgx, "<info name=\"ChorusNIC\" value=\"name=mlx5_99\"/>\n"), "nic", &t, &err));
  EXPECT_NE(err.find("mlx5_99"), std::string::npos) << err;
  EXPECT_FALSE(loadHostTopologyXml(
      withRootInfos(dgx, "<info name=\"ChorusGPULink\" value=\"a=0000:19:00.0 b=0000:77:00.0 kind=NVLink\"/>\n"),
      "link", &t, &err));
  EXPECT_NE(err.find("ChorusGPULink"), std::string::npos) << err;

  HostTopology empty;
  EXPECT_FALSE(dumpHostTopology(empty, tempPath("empty"), &err));
}

TEST_F(Topo, ResolveFallsBackToTheProbe) {
  std::string warning;
  HostTopology t = resolveHostTopology("/nonexistent/node.xml", {}, &warning);
  EXPECT_EQ(t.source, "probe");
  EXPECT_NE(warning.find("/nonexistent/node.xml"), std::string::npos) << warning;
  EXPECT_NE(warning.find("probing this host instead"), std::string::npos) << warning;

  t = resolveHostTopology(node("mi300x.xml"), {}, &warning);
  EXPECT_EQ(t.source, "file " + node("mi300x.xml"));
  EXPECT_TRUE(warning.empty()) << warning;
  EXPECT_EQ(t.gpus.size(), 8u);
}

// Runs communicator init in a child process (the process topology is resolved once per process) with `env` set;
// returns the child's log.
std::string initInChild(const std::vector<std::pair<std::string, std::string>>& env) {
  std::string log = tempPath("log");
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);  // a hung init fails the test instead of hanging it
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    chorus_test::logInfoTo(log, "INIT");
    paramsReload();
    ncclComm_t comms[2];
    if (ncclCommInitAll(comms, 2, nullptr) != ncclSuccess) _exit(1);
    for (ncclComm_t c : comms) ncclCommDestroy(c);
    _exit(0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::string text = chorus_test::readFile(log);
  std::remove(log.c_str());
  return text;
}

TEST_F(Topo, InitLogsTheSummaryAndDumps) {
  std::string dump = tempPath("dump");
  std::string log = initInChild({{"CHORUS_TOPO_FILE", node("dgx-h100.xml")}, {"NCCL_TOPO_DUMP_FILE", dump}});
  EXPECT_NE(log.find("topology: 2 packages, 2 NUMA, 112 cores, 224 PUs, 8 GPUs, 8 NICs (from file " +
                     node("dgx-h100.xml") + ")"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find(" WARN "), std::string::npos) << log;
  EXPECT_EQ(load(dump), load(node("dgx-h100.xml")));
  std::remove(dump.c_str());
}

// An NCCL_TOPO_FILE in NCCL's format, as cloud images set it: read, named as such, and no dump of it.
TEST_F(Topo, InitReadsAnNcclFormatFile) {
  std::string dump = tempPath("ncclinit");
  std::string log = initInChild({{"NCCL_TOPO_FILE", node("nccl-dgx-h100.xml")}, {"NCCL_TOPO_DUMP_FILE", dump}});
  EXPECT_NE(log.find("8 GPUs, 8 NICs (from file " + node("nccl-dgx-h100.xml") + " (NCCL format))"), std::string::npos)
      << log;
  EXPECT_NE(log.find("read from an NCCL topology file"), std::string::npos) << log;
  EXPECT_NE(access(dump.c_str(), F_OK), 0) << "no dump was to be written";
}

TEST_F(Topo, InitWarnsAboutABadFileAndProbes) {
  std::string log = initInChild({{"NCCL_TOPO_FILE", "/nonexistent/node.xml"}});
  size_t warn = log.find(" WARN ");
  ASSERT_NE(warn, std::string::npos) << log;
  EXPECT_EQ(log.find(" WARN ", warn + 1), std::string::npos) << "warned once: " << log;
  std::string line = log.substr(warn, log.find('\n', warn) - warn);
  EXPECT_NE(line.find("topology: cannot read topology file /nonexistent/node.xml"), std::string::npos) << line;
  EXPECT_NE(log.find("(probed)"), std::string::npos) << log;
}

// NCCL's own format (<system>), which needs no hwloc. The DGX file is dgx-h100.xml's node as NCCL would dump it.
TEST(NcclTopo, DgxFileGivesTheViewOfTheHwlocFile) {
  HostTopology t = load(node("nccl-dgx-h100.xml"));
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 8u);
  EXPECT_EQ(t.numaNodes, 2);
  EXPECT_EQ(t.pus, 224);
  EXPECT_EQ(t.gpus[0].busId, "0000:19:00.0");
  EXPECT_EQ(t.gpus[0].pciClass, 0x0302);
  EXPECT_EQ(t.gpus[4].numa, 1);
  EXPECT_EQ(t.gpus[4].cpus, "56-111,168-223");
  EXPECT_NEAR(t.gpus[0].linkGBps, 63.0, 0.1);
  EXPECT_EQ(t.cpuArch, "x86_64");
  EXPECT_EQ(t.cpuVendor, "GenuineIntel");
  for (const TopoGpu& g : t.gpus) EXPECT_TRUE(g.linksKnown) << g.busId;
  EXPECT_EQ(t.nics[1].name, "mlx5_1");
  EXPECT_EQ(t.nics[1].busId, "0000:1a:00.0");
  EXPECT_TRUE(t.nics[1].rdma);
  EXPECT_EQ(t.nics[1].speedMbps, 400000);
  const PathClass row0[] = {PathClass::kPIX, PathClass::kPIX, PathClass::kPHB, PathClass::kPHB,
                            PathClass::kSYS, PathClass::kSYS, PathClass::kSYS, PathClass::kSYS};
  for (int n = 0; n < 8; n++) EXPECT_EQ(t.gpuNic(0, n), row0[n]) << "NIC" << n;
  EXPECT_EQ(t.gpuNic(6, 7), PathClass::kPIX);
  EXPECT_EQ(t.gpuGpu(0, 2), PathClass::kPHB);
  ASSERT_EQ(t.gpuLinks.size(), 28u);
  for (const TopoGpuLink& l : t.gpuLinks) EXPECT_EQ(l.count, 18);
  if (!topologyHasHwloc()) return;
  // The same node through hwloc's tree: the same GPUs, NICs, classes and links.
  HostTopology h = load(node("dgx-h100.xml"));
  ASSERT_EQ(h.gpus.size(), t.gpus.size());
  ASSERT_EQ(h.nics.size(), t.nics.size());
  for (size_t i = 0; i < t.gpus.size(); i++) {
    EXPECT_EQ(t.gpus[i].busId, h.gpus[i].busId);
    EXPECT_EQ(t.gpus[i].numa, h.gpus[i].numa);
    EXPECT_EQ(t.gpus[i].cpus, h.gpus[i].cpus);
  }
  for (size_t i = 0; i < t.nics.size(); i++) {
    EXPECT_EQ(t.nics[i].name, h.nics[i].name);
    EXPECT_EQ(t.nics[i].busId, h.nics[i].busId);
    EXPECT_EQ(t.nics[i].speedMbps, h.nics[i].speedMbps);
  }
  EXPECT_EQ(t.classes, h.classes);
  ASSERT_EQ(t.gpuLinks.size(), h.gpuLinks.size());
  for (size_t i = 0; i < t.gpuLinks.size(); i++) {
    EXPECT_EQ(t.gpuLinks[i].a, h.gpuLinks[i].a);
    EXPECT_EQ(t.gpuLinks[i].b, h.gpuLinks[i].b);
    EXPECT_EQ(t.gpuLinks[i].count, h.gpuLinks[i].count);
  }
}

// What NVIDIA's NCCL 2.28.9 dumped on an H200 VM (docs/perf/h100.md): its virtio NIC hangs off the CPU, so the GPU
// reaches it through the host bridge, as chorus's own probe of that VM said.
TEST(NcclTopo, RealH200VmDump) {
  HostTopology t = load(node("nccl-h200-vm.xml"));
  ASSERT_EQ(t.gpus.size(), 1u);
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.gpus[0].busId, "0000:00:06.0");
  EXPECT_EQ(t.gpus[0].device, 0x2335);
  EXPECT_EQ(t.nics[0].name, "eth0");
  EXPECT_FALSE(t.nics[0].rdma);
  EXPECT_FALSE(t.nics[0].isVirtual);
  EXPECT_EQ(t.nics[0].busId, "");
  EXPECT_EQ(t.gpuNic(0, 0), PathClass::kPHB);
  EXPECT_EQ(t.gpus[0].numa, -1);
  std::string warning;
  HostTopology r = resolveHostTopology(node("nccl-h200-vm.xml"), {}, &warning);  // NCCL_TOPO_FILE's path
  EXPECT_EQ(warning, "");
  EXPECT_EQ(r.gpus.size(), 1u);
  std::string err;
  EXPECT_FALSE(dumpHostTopology(t, tempPath("nccl"), &err));
  EXPECT_NE(err.find("NCCL topology file"), std::string::npos) << err;
}

TEST(NcclTopo, XgmiAndDirectLinksAndBadFiles) {
  const std::string two =
      "<system version=\"1\"><cpu numaid=\"0\" affinity=\"0000000f\">"
      "<pci busid=\"0000:0A:00.0\" class=\"0x120000\" vendor=\"0x1002\" device=\"0x74a1\">"
      "<gpu dev=\"0\"><xgmi target=\"0000:0b:00.0\" count=\"1\" tclass=\"0x120000\"/></gpu></pci>"
      "<pci busid=\"0000:0b:00.0\" class=\"0x120000\" vendor=\"0x1002\" device=\"0x74a1\">"
      "<gpu dev=\"1\"><xgmi target=\"0000:0a:00.0\" count=\"1\" tclass=\"0x120000\"/></gpu></pci>"
      "</cpu></system>";
  HostTopology t;
  std::string err;
  ASSERT_TRUE(loadHostTopologyXml(two, "two.xml", &t, &err)) << err;
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.gpus[0].busId, "0000:0a:00.0");
  EXPECT_EQ(t.gpus[0].cpus, "0-3");
  EXPECT_EQ(t.gpuGpu(0, 1), PathClass::kPHB);
  ASSERT_EQ(t.gpuLinks.size(), 1u);
  EXPECT_EQ(t.gpuLinks[0].kind, GpuLinkKind::kXGMI);

  // NICs in natural name order, whatever the file's order.
  const std::string nics =
      "<system version=\"1\"><cpu numaid=\"0\">"
      "<nic><net name=\"mlx5_10\" speed=\"100000\" guid=\"0x1\"/></nic>"
      "<nic><net name=\"mlx5_2\" speed=\"100000\" guid=\"0x2\"/></nic></cpu></system>";
  ASSERT_TRUE(loadHostTopologyXml(nics, "nics.xml", &t, &err)) << err;
  ASSERT_EQ(t.nics.size(), 2u);
  EXPECT_EQ(t.nics[0].name, "mlx5_2");
  EXPECT_EQ(t.nics[1].name, "mlx5_10");
  EXPECT_EQ(t.nicNic(0, 1), PathClass::kPHB);

  EXPECT_FALSE(loadHostTopologyXml("<system version=\"1\"></system>", "none.xml", &t, &err));
  EXPECT_NE(err.find("none.xml: the NCCL topology names no CPU, GPU or NIC"), std::string::npos) << err;
  EXPECT_FALSE(loadHostTopologyXml("<system><cpu><gpu dev=\"0\"/></cpu></system>", "loose.xml", &t, &err));
  EXPECT_NE(err.find("loose.xml: a <gpu> outside a <pci>"), std::string::npos) << err;
  EXPECT_FALSE(loadHostTopologyXml("<system><cpu numaid=\"0></system>", "quote.xml", &t, &err));
  EXPECT_NE(err.find("quote.xml: cannot read"), std::string::npos) << err;
}

#ifdef CHORUS_TEST_FAKE_NVML
// NVLink from NVML (addNvmlLinks), over tests/plugins/fake_nvml.c: four NVIDIA GPUs, the first two with two direct
// links between them, and every one with links to NVSwitches (two, or four for the third), one link down. A pair's
// count is its direct links plus the fewer of its two switch counts. NVML without the remote-type call (before 11.0)
// gives the same view, the far end told by its bus id.
class Nvml : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CHORUS_NVML_LIBRARY", CHORUS_TEST_FAKE_NVML, 1);
    paramsReload();
  }
  void TearDown() override {
    for (const char* v : {"CHORUS_NVML_LIBRARY", "FAKE_NVML_LINKS", "FAKE_NVML_INIT_FAIL", "FAKE_NVML_NO_TYPE"})
      unsetenv(v);
    paramsReload();
  }
  static HostTopology fourGpus(uint16_t vendor = 0x10de) {
    HostTopology t;
    for (const char* id : {"0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0"}) {
      TopoGpu g;
      g.busId = id;
      g.vendor = vendor;
      t.gpus.push_back(g);
    }
    return t;
  }
  static void setLinks() {
    setenv("FAKE_NVML_LINKS",
           "0000:19:00.0=0000:3b:00.0,switch,0000:3b:00.0,switch,down;"
           "0000:3b:00.0=0000:19:00.0,0000:19:00.0,switch,switch;"
           "0000:4c:00.0=switch,switch,switch,switch;"
           "0000:5d:00.0=switch,down,switch",
           1);
  }
};

TEST_F(Nvml, DirectAndSwitchLinks) {
  setLinks();
  for (const char* noType : {"0", "1"}) {
    SCOPED_TRACE(std::string("FAKE_NVML_NO_TYPE=") + noType);
    setenv("FAKE_NVML_NO_TYPE", noType, 1);
    HostTopology t = fourGpus();
    std::string said;
    ASSERT_EQ(addNvmlLinks(&t, &said), 6) << said;
    for (const TopoGpu& g : t.gpus) EXPECT_TRUE(g.linksKnown) << g.busId << ": NVML answered for it";
    EXPECT_NE(said.find("4 of 4 NVIDIA GPUs answered; NVLink between 6 pair(s), 6 through NVSwitch"), std::string::npos)
        << said;
    const int want[4][4] = {{0, 4, 2, 2}, {4, 0, 2, 2}, {2, 2, 0, 2}, {2, 2, 2, 0}};
    for (int a = 0; a < 4; a++) {
      for (int b = 0; b < 4; b++) {
        if (a == b) continue;
        const TopoGpuLink* l = t.gpuLink(a, b);
        ASSERT_NE(l, nullptr) << a << "-" << b;
        EXPECT_EQ(l->count, want[a][b]) << a << "-" << b;
        EXPECT_EQ(l->kind, GpuLinkKind::kNVLink);
      }
    }
    EXPECT_GT(topologyNvlinkBytesPerUs(t), 0.0) << "every pair has NVLink";
  }
}

// A link the view has already (from a file) stays as it is; NVML adds the others.
TEST_F(Nvml, KeepsLinksTheViewHas) {
  setLinks();
  HostTopology t = fourGpus();
  TopoGpuLink known;
  known.a = 0;
  known.b = 1;
  known.count = 18;
  t.gpuLinks.push_back(known);
  std::string said;
  EXPECT_EQ(addNvmlLinks(&t, &said), 5) << said;
  ASSERT_NE(t.gpuLink(0, 1), nullptr);
  EXPECT_EQ(t.gpuLink(0, 1)->count, 18);
  EXPECT_EQ(t.gpuLinks.size(), 6u);
}

// Where NVML cannot answer, the view has no NVLink and the reason is said; where there is nothing to ask, it is not
// loaded at all.
TEST_F(Nvml, NothingToAskOrNoAnswer) {
  setLinks();
  std::string said;
  HostTopology amd = fourGpus(0x1002);
  EXPECT_EQ(addNvmlLinks(&amd, &said), 0);
  EXPECT_NE(said.find("fewer than two NVIDIA GPUs"), std::string::npos) << said;

  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  HostTopology t = fourGpus();
  EXPECT_EQ(addNvmlLinks(&t, &said), -1);
  EXPECT_NE(said.find("nvmlInit_v2 failed (NVML error 999)"), std::string::npos) << said;
  EXPECT_TRUE(t.gpuLinks.empty());
  for (const TopoGpu& g : t.gpus) EXPECT_FALSE(g.linksKnown) << g.busId << ": NVML did not answer";
  unsetenv("FAKE_NVML_INIT_FAIL");

  setenv("CHORUS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  paramsReload();
  EXPECT_EQ(addNvmlLinks(&t, &said), -1);
  EXPECT_NE(said.find("NVML (/nonexistent/libnvidia-ml.so.1) did not load"), std::string::npos) << said;
  setenv("CHORUS_NVML_LIBRARY", "none", 1);
  paramsReload();
  EXPECT_EQ(addNvmlLinks(&t, &said), -1);
  EXPECT_NE(said.find("CHORUS_NVML_LIBRARY=none"), std::string::npos) << said;
  EXPECT_TRUE(t.gpuLinks.empty());

  // A GPU NVML does not know is skipped; the others' links still count.
  setenv("CHORUS_NVML_LIBRARY", CHORUS_TEST_FAKE_NVML, 1);
  paramsReload();
  setenv("FAKE_NVML_LINKS", "0000:19:00.0=switch,switch;0000:3b:00.0=switch", 1);
  HostTopology three = fourGpus();
  three.gpus.pop_back();
  ASSERT_EQ(addNvmlLinks(&three, &said), 1) << said;
  EXPECT_NE(said.find("2 of 3 NVIDIA GPUs answered"), std::string::npos) << said;
  EXPECT_TRUE(three.gpus[0].linksKnown);
  EXPECT_TRUE(three.gpus[1].linksKnown);
  EXPECT_FALSE(three.gpus[2].linksKnown) << "NVML does not know it: an NVLink of it may be unseen";
  ASSERT_NE(three.gpuLink(0, 1), nullptr);
  EXPECT_EQ(three.gpuLink(0, 1)->count, 1);
}
#endif  // CHORUS_TEST_FAKE_NVML

#ifdef CHORUS_TEST_FAKE_ROCM_SMI
// xGMI from ROCm SMI (addRsmiLinks), over tests/plugins/fake_rocm_smi.c: four AMD GPUs that ROCm SMI numbers in
// another order than the view (bus id order). Direct xGMI paths (weight 15 or 41) are links; a two-hop xGMI path
// (weight 30) and PCIe are not. Without weights, one hop decides.
class Rsmi : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CHORUS_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so.7," CHORUS_TEST_FAKE_ROCM_SMI, 1);
    setenv("FAKE_RSMI_GPUS", "0000:e1:00.0,0000:c1:00.0,0000:29:00.0,0000:09:00.0", 1);  // view GPUs 3, 2, 1, 0
    setenv("FAKE_RSMI_XGMI", "0-1:15:1,1-2:41:1,2-3:15:1,0-3:30:2", 1);
    paramsReload();
  }
  void TearDown() override {
    for (const char* v :
         {"CHORUS_ROCM_SMI_LIBRARY", "FAKE_RSMI_GPUS", "FAKE_RSMI_XGMI", "FAKE_RSMI_INIT_FAIL", "FAKE_RSMI_NO_WEIGHT"})
      unsetenv(v);
    paramsReload();
  }
  static HostTopology fourGpus() {
    HostTopology t;
    for (const char* id : {"0000:09:00.0", "0000:29:00.0", "0000:c1:00.0", "0000:e1:00.0"}) {
      TopoGpu g;
      g.busId = id;
      g.vendor = 0x1002;
      t.gpus.push_back(g);
    }
    return t;
  }
};

TEST_F(Rsmi, DirectXgmiPathsAreLinks) {
  for (const char* noWeight : {"0", "1"}) {
    SCOPED_TRACE(std::string("FAKE_RSMI_NO_WEIGHT=") + noWeight);
    setenv("FAKE_RSMI_NO_WEIGHT", noWeight, 1);
    HostTopology t = fourGpus();
    std::string said;
    ASSERT_EQ(addRsmiLinks(&t, &said), 3) << said;
    for (const TopoGpu& g : t.gpus) EXPECT_TRUE(g.linksKnown) << g.busId << ": ROCm SMI answered for it";
    EXPECT_NE(said.find("4 of 4 AMD GPUs answered; xGMI between 3 pair(s)"), std::string::npos) << said;
    EXPECT_NE(said.find(CHORUS_TEST_FAKE_ROCM_SMI), std::string::npos) << "the library that loaded: " << said;
    // ROCm SMI's pairs 0-1, 1-2, 2-3 are the view's 3-2, 2-1, 1-0; its 0-3 (two hops) is none.
    for (auto [a, b] : {std::pair{3, 2}, std::pair{2, 1}, std::pair{1, 0}}) {
      const TopoGpuLink* l = t.gpuLink(a, b);
      ASSERT_NE(l, nullptr) << a << "-" << b;
      EXPECT_EQ(l->kind, GpuLinkKind::kXGMI);
      EXPECT_EQ(l->count, 1);
    }
    EXPECT_EQ(t.gpuLink(0, 3), nullptr);
    EXPECT_EQ(t.gpuLink(0, 2), nullptr);
  }
}

TEST_F(Rsmi, NothingToAskOrNoAnswer) {
  std::string said;
  HostTopology one = fourGpus();
  one.gpus.resize(1);
  EXPECT_EQ(addRsmiLinks(&one, &said), 0);
  EXPECT_NE(said.find("fewer than two AMD GPUs"), std::string::npos) << said;

  setenv("FAKE_RSMI_INIT_FAIL", "1", 1);
  HostTopology t = fourGpus();
  EXPECT_EQ(addRsmiLinks(&t, &said), -1);
  EXPECT_NE(said.find("rsmi_init failed (ROCm SMI status 8)"), std::string::npos) << said;
  for (const TopoGpu& g : t.gpus) EXPECT_FALSE(g.linksKnown) << g.busId;
  unsetenv("FAKE_RSMI_INIT_FAIL");

  setenv("CHORUS_ROCM_SMI_LIBRARY", "/nonexistent/a.so,/nonexistent/b.so", 1);
  paramsReload();
  EXPECT_EQ(addRsmiLinks(&t, &said), -1);
  EXPECT_NE(said.find("ROCm SMI (/nonexistent/a.so,/nonexistent/b.so) did not load: "), std::string::npos) << said;
  EXPECT_NE(said.find("b.so"), std::string::npos) << "each name's error is said: " << said;
  setenv("CHORUS_ROCM_SMI_LIBRARY", "none", 1);
  paramsReload();
  EXPECT_EQ(addRsmiLinks(&t, &said), -1);
  EXPECT_NE(said.find("CHORUS_ROCM_SMI_LIBRARY=none"), std::string::npos) << said;
  EXPECT_TRUE(t.gpuLinks.empty());
}
#endif  // CHORUS_TEST_FAKE_ROCM_SMI

}  // namespace
}  // namespace chorus
