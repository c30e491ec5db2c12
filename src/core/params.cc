#include "core/params.h"

#include <dlfcn.h>
#include <pwd.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "core/plugin_lib.h"
#include "nccl.h"

extern char** environ;

namespace chorus {
namespace {
std::atomic<uint64_t> gGeneration{1};
std::mutex gParamMutex;  // guards lazy (re)reads of cached values

// Listed for chorus-env and docs/env.md; read by loadNcclConfFiles directly, since reading a parameter loads the files.
StrParam kConfFile{"NCCL_CONF_FILE", "",
                   "A file of VAR=VALUE lines read, as NCCL does, instead of ~/.nccl.conf and before "
                   "/etc/nccl.conf; the environment wins over both files.",
                   "general"};
StrParam kEnvPlugin{"NCCL_ENV_PLUGIN", "",
                    "Environment plugin, as NCCL 2.28 loads it: a library path or name (libnccl-env-NAME.so) whose "
                    "ncclEnvPlugin_v1 answers every variable chorus reads; \"none\" for none; unset tries "
                    "libnccl-env.so. Read from the environment or NCCL's configuration files.",
                    "general"};

// One configuration file, as NCCL reads it: each line VAR=VALUE (the name is what precedes the first '=', the value
// the rest of the line) that does not start with '#' sets VAR unless the environment has it already. A missing or
// unreadable file is no error.
void loadConfFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    setenv(line.substr(0, eq).c_str(), line.substr(eq + 1).c_str(), 0);
  }
}

// NCCL 2.28's environment plugin ABI (ncclEnv_v1_t).
struct EnvPluginV1 {
  const char* name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
};

// The environment plugin of the process: its table once loaded (null: none, the environment itself), and what
// loading it said. Never destroyed: a thread may read a parameter while the process exits.
struct EnvPlugin {
  std::atomic<const EnvPluginV1*> table{nullptr};
  std::string said;
};

EnvPlugin& envPlugin() {
  static EnvPlugin* p = new EnvPlugin();
  return *p;
}

// Loads NCCL_ENV_PLUGIN (from the environment or NCCL's configuration files, as NCCL reads it), once a process: a
// library path or name (libnccl-env-NAME.so), "none" for none; unset tries libnccl-env.so. A plugin that is missing,
// exports no ncclEnvPlugin_v1 or fails its init leaves the environment itself, as in NCCL. Its finalize runs at exit.
void loadEnvPlugin() {
  static std::once_flag once;
  std::call_once(once, [] {
    EnvPlugin& p = envPlugin();
    const char* setting = std::getenv("NCCL_ENV_PLUGIN");
    const std::string s = setting != nullptr ? setting : "";
    if (strcasecmp(s.c_str(), "none") == 0) {
      p.said = "none (NCCL_ENV_PLUGIN=none)";
      return;
    }
    std::string path, tried;
    void* lib = openPluginLib("libnccl-env", s, &path, &tried);
    if (lib == nullptr) {
      p.said = (s.empty() ? std::string("libnccl-env.so") : s) + " not loaded (" + tried + ")";
      return;
    }
    const auto* t = static_cast<const EnvPluginV1*>(dlsym(lib, "ncclEnvPlugin_v1"));
    if (t == nullptr || t->init == nullptr || t->getEnv == nullptr) {
      p.said = path + ": exports no usable ncclEnvPlugin_v1 (the version NCCL 2.28 loads)";
      dlclose(lib);
      return;
    }
    if (const ncclResult_t rc = t->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX); rc != ncclSuccess) {
      p.said = path + ": init failed (ncclResult_t " + std::to_string(static_cast<int>(rc)) + ")";
      dlclose(lib);
      return;
    }
    p.said = "loaded " + path + " (" + (t->name != nullptr ? t->name : "?") + ", v1)";
    p.table.store(t);
    std::atexit([] {
      std::lock_guard<std::mutex> lock(gParamMutex);  // no parameter reads it meanwhile
      const EnvPluginV1* done = envPlugin().table.exchange(nullptr);
      if (done != nullptr && done->finalize != nullptr) done->finalize();
    });
  });
}

// The one place chorus reads the environment: NCCL's configuration files first, then through the environment plugin
// where one is loaded. Callers hold gParamMutex, so the plugin is asked one variable at a time.
const char* readEnv(const char* name) {
  loadNcclConfFiles();
  loadEnvPlugin();
  const EnvPluginV1* t = envPlugin().table.load();
  return t != nullptr ? t->getEnv(name) : std::getenv(name);
}
}  // namespace

bool paramSetting(const char* env, std::string* value) {
  std::lock_guard<std::mutex> lock(gParamMutex);
  const char* v = readEnv(env);
  if (v == nullptr || *v == '\0') return false;
  *value = v;
  return true;
}

std::string envPluginSaid() {
  loadNcclConfFiles();
  {
    std::lock_guard<std::mutex> lock(gParamMutex);
    loadEnvPlugin();
  }
  return envPlugin().said;
}

