#include "core/process.h"

#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

bool memoryAccessible(const void* p, size_t bytes, bool write, std::string* why) {
  if (bytes == 0) return true;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  uintptr_t end = 0;
  char text[160];
  if (__builtin_add_overflow(start, bytes, &end)) {
    *why = "runs past the end of the address space";
    return false;
  }
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == nullptr) return true;
  // The mappings come in address order: walk those that cover [start, end) from `at` on.
  uintptr_t at = start;
  bool ok = true;
  char* line = nullptr;
  size_t cap = 0;
  while (at < end && getline(&line, &cap, f) > 0) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {0};
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || hi <= at) continue;
    if (lo > at) break;  // a hole at `at`
    if (perms[0] != 'r' || (write && perms[1] != 'w')) {
      snprintf(text, sizeof(text), "is %s memory at 0x%lx (%s)", perms[0] != 'r' ? "unreadable" : "read-only",
               static_cast<unsigned long>(at), write ? "the call writes it" : "the call reads it");
      ok = false;
      break;
    }
    at = hi;
  }
  free(line);
  fclose(f);
  if (ok && at < end) {
    snprintf(text, sizeof(text), "is not all memory of this process: nothing is mapped at 0x%lx",
             static_cast<unsigned long>(at));
    ok = false;
  }
  if (!ok) *why = text;
  return ok;
}

}  // namespace chorus
