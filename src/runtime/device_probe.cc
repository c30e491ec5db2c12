#include "runtime/device_probe.h"

#include <dlfcn.h>

#include <mutex>

#include "core/debug.h"

namespace chorus {
namespace {

// The leading fields of cudaPointerAttributes (CUDA 10 and later): the memory type comes first.
struct PointerAttributes {
  int type;  // 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* devicePointer;
  void* hostPointer;
  char reserved[64];  // room for fields later CUDA versions may append
};

using GetDeviceCountFn = int (*)(int*);
using PointerGetAttributesFn = int (*)(PointerAttributes*, const void*);

struct CudaRuntime {
  int devices = 0;
  PointerGetAttributesFn pointerAttributes = nullptr;
};

const CudaRuntime& runtime() {
  static CudaRuntime rt;
  static std::once_flag once;
  std::call_once(once, []() {
    const char* names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
    void* lib = nullptr;
    for (const char* n : names)
      if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (lib == nullptr) {
      INFO(kInit, "no CUDA runtime found: every buffer is host memory");
      return;
    }
    auto count = reinterpret_cast<GetDeviceCountFn>(dlsym(lib, "cudaGetDeviceCount"));
    rt.pointerAttributes = reinterpret_cast<PointerGetAttributesFn>(dlsym(lib, "cudaPointerGetAttributes"));
    int n = 0;
    if (count == nullptr || count(&n) != 0) n = 0;
    rt.devices = rt.pointerAttributes ? n : 0;
    INFO(kInit, "CUDA runtime found, %d device(s) visible; this build runs host buffers only", rt.devices);
  });
  return rt;
}

}  // namespace

int visibleCudaDevices() { return runtime().devices; }

bool isDevicePointer(const void* ptr) {
  const CudaRuntime& rt = runtime();
  if (rt.devices == 0 || ptr == nullptr) return false;
  PointerAttributes attr = {};
  if (rt.pointerAttributes(&attr, ptr) != 0) return false;  // not known to CUDA: host memory
  return attr.type == 2;
}

}  // namespace chorus
