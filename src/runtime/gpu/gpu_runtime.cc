// GpuRuntime over the CUDA or the HIP runtime API: one source for both backends. The build compiles it with
// CHORUS_HAVE_CUDA (against src/runtime/cuda/api.h) or CHORUS_HAVE_HIP (src/runtime/hip/api.h); both headers map
// the same gpu* names, so behaviour lives here once and is never hipified.
//
// Thread safety: the runtime APIs are thread-safe; this object's own state is the device count (computed once) and
// the last error text (under a mutex, since ranks of one process share the singleton).
#if defined(CHORUS_HAVE_CUDA)
#include "runtime/cuda/api.h"
#elif defined(CHORUS_HAVE_HIP)
#include "runtime/hip/api.h"
#else
#error "gpu_runtime.cc is compiled only by GPU builds (CHORUS_HAVE_CUDA or CHORUS_HAVE_HIP)"
#endif

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/debug.h"
#include "core/files.h"
#include "kernels/device_kernel.h"
#include "runtime/runtime.h"

namespace chorus {
namespace {

static_assert(sizeof(gpu::IpcMemHandle) == sizeof(IpcHandle), "IPC handles are 64 bytes on CUDA and HIP");

// Returns early from the enclosing method when a runtime call fails (check() has set the lastError() text).
#define CHECK_GPU(call, ...)                                    \
  do {                                                          \
    ncclResult_t chorus_gpu_res_ = check((call), __VA_ARGS__);  \
    if (chorus_gpu_res_ != ncclSuccess) return chorus_gpu_res_; \
  } while (0)

// Setup scopes (GpuRuntime::beginSetup): the calling thread runs in relaxed capture mode until its outermost
// scope ends, so that setup made while a user's stream is being captured (global or thread-local mode) does not
// invalidate that capture. Per thread, since capture modes are.
thread_local int tSetupDepth = 0;
thread_local gpu::CaptureMode tSavedMode = gpu::kCaptureRelaxed;
thread_local bool tModeSwapped = false;

class BuiltinGpuRuntime final : public GpuRuntime {
 public:
  const char* name() const override { return gpu::kName; }

  int deviceCount() override {
    std::call_once(countOnce_, [this]() {
      int n = 0;
      gpu::Error e = gpu::gpuGetDeviceCount(&n);
      if (e != gpu::kSuccess || n <= 0) {
        // No driver, no device, or a runtime/driver mismatch: every call takes the host path.
        const char* why = e != gpu::kSuccess ? gpu::gpuGetErrorString(e) : "no device";
        (void)gpu::gpuGetLastError();
        INFO(kInit, "no GPU visible (%s): host path", why);
        n = 0;
      } else {
        INFO(kInit, "GPU runtime %s: %d device(s) visible", gpu::kName, n);
      }
      count_ = n;
    });
    return count_;
  }

  ncclResult_t getDevice(int* dev) override { return check(gpu::gpuGetDevice(dev), "GetDevice()"); }

  ncclResult_t setDevice(int dev) override { return check(gpu::gpuSetDevice(dev), "SetDevice(%d)", dev); }

  int64_t busId(int dev) override {
    char buf[64] = {};
    if (check(gpu::gpuDeviceGetPCIBusId(buf, sizeof(buf), dev), "DeviceGetPCIBusId(%d)", dev) != ncclSuccess) {
      return -1;
    }
    // "dddd:bb:dd.f" (domain may have more digits): the function number is dropped, as NCCL's busId does.
    unsigned long domain = 0, bus = 0, device = 0;
    if (std::sscanf(buf, "%lx:%lx:%lx", &domain, &bus, &device) != 3) return -1;
    return static_cast<int64_t>(domain << 32 | bus << 8 | device);
  }

  MemKind pointerKind(const void* p, int* dev) override {
    if (dev != nullptr) *dev = -1;
    if (p == nullptr || deviceCount() == 0) return MemKind::kHost;
    gpu::PointerAttributes attr;
    std::memset(&attr, 0, sizeof(attr));
    if (gpu::gpuPointerGetAttributes(&attr, p) != gpu::kSuccess) {
      // Older runtimes fail on memory they never saw: that is plain host memory. Clear the sticky error so that
      // the next launch's error check does not report it.
      (void)gpu::gpuGetLastError();
      return MemKind::kHost;
    }
    MemKind kind = gpu::gpuPointerKind(attr);
    if (kind != MemKind::kHost && dev != nullptr) *dev = attr.device;
    return kind;
  }

