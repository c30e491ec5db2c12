// A GPU runtime emulated on the host, for the CPU test suite: "device memory" is memfd-backed shared memory
// (so another process can map it through an "IPC handle", /proc/<pid>/fd/<fd>), and a launch runs the collective
// kernel's body (kernels/device_kernel.h) synchronously on the calling thread, one block of one thread per
// channel. It proves the device path's logic: planning into DevWork, connections, rendezvous, the device
// platform's waits and failures, and the kernel body, compiled by g++. It proves nothing about real GPUs.
#pragma once

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "runtime/runtime.h"

namespace chorus_test {

/// Host emulation of chorus::GpuRuntime (tests only).
class EmuRuntime : public chorus::GpuRuntime {
 public:
  const char* name() const override { return "emu"; }
  int deviceCount() override { return devices; }
  ncclResult_t getDevice(int* dev) override;
  ncclResult_t setDevice(int dev) override;
  int64_t busId(int dev) override { return dev; }
  chorus::MemKind pointerKind(const void* p, int* dev) override;
  ncclResult_t deviceAlloc(size_t bytes, void** p) override;
  void deviceFree(void* p) override;
  ncclResult_t hostAllocMapped(size_t bytes, void** host, void** dev) override;
  void hostFree(void* host) override;
  /// Like cudaHostRegister: registering the same memory twice fails.
  ncclResult_t hostRegister(void* p, size_t, void** dev) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!registered_.insert(p).second) {
      lastError_ = "hostRegister: memory already registered";
      return ncclUnhandledCudaError;
    }
    *dev = p;
    return ncclSuccess;
  }
  void hostUnregister(void* p) override {
    std::lock_guard<std::mutex> lock(mutex_);
    registered_.erase(p);
  }
  /// Host ranges registered and not yet unregistered (this process).
  size_t registeredCount() {
    std::lock_guard<std::mutex> lock(mutex_);
    return registered_.size();
  }
  ncclResult_t ipcGetHandle(void* p, chorus::IpcHandle* h) override;
  ncclResult_t ipcOpenHandle(const chorus::IpcHandle& h, void** p) override;
  void ipcCloseHandle(void* p) override;
  bool canAccessPeer(int, int) override { return peerAccess; }
  ncclResult_t enablePeerAccess(int) override { return ncclSuccess; }
  ncclResult_t streamIsCapturing(cudaStream_t, bool* capturing) override {
    *capturing = false;
    return ncclSuccess;
  }
  /// Emulated streams are never created or destroyed: the handle is the id.
  bool streamId(cudaStream_t s, uint64_t* id) override {
    *id = reinterpret_cast<uintptr_t>(s);
    return true;
  }
  uint64_t clockTicksPerMs(int) override { return 1000000; }  // deviceClock() is CLOCK_MONOTONIC ns on the host
  int blockThreads() override { return 1; }
  ncclResult_t launch(const chorus::DevWork& work, cudaStream_t stream) override;
  ncclResult_t streamSynchronize(cudaStream_t) override { return ncclSuccess; }
  ncclResult_t deviceSynchronize() override { return ncclSuccess; }  // kernels run at launch
  ncclResult_t copyToHost(void* dst, const void* src, size_t bytes) override {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    std::memcpy(dst, src, bytes);
    return ncclSuccess;
  }
  std::string lastError() override;

  int devices = 1;
  bool peerAccess = true;        ///< false: device connections fall back to pinned shared memory
  std::atomic<int> launches{0};  ///< kernels run (all threads)
  std::atomic<int> lastChannels{0};  ///< blocks of the last kernel run

 private:
  struct Alloc {
    size_t size;
    int fd;
    int dev;
  };
  std::mutex mutex_;
  std::map<char*, Alloc> allocs_;   ///< device allocations by base
  std::map<char*, size_t> opened_;  ///< IPC mappings
  std::set<void*> registered_;      ///< hostRegister'ed ranges
  std::string lastError_;
};

/// A host buffer pretending to be device memory of the test's EmuRuntime (freed at scope exit).
class DevBuf {
 public:
  DevBuf(EmuRuntime& rt, size_t bytes);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  EmuRuntime& rt_;
  void* p_ = nullptr;
};

}  // namespace chorus_test
