#include "transports/shm/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/checks.h"

namespace chorus {

std::string shmFifoName(uint64_t commHash, int channel, int from, int to, char kind) {
  char buf[96];
  snprintf(buf, sizeof(buf), "/chorus-%016lx-%c%d-%d-%d", static_cast<unsigned long>(commHash), kind, channel, from,
           to);
  return buf;
}

void* shmMapNamed(const std::string& name, size_t size, bool create, int* err, const char** call) {
  int fd = shm_open(name.c_str(), O_RDWR | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return *err = errno, *call = "shm_open", nullptr;
  // Only grow: the other end may have created (and written) it already.
  struct stat st;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < size && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *err = errno, *call = "ftruncate";
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  *err = errno, *call = "mmap";
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

ncclResult_t shmFifoOpen(const std::string& name, const FifoGeometry& geo, ShmSegment* seg) {
  size_t size = geo.totalBytes();
  int err = 0;
  const char* call = "";
  void* p = shmMapNamed(name, size, true, &err, &call);
  if (p == nullptr)
    CHORUS_FAIL(nullptr, ncclSystemError, "%s(%s, %zu) failed: %s%s", call, name.c_str(), size, strerror(err),
                strcmp(call, "ftruncate") == 0 ? " (is /dev/shm large enough?)" : "");
  seg->name = name;
  seg->base = p;
  seg->size = size;
  auto* ctrl = static_cast<FifoCtrl*>(p);
  if (__atomic_add_fetch(&ctrl->attached, 1, __ATOMIC_ACQ_REL) == 2) {
    shm_unlink(name.c_str());  // both ends mapped: the name is no longer needed
    seg->name.clear();
  }
  return ncclSuccess;
}

void shmFifoClose(ShmSegment* seg, bool unlinkName) {
  if (seg->base) munmap(seg->base, seg->size);
  if (unlinkName && !seg->name.empty()) shm_unlink(seg->name.c_str());
  seg->base = nullptr;
  seg->name.clear();
}

}  // namespace chorus