  ncclResult_t deviceAlloc(size_t bytes, void** p) override {
    *p = nullptr;
    CHECK_GPU(gpu::gpuMalloc(p, bytes), "Malloc(%zu bytes)", bytes);
    // Zeroed before anyone can use it (FIFO control words: a peer's kernel may start on it as soon as the handle
    // is published). A plain memset would be asynchronous on the legacy default stream, which does not order
    // kernels on non-blocking streams, and would queue behind kernels on blocking ones.
    gpu::Stream s = nullptr;
    ncclResult_t r = ownStream(&s);
    if (r == ncclSuccess) r = check(gpu::gpuMemsetAsync(*p, 0, bytes, s), "MemsetAsync(%zu bytes)", bytes);
    if (r == ncclSuccess) r = check(gpu::gpuStreamSynchronize(s), "StreamSynchronize(setup stream)");
    if (r != ncclSuccess) {
      (void)gpu::gpuFree(*p);
      *p = nullptr;
    }
    return r;
  }

  void deviceFree(void* p) override {
    if (p != nullptr) (void)check(gpu::gpuFree(p), "Free(%p)", p);
  }

  ncclResult_t hostAllocMapped(size_t bytes, void** host, void** dev) override {
    *host = *dev = nullptr;
    CHECK_GPU(gpu::gpuHostAlloc(host, bytes), "HostAlloc(%zu bytes, mapped)", bytes);
    std::memset(*host, 0, bytes);
    ncclResult_t r = check(gpu::gpuHostGetDevicePointer(dev, *host), "HostGetDevicePointer(%p)", *host);
    if (r != ncclSuccess) {
      (void)gpu::gpuFreeHost(*host);
      *host = *dev = nullptr;
    }
    return r;
  }

  void hostFree(void* host) override {
    if (host != nullptr) (void)check(gpu::gpuFreeHost(host), "FreeHost(%p)", host);
  }

  ncclResult_t hostRegister(void* p, size_t bytes, void** dev) override {
    *dev = nullptr;
    CHECK_GPU(gpu::gpuHostRegister(p, bytes), "HostRegister(%p, %zu bytes, mapped|portable)", p, bytes);
    ncclResult_t r = check(gpu::gpuHostGetDevicePointer(dev, p), "HostGetDevicePointer(%p)", p);
    if (r != ncclSuccess) {
      (void)gpu::gpuHostUnregister(p);
      *dev = nullptr;
    }
    return r;
  }

  void hostUnregister(void* p) override {
    if (p != nullptr) (void)check(gpu::gpuHostUnregister(p), "HostUnregister(%p)", p);
  }

  ncclResult_t addressRange(const void* p, void** base, size_t* bytes) override {
    *base = nullptr;
    *bytes = 0;
    return check(gpu::gpuMemGetAddressRange(p, base, bytes), "MemGetAddressRange(%p)", p);
  }

  ncclResult_t ipcGetHandle(void* p, IpcHandle* h) override {
    gpu::IpcMemHandle mh;
    CHECK_GPU(gpu::gpuIpcGetMemHandle(&mh, p), "IpcGetMemHandle(%p)", p);
    std::memcpy(h->bytes, &mh, sizeof(h->bytes));
    return ncclSuccess;
  }

  ncclResult_t ipcOpenHandle(const IpcHandle& h, void** p) override {
    gpu::IpcMemHandle mh;
    std::memcpy(&mh, h.bytes, sizeof(mh));
    *p = nullptr;
    return check(gpu::gpuIpcOpenMemHandle(p, mh), "IpcOpenMemHandle()");
  }

  void ipcCloseHandle(void* p) override {
    if (p != nullptr) (void)check(gpu::gpuIpcCloseMemHandle(p), "IpcCloseMemHandle(%p)", p);
  }

  bool canAccessPeer(int dev, int peerDev) override {
    if (dev == peerDev) return true;
    int can = 0;
    if (check(gpu::gpuDeviceCanAccessPeer(&can, dev, peerDev), "DeviceCanAccessPeer(%d, %d)", dev, peerDev) !=
        ncclSuccess) {
      return false;
    }
    return can != 0;
  }

  ncclResult_t enablePeerAccess(int peerDev) override {
    return check(gpu::gpuDeviceEnablePeerAccess(peerDev), "DeviceEnablePeerAccess(%d)", peerDev);
  }

  ncclResult_t streamCaptureInfo(cudaStream_t s, bool* capturing, uint64_t* id) override {
    *capturing = false;
    *id = 0;
    return check(gpu::gpuStreamCaptureInfo(gpu::toStream(s), capturing, id), "StreamGetCaptureInfo(%p)",
                 static_cast<void*>(s));
  }

  ncclResult_t eventCreate(void** ev) override {
    gpu::Event e = nullptr;
    CHECK_GPU(gpu::gpuEventCreate(&e), "EventCreateWithFlags(disable timing)");
    *ev = static_cast<void*>(e);
    return ncclSuccess;
  }

  void eventDestroy(void* ev) override {
    if (ev != nullptr) (void)check(gpu::gpuEventDestroy(static_cast<gpu::Event>(ev)), "EventDestroy(%p)", ev);
  }

