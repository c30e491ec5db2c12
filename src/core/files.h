// Small file helpers shared by the parts of chorus that read files (topology files, the link-cost cache, the kernel's
// GPUDirect RDMA modules).
#pragma once

#include <string>

namespace chorus {

/// Reads the whole file at `path` into *text; false, with *err = "<path>: <errno's text>", when it cannot be read.
bool readFileText(const std::string& path, std::string* text, std::string* err);

/// Whose GPUs a GPUDirect RDMA peer-memory module serves.
enum class PeerMemoryVendor { kNvidia, kAmd, kAny };

/// The version file of a loaded peer-memory module, through which a NIC's driver pins GPU memory that is registered
/// as it is, looked for where NCCL and RCCL look: NVIDIA's nv_peer_mem (MLNX_OFED's ib_core) and nvidia_peermem;
/// AMD's amdkfd client, under /sys/kernel/mm, /sys/kernel or /sys (MLNX_OFED's ib_core, or the inbox kernel's
/// ib_peer_mem, by version). `root` is prefixed to each path (tests). Empty when none of the vendor's is there.
std::string peerMemoryModuleFile(PeerMemoryVendor vendor, const std::string& root = "");

}  // namespace chorus
