#include "core/process.h"

#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus {

bool processGone(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = fopen(path, "r");
  if (f == nullptr) return false;  // no /proc: trust kill()
  char buf[512];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')' (comm may itself contain parentheses).
  const char* close = strrchr(buf, ')');
  return close != nullptr && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

uint64_t randomNonce() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
    // No entropy call (old kernels): mix what differs between processes and calls (splitmix64's finalizer).
    static std::atomic<uint64_t> counter{0};
    v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(getpid()) << 32) ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
    v ^= v >> 31;
  }
  return v | 1;  // never 0
}

}  // namespace chorus
