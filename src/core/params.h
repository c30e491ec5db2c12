// One registry of every environment parameter chorus reads (NCCL_* names honoured,
// CHORUS_* for chorus's own). Nothing else in the tree calls getenv: a parameter is
// declared once with its default and help text, and `chorus-env --markdown` writes
// docs/env.md from this registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

/// Static description of one parameter, for docs and `chorus-env`.
struct ParamInfo {
  const char* env;    ///< environment variable name
  const char* def;    ///< default, as text
  const char* help;   ///< one line for docs/env.md
  const char* group;  ///< section in docs/env.md
};

/// Every parameter declared in the process, in declaration order per file.
std::vector<const ParamInfo*>& paramRegistry();

/// Makes every parameter re-read its variable on next use (tests, ncclResetDebugInit).
void paramsReload();

/// NCCL's configuration files, once a process (the first read of any parameter does it): NCCL_CONF_FILE, else
/// ~/.nccl.conf, then /etc/nccl.conf. Each line VAR=VALUE not starting with '#' sets VAR in the process's
/// environment, where plugins see it too, unless the environment or an earlier file has it.
void loadNcclConfFiles();
/// The same from the given files: `confFile` (NCCL_CONF_FILE; null or empty: none), else `homeDir`/.nccl.conf (null:
/// none), then `etcFile`. Every call reads them again.
void loadNcclConfFiles(const char* confFile, const char* homeDir, const char* etcFile);

/// Current reload generation (parameters cache their value per generation).
uint64_t paramsGeneration();

/// An integer parameter. Declare at namespace scope: `IntParam kTimeoutS{"CHORUS_TIMEOUT_S", 600, "..."}`.
class IntParam {
 public:
  IntParam(const char* env, int64_t def, const char* help, const char* group = "general");
  /// Value from the environment, or the default when unset or unparsable (a warning is logged then).
  int64_t get() const;
  /// Whether the variable is set in the environment.
  bool isSet() const;
  const ParamInfo& info() const { return info_; }

 private:
  ParamInfo info_;
  int64_t def_;
  std::string defText_;
  // Read on hot paths: the cached value is valid while gen_ equals paramsGeneration().
  mutable std::atomic<uint64_t> gen_{0};
  mutable std::atomic<int64_t> value_{0};
  mutable std::atomic<bool> set_{false};
};

/// A string parameter (empty string when unset and no default).
class StrParam {
 public:
  StrParam(const char* env, const char* def, const char* help, const char* group = "general");
  StrParam(const StrParam&) = delete;
  StrParam& operator=(const StrParam&) = delete;
  std::string get() const;
  bool isSet() const;
  const ParamInfo& info() const { return info_; }

 private:
  ParamInfo info_;
  // On the heap and never freed: a thread that outlives main (the detached bootstrap root) may read a parameter while
  // the exiting process runs the destructors of static objects, as this one is.
  struct Cache {
    uint64_t gen = 0;
    std::string value;
    bool set = false;
  };
  Cache* cache_;
  /// The cache, read again from the environment if paramsReload() ran since. Under the parameter lock.
  const Cache& fresh() const;
};

/// The value chorus reads for `env`, as its parameters read it (NCCL's configuration files, the environment plugin):
/// false when it is unset or empty.
bool paramSetting(const char* env, std::string* value);

/// What loading NCCL_ENV_PLUGIN said ("loaded PATH (NAME, v1)", or why none is used), for the init's log.
std::string envPluginSaid();

/// The NCCL_* variables set in the environment (or by NCCL's configuration files) that no parameter of this build
/// reads, sorted; NCCL_TESTS_* (the perf tools' own) left out.
std::vector<std::string> unreadNcclVariables();

/// Markdown table of every parameter (the content of docs/env.md).
std::string paramsMarkdown();

/// The items of a comma-separated parameter value ("a, b,,c" gives a, b, c): each trimmed of spaces and tabs, empty
/// items dropped. A leading '^' or '=' is the caller's to strip first.
std::vector<std::string> splitList(const std::string& list);

}  // namespace chorus
