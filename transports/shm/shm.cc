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

std::string shmFifoName(uint64_t commHash, int channel, int from, int to) {
  char buf[96];
  snprintf(buf, sizeof(buf), "/chorus-%016lx-c%d-%d-%d", static_cast<unsigned long>(commHash), channel, from, to);
  return buf;
}

ncclResult_t shmFifoOpen(const std::string& name, const FifoGeometry& geo, ShmSegment* seg) {
  size_t size = geo.totalBytes();
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) CHORUS_FAIL(nullptr, ncclSystemError, "shm_open(%s) failed: %s", name.c_str(), strerror(errno));
  struct stat st;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < size && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int e = errno;
    close(fd);
    CHORUS_FAIL(nullptr, ncclSystemError, "ftruncate(%s, %zu) failed: %s (is /dev/shm large enough?)", name.c_str(),
                size, strerror(e));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) CHORUS_FAIL(nullptr, ncclSystemError, "mmap(%s, %zu) failed: %s", name.c_str(), size, strerror(e));
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
