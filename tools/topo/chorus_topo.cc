// chorus-topo: the host topology as chorus sees it (docs/topology.md).
//   chorus-topo                 probes this host and prints its view: counts, GPUs, NICs, the distance matrix, and
//                               the NICs each GPU's connections between hosts use
//   chorus-topo --file F        prints the view of topology file F (a dump, a synthetic node, `lstopo --of xml`)
//   chorus-topo --dump OUT      also writes the view (probed, or --file's) to OUT, as NCCL_TOPO_DUMP_FILE does
// Exit status: 0, 1 when the probe or file fails (the message says why), 2 for bad arguments.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "topo/nic_choice.h"
#include "topo/nic_fusion.h"
#include "topo/topology.h"

namespace {

int usage() {
  std::fprintf(stderr, "usage: chorus-topo [--file TOPOLOGY.xml] [--dump OUT.xml]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, dump;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if ((a == "--file" || a == "--dump") && i + 1 < argc) {
      (a == "--file" ? file : dump) = argv[++i];
    } else {
      return usage();
    }
  }
  chorus::HostTopology topo;
  std::string err;
  // Bus ids from no GPU runtime: this tool must run on a login node or laptop without a GPU stack.
  bool ok = file.empty() ? chorus::probeHostTopology({}, &topo, &err) : chorus::loadHostTopology(file, &topo, &err);
  if (!ok) {
    std::fprintf(stderr, "chorus-topo: %s\n", err.c_str());
    return 1;
  }
  std::fputs(chorus::formatTopology(topo).c_str(), stdout);
  if (!topo.gpuLinksFrom.empty()) std::printf("\nGPU links: %s\n", topo.gpuLinksFrom.c_str());
  if (const std::string nics = chorus::formatNicChoices(topo); !nics.empty()) std::printf("\n%s", nics.c_str());
  if (const std::string fused = chorus::formatNicFusion(topo); !fused.empty()) std::printf("\n%s", fused.c_str());
  if (!dump.empty()) {
    if (!chorus::dumpHostTopology(topo, dump, &err)) {
      std::fprintf(stderr, "chorus-topo: %s\n", err.c_str());
      return 1;
    }
    std::printf("\nwritten to %s\n", dump.c_str());
  }
  return 0;
}
