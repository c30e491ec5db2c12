// dlopen access to the CUDA runtime (see cuda_shim.h).
#include "perf/cuda_shim.h"

#include <dlfcn.h>

namespace chorus {
namespace perf {

bool CudaRuntime::load() {
  if (getDeviceCount != nullptr) return true;
  void* lib = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) return false;
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  setDevice = reinterpret_cast<int (*)(int)>(sym("cudaSetDevice"));
  memcpyAsync = reinterpret_cast<int (*)(void*, const void*, size_t, int, void*)>(sym("cudaMemcpyAsync"));
  streamCreateWithFlags = reinterpret_cast<int (*)(void**, unsigned)>(sym("cudaStreamCreateWithFlags"));
  streamDestroy = reinterpret_cast<int (*)(void*)>(sym("cudaStreamDestroy"));
  streamSynchronize = reinterpret_cast<int (*)(void*)>(sym("cudaStreamSynchronize"));
  deviceGetPCIBusId = reinterpret_cast<int (*)(char*, int, int)>(sym("cudaDeviceGetPCIBusId"));
  getErrorString = reinterpret_cast<const char* (*)(int)>(sym("cudaGetErrorString"));
  pointerGetAttributes = reinterpret_cast<int (*)(void*, const void*)>(sym("cudaPointerGetAttributes"));
  streamBeginCapture = reinterpret_cast<int (*)(void*, int)>(sym("cudaStreamBeginCapture"));
  streamEndCapture = reinterpret_cast<int (*)(void*, void**)>(sym("cudaStreamEndCapture"));
  graphInstantiateWithFlags =
      reinterpret_cast<int (*)(void**, void*, unsigned long long)>(sym("cudaGraphInstantiateWithFlags"));
  graphLaunch = reinterpret_cast<int (*)(void*, void*)>(sym("cudaGraphLaunch"));
  graphExecDestroy = reinterpret_cast<int (*)(void*)>(sym("cudaGraphExecDestroy"));
  graphDestroy = reinterpret_cast<int (*)(void*)>(sym("cudaGraphDestroy"));
  auto count = reinterpret_cast<int (*)(int*)>(sym("cudaGetDeviceCount"));
  if (!setDevice || !memcpyAsync || !streamCreateWithFlags || !streamDestroy || !streamSynchronize ||
      !deviceGetPCIBusId || !getErrorString || !pointerGetAttributes || !count) {
    dlclose(lib);
    return false;
  }
  getDeviceCount = count;  // set last: it marks the runtime as loaded
  return true;
}

int CudaRuntime::deviceCount() {
  int n = 0;
  if (!load() || getDeviceCount(&n) != 0) return 0;
  return n;
}

bool CudaRuntime::isDevicePointer(const void* p) {
  // struct cudaPointerAttributes since CUDA 11: type, device, devicePointer, hostPointer, and from CUDA 13 on
  // reserved words after them. The runtime writes the whole struct of its own version, so the buffer is larger
  // than any version's (CUDA 13's is 64 bytes) and only the leading fields are read.
  struct {
    int type;
    int device;
    void* devicePointer;
    void* hostPointer;
    long reserved[24];
  } attr{};
  constexpr int kCudaMemoryTypeDevice = 2;
  return load() && pointerGetAttributes(&attr, p) == 0 && attr.type == kCudaMemoryTypeDevice;
}

std::string CudaRuntime::errorText(int err) const {
  return getErrorString ? getErrorString(err) : "cuda error " + std::to_string(err);
}

}  // namespace perf
}  // namespace chorus