void loadNcclConfFiles(const char* confFile, const char* homeDir, const char* etcFile) {
  if (confFile != nullptr && *confFile != '\0') {
    loadConfFile(confFile);
  } else if (homeDir != nullptr) {
    loadConfFile(std::string(homeDir) + "/.nccl.conf");
  }
  loadConfFile(etcFile);
}

void loadNcclConfFiles() {
  static std::once_flag once;
  std::call_once(once, [] {
    const passwd* user = getpwuid(getuid());
    loadNcclConfFiles(std::getenv("NCCL_CONF_FILE"), user != nullptr ? user->pw_dir : nullptr, "/etc/nccl.conf");
  });
}

std::vector<const ParamInfo*>& paramRegistry() {
  static std::vector<const ParamInfo*> registry;
  return registry;
}

void paramsReload() { gGeneration.fetch_add(1); }
uint64_t paramsGeneration() { return gGeneration.load(std::memory_order_relaxed); }

IntParam::IntParam(const char* env, int64_t def, const char* help, const char* group)
    : def_(def), defText_(std::to_string(def)) {
  info_ = ParamInfo{env, defText_.c_str(), help, group};
  paramRegistry().push_back(&info_);
}

int64_t IntParam::get() const {
  uint64_t gen = paramsGeneration();
  if (gen_.load(std::memory_order_acquire) == gen) return value_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(gParamMutex);
  if (gen_.load(std::memory_order_relaxed) != gen) {
    const char* v = readEnv(info_.env);
    bool set = v != nullptr && *v != '\0';
    int64_t value = def_;
    if (set) {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(v, &end, 0);
      if (errno != 0 || end == v || *end != '\0') {
        std::fprintf(stderr, "chorus WARN %s=\"%s\" is not an integer; using the default %lld\n", info_.env, v,
                     static_cast<long long>(def_));
      } else {
        value = x;
      }
    }
    set_.store(set, std::memory_order_relaxed);
    value_.store(value, std::memory_order_relaxed);
    gen_.store(gen, std::memory_order_release);
  }
  return value_.load(std::memory_order_relaxed);
}

bool IntParam::isSet() const {
  get();
  return set_.load(std::memory_order_relaxed);
}

StrParam::StrParam(const char* env, const char* def, const char* help, const char* group) : cache_(new Cache) {
  info_ = ParamInfo{env, def ? def : "", help, group};
  paramRegistry().push_back(&info_);
}

const StrParam::Cache& StrParam::fresh() const {
  uint64_t gen = paramsGeneration();
  Cache& c = *cache_;
  if (c.gen != gen) {
    const char* v = readEnv(info_.env);
    c.set = v != nullptr && *v != '\0';
    c.value = c.set ? std::string(v) : std::string(info_.def);
    c.gen = gen;
  }
  return c;
}

std::string StrParam::get() const {
  std::lock_guard<std::mutex> lock(gParamMutex);
  return fresh().value;
}

bool StrParam::isSet() const {
  std::lock_guard<std::mutex> lock(gParamMutex);
  return fresh().set;
}

std::vector<std::string> unreadNcclVariables() {
  loadNcclConfFiles();
  std::set<std::string> known;
  for (const ParamInfo* p : paramRegistry()) known.insert(p->env);
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(gParamMutex);
  for (char** e = environ; e != nullptr && *e != nullptr; e++) {
    const std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    if (name.rfind("NCCL_", 0) == 0 && name.rfind("NCCL_TESTS_", 0) != 0 && known.count(name) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string paramsMarkdown() {
  std::map<std::string, std::vector<const ParamInfo*>> byGroup;
  for (const ParamInfo* p : paramRegistry()) byGroup[p->group].push_back(p);
  std::string out =
      "# Environment variables\n\n"
      "Generated by `chorus-env --markdown` from the parameter registry (src/core/params.h); do not edit by hand.\n"
      "NCCL_* variables mean what they mean to NCCL; CHORUS_* variables are chorus's own.\n"
      "As NCCL does, chorus first reads `NCCL_CONF_FILE` (else `~/.nccl.conf`, the user's home directory from the\n"
      "password database) and then `/etc/nccl.conf`: each line `VAR=VALUE` not starting with `#` sets VAR, for chorus\n"
      "and for the plugins it loads, unless the environment or an earlier file set it. At `NCCL_DEBUG=INFO` the first\n"
      "init names the `NCCL_*` variables that are set but that chorus does not read (`NCCL_TESTS_*` aside).\n";
  for (auto& [group, params] : byGroup) {
    std::map<std::string, const ParamInfo*> sorted;
    for (const ParamInfo* p : params) sorted[p->env] = p;
    out += "\n## " + group + "\n\n| variable | default | meaning |\n|---|---|---|\n";
    for (auto& [name, p] : sorted) {
      out += "| `" + name + "` | `" + (p->def[0] ? p->def : "(unset)") + "` | " + p->help + " |\n";
    }
  }
  return out;
}

std::vector<std::string> splitList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const size_t first = list.find_first_not_of(" \t", start);
    if (first != std::string::npos && first < end) {
      const size_t last = list.find_last_not_of(" \t", end - 1);
      out.push_back(list.substr(first, last - first + 1));
    }
    start = end + 1;
  }
  return out;
}

}  // namespace chorus
