// The one portability header for single-source device code. Everything under kernels/ is written once against
// these macros and helpers and compiled three ways: g++ (host path, no CUDA headers needed), nvcc and hipcc.
// Keep it free of anything that needs a GPU toolkit when neither compiler is in use.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include <sched.h>
#include <time.h>

// Which compiler is reading this file. clang in HIP mode defines __HIP__; hipcc adds __HIPCC__. clang in CUDA mode
// defines __CUDACC__ too, so HIP is tested first.
#if defined(__HIPCC__) || defined(__HIP__)
/// 1 when compiled by hipcc (host or device pass).
#define CHORUS_HIP 1
/// 1 when compiled by nvcc (host or device pass).
#define CHORUS_CUDA 0
#elif defined(__CUDACC__)
#define CHORUS_HIP 0
#define CHORUS_CUDA 1
#else
#define CHORUS_HIP 0
#define CHORUS_CUDA 0
#endif

#if CHORUS_HIP
#include <hip/hip_runtime.h>
#endif

/// 1 inside a device compilation pass (CUDA __CUDA_ARCH__ or HIP __HIP_DEVICE_COMPILE__), else 0.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define CHORUS_ON_DEVICE 1
#else
#define CHORUS_ON_DEVICE 0
#endif

#if CHORUS_CUDA || CHORUS_HIP
/// Marks a function callable from host and device code.
#define CHORUS_HOST_DEVICE __host__ __device__
/// Device-only function, always inlined.
#define CHORUS_DEVICE_INLINE __device__ __forceinline__
/// Forced inlining that works on both sides (combine with CHORUS_HOST_DEVICE).
#define CHORUS_INLINE __forceinline__
#else
#define CHORUS_HOST_DEVICE
// Without a GPU compiler "device" code is host code: the host path runs the same functors.
#define CHORUS_DEVICE_INLINE inline __attribute__((always_inline))
#define CHORUS_INLINE inline __attribute__((always_inline))
#endif

/// Fully unrolls the loop that follows (its trip count is a constant), in every compiler.
#if CHORUS_CUDA || CHORUS_HIP
#define CHORUS_UNROLL _Pragma("unroll")
#else
#define CHORUS_UNROLL _Pragma("GCC unroll 16")
#endif

/// No-alias qualifier understood by g++, nvcc and hipcc.
#define CHORUS_RESTRICT __restrict__

