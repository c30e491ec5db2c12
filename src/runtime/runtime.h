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
/// The ways a NIC's driver may reach a GPU's memory (GpuRuntime::gpuDirectRdma).
struct GpuDirectPaths {
  /// a peer-memory kernel module (nvidia_peermem; amdkfd's on ROCm): nets register device pointers as they are
  bool peerMemory = false;
  bool dmaBuf = false;  ///< the driver exports device memory as dma-buf file descriptors (GpuRuntime::dmaBufFd)
};

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
  /// Whether a NIC can read and write dev's memory in place (GPUDirect RDMA): the device and driver support it and a
  /// NIC's driver can reach the memory, through a peer-memory kernel module (the net registers device pointers) or
  /// through dma-buf (dmaBufFd). *paths says which of the two exist; *why says what is missing. Default: no.
  virtual bool gpuDirectRdma(int dev, GpuDirectPaths* paths, std::string* why) {
    (void)dev;
    *paths = GpuDirectPaths{};
    *why = std::string(name()) + " runtime: not supported by chorus";
    return false;
  }
  /// A dma-buf file descriptor for device memory [p, p + bytes): *fd (the caller closes it) covers the whole pages
  /// that hold the range, and *offset is p's offset into it. Default: not supported.
  virtual ncclResult_t dmaBufFd(void* p, size_t bytes, int* fd, uint64_t* offset) {
    (void)p, (void)bytes, (void)offset;
    *fd = -1;
    return ncclInvalidUsage;
  }
  /// Compute capability as major * 10 + minor (CUDA), 0 when unknown.
  virtual int computeCapability(int dev) {
    (void)dev;
    return 0;
  }
  /// Zero-filled device memory on the current device.
  virtual ncclResult_t deviceAlloc(size_t bytes, void** p) = 0;
  virtual void deviceFree(void* p) = 0;
  /// Zero-filled pinned host memory mapped into the device address space (*dev is the device view).
  virtual ncclResult_t hostAllocMapped(size_t bytes, void** host, void** dev) = 0;
  virtual void hostFree(void* host) = 0;
  /// Pins existing host memory (a shared-memory segment) and maps it for the device.
  virtual ncclResult_t hostRegister(void* p, size_t bytes, void** dev) = 0;
  virtual void hostUnregister(void* p) = 0;
  /// The device allocation that holds p: its base and size (a user's buffer may start inside an allocation that
  /// a caching allocator carved up; IPC exports whole allocations).
  virtual ncclResult_t addressRange(const void* p, void** base, size_t* bytes) = 0;
  /// Exports a device allocation (its base pointer) for another process.
  virtual ncclResult_t ipcGetHandle(void* p, IpcHandle* h) = 0;
  /// Maps another process's allocation (lazy peer access enabled).
  virtual ncclResult_t ipcOpenHandle(const IpcHandle& h, void** p) = 0;
  virtual void ipcCloseHandle(void* p) = 0;
  /// Whether dev can map peerDev's memory (true when equal).
  virtual bool canAccessPeer(int dev, int peerDev) = 0;
  /// Enables access from the current device to peerDev's memory (idempotent).
  virtual ncclResult_t enablePeerAccess(int peerDev) = 0;
  /// Whether the stream is being captured into a graph and, if so, that capture's id (0 when not capturing).
  /// Capture-safe: callable at any time without a SetupScope.
  virtual ncclResult_t streamCaptureInfo(cudaStream_t s, bool* capturing, uint64_t* id) = 0;
  /// Events order streams: a communicator's launches run in call order whatever streams they are on. Record and
  /// wait are capture-safe (in a capture they become graph edges); create and destroy belong in a SetupScope.
  virtual ncclResult_t eventCreate(void** ev) = 0;
  virtual void eventDestroy(void* ev) = 0;
  virtual ncclResult_t eventRecord(void* ev, cudaStream_t s) = 0;
  /// Makes later work on s wait for the work ev recorded.
  virtual ncclResult_t streamWaitEvent(cudaStream_t s, void* ev) = 0;
  /// Asynchronous copy between device buffers on the stream (the copy engine). Capture-safe.
  virtual ncclResult_t memcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t s) = 0;
  /// The same copy by a small kernel on the stream (cheaper to issue than the copy engine for small and mid sizes,
  /// but it takes SMs). Capture-safe.
  virtual ncclResult_t copyKernelAsync(void* dst, const void* src, size_t bytes, cudaStream_t s) = 0;
  /// Blocks of the collective kernel that device dev runs at once (SMs x blocks per SM): the kernels of ranks
  /// sharing a GPU wait for each other, so together they must fit.
  virtual int maxResidentBlocks(int dev) = 0;
  /// Setup scope (see SetupScope): between these, runtime calls run in relaxed capture mode, so that allocation,
  /// pinning, IPC and pointer queries made while a user's stream is being captured neither fail nor invalidate
  /// that capture. Nests; per thread.
  virtual void beginSetup() = 0;
  virtual void endSetup() = 0;
  /// A process-unique id of the stream that is never reused after the stream is destroyed; false when this
  /// runtime has none (handles alone can be reused, so they do not identify a stream over time).
  virtual bool streamId(cudaStream_t s, uint64_t* id) = 0;
  /// Ticks per millisecond of the device timer the kernel reads for its deadlines (arch.h deviceClock()).
  virtual uint64_t clockTicksPerMs(int dev) = 0;
  /// Enqueues the collective kernel on the stream: one block per channel of `work`.
  virtual ncclResult_t launch(const DevWork& work, cudaStream_t stream) = 0;
  /// Blocks until the stream's work is done.
  virtual ncclResult_t streamSynchronize(cudaStream_t stream) = 0;
  /// Blocks until all work on the current device is done (teardown: the user's streams may already be
  /// destroyed, with kernels still queued on them).
  virtual ncclResult_t deviceSynchronize() = 0;
  /// Synchronous copy from device (or any) memory to host memory (teardown reads FIFO counters with it).
  virtual ncclResult_t copyToHost(void* dst, const void* src, size_t bytes) = 0;
  /// Synchronous copy from host memory to device memory (set-up tables the kernels read).
  virtual ncclResult_t copyToDevice(void* dst, const void* src, size_t bytes) = 0;
  /// Text of the last failure of this runtime ("cudaMalloc(1048576): out of memory").
  virtual std::string lastError() = 0;
};

