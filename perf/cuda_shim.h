// The few CUDA runtime calls the perf tools need for --mem device, loaded with dlopen so the tools build and run
// without CUDA (they then use host memory).
#pragma once

#include <cstddef>
#include <string>

namespace chorus {
namespace perf {

/// CUDA runtime entry points (nullptr until load() succeeds). Return values are cudaError_t (0: success).
struct CudaRuntime {
  int (*getDeviceCount)(int*) = nullptr;
  int (*setDevice)(int) = nullptr;
  int (*memcpyAsync)(void*, const void*, size_t, int, void*) = nullptr;
  int (*streamCreateWithFlags)(void**, unsigned) = nullptr;
  int (*streamDestroy)(void*) = nullptr;
  int (*streamSynchronize)(void*) = nullptr;
  int (*deviceGetPCIBusId)(char*, int, int) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
  int (*pointerGetAttributes)(void*, const void*) = nullptr;
  // CUDA graphs (-G); optional: null where the runtime lacks them.
  int (*streamBeginCapture)(void*, int) = nullptr;
  int (*streamEndCapture)(void*, void**) = nullptr;
  int (*graphInstantiateWithFlags)(void**, void*, unsigned long long) = nullptr;
  int (*graphLaunch)(void*, void*) = nullptr;
  int (*graphExecDestroy)(void*) = nullptr;
  int (*graphDestroy)(void*) = nullptr;

  /// Loads libcudart once; false when it is absent or incomplete.
  bool load();
  /// Number of usable GPUs (0 without a runtime or a driver).
  int deviceCount();
  /// Text of a cudaError_t.
  std::string errorText(int err) const;
  /// Whether every graph entry point loaded (capture, instantiate, launch, destroy).
  bool hasGraphs() const {
    return streamBeginCapture && streamEndCapture && graphInstantiateWithFlags && graphLaunch && graphExecDestroy &&
           graphDestroy;
  }
  /// Whether p is device memory (cudaPointerGetAttributes says cudaMemoryTypeDevice).
  bool isDevicePointer(const void* p);
};

/// cudaMemcpyDefault: the runtime infers the direction (unified addressing).
constexpr int kCudaMemcpyDefault = 4;
/// cudaStreamNonBlocking, as nccl-tests creates its streams.
constexpr unsigned kCudaStreamNonBlocking = 1;
/// cudaStreamCaptureModeThreadLocal, the mode nccl-tests captures in: other threads' calls stay unaffected.
constexpr int kCudaStreamCaptureModeThreadLocal = 1;

}  // namespace perf
}  // namespace chorus
