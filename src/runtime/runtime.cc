#include "runtime/runtime.h"

#include <atomic>
#include <mutex>

#include "core/debug.h"

namespace chorus {
namespace {

std::atomic<GpuRuntime*> gOverride{nullptr};

}  // namespace

GpuRuntime* gpuRuntime() {
  GpuRuntime* forced = gOverride.load(std::memory_order_acquire);
  if (forced != nullptr) return forced;
  static GpuRuntime* builtin = nullptr;
  static std::once_flag once;
  std::call_once(once, []() {
    GpuRuntime* rt = makeBuiltinGpuRuntime();
    if (rt == nullptr) return;  // host-only build
    int n = rt->deviceCount();  // logs why when there is none
    if (n <= 0) return;
    INFO(kInit, "%s backend: %d GPU(s) visible; device buffers run as kernels on the caller's stream", rt->name(), n);
    builtin = rt;
  });
  return builtin;
}

void setGpuRuntimeForTesting(GpuRuntime* rt) { gOverride.store(rt, std::memory_order_release); }

}  // namespace chorus
