// CUDA side of the GPU runtime mapping: the gpu* names src/runtime/gpu/gpu_runtime.cc is written against, each a
// one-line forward to the CUDA runtime API. src/runtime/hip/api.h maps the same names to HIP; nothing else differs
// between the two backends, so fix behaviour in gpu_runtime.cc, not here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/runtime.h"

namespace chorus {
namespace gpu {

using Error = cudaError_t;
using Stream = cudaStream_t;
using PointerAttributes = cudaPointerAttributes;
using IpcMemHandle = cudaIpcMemHandle_t;

constexpr Error kSuccess = cudaSuccess;
/// Backend name (GpuRuntime::name) and prefix of the API calls named in error texts.
constexpr const char* kName = "cuda";
constexpr const char* kApi = "cuda";

/// The backend's stream from the type nccl.h declares (the same type under CUDA).
inline Stream toStream(cudaStream_t s) { return s; }

inline Error gpuGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline Error gpuGetDevice(int* dev) { return cudaGetDevice(dev); }
inline Error gpuSetDevice(int dev) { return cudaSetDevice(dev); }
inline Error gpuGetLastError() { return cudaGetLastError(); }
inline const char* gpuGetErrorString(Error e) { return cudaGetErrorString(e); }
inline const char* gpuGetErrorName(Error e) { return cudaGetErrorName(e); }
inline Error gpuDeviceGetPCIBusId(char* buf, int len, int dev) { return cudaDeviceGetPCIBusId(buf, len, dev); }
inline Error gpuPointerGetAttributes(PointerAttributes* a, const void* p) { return cudaPointerGetAttributes(a, p); }
inline Error gpuMalloc(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
using CaptureMode = cudaStreamCaptureMode;
constexpr CaptureMode kCaptureRelaxed = cudaStreamCaptureModeRelaxed;
/// Swaps the calling thread's stream-capture interaction mode with *mode.
inline Error gpuExchangeCaptureMode(CaptureMode* mode) { return cudaThreadExchangeStreamCaptureMode(mode); }
/// A stream that never synchronises with the legacy default stream (the runtime's own setup copies).
inline Error gpuStreamCreateNonBlocking(Stream* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline Error gpuMemsetAsync(void* p, int v, size_t bytes, Stream s) { return cudaMemsetAsync(p, v, bytes, s); }
inline Error gpuFree(void* p) { return cudaFree(p); }
/// Pinned host memory mapped into every device's address space.
inline Error gpuHostAlloc(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocMapped); }
inline Error gpuFreeHost(void* p) { return cudaFreeHost(p); }
/// Pins existing host memory for all devices (portable) and maps it.
inline Error gpuHostRegister(void* p, size_t bytes) {
  return cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
}
inline Error gpuHostUnregister(void* p) { return cudaHostUnregister(p); }
inline Error gpuHostGetDevicePointer(void** dev, void* host) { return cudaHostGetDevicePointer(dev, host, 0); }
/// A CUDA driver function, reached through the runtime so that nothing links libcuda; null when the driver lacks it.
inline void* driverEntry(const char* symbol) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  Error e = cudaGetDriverEntryPointByVersion(symbol, &f, 12000, cudaEnableDefault, &found);
#else
  Error e = cudaGetDriverEntryPoint(symbol, &f, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? f : nullptr;
}
/// The allocation holding p (cuMemGetAddressRange).
inline Error gpuMemGetAddressRange(const void* p, void** base, size_t* bytes) {
  using Fn = int (*)(unsigned long long* base, size_t* bytes, unsigned long long ptr);  // CUresult, CUdeviceptr
  static Fn fn = reinterpret_cast<Fn>(driverEntry("cuMemGetAddressRange"));
  if (fn == nullptr) return cudaErrorNotSupported;
  unsigned long long b = 0;
  if (fn(&b, bytes, reinterpret_cast<uintptr_t>(p)) != 0) return cudaErrorInvalidValue;
  *base = reinterpret_cast<void*>(static_cast<uintptr_t>(b));
  return cudaSuccess;
}
/// cuMemGetHandleForAddressRange, looked up once; null when the driver lacks it.
using MemGetHandleFn = int (*)(void* handle, unsigned long long ptr, size_t size, int type, unsigned long long flags);
inline MemGetHandleFn memGetHandleForAddressRange() {
  static MemGetHandleFn fn = reinterpret_cast<MemGetHandleFn>(driverEntry("cuMemGetHandleForAddressRange"));
  return fn;
}
/// Whether the driver exports dev's memory as dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 124): 1 or 0.
inline Error gpuDmaBufSupported(int dev, int* v) {
  using GetFn = int (*)(int* device, int ordinal);           // cuDeviceGet
  using AttrFn = int (*)(int* value, int attr, int device);  // cuDeviceGetAttribute
  static GetFn get = reinterpret_cast<GetFn>(driverEntry("cuDeviceGet"));
  static AttrFn attr = reinterpret_cast<AttrFn>(driverEntry("cuDeviceGetAttribute"));
  *v = 0;
  if (get == nullptr || attr == nullptr || memGetHandleForAddressRange() == nullptr) return cudaSuccess;
  int cuDev = 0;
  if (get(&cuDev, dev) != 0 || attr(v, 124, cuDev) != 0) *v = 0;
  return cudaSuccess;
}
/// A dma-buf file descriptor for [p, p + bytes), both aligned to the host's page (cuMemGetHandleForAddressRange with
/// CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD).
inline Error gpuDmaBufFd(void* p, size_t bytes, int* fd) {
  *fd = -1;
  MemGetHandleFn fn = memGetHandleForAddressRange();
  if (fn == nullptr) return cudaErrorNotSupported;
  if (fn(fd, reinterpret_cast<uintptr_t>(p), bytes, 1, 0) != 0) return (*fd = -1), cudaErrorInvalidValue;
  return cudaSuccess;
}
inline Error gpuIpcGetMemHandle(IpcMemHandle* h, void* p) { return cudaIpcGetMemHandle(h, p); }
inline Error gpuIpcOpenMemHandle(void** p, const IpcMemHandle& h) {
  return cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
}
inline Error gpuIpcCloseMemHandle(void* p) { return cudaIpcCloseMemHandle(p); }
inline Error gpuDeviceCanAccessPeer(int* can, int dev, int peer) { return cudaDeviceCanAccessPeer(can, dev, peer); }
/// Enables peer access; "already enabled" counts as success (and is cleared from the sticky last error).
inline Error gpuDeviceEnablePeerAccess(int peer) {
  Error e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return cudaSuccess;
  }
  return e;
}
inline Error gpuStreamCaptureInfo(Stream s, bool* capturing, uint64_t* id) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long v = 0;
  Error e = cudaStreamGetCaptureInfo(s, &st, &v);
  *capturing = st != cudaStreamCaptureStatusNone;
  *id = *capturing ? v : 0;
  return e;
}
using Event = cudaEvent_t;
inline Error gpuEventCreate(Event* ev) { return cudaEventCreateWithFlags(ev, cudaEventDisableTiming); }
inline Error gpuEventDestroy(Event ev) { return cudaEventDestroy(ev); }
inline Error gpuEventRecord(Event ev, Stream s) { return cudaEventRecord(ev, s); }
inline Error gpuStreamWaitEvent(Stream s, Event ev) { return cudaStreamWaitEvent(s, ev, 0); }
inline Error gpuMultiProcessorCount(int dev, int* n) {
  return cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, dev);
}
/// Whether the device and driver support GPUDirect RDMA (1) or not (0); -1: this backend cannot say.
inline Error gpuDirectRdmaAttr(int dev, int* v) {
  return cudaDeviceGetAttribute(v, cudaDevAttrGPUDirectRDMASupported, dev);
}
inline Error gpuComputeCapability(int dev, int* major, int* minor) {
  Error e = cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev);
  return e != cudaSuccess ? e : cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, dev);
}
inline Error gpuStreamSynchronize(Stream s) { return cudaStreamSynchronize(s); }
inline Error gpuDeviceSynchronize() { return cudaDeviceSynchronize(); }
/// A process-unique id of the stream, never reused after the stream is destroyed (CUDA 12.0+).
inline bool gpuStreamId(Stream s, uint64_t* id) {
  unsigned long long v = 0;
  if (cudaStreamGetId(s, &v) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  *id = v;
  return true;
}
inline Error gpuMemcpyAsync(void* dst, const void* src, size_t n, Stream s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
}

/// The memory kind of a successful gpuPointerGetAttributes.
inline MemKind gpuPointerKind(const PointerAttributes& a) {
  switch (a.type) {
    case cudaMemoryTypeDevice:
      return MemKind::kDevice;
    case cudaMemoryTypeManaged:
      return MemKind::kManaged;
    default:  // cudaMemoryTypeHost (pinned) and cudaMemoryTypeUnregistered
      return MemKind::kHost;
  }
}

/// Ticks per millisecond of deviceClock() (kernels/arch.h): %globaltimer counts nanoseconds.
inline Error gpuClockTicksPerMs(int dev, uint64_t* ticks) {
  (void)dev;
  *ticks = 1000000;
  return cudaSuccess;
}

}  // namespace gpu
}  // namespace chorus
