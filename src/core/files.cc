#include "core/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chorus {

bool readFileText(const std::string& path, std::string* text, std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = path + ": " + std::strerror(errno);
    return false;
  }
  std::stringstream s;
  s << f.rdbuf();
  *text = s.str();
  return true;
}

std::string peerMemoryModuleFile(PeerMemoryVendor vendor, const std::string& root) {
  static const char* const kNvidia[] = {"/sys/kernel/mm/memory_peers/nv_mem/version",
                                        "/sys/module/nvidia_peermem/version", "/sys/module/nv_peer_mem/version"};
  static const char* const kAmd[] = {"/sys/kernel/mm/memory_peers/amdkfd/version",
                                     "/sys/kernel/memory_peers/amdkfd/version", "/sys/memory_peers/amdkfd/version"};
  if (vendor != PeerMemoryVendor::kAmd)
    for (const char* f : kNvidia)
      if (access((root + f).c_str(), F_OK) == 0) return f;
  if (vendor != PeerMemoryVendor::kNvidia)
    for (const char* f : kAmd)
      if (access((root + f).c_str(), F_OK) == 0) return f;
  return "";
}

}  // namespace chorus
