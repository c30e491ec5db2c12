#include "core/plugin_lib.h"

#include <dlfcn.h>
#include <link.h>

#include <vector>

namespace chorus {
namespace {

// NCCL also tries lib<kind>-NAME.so for a setting that is neither a path nor a library name (lib*.so).
bool isPlainName(const std::string& s) {
  if (s.find('/') != std::string::npos) return false;
  const bool libName = s.rfind("lib", 0) == 0 && s.size() >= 3 && s.compare(s.size() - 3, 3, ".so") == 0;
  return !libName;
}

// The file dlopen found, for logs ("libnccl-net.so" says less than "/opt/x/lib/libnccl-net.so").
std::string libPath(void* lib, const std::string& name) {
  struct link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0')
    return map->l_name;
  return name;
}

}  // namespace

void* openPluginLib(const char* prefix, const std::string& setting, std::string* path, std::string* tried) {
  std::vector<std::string> names;
  if (setting.empty()) {
    names.push_back(std::string(prefix) + ".so");
  } else {
    names.push_back(setting);
    if (isPlainName(setting)) names.push_back(std::string(prefix) + "-" + setting + ".so");
  }
  for (const std::string& name : names) {
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      *path = libPath(lib, name);
      return lib;
    }
    const char* err = dlerror();
    *tried += (tried->empty() ? "" : "; ") + std::string(err != nullptr ? err : name + ": dlopen failed");
  }
  return nullptr;
}

}  // namespace chorus