namespace chorus {

/// Threads per warp (CUDA) or wavefront (HIP). The host path uses 32 so its slicing matches CUDA's.
#if CHORUS_HIP && defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#elif CHORUS_HIP
// Host pass of hipcc: the wavefront size is a device property; 64 is CDNA's (the data-center parts we target).
constexpr int kWarpSize = 64;
#else
constexpr int kWarpSize = 32;
#endif

/// Reinterprets a float's bits as uint32_t (no conversion).
CHORUS_HOST_DEVICE CHORUS_INLINE uint32_t floatBits(float f) {
#if CHORUS_ON_DEVICE
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

/// Reinterprets a uint32_t as a float's bits (no conversion).
CHORUS_HOST_DEVICE CHORUS_INLINE float bitsFloat(uint32_t u) {
#if CHORUS_ON_DEVICE
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/// Number of leading zero bits of a nonzero 32-bit value.
CHORUS_HOST_DEVICE CHORUS_INLINE int countLeadingZeros(uint32_t x) {
#if CHORUS_ON_DEVICE
  return __clz(static_cast<int>(x));
#else
  return __builtin_clz(x);
#endif
}

/// Full memory fence at system scope: orders this thread's accesses as seen by other GPUs, the host and peers
/// mapping the same memory. Connection FIFOs publish data with it before bumping a step counter.
CHORUS_HOST_DEVICE CHORUS_INLINE void memoryFence() {
#if CHORUS_ON_DEVICE
  __threadfence_system();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// 64-bit step counters shared between ranks (head/tail of a connection FIFO). On the host these are __atomic
// builtins on plain uint64_t, which also works on memory mapped into another process. On the device, volatile
// accesses plus a system fence give the acquire/release ordering without depending on libcu++ or a HIP variant.

/// Relaxed 64-bit load: no ordering, but never torn and never cached in a register across calls.
CHORUS_HOST_DEVICE CHORUS_INLINE uint64_t loadRelaxed(const uint64_t* p) {
#if CHORUS_ON_DEVICE
  return *reinterpret_cast<const volatile uint64_t*>(p);
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

/// Acquire 64-bit load: accesses after it are not reordered before it.
CHORUS_HOST_DEVICE CHORUS_INLINE uint64_t loadAcquire(const uint64_t* p) {
#if CHORUS_ON_DEVICE
  uint64_t v = *reinterpret_cast<const volatile uint64_t*>(p);
  __threadfence_system();
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

/// A poll of a word a peer releases (a FIFO counter, an LL line, a meeting counter): relaxed on the device, where the
/// wait's fence after its loop orders what follows and a fence a poll would cost too much; acquire on the host, where
/// it is a plain load on x86, and where ThreadSanitizer, which ignores standalone fences, then pairs it with the
/// peer's release (the host runs this code for the emulated device of the test suite).
CHORUS_HOST_DEVICE CHORUS_INLINE uint64_t loadPoll(const uint64_t* p) {
  return CHORUS_ON_DEVICE ? loadRelaxed(p) : loadAcquire(p);
}

/// Relaxed 64-bit store.
CHORUS_HOST_DEVICE CHORUS_INLINE void storeRelaxed(uint64_t* p, uint64_t v) {
#if CHORUS_ON_DEVICE
  *reinterpret_cast<volatile uint64_t*>(p) = v;
#else
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

/// Release 64-bit store: accesses before it (the data of a slot) are visible before the new value.
CHORUS_HOST_DEVICE CHORUS_INLINE void storeRelease(uint64_t* p, uint64_t v) {
#if CHORUS_ON_DEVICE
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(p) = v;
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/// Spin-wait hint: lets the sibling hyperthread (or the other rank on a 2-core machine) run while we poll.
CHORUS_HOST_DEVICE CHORUS_INLINE void cpuRelax() {
#if CHORUS_ON_DEVICE
  // Nothing: a spinning warp is descheduled by the hardware between its polls anyway.
#elif defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

#if !CHORUS_ON_DEVICE
/// A block of several host threads (the CPU tests' emulated GPU runs blocks that way): what blockSync() waits on.
struct HostBlockBarrier {
  virtual void arrive() = 0;

 protected:
  ~HostBlockBarrier() = default;
};
/// The calling thread's block barrier; null for a block of one thread (the usual host case).
extern thread_local HostBlockBarrier* tHostBlockBarrier;
#endif

/// Barrier of the threads of one block. On the host a block is one thread (a no-op) unless an emulated block of
/// several threads installed its barrier.
CHORUS_HOST_DEVICE CHORUS_INLINE void blockSync() {
#if CHORUS_ON_DEVICE
  __syncthreads();
#else
  if (tHostBlockBarrier != nullptr) tHostBlockBarrier->arrive();
#endif
}

/// The timer device-side deadlines read: %globaltimer (ns) on CUDA, wall_clock64() on HIP (rate from
/// hipDeviceAttributeWallClockRate), CLOCK_MONOTONIC ns on the host. GpuRuntime::clockTicksPerMs gives the rate.
CHORUS_HOST_DEVICE CHORUS_INLINE uint64_t deviceClock() {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif CHORUS_ON_DEVICE && CHORUS_HIP
  return static_cast<uint64_t>(wall_clock64());
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
#endif
}

/// Pause between polls of a waiting loop. On the device the warp sleeps briefly (so that ranks sharing a GPU leave
/// it cycles); on the host the thread yields once it has spun a while, since ranks may outnumber cores.
CHORUS_HOST_DEVICE CHORUS_INLINE void pollPause(uint32_t iter) {
#if CHORUS_ON_DEVICE && CHORUS_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  if (iter > 64) __nanosleep(100);
#elif CHORUS_ON_DEVICE && CHORUS_HIP
  if (iter > 64) __builtin_amdgcn_s_sleep(2);
#elif CHORUS_ON_DEVICE
  (void)iter;
#else
  if (iter > 256) {
    sched_yield();
  } else {
    cpuRelax();
  }
#endif
}

/// Compare-and-swap of a 32-bit word (records the first failure of a launch).
CHORUS_HOST_DEVICE CHORUS_INLINE uint32_t atomicCas32(uint32_t* p, uint32_t expected, uint32_t desired) {
#if CHORUS_ON_DEVICE
  return atomicCAS(reinterpret_cast<unsigned int*>(p), expected, desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;
#endif
}

}  // namespace chorus
