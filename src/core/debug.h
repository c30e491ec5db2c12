// NCCL-compatible logging (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE) and the
// "last error" text that ncclGetLastError returns.
//
// Levels are checked before anything is formatted, so a disabled INFO costs one load.
// Lines look like NCCL's: "host:pid:tid [dev] chorus LEVEL message".
#pragma once

#include <cstdint>

#include "nccl.h"

namespace chorus {

/// Log levels, as NCCL_DEBUG names them.
enum class LogLevel : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

/// Subsystem bits, as NCCL_DEBUG_SUBSYS names them.
enum LogSubsys : uint64_t {
  kInit = 1 << 0,
  kColl = 1 << 1,
  kP2P = 1 << 2,
  kShm = 1 << 3,
  kNet = 1 << 4,
  kGraph = 1 << 5,
  kTune = 1 << 6,
  kEnv = 1 << 7,
  kAlloc = 1 << 8,
  kCall = 1 << 9,
  kProxy = 1 << 10,
  kBootstrap = 1 << 12,
  kReg = 1 << 13,
  kAllSubsys = ~0ull
};

/// Effective level (reads the environment once per paramsReload generation).
LogLevel logLevel();
/// Whether messages of this level and subsystem are printed.
bool logEnabled(LogLevel level, uint64_t subsys);
/// Formats and prints one log line (call through the macros below).
void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
/// The logger chorus hands to plugins (tuner, net): NCCL's ncclDebugLogger_t signature, whose levels and subsystem
/// flags are chorus's too.
void pluginLog(int level, unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/// Records the text ncclGetLastError returns, for this thread and for `comm` (may be null).
void setLastError(ncclComm* comm, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/// This thread's last error text ("" if none).
const char* threadLastError();
/// Makes `text` this thread's last error without logging it again (an error decided on another thread).
void setThreadLastError(const char* text);
/// Sets the device number shown in log prefixes for this thread (-1: host).
void setLogDevice(int dev);

}  // namespace chorus

#define CHORUS_LOG(level, subsys, ...)                                                           \
  do {                                                                                           \
    if (::chorus::logEnabled(level, subsys))                                                     \
      ::chorus::logMessage(level, subsys, __FILE__, __LINE__, __VA_ARGS__);                      \
  } while (0)

/// A warning: printed at NCCL_DEBUG=WARN and above.
#define WARN(...) CHORUS_LOG(::chorus::LogLevel::kWarn, ::chorus::kAllSubsys, __VA_ARGS__)
/// Information for one subsystem: NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS.
#define INFO(subsys, ...) CHORUS_LOG(::chorus::LogLevel::kInfo, subsys, __VA_ARGS__)
/// Tracing: NCCL_DEBUG=TRACE.
#define TRACE(subsys, ...) CHORUS_LOG(::chorus::LogLevel::kTrace, subsys, __VA_ARGS__)
