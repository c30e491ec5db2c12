#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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

namespace {

// /proc/self/maps, opened once by each thread that checks memory and read again from its start at each check (the
// kernel writes it anew); reopened in a forked child, since the open file names the process that opened it.
struct MapsFile {
  int fd = -1;
  pid_t owner = 0;
  std::vector<char> buf;
  ~MapsFile() {
    if (fd >= 0) close(fd);
  }
  int get() {
    const pid_t me = getpid();
    if (fd >= 0 && owner != me) {
      close(fd);
      fd = -1;
    }
    if (fd < 0) {
      fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
      owner = me;
    }
    return fd;
  }
};

// Linux 6.11's PROCMAP_QUERY ioctl on the maps file: the one mapping that covers an address, where reading the file
// has the kernel write out every mapping. Its ABI (struct procmap_query and the request number of linux/fs.h) is
// spelled out here, since the C library headers of older distributions predate it; an older kernel answers ENOTTY.
struct ProcmapQuery {
  uint64_t size, queryFlags, queryAddr;
  uint64_t vmaStart, vmaEnd, vmaFlags, vmaPageSize, vmaOffset, inode;
  uint32_t devMajor, devMinor, vmaNameSize, buildIdSize;
  uint64_t vmaNameAddr, buildIdAddr;
};
static_assert(sizeof(ProcmapQuery) == 104, "struct procmap_query of linux/fs.h");
constexpr unsigned long kProcmapQuery = 0xC0686611UL;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kVmaReadable = 0x01, kVmaWritable = 0x02;

// Whether PROCMAP_QUERY answers in this process: unknown until a check asks, then kept (one kernel per process).
std::atomic<int> gProcmapQuery{-1};

}  // namespace

bool memoryAccessible(const MemoryUse* uses, int n, int* bad, std::string* why, MapsLookup how) {
  constexpr int kMax = 4;
  if (n > kMax) n = kMax;
  uintptr_t at[kMax], end[kMax];
  int left = 0;   // uses not yet found whole or failed
  int first = n;  // the first use that failed
  char text[160] = "";
  auto fail = [&](int i, const char* what) {
    if (i < first) {
      first = i;
      snprintf(text, sizeof(text), "%s", what);
    }
  };
  auto hole = [&](int i) {  // use i reaches an address that nothing maps
    char what[128];
    snprintf(what, sizeof(what), "is not all memory of this process: nothing is mapped at 0x%lx",
             static_cast<unsigned long>(at[i]));
    fail(i, what);
  };
  auto verdict = [&]() {
    if (first == n) return true;
    *bad = first;
    *why = text;
    return false;
  };
  auto denied = [&](int i, bool readable) {  // use i reaches a mapping without the access it needs
    char what[128];
    snprintf(what, sizeof(what), "is %s memory at 0x%lx (%s)", readable ? "read-only" : "unreadable",
             static_cast<unsigned long>(at[i]), uses[i].write ? "the call writes it" : "the call reads it");
    fail(i, what);
  };
  for (int i = 0; i < n; i++) {
    at[i] = reinterpret_cast<uintptr_t>(uses[i].p);
    end[i] = at[i];
    if (uses[i].bytes == 0) continue;
    if (__builtin_add_overflow(at[i], uses[i].bytes, &end[i])) {
      fail(i, "runs past the end of the address space");
      end[i] = at[i];
      continue;
    }
    left++;
  }
  thread_local MapsFile maps;
  const int fd = left > 0 ? maps.get() : -1;
  // Each use's mappings asked of the kernel one by one, where it answers.
  if (fd >= 0 && how == MapsLookup::kQuery && gProcmapQuery.load(std::memory_order_relaxed) != 0) {
    bool answered = true;
    for (int i = 0; i < n && answered; i++) {
      while (at[i] < end[i]) {
        ProcmapQuery q{};
        q.size = sizeof(q);
        q.queryAddr = at[i];
        if (ioctl(fd, kProcmapQuery, &q) != 0) {
          if (errno == ENOENT) {  // no mapping covers the address
            hole(i);
            break;
          }
          answered = false;  // ENOTTY (an older kernel), or refused: read the file instead
          break;
        }
        if (q.vmaEnd <= at[i] || q.vmaStart > at[i]) {  // not the covering mapping asked for: trust the file
          answered = false;
          break;
        }
        if ((q.vmaFlags & kVmaReadable) == 0 || (uses[i].write && (q.vmaFlags & kVmaWritable) == 0)) {
          denied(i, (q.vmaFlags & kVmaReadable) != 0);
          break;
        }
        at[i] = q.vmaEnd < end[i] ? static_cast<uintptr_t>(q.vmaEnd) : end[i];
      }
    }
    if (answered) {
      gProcmapQuery.store(1, std::memory_order_relaxed);
      return verdict();
    }
    gProcmapQuery.store(0, std::memory_order_relaxed);
    return memoryAccessible(uses, n, bad, why, MapsLookup::kRead);
  }
  // Whether the whole map was read (or every use settled): else a use not settled passes, with nothing to check it
  // against.
  bool complete = left == 0;
  if (left > 0 && (fd < 0 || lseek(fd, 0, SEEK_SET) != 0)) left = 0;
  if (maps.buf.size() < (64u << 10)) maps.buf.resize(64u << 10);
  size_t have = 0;  // bytes of an unfinished line at the start of buf
  // The mappings come in address order: each use's cursor `at` walks those that cover it.
  while (left > 0) {
    const ssize_t got = read(fd, maps.buf.data() + have, maps.buf.size() - 1 - have);
    if (got == 0) complete = true;
    if (got <= 0) break;
    have += static_cast<size_t>(got);
    maps.buf[have] = '\0';
    char* line = maps.buf.data();
    for (char* nl; left > 0 && (nl = strchr(line, '\n')) != nullptr; line = nl + 1) {
      *nl = '\0';
      unsigned long lo = 0, hi = 0;
      char perms[8] = {0};
      if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
      for (int i = 0; i < n; i++) {
        if (at[i] >= end[i] || hi <= at[i]) continue;
        if (lo > at[i]) {
          hole(i);
        } else if (perms[0] != 'r' || (uses[i].write && perms[1] != 'w')) {
          denied(i, perms[0] == 'r');
        } else {
          at[i] = hi < end[i] ? hi : end[i];
          if (at[i] >= end[i]) left--;
          continue;
        }
        at[i] = end[i];
        left--;
      }
    }
    if (left == 0) complete = true;
    have = strlen(line);  // the unfinished line, moved to the start
    memmove(maps.buf.data(), line, have);
    if (have + 1 >= maps.buf.size()) break;  // a line longer than the buffer: give up checking
  }
  for (int i = 0; complete && i < n; i++)
    if (at[i] < end[i]) hole(i);
  return verdict();
}

}  // namespace chorus
