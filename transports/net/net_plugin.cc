// The external net plugin loader: which library NCCL_NET_PLUGIN names, which ncclNetPlugin_vN it exports, and the
// process-wide cache behind pluginNet() (transports/net/net.h). Calling the plugin's init is the proxy's job.
//
// It follows NCCL 2.28: NCCL_NET_PLUGIN is one entry or a comma-separated list, tried in order; each entry is opened
// as given, then (a plain NAME, neither a path nor lib*.so) as libnccl-net-NAME.so; "none" disables; unset tries
// libnccl-net.so. The first entry that opens and exports a usable table wins (NCCL also moves on when that
// plugin's init fails or finds no device; chorus decides at load time).
#include "transports/net/net_plugin.h"

#include <dlfcn.h>
#include <strings.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"
#include "core/params.h"
#include "core/plugin_lib.h"
#include "transports/net/net.h"

namespace chorus {
namespace {

StrParam kNetPlugin{"NCCL_NET_PLUGIN", "",
                    "External net plugin: a library path or name (NAME tries libnccl-net-NAME.so too), or a "
                    "comma-separated list of them tried in order; \"none\" disables; unset tries libnccl-net.so. "
                    "NCCL 2.28's ABI, ncclNetPlugin_v6 to _v11 (docs/net_plugin.md).",
                    "network"};

// Opens one entry of NCCL_NET_PLUGIN; null with *why listing what dlopen said for each name tried.
void* openEntry(const std::string& entry, std::string* path, std::string* why) {
  std::string errors;
  void* lib = openPluginLib("libnccl-net", entry, path, &errors);
  if (lib == nullptr) *why = entry + ": not loaded (" + errors + ")";
  return lib;
}

// The newest ncclNetPlugin_vN the library exports, adapted; null with *why otherwise.
const ncclNet_v11_t* findTable(void* lib, const std::string& path, std::string* why, int* version) {
  for (int v = kNetPluginNewest; v >= kNetPluginOldest; v--) {
    const void* sym = dlsym(lib, ("ncclNetPlugin_v" + std::to_string(v)).c_str());
    if (sym == nullptr) continue;
    // The newest symbol decides, as in NCCL: a broken v11 table is not replaced by an older one.
    const ncclNet_v11_t* net = adaptNetPlugin(sym, v, path, why);
    if (net == nullptr) return nullptr;
    *version = v;
    *why = "loaded " + path + " (" + net->name + ", v" + std::to_string(v) + ")";
    return net;
  }
  // Name an older version when there is one: "it is too old" is more useful than "it is not a net plugin".
  for (int v = kNetPluginOldest - 1; v >= 2; v--) {
    if (dlsym(lib, ("ncclNetPlugin_v" + std::to_string(v)).c_str()) != nullptr) {
      *why = path + ": exports ncclNetPlugin_v" + std::to_string(v) +
             ", a version neither chorus nor NCCL 2.28 loads (v6 to v11)";
      return nullptr;
    }
  }
  *why = path + ": exports no ncclNetPlugin_v11 .. _v6 symbol (not a net plugin)";
  return nullptr;
}

// One entry: opened, its table found and adapted. A library that is not usable is closed again.
const ncclNet_v11_t* loadEntry(const std::string& entry, std::string* why, int* version) {
  *version = 0;
  std::string path;
  void* lib = openEntry(entry, &path, why);
  if (lib == nullptr) return nullptr;
  const ncclNet_v11_t* net = findTable(lib, path, why, version);
  if (net == nullptr) dlclose(lib);
  return net;
}

// What NCCL_NET_PLUGIN=setting loads; *why says what was loaded, or why nothing was.
const ncclNet_v11_t* loadSetting(const std::string& setting, std::string* why, int* version) {
  *version = 0;
  if (strcasecmp(setting.c_str(), "none") == 0) {
    *why = "disabled (NCCL_NET_PLUGIN=none)";
    return nullptr;
  }
  const std::vector<std::string> entries = splitList(setting.empty() ? "libnccl-net.so" : setting);
  std::string failures;
  for (const std::string& entry : entries) {
    std::string entryWhy;
    const ncclNet_v11_t* net = loadEntry(entry, &entryWhy, version);
    if (net != nullptr) {
      *why = entryWhy;
      return net;
    }
    failures += (failures.empty() ? "" : "; ") + entryWhy;
  }
  *why = failures.empty() ? "NCCL_NET_PLUGIN names no library" : failures;
  return nullptr;
}

// The process's plugin. Loaded on first use; a loaded library stays for the life of the process (communicators may
// use it), and later calls return it whatever NCCL_NET_PLUGIN says then. When nothing was loaded, a later call whose
// NCCL_NET_PLUGIN differs tries again (a program that sets it after a first communicator), as the tuner loader does.
struct Cache {
  std::mutex mu;
  bool tried = false;
  std::string setting;  ///< NCCL_NET_PLUGIN when last tried
  const ncclNet_v11_t* net = nullptr;
  int version = 0;
  std::string why;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: proxy threads may outlive static destruction
  return *c;
}

}  // namespace

std::mutex& netSetupMutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: a proxy may finalize its net during static destruction
  return *mu;
}

const ncclNet_v11_t* pluginNet(std::string* why, int* version) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const std::string setting = kNetPlugin.get();
  if (!c.tried || (c.net == nullptr && setting != c.setting)) {
    c.tried = true;
    c.setting = setting;
    c.net = loadSetting(setting, &c.why, &c.version);
    // Unset and absent is the common case: one line at INFO either way.
    if (c.net != nullptr) {
      INFO(kNet | kInit, "net plugin: %s", c.why.c_str());
    } else {
      INFO(kNet | kInit, "net plugin: none loaded: %s", c.why.c_str());
    }
  }
  *why = c.why;
  *version = c.version;
  return c.net;
}

const ncclNet_v11_t* loadNetPluginForTest(const char* path, std::string* why, int* version) {
  return loadEntry(path, why, version);
}

}  // namespace chorus