  ncclResult_t eventRecord(void* ev, cudaStream_t s) override {
    return check(gpu::gpuEventRecord(static_cast<gpu::Event>(ev), gpu::toStream(s)), "EventRecord(%p, stream %p)", ev,
                 static_cast<void*>(s));
  }

  ncclResult_t streamWaitEvent(cudaStream_t s, void* ev) override {
    return check(gpu::gpuStreamWaitEvent(gpu::toStream(s), static_cast<gpu::Event>(ev)),
                 "StreamWaitEvent(stream %p, %p)", static_cast<void*>(s), ev);
  }

  ncclResult_t memcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t s) override {
    return check(gpu::gpuMemcpyAsync(dst, src, bytes, gpu::toStream(s)), "MemcpyAsync(%p <- %p, %zu bytes, stream %p)",
                 dst, src, bytes, static_cast<void*>(s));
  }

  ncclResult_t copyKernelAsync(void* dst, const void* src, size_t bytes, cudaStream_t s) override {
    // One block per 8 KiB, at most 256. On the H100 one block copied only some 20-50 GB/s: with one block per 64 KiB
    // a 64 KiB copy in a CUDA graph took 2.7 us against 1.5 for NVIDIA's NCCL, and 1 MB (16 blocks) 7.9 us
    // against 5.0 (docs/perf/h100.md). This spacing is derived from those figures, not yet measured.
    int blocks = static_cast<int>(std::min<size_t>(256, std::max<size_t>(1, (bytes + 8191) / 8192)));
    int code = launchCopyKernel(dst, src, bytes, blocks, kDevThreads, static_cast<void*>(gpu::toStream(s)));
    return check(static_cast<gpu::Error>(code), "LaunchKernel(copyKernel, %zu bytes, stream %p)", bytes,
                 static_cast<void*>(s));
  }

  bool gpuDirectRdma(int dev, GpuDirectPaths* paths, std::string* why) override {
    *paths = GpuDirectPaths{};
    int v = 0;
    if (gpu::gpuDirectRdmaAttr(dev, &v) != gpu::kSuccess) {
      (void)gpu::gpuGetLastError();
      *why = "the device attribute could not be read";
      return false;
    }
    if (v < 0) {
      *why = std::string(name()) + ": not built";
      return false;
    }
    if (v == 0) {
      *why = "GPU " + std::to_string(dev) + " or its driver does not support it";
      return false;
    }
    // A NIC's driver reaches GPU memory through a peer-memory module of this GPU's vendor (looked for as NCCL and
    // RCCL look for them) or through a dma-buf the GPU driver exports.
#if defined(CHORUS_HAVE_HIP)
    const PeerMemoryVendor vendor = PeerMemoryVendor::kAmd;
    const char* module = "amdkfd's peer-memory client";
#else
    const PeerMemoryVendor vendor = PeerMemoryVendor::kNvidia;
    const char* module = "nvidia_peermem";
#endif
    paths->peerMemory = !peerMemoryModuleFile(vendor).empty();
    int dmaBuf = 0;
    paths->dmaBuf = gpu::gpuDmaBufSupported(dev, &dmaBuf) == gpu::kSuccess && dmaBuf == 1;
    if (paths->peerMemory || paths->dmaBuf) return true;
    *why = std::string("no peer-memory kernel module (") + module + ") is loaded and the driver exports no dma-buf";
    return false;
  }

  ncclResult_t dmaBufFd(void* p, size_t bytes, int* fd, uint64_t* offset) override {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t base = at & ~(page - 1);
    const size_t span = (at + bytes - base + page - 1) & ~(page - 1);
    *offset = at - base;
    return check(gpu::gpuDmaBufFd(reinterpret_cast<void*>(base), span, fd), "MemGetHandleForAddressRange(%p, %zu)",
                 reinterpret_cast<void*>(base), span);
  }

  int computeCapability(int dev) override {
    int major = 0, minor = 0;
    if (gpu::gpuComputeCapability(dev, &major, &minor) != gpu::kSuccess) {
      (void)gpu::gpuGetLastError();
      return 0;
    }
    return major * 10 + minor;
  }

  int maxResidentBlocks(int dev) override {
    int sms = 0;
    if (check(gpu::gpuMultiProcessorCount(dev, &sms), "DeviceGetAttribute(multiprocessor count, %d)", dev) !=
        ncclSuccess)
      return 0;
    return sms * collKernelBlocksPerSM(kDevThreads);
  }

  void beginSetup() override {
    if (tSetupDepth++ > 0) return;
    gpu::CaptureMode mode = gpu::kCaptureRelaxed;
    tModeSwapped = gpu::gpuExchangeCaptureMode(&mode) == gpu::kSuccess;
    if (!tModeSwapped) (void)gpu::gpuGetLastError();
    tSavedMode = mode;
  }

