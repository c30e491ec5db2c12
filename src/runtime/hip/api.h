// HIP side of the GPU runtime mapping: the same gpu* names as src/runtime/cuda/api.h, forwarded to the HIP runtime
// API. Compiled with g++ against hip::host (__HIP_PLATFORM_AMD__); no device code here.
#pragma once

#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <cstdint>

#include "runtime/runtime.h"

namespace chorus {
namespace gpu {

using Error = hipError_t;
using Stream = hipStream_t;
using PointerAttributes = hipPointerAttribute_t;
using IpcMemHandle = hipIpcMemHandle_t;

constexpr Error kSuccess = hipSuccess;
constexpr const char* kName = "hip";
constexpr const char* kApi = "hip";

/// nccl.h declares streams with CUDA's opaque type; under HIP the same pointer is a hipStream_t.
inline Stream toStream(cudaStream_t s) { return reinterpret_cast<Stream>(s); }

inline Error gpuGetDeviceCount(int* n) { return hipGetDeviceCount(n); }
inline Error gpuGetDevice(int* dev) { return hipGetDevice(dev); }
inline Error gpuSetDevice(int dev) { return hipSetDevice(dev); }
inline Error gpuGetLastError() { return hipGetLastError(); }
inline const char* gpuGetErrorString(Error e) { return hipGetErrorString(e); }
inline const char* gpuGetErrorName(Error e) { return hipGetErrorName(e); }
inline Error gpuDeviceGetPCIBusId(char* buf, int len, int dev) { return hipDeviceGetPCIBusId(buf, len, dev); }
inline Error gpuPointerGetAttributes(PointerAttributes* a, const void* p) { return hipPointerGetAttributes(a, p); }
inline Error gpuMalloc(void** p, size_t bytes) { return hipMalloc(p, bytes); }
using CaptureMode = hipStreamCaptureMode;
constexpr CaptureMode kCaptureRelaxed = hipStreamCaptureModeRelaxed;
/// Swaps the calling thread's stream-capture interaction mode with *mode.
inline Error gpuExchangeCaptureMode(CaptureMode* mode) { return hipThreadExchangeStreamCaptureMode(mode); }
/// A stream that never synchronises with the null stream (the runtime's own setup copies).
inline Error gpuStreamCreateNonBlocking(Stream* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline Error gpuMemsetAsync(void* p, int v, size_t bytes, Stream s) { return hipMemsetAsync(p, v, bytes, s); }
inline Error gpuFree(void* p) { return hipFree(p); }
/// Pinned host memory mapped into every device's address space.
inline Error gpuHostAlloc(void** p, size_t bytes) { return hipHostMalloc(p, bytes, hipHostMallocMapped); }
inline Error gpuFreeHost(void* p) { return hipHostFree(p); }
/// Pins existing host memory for all devices (portable) and maps it.
inline Error gpuHostRegister(void* p, size_t bytes) {
  return hipHostRegister(p, bytes, hipHostRegisterMapped | hipHostRegisterPortable);
}
inline Error gpuHostUnregister(void* p) { return hipHostUnregister(p); }
inline Error gpuHostGetDevicePointer(void** dev, void* host) { return hipHostGetDevicePointer(dev, host, 0); }
/// The allocation holding p.
inline Error gpuMemGetAddressRange(const void* p, void** base, size_t* bytes) {
  return hipMemGetAddressRange(base, bytes, const_cast<void*>(p));
}
inline Error gpuIpcGetMemHandle(IpcMemHandle* h, void* p) { return hipIpcGetMemHandle(h, p); }
inline Error gpuIpcOpenMemHandle(void** p, const IpcMemHandle& h) {
  return hipIpcOpenMemHandle(p, h, hipIpcMemLazyEnablePeerAccess);
}
inline Error gpuIpcCloseMemHandle(void* p) { return hipIpcCloseMemHandle(p); }
inline Error gpuDeviceCanAccessPeer(int* can, int dev, int peer) { return hipDeviceCanAccessPeer(can, dev, peer); }
/// Enables peer access; "already enabled" counts as success (and is cleared from the sticky last error).
inline Error gpuDeviceEnablePeerAccess(int peer) {
  Error e = hipDeviceEnablePeerAccess(peer, 0);
  if (e == hipErrorPeerAccessAlreadyEnabled) {
    (void)hipGetLastError();
    return hipSuccess;
  }
  return e;
}
inline Error gpuStreamCaptureInfo(Stream s, bool* capturing, uint64_t* id) {
  hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
  unsigned long long v = 0;
  Error e = hipStreamGetCaptureInfo(s, &st, &v);
  *capturing = st != hipStreamCaptureStatusNone;
  *id = *capturing ? v : 0;
  return e;
}
using Event = hipEvent_t;
inline Error gpuEventCreate(Event* ev) { return hipEventCreateWithFlags(ev, hipEventDisableTiming); }
inline Error gpuEventDestroy(Event ev) { return hipEventDestroy(ev); }
inline Error gpuEventRecord(Event ev, Stream s) { return hipEventRecord(ev, s); }
inline Error gpuStreamWaitEvent(Stream s, Event ev) { return hipStreamWaitEvent(s, ev, 0); }
inline Error gpuMultiProcessorCount(int dev, int* n) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeMultiprocessorCount, dev);
}
/// HIP has no attribute for GPUDirect RDMA: a ROCm GPU counts as supporting it, and whether a NIC can reach its memory
/// is whether amdkfd's peer-memory client is loaded (the runtime looks for it), so 1.
inline Error gpuDirectRdmaAttr(int, int* v) {
  *v = 1;
  return hipSuccess;
}
/// dma-buf export of device memory is not built for ROCm (HIP 5.2 has no call for it): 0.
inline Error gpuDmaBufSupported(int, int* v) {
  *v = 0;
  return hipSuccess;
}
inline Error gpuDmaBufFd(void*, size_t, int* fd) {
  *fd = -1;
  return hipErrorNotSupported;
}
/// No CUDA compute capability.
inline Error gpuComputeCapability(int, int* major, int* minor) {
  *major = *minor = 0;
  return hipSuccess;
}
inline Error gpuStreamSynchronize(Stream s) { return hipStreamSynchronize(s); }
inline Error gpuDeviceSynchronize() { return hipDeviceSynchronize(); }
/// HIP 5.2 has no stream ids, and handles are reused after destruction: unknown.
inline bool gpuStreamId(Stream, uint64_t*) { return false; }
inline Error gpuMemcpyAsync(void* dst, const void* src, size_t n, Stream s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyDefault, s);
}

