#include "device/emu_runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/device_kernel.h"

namespace chorus_test {
namespace {

thread_local int tCurrentDevice = 0;

struct HandleBytes {
  uint64_t pid;
  int32_t fd;
  uint64_t size;
};

}  // namespace

ncclResult_t EmuRuntime::getDevice(int* dev) {
  *dev = tCurrentDevice;
  return ncclSuccess;
}

ncclResult_t EmuRuntime::setDevice(int dev) {
  if (dev < 0 || dev >= devices) {
    std::lock_guard<std::mutex> lock(mutex_);
    lastError_ = "emu: invalid device " + std::to_string(dev);
    return ncclUnhandledCudaError;
  }
  tCurrentDevice = dev;
  return ncclSuccess;
}

chorus::MemKind EmuRuntime::pointerKind(const void* p, int* dev) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* c = static_cast<const char*>(p);
  auto it = allocs_.upper_bound(const_cast<char*>(c));
  if (it == allocs_.begin()) return chorus::MemKind::kHost;
  --it;
  if (c < it->first + it->second.size) {
    *dev = it->second.dev;
    return chorus::MemKind::kDevice;
  }
  return chorus::MemKind::kHost;
}

ncclResult_t EmuRuntime::deviceAlloc(size_t bytes, void** p) {
  int fd = memfd_create("chorus-emu", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    lastError_ = std::string("emu: memfd: ") + strerror(errno);
    if (fd >= 0) close(fd);
    return ncclUnhandledCudaError;
  }
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    std::lock_guard<std::mutex> lock(mutex_);
    lastError_ = std::string("emu: mmap: ") + strerror(errno);
    return ncclUnhandledCudaError;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  allocs_[static_cast<char*>(m)] = Alloc{bytes, fd, tCurrentDevice};
  *p = m;
  return ncclSuccess;
}

void EmuRuntime::deviceFree(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocs_.find(static_cast<char*>(p));
  if (it == allocs_.end()) return;
  munmap(p, it->second.size);
  close(it->second.fd);
  allocs_.erase(it);
}

ncclResult_t EmuRuntime::hostAllocMapped(size_t bytes, void** host, void** dev) {
  *host = *dev = calloc(1, bytes);
  return *host ? ncclSuccess : ncclSystemError;
}

void EmuRuntime::hostFree(void* host) { free(host); }

ncclResult_t EmuRuntime::ipcGetHandle(void* p, chorus::IpcHandle* h) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocs_.find(static_cast<char*>(p));
  if (it == allocs_.end()) {
    lastError_ = "emu: ipcGetHandle of a pointer that is not an allocation base";
    return ncclUnhandledCudaError;
  }
  HandleBytes hb{static_cast<uint64_t>(getpid()), it->second.fd, it->second.size};
  std::memset(h, 0, sizeof(*h));
  std::memcpy(h->bytes, &hb, sizeof(hb));
  return ncclSuccess;
}

ncclResult_t EmuRuntime::ipcOpenHandle(const chorus::IpcHandle& h, void** p) {
  HandleBytes hb;
  std::memcpy(&hb, h.bytes, sizeof(hb));
  char path[64];
  snprintf(path, sizeof(path), "/proc/%lu/fd/%d", static_cast<unsigned long>(hb.pid), hb.fd);
  int fd = open(path, O_RDWR);
  void* m = fd >= 0 ? mmap(nullptr, hb.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  int e = errno;
  if (fd >= 0) close(fd);
  std::lock_guard<std::mutex> lock(mutex_);
  if (m == MAP_FAILED) {
    lastError_ = std::string("emu: opening ") + path + ": " + strerror(e);
    return ncclUnhandledCudaError;
  }
  opened_[static_cast<char*>(m)] = hb.size;
  *p = m;
  return ncclSuccess;
}

void EmuRuntime::ipcCloseHandle(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = opened_.find(static_cast<char*>(p));
  if (it == opened_.end()) return;
  munmap(p, it->second);
  opened_.erase(it);
}

ncclResult_t EmuRuntime::launch(const chorus::DevWork& work, cudaStream_t) {
  // Blocks run one after the other: channels are independent schedules that every rank runs in the same order.
  for (int b = 0; b < work.nChannels; b++) {
    chorus::DevShared shared;
    chorus::runDevBlock(work, b, shared, 0, 1);
  }
  lastChannels = work.nChannels;
  launches++;
  return ncclSuccess;
}

std::string EmuRuntime::lastError() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_;
}

DevBuf::DevBuf(EmuRuntime& rt, size_t bytes) : rt_(rt) {
  if (rt_.deviceAlloc(bytes ? bytes : 1, &p_) != ncclSuccess) abort();
}

DevBuf::~DevBuf() { rt_.deviceFree(p_); }

}  // namespace chorus_test
