// The built-in GPU runtime of a host-only build (CHORUS_CUDA=OFF, no HIP): there is none, so gpuRuntime() is null
// and every buffer takes the host path. GPU builds compile src/runtime/gpu/gpu_runtime.cc instead of this file.
#include "runtime/runtime.h"

namespace chorus {

GpuRuntime* makeBuiltinGpuRuntime() { return nullptr; }

}  // namespace chorus