  void endSetup() override {
    if (--tSetupDepth > 0 || !tModeSwapped) return;
    gpu::CaptureMode mode = tSavedMode;
    (void)gpu::gpuExchangeCaptureMode(&mode);
    tModeSwapped = false;
  }

  bool streamId(cudaStream_t s, uint64_t* id) override { return gpu::gpuStreamId(gpu::toStream(s), id); }

  uint64_t clockTicksPerMs(int dev) override {
    uint64_t ticks = 0;
    if (check(gpu::gpuClockTicksPerMs(dev, &ticks), "DeviceGetAttribute(wall clock rate, %d)", dev) != ncclSuccess) {
      return 0;
    }
    return ticks;
  }

  ncclResult_t launch(const DevWork& work, cudaStream_t stream) override {
    // The kernel divides its work by blockDim.x, so any count up to its launch bounds runs it (NCCL_NTHREADS).
    const int threads = work.threads > 0 && work.threads <= kDevThreads ? work.threads : kDevThreads;
    int code = launchCollKernel(work, threads, static_cast<void*>(gpu::toStream(stream)));
    return check(static_cast<gpu::Error>(code), "LaunchKernel(collKernel, %d blocks x %d threads, stream %p)",
                 static_cast<int>(work.nChannels), threads, static_cast<void*>(stream));
  }

  ncclResult_t deviceSynchronize() override { return check(gpu::gpuDeviceSynchronize(), "DeviceSynchronize()"); }

  ncclResult_t streamSynchronize(cudaStream_t stream) override {
    return check(gpu::gpuStreamSynchronize(gpu::toStream(stream)), "StreamSynchronize(%p)", static_cast<void*>(stream));
  }

  ncclResult_t copyToHost(void* dst, const void* src, size_t bytes) override {
    return copySync(dst, src, bytes, "to host");
  }

  ncclResult_t copyToDevice(void* dst, const void* src, size_t bytes) override {
    return copySync(dst, src, bytes, "to the device");
  }

  std::string lastError() override {
    std::lock_guard<std::mutex> lock(mu_);
    return lastError_;
  }

 private:
  /// A copy on this runtime's own stream, waited for (the runtime infers the direction from the pointers).
  ncclResult_t copySync(void* dst, const void* src, size_t bytes, const char* direction) {
    gpu::Stream s = nullptr;
    ncclResult_t r = ownStream(&s);
    if (r != ncclSuccess) return r;
    CHECK_GPU(gpu::gpuMemcpyAsync(dst, src, bytes, s), "MemcpyAsync(%zu bytes %s)", bytes, direction);
    return check(gpu::gpuStreamSynchronize(s), "StreamSynchronize(setup stream)");
  }

  /// This runtime's own non-blocking stream on the current device (made on first use, kept for the process).
  ncclResult_t ownStream(gpu::Stream* out) {
    int dev = 0;
    CHECK_GPU(gpu::gpuGetDevice(&dev), "GetDevice()");
    std::lock_guard<std::mutex> lock(streamsMu_);
    auto it = streams_.find(dev);
    if (it == streams_.end()) {
      gpu::Stream s = nullptr;
      CHECK_GPU(gpu::gpuStreamCreateNonBlocking(&s), "StreamCreateWithFlags(non-blocking, device %d)", dev);
      it = streams_.emplace(dev, s).first;
    }
    *out = it->second;
    return ncclSuccess;
  }

  /// Turns a runtime error into ncclUnhandledCudaError with lastError() text "<api><call>: <error text>", e.g.
  /// "cudaMalloc(1048576 bytes): out of memory". The runtime's sticky last error is cleared.
  ncclResult_t check(gpu::Error e, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    if (e == gpu::kSuccess) return ncclSuccess;
    (void)gpu::gpuGetLastError();
    char call[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(call, sizeof(call), fmt, ap);
    va_end(ap);
    char text[512];
    std::snprintf(text, sizeof(text), "%s%s: %s", gpu::kApi, call, gpu::gpuGetErrorString(e));
    {
      std::lock_guard<std::mutex> lock(mu_);
      lastError_ = text;
    }
    WARN("%s", text);
    return ncclUnhandledCudaError;
  }
  std::once_flag countOnce_;
  int count_ = 0;
  std::mutex mu_;
  std::string lastError_;
  std::mutex streamsMu_;
  std::map<int, gpu::Stream> streams_;  ///< ownStream() per device
};

#undef CHECK_GPU

}  // namespace

GpuRuntime* makeBuiltinGpuRuntime() {
  // Process lifetime: never destroyed, so that communicators torn down from atexit handlers can still use it.
  static BuiltinGpuRuntime* rt = new BuiltinGpuRuntime();
  return rt;
}

}  // namespace chorus