/// The memory kind of a successful gpuPointerGetAttributes. HIP before 6.0 names the field memoryType and flags
/// managed memory separately; 6.0 renamed it to type, like CUDA.
inline MemKind gpuPointerKind(const PointerAttributes& a) {
#if HIP_VERSION_MAJOR >= 6
  if (a.type == hipMemoryTypeManaged) return MemKind::kManaged;
  return a.type == hipMemoryTypeDevice ? MemKind::kDevice : MemKind::kHost;
#else
  if (a.isManaged) return MemKind::kManaged;
  return a.memoryType == hipMemoryTypeDevice ? MemKind::kDevice : MemKind::kHost;
#endif
}

/// Ticks per millisecond of deviceClock() (kernels/arch.h reads wall_clock64()). The rate attribute is in kHz,
/// which is ticks per millisecond. HIP 5.2 (Debian) has no hipDeviceAttributeWallClockRate; there the constant
/// 100 MHz of s_memrealtime on CDNA parts (gfx90a, gfx94x) is used.
inline Error gpuClockTicksPerMs(int dev, uint64_t* ticks) {
#if HIP_VERSION_MAJOR > 5 || (HIP_VERSION_MAJOR == 5 && HIP_VERSION_MINOR >= 3)
  int khz = 0;
  Error e = hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, dev);
  if (e != hipSuccess) return e;
  *ticks = khz > 0 ? static_cast<uint64_t>(khz) : 100000;
  return hipSuccess;
#else
  (void)dev;
  *ticks = 100000;
  return hipSuccess;
#endif
}

}  // namespace gpu
}  // namespace chorus
