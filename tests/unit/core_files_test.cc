// The kernel's GPUDirect RDMA peer-memory modules, as chorus looks for them (core/files.h): each vendor's version
// files under a scratch root standing for /.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/files.h"

namespace chorus {
namespace {

struct ScratchRoot {
  std::string root = "/tmp/chorus-peermem-" + std::to_string(getpid());
  ScratchRoot() { std::filesystem::create_directories(root); }
  ~ScratchRoot() { std::filesystem::remove_all(root); }
  void add(const std::string& file) {
    std::filesystem::create_directories(std::filesystem::path(root + file).parent_path());
    std::ofstream(root + file) << "1.0\n";
  }
};

TEST(PeerMemory, EachVendorsModuleWhereNcclAndRcclLookForIt) {
  ScratchRoot s;
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kAny, s.root), "");
  // AMD's client, in the place of the inbox kernel's ib_peer_mem of Ubuntu 24.04's kernel.
  s.add("/sys/memory_peers/amdkfd/version");
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kAmd, s.root), "/sys/memory_peers/amdkfd/version");
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kAny, s.root), "/sys/memory_peers/amdkfd/version");
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kNvidia, s.root), "") << "AMD's module pins no NVIDIA memory";
  // MLNX_OFED's place comes first.
  s.add("/sys/kernel/mm/memory_peers/amdkfd/version");
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kAmd, s.root), "/sys/kernel/mm/memory_peers/amdkfd/version");
  // NVIDIA's, by its module's directory.
  s.add("/sys/module/nvidia_peermem/version");
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kNvidia, s.root), "/sys/module/nvidia_peermem/version");
  EXPECT_EQ(peerMemoryModuleFile(PeerMemoryVendor::kAmd, s.root), "/sys/kernel/mm/memory_peers/amdkfd/version");
}

}  // namespace
}  // namespace chorus
