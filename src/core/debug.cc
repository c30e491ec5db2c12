#include "core/debug.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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

StrParam kTimestampLevels{"NCCL_DEBUG_TIMESTAMP_LEVELS", "WARN",
                          "Log levels whose lines start with a timestamp, comma-separated (VERSION, WARN, INFO, ABORT, "
                          "TRACE, ALL); a leading ^ stamps all but those. As in NCCL, WARN lines only by default.",
                          "logging"};
StrParam kTimestampFormat{"NCCL_DEBUG_TIMESTAMP_FORMAT", "[%F %T] ",
                          "The timestamp of a stamped log line, as strftime formats local time, plus %Nf for N digits "
                          "(1-9) of the second's fraction; an underscore stands for a space. Empty: no timestamps.",
                          "logging"};

struct LogState {
  std::mutex mutex;
  uint64_t gen = 0;
  LogLevel level = LogLevel::kNone;
  uint64_t subsys = 0;
  FILE* file = stdout;
  char host[64] = {0};
  uint32_t stampLevels = 0;  ///< bit (1 << level) for each stamped level
  std::string stampFormat;   ///< strftime's, the %Nf taken out (stampAt: where its digits go)
  size_t stampAt = std::string::npos;
  int stampDigits = 0;
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

// NCCL_DEBUG_TIMESTAMP_LEVELS as NCCL parses it: names it does not know are skipped.
uint32_t parseStampLevels(const std::string& s) {
  static const struct {
    const char* name;
    LogLevel level;
  } kNames[] = {{"VERSION", LogLevel::kVersion},
                {"WARN", LogLevel::kWarn},
                {"INFO", LogLevel::kInfo},
                {"ABORT", LogLevel::kAbort},
                {"TRACE", LogLevel::kTrace}};
  const bool invert = !s.empty() && s[0] == '^';
  uint32_t mask = invert ? ~0u : 0u;
  for (const std::string& tok : splitList(s.substr(invert ? 1 : 0))) {
    uint32_t bits = 0;
    if (strcasecmp(tok.c_str(), "ALL") == 0) bits = ~0u;
    for (auto& n : kNames)
      if (strcasecmp(tok.c_str(), n.name) == 0) bits = 1u << static_cast<int>(n.level);
    mask = invert ? mask & ~bits : mask | bits;
  }
  return mask;
}

// NCCL_DEBUG_TIMESTAMP_FORMAT: the first %Nf becomes N placeholders filled with the fraction of the second at each
// line (a %% before it is left to strftime); underscores become spaces.
void parseStampFormat(const std::string& text, LogState* st) {
  std::string f = text;
  st->stampAt = std::string::npos;
  st->stampDigits = 0;
  for (size_t i = 0; i + 1 < f.size(); i++) {
    if (f[i] != '%') continue;
    if (f[i + 1] == '%') {
      i++;
      continue;
    }
    if (i + 2 < f.size() && f[i + 1] >= '1' && f[i + 1] <= '9' && f[i + 2] == 'f') {
      st->stampDigits = f[i + 1] - '0';
      st->stampAt = i;
      f.replace(i, 3, static_cast<size_t>(st->stampDigits), '0');
      break;
    }
  }
  for (char& c : f)
    if (c == '_') c = ' ';
  st->stampFormat = f;
}

// The timestamp a line of `level` starts with ("" when its level is not stamped). Under st.mutex.
std::string timestamp(const LogState& st, LogLevel level) {
  if ((st.stampLevels & (1u << static_cast<int>(level))) == 0 || st.stampFormat.empty()) return "";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  std::tm tm;
  localtime_r(&ts.tv_sec, &tm);
  std::string format = st.stampFormat;
  if (st.stampAt != std::string::npos) {
    long frac = ts.tv_nsec;
    for (int d = st.stampDigits; d < 9; d++) frac /= 10;
    char digits[16];
    snprintf(digits, sizeof(digits), "%0*ld", st.stampDigits, frac);
    format.replace(st.stampAt, static_cast<size_t>(st.stampDigits), digits);
  }
  char buf[256];
  size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
  if (n == 0) n = std::strftime(buf, sizeof(buf), "[%F %T] ", &tm);  // too long: NCCL's default
  return std::string(buf, n);
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
  st.stampLevels = parseStampLevels(kTimestampLevels.get());
  // Set but empty turns timestamps off, as in NCCL (a parameter reads an empty value as unset).
  const char* rawFormat = getenv("NCCL_DEBUG_TIMESTAMP_FORMAT");
  parseStampFormat(rawFormat != nullptr && *rawFormat == '\0' ? std::string() : kTimestampFormat.get(), &st);
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
  const std::string stamp = timestamp(st, level);
  if (level == LogLevel::kWarn) {
    fprintf(st.file, "%s%s:%d:%ld [%d] chorus WARN %s:%d %s\n", stamp.c_str(), st.host, getpid(), tid, tDevice,
            base ? base + 1 : file, line, msg);
  } else {
    fprintf(st.file, "%s%s:%d:%ld [%d] chorus %s %s\n", stamp.c_str(), st.host, getpid(), tid, tDevice,
            levelName(level), msg);
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