/// Runs the runtime calls of its lifetime as setup (GpuRuntime::beginSetup). Every runtime call other than the
/// capture-safe ones (getDevice, setDevice, streamCaptureInfo, eventRecord, streamWaitEvent, memcpyAsync,
/// copyKernelAsync, launch) is made inside one: the user's stream may be under capture at any call. streamId is
/// never asked of a stream under capture: cudaStreamGetId refuses it and invalidates the capture, relaxed mode or
/// not (H100, CUDA 13). A null runtime is allowed.
class SetupScope {
 public:
  explicit SetupScope(GpuRuntime* rt) : rt_(rt) {
    if (rt_) rt_->beginSetup();
  }
  ~SetupScope() {
    if (rt_) rt_->endSetup();
  }
  SetupScope(const SetupScope&) = delete;
  SetupScope& operator=(const SetupScope&) = delete;

 private:
  GpuRuntime* rt_;
};

/// The process's GPU runtime, or null when this build has none or no device is visible. Loaded once.
GpuRuntime* gpuRuntime();
/// Replaces the runtime (tests only: the host emulation). Pass null to restore the built-in one.
void setGpuRuntimeForTesting(GpuRuntime* rt);
/// The built-in backend of this build (null for host-only builds). Defined by the backend's source.
GpuRuntime* makeBuiltinGpuRuntime();

}  // namespace chorus
