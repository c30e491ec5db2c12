#include "transports/shm/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "core/checks.h"
#include "core/process.h"

namespace chorus {

std::string shmFifoName(uint64_t commHash, int channel, int from, int to, char kind) {
  char buf[96];
  snprintf(buf, sizeof(buf), "/chorus-%016lx-%c%d-%d-%d", static_cast<unsigned long>(commHash), kind, channel, from,
           to);
  return buf;
}

ShmKind shmKind(const char* name) {
  // "chorus-" and the communicator hash (16 hex digits) and '-': the family letter is at 24.
  constexpr size_t kKindAt = 24;
  const size_t len = strlen(name);
  if (len <= kKindAt || strncmp(name, "chorus-", 7) != 0) return ShmKind::kOther;
  if (strcmp(name + len - 2, "-h") == 0) return ShmKind::kPinnedDeviceFifo;
  switch (name[kKindAt]) {
    case 'c':
      return ShmKind::kHostFifo;
    case 'd':
      return ShmKind::kDeviceRecord;
    case 'b':
      return ShmKind::kCallBoard;
    default:
      return ShmKind::kOther;
  }
}

namespace {

// Maps `size` bytes of the segment open on fd and closes fd. Where `st` (the segment's fstat) says it is shorter, it
// is grown first; never shrunk, since the other end may have created (and written) it already. On failure null, with
// errno in *err and the failing call in *call.
void* growAndMap(int fd, const struct stat* st, size_t size, int* err, const char** call) {
  if (st != nullptr && static_cast<size_t>(st->st_size) < size && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *err = errno, *call = "ftruncate";
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  *err = errno, *call = "mmap";
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

void* shmMapNamed(const std::string& name, size_t size, bool create, int* err, const char** call) {
  int fd = shm_open(name.c_str(), O_RDWR | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return *err = errno, *call = "shm_open", nullptr;
  struct stat st;
  return growAndMap(fd, fstat(fd, &st) == 0 ? &st : nullptr, size, err, call);
}

void shmFifoRecordEnds(FifoCtrl* ctrl, uint64_t peerPid) {
  uint64_t zero = 0;
  // pids[1] first: a sweeper that sees pids[0] set also sees the peer.
  if (__atomic_load_n(&ctrl->pids[0], __ATOMIC_ACQUIRE) != 0) return;
  __atomic_store_n(&ctrl->pids[1], peerPid, __ATOMIC_RELAXED);
  __atomic_compare_exchange_n(&ctrl->pids[0], &zero, static_cast<uint64_t>(getpid()), false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
}

namespace {

// The FIFOs this process has mapped, by file: with ranks as threads of one process both ends of a FIFO open the same
// segment, and they share one mapping of it. Then both ends reach the FIFO's counters (and the data) at the same
// addresses, which tools that track memory by address (ThreadSanitizer) need in order to pair a release with its
// acquire; and the process holds one mapping where it held two.
struct Mapping {
  void* base = nullptr;
  size_t size = 0;
  int users = 0;
};
std::mutex gMappingsMu;
std::map<std::pair<dev_t, ino_t>, Mapping>& mappings() {
  static auto* m = new std::map<std::pair<dev_t, ino_t>, Mapping>();  // never destroyed: closes may run at exit
  return *m;
}

// shmMapNamed for FIFOs: the mapping of the same file this process already holds, if one is large enough.
void* mapFifo(const std::string& name, size_t size, int* err, const char** call) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) return *err = errno, *call = "shm_open", nullptr;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *err = errno, *call = "fstat";
    close(fd);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(gMappingsMu);
  const auto key = std::make_pair(st.st_dev, st.st_ino);
  auto it = mappings().find(key);
  if (it != mappings().end() && it->second.size >= size) {
    close(fd);
    it->second.users++;
    return it->second.base;
  }
  void* p = growAndMap(fd, &st, size, err, call);
  if (p != nullptr && it == mappings().end()) mappings()[key] = Mapping{p, size, 1};  // a smaller one found stays apart
  return p;
}

void unmapFifo(void* base, size_t size) {
  {
    std::lock_guard<std::mutex> lock(gMappingsMu);
    for (auto it = mappings().begin(); it != mappings().end(); ++it) {
      if (it->second.base != base) continue;
      if (--it->second.users > 0) return;
      size = it->second.size;
      mappings().erase(it);
      break;
    }
  }
  munmap(base, size);
}

}  // namespace

ncclResult_t shmFifoOpen(const std::string& name, const FifoGeometry& geo, ShmSegment* seg, uint64_t peerPid) {
  size_t size = geo.totalBytes();
  int err = 0;
  const char* call = "";
  void* p = mapFifo(name, size, &err, &call);
  if (p == nullptr)
    CHORUS_FAIL(nullptr, ncclSystemError, "%s(%s, %zu) failed: %s%s", call, name.c_str(), size, strerror(err),
                strcmp(call, "ftruncate") == 0 ? " (is /dev/shm large enough?)" : "");
  seg->name = name;
  seg->base = p;
  seg->size = size;
  auto* ctrl = static_cast<FifoCtrl*>(p);
  shmFifoRecordEnds(ctrl, peerPid);
  if (__atomic_add_fetch(&ctrl->attached, 1, __ATOMIC_ACQ_REL) == 2) {
    shm_unlink(name.c_str());  // both ends mapped: the name is no longer needed
    seg->name.clear();
  }
  return ncclSuccess;
}

void shmFifoClose(ShmSegment* seg, bool unlinkName) {
  if (seg->base) unmapFifo(seg->base, seg->size);
  if (unlinkName && !seg->name.empty()) shm_unlink(seg->name.c_str());
  seg->base = nullptr;
  seg->name.clear();
}

const void* shmMapMine(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return nullptr;
  struct stat st;
  bool mine = fstat(fd, &st) == 0 && st.st_uid == geteuid() && static_cast<size_t>(st.st_size) >= bytes;
  void* p = mine ? mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

bool shmPidGone(uint64_t pid) { return pid != 0 && processGone(static_cast<pid_t>(pid)); }

bool shmFifoStale(const std::string& name) {
  const auto* ctrl = static_cast<const FifoCtrl*>(shmMapMine(name, sizeof(FifoCtrl)));
  if (ctrl == nullptr) return false;
  uint64_t a = __atomic_load_n(&ctrl->pids[0], __ATOMIC_ACQUIRE);  // 0: no end has recorded itself yet
  uint64_t b = __atomic_load_n(&ctrl->pids[1], __ATOMIC_RELAXED);
  bool stale = shmPidGone(a) && shmPidGone(b);
  munmap(const_cast<FifoCtrl*>(ctrl), sizeof(FifoCtrl));
  return stale;
}

int shmSweep(bool (*match)(const char* name), bool (*stale)(const std::string& name)) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (struct dirent* e = readdir(dir)) {
    if (strncmp(e->d_name, "chorus-", 7) != 0 || !match(e->d_name)) continue;
    std::string name = std::string("/") + e->d_name;
    if (stale(name) && shm_unlink(name.c_str()) == 0) removed++;
  }
  closedir(dir);
  return removed;
}

int shmSweepStale() {
  // FIFOs only: host-path FIFOs and pinned device FIFOs (not rendezvous records).
  return shmSweep(
      [](const char* n) {
        ShmKind k = shmKind(n);
        return k == ShmKind::kHostFifo || k == ShmKind::kPinnedDeviceFifo;
      },
      shmFifoStale);
}

}  // namespace chorus
