// The GPU backend interface (DESIGN.md "src/runtime/"): memory, pinned host memory, IPC, streams and the
// collective kernel's launch, behind one class so that the engine never includes a CUDA or HIP header.
//
// Implementations: src/runtime/cuda (nvcc build), src/runtime/hip (hipcc build), both compiled from
// src/runtime/gpu_runtime.cc through a per-backend API header; and a host emulation used only by tests
// (tests/harness/emu_runtime.*), which runs the device executor on CPU threads.
// A build without a GPU backend, or a process that sees no GPU, has no runtime: gpuRuntime() is null and every
// buffer is host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl.h"

namespace chorus {

struct DevWork;

/// What kind of memory a pointer is.
enum class MemKind { kHost, kDevice, kManaged };

/// An exported device allocation (cudaIpcMemHandle_t and hipIpcMemHandle_t are both 64 bytes).
struct IpcHandle {
  char bytes[64];
};

/// One GPU backend. Methods returning ncclResult_t describe failures with setLastError-ready text in lastError().
class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  /// "cuda", "hip" or "emu".
  virtual const char* name() const = 0;
  /// Devices this process can use (0: none, the host path serves every call).
  virtual int deviceCount() = 0;
  /// The calling thread's current device.
  virtual ncclResult_t getDevice(int* dev) = 0;
  /// Makes dev current on the calling thread.
  virtual ncclResult_t setDevice(int dev) = 0;
  /// PCI bus id of dev as a number (domain << 32 | bus << 8 | device), -1 if unknown.
  virtual int64_t busId(int dev) = 0;
  /// Kind of memory at p; *dev receives the owning device for device and managed memory.
  virtual MemKind pointerKind(const void* p, int* dev) = 0;
  /// Zero-filled device memory on the current device.
  virtual ncclResult_t deviceAlloc(size_t bytes, void** p) = 0;
  virtual void deviceFree(void* p) = 0;
  /// Zero-filled pinned host memory mapped into the device address space (*dev is the device view).
  virtual ncclResult_t hostAllocMapped(size_t bytes, void** host, void** dev) = 0;
  virtual void hostFree(void* host) = 0;
  /// Pins existing host memory (a shared-memory segment) and maps it for the device.
  virtual ncclResult_t hostRegister(void* p, size_t bytes, void** dev) = 0;
  virtual void hostUnregister(void* p) = 0;
  /// Exports a deviceAlloc allocation for another process.
  virtual ncclResult_t ipcGetHandle(void* p, IpcHandle* h) = 0;
  /// Maps another process's allocation (lazy peer access enabled).
  virtual ncclResult_t ipcOpenHandle(const IpcHandle& h, void** p) = 0;
  virtual void ipcCloseHandle(void* p) = 0;
  /// Whether dev can map peerDev's memory (true when equal).
  virtual bool canAccessPeer(int dev, int peerDev) = 0;
  /// Enables access from the current device to peerDev's memory (idempotent).
  virtual ncclResult_t enablePeerAccess(int peerDev) = 0;
  /// Whether the stream is being captured into a graph.
  virtual ncclResult_t streamIsCapturing(cudaStream_t s, bool* capturing) = 0;
  /// A process-unique id of the stream that is never reused after the stream is destroyed; false when this
  /// runtime has none (handles alone can be reused, so they do not identify a stream over time).
  virtual bool streamId(cudaStream_t s, uint64_t* id) = 0;
  /// Ticks per millisecond of the device timer the kernel reads for its deadlines (arch.h deviceClock()).
  virtual uint64_t clockTicksPerMs(int dev) = 0;
  /// Threads per block for the collective kernel.
  virtual int blockThreads() = 0;
  /// Enqueues the collective kernel on the stream: one block per channel of `work`.
  virtual ncclResult_t launch(const DevWork& work, cudaStream_t stream) = 0;
  /// Blocks until the stream's work is done.
  virtual ncclResult_t streamSynchronize(cudaStream_t stream) = 0;
  /// Blocks until all work on the current device is done (teardown: the user's streams may already be
  /// destroyed, with kernels still queued on them).
  virtual ncclResult_t deviceSynchronize() = 0;
  /// Synchronous copy from device (or any) memory to host memory (teardown reads FIFO counters with it).
  virtual ncclResult_t copyToHost(void* dst, const void* src, size_t bytes) = 0;
  /// Text of the last failure of this runtime ("cudaMalloc(1048576): out of memory").
  virtual std::string lastError() = 0;
};

/// The process's GPU runtime, or null when this build has none or no device is visible. Loaded once.
GpuRuntime* gpuRuntime();
/// Replaces the runtime (tests only: the host emulation). Pass null to restore the built-in one.
void setGpuRuntimeForTesting(GpuRuntime* rt);
/// The built-in backend of this build (null for host-only builds). Defined by the backend's source.
GpuRuntime* makeBuiltinGpuRuntime();

}  // namespace chorus
