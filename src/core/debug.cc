#include "core/debug.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "core/comm.h"
#include "core/params.h"

namespace chorus {
namespace {

StrParam kDebug{"NCCL_DEBUG", "", "Log level: VERSION, WARN, INFO, ABORT or TRACE (unset: nothing but fatal errors).",
                "logging"};
StrParam kDebugSubsys{"NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV",
                      "Comma-separated subsystems logged at INFO: INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, "
                      "CALL, PROXY, BOOTSTRAP, REG, ALL; a leading ^ excludes the listed ones.",
                      "logging"};
StrParam kDebugFile{"NCCL_DEBUG_FILE", "",
                    "Write the log to this file instead of stdout; %h becomes the host name, %p the pid.", "logging"};

struct LogState {
  std::mutex mutex;
  uint64_t gen = 0;
  LogLevel level = LogLevel::kNone;
  uint64_t subsys = 0;
  FILE* file = stdout;
  char host[64] = {0};
};
LogState& state() {
  static LogState s;
  return s;
}
std::atomic<int> gLevelCache{-1};
std::atomic<uint64_t> gSubsysCache{0};
std::atomic<uint64_t> gCacheGen{0};
thread_local int tDevice = -1;
thread_local char tLastError[1024];
std::mutex gLastErrorMutex;

LogLevel parseLevel(const std::string& s) {
  if (strcasecmp(s.c_str(), "VERSION") == 0) return LogLevel::kVersion;
  if (strcasecmp(s.c_str(), "WARN") == 0) return LogLevel::kWarn;
  if (strcasecmp(s.c_str(), "INFO") == 0) return LogLevel::kInfo;
  if (strcasecmp(s.c_str(), "ABORT") == 0) return LogLevel::kAbort;
  if (strcasecmp(s.c_str(), "TRACE") == 0) return LogLevel::kTrace;
  return LogLevel::kNone;
}

uint64_t parseSubsys(const std::string& s) {
  static const struct {
    const char* name;
    uint64_t bit;
  } kNames[] = {{"INIT", kInit},   {"COLL", kColl},   {"P2P", kP2P},     {"SHM", kShm},          {"NET", kNet},
                {"GRAPH", kGraph}, {"TUNING", kTune}, {"ENV", kEnv},     {"ALLOC", kAlloc},      {"CALL", kCall},
                {"PROXY", kProxy}, {"REG", kReg},     {"ALL", kAllSubsys}, {"BOOTSTRAP", kBootstrap}};
  bool invert = !s.empty() && s[0] == '^';
  uint64_t mask = 0;
  for (const std::string& tok : splitList(s.substr(invert ? 1 : 0)))
    for (auto& n : kNames)
      if (strcasecmp(tok.c_str(), n.name) == 0) mask |= n.bit;
  return invert ? ~mask : mask;
}

// Re-reads the logging environment when the parameter generation changed.
void refresh() {
  uint64_t gen = paramsGeneration();
  if (gCacheGen.load(std::memory_order_acquire) == gen) return;
  LogState& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  if (st.gen == gen) return;
  st.level = parseLevel(kDebug.get());
  st.subsys = parseSubsys(kDebugSubsys.get());
  gethostname(st.host, sizeof(st.host) - 1);
  if (char* dot = strchr(st.host, '.')) *dot = '\0';
  std::string path = kDebugFile.get();
  if (st.file != stdout && st.file != stderr) fclose(st.file);
  st.file = stdout;
  if (!path.empty()) {
    std::string name;
    for (size_t i = 0; i < path.size(); i++) {
      if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'h') {
        name += st.host;
        i++;
      } else if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
        name += std::to_string(getpid());
        i++;
      } else {
        name += path[i];
      }
    }
    FILE* f = fopen(name.c_str(), "w");
    if (f) {
      setvbuf(f, nullptr, _IOLBF, 0);
      st.file = f;
    }
  }
  st.gen = gen;
  gLevelCache.store(static_cast<int>(st.level), std::memory_order_relaxed);
  gSubsysCache.store(st.subsys, std::memory_order_relaxed);
  gCacheGen.store(gen, std::memory_order_release);
}

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::kVersion: return "VERSION";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kAbort: return "ABORT";
    case LogLevel::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

LogLevel logLevel() {
  refresh();
  return static_cast<LogLevel>(gLevelCache.load(std::memory_order_relaxed));
}

void pluginLog(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  const LogLevel lv = static_cast<LogLevel>(level);
  // A plugin's WARN is the calling thread's last error whether or not it is logged, as NCCL keeps the last WARN: the
  // net proxy puts it into what it reports of a net call that failed (a plugin says why only through its log).
  const bool keep = lv == LogLevel::kWarn;
  if (!keep && !logEnabled(lv, flags)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (keep) setThreadLastError(msg);
  if (logEnabled(lv, flags)) logMessage(lv, flags, file ? file : "plugin", line, "%s", msg);
}

bool logEnabled(LogLevel level, uint64_t subsys) {
  refresh();
  int cur = gLevelCache.load(std::memory_order_relaxed);
  if (cur < static_cast<int>(level)) return false;
  if (level == LogLevel::kInfo || level == LogLevel::kTrace)
    return (gSubsysCache.load(std::memory_order_relaxed) & subsys) != 0;
  return true;
}

void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LogState& st = state();
  long tid = syscall(SYS_gettid);
  std::lock_guard<std::mutex> lock(st.mutex);
  const char* base = strrchr(file, '/');
  if (level == LogLevel::kWarn) {
    fprintf(st.file, "%s:%d:%ld [%d] chorus WARN %s:%d %s\n", st.host, getpid(), tid, tDevice, base ? base + 1 : file,
            line, msg);
  } else {
    fprintf(st.file, "%s:%d:%ld [%d] chorus %s %s\n", st.host, getpid(), tid, tDevice, levelName(level), msg);
  }
  fflush(st.file);
}

void setLastError(ncclComm* comm, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(tLastError, sizeof(tLastError), "%s", msg);
  if (comm != nullptr) commStoreLastError(comm, msg);
  if (logEnabled(LogLevel::kWarn, kAllSubsys)) logMessage(LogLevel::kWarn, kAllSubsys, "chorus", 0, "%s", msg);
}

const char* threadLastError() { return tLastError; }
void setThreadLastError(const char* text) { snprintf(tLastError, sizeof(tLastError), "%s", text); }
void setLogDevice(int dev) { tDevice = dev; }

}  // namespace chorus
