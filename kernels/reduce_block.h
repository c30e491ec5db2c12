// Copies and reductions shared by the threads of one block: the device executor's data movement. Type-erased
// by one switch on (dtype, kind) so that the kernel holds one loop per pair (12 x 6), not one kernel per pair.
// On the host (the emulation the CPU tests run) a block is one thread: tid 0 of 1.
//
// Elements must be aligned to their size (user buffers, tiles, FIFO slots and staging all are). Results match
// reduceHost/copyHost bit for bit: both apply the functors of kernels/reduce.h element by element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/arch.h"
#include "kernels/dtypes.h"
#include "kernels/reduce.h"

namespace chorus {

/// 16 bytes moved as one vector load/store.
struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

/// Loads a source element. On the device every source load bypasses the SM's L1 cache (ld.volatile): sources
/// include FIFO slots that a peer GPU or process rewrites each time the FIFO wraps, and a line the L1 kept from the
/// previous round would be stale (L1 is not coherent with other agents' writes); NCCL's copy loops load their
/// sources the same way. On the host a plain load.
template <typename T>
CHORUS_HOST_DEVICE CHORUS_INLINE T loadSrc(const T* p) {
#if CHORUS_ON_DEVICE
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "element sizes of the copy loops");
  T v;
  if constexpr (sizeof(T) == 16) {
    uint64_t lo, hi;
#if CHORUS_CUDA
    asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(p));
#else
    lo = reinterpret_cast<const volatile uint64_t*>(p)[0];
    hi = reinterpret_cast<const volatile uint64_t*>(p)[1];
#endif
    uint64_t both[2] = {lo, hi};
    __builtin_memcpy(&v, both, 16);
  } else if constexpr (sizeof(T) == 8) {
    uint64_t b = *reinterpret_cast<const volatile uint64_t*>(p);
    __builtin_memcpy(&v, &b, 8);
  } else if constexpr (sizeof(T) == 4) {
    uint32_t b = *reinterpret_cast<const volatile uint32_t*>(p);
    __builtin_memcpy(&v, &b, 4);
  } else if constexpr (sizeof(T) == 2) {
    uint16_t b = *reinterpret_cast<const volatile uint16_t*>(p);
    __builtin_memcpy(&v, &b, 2);
  } else {
    uint8_t b = *reinterpret_cast<const volatile uint8_t*>(p);
    __builtin_memcpy(&v, &b, 1);
  }
  return v;
#else
  return *p;
#endif
}

/// dst = src for `bytes` bytes, the block's threads striding over 16-byte (or 4-byte, or 1-byte) units.
/// Loads in flight per thread in the copy and reduce loops: a thread issues this many independent loads before it
/// stores (a block with one load in flight per thread waits out the memory latency at every element, which is
/// what held an H100 at a tenth of its bandwidth). The host emulation unrolls less, but does unroll, so that the
/// CPU tests run the same index arithmetic.
#if CHORUS_ON_DEVICE
constexpr int kCopyUnroll = 8;
#else
constexpr int kCopyUnroll = 4;
#endif
constexpr int kHipFp8Unroll = 1;

/// Loads in flight per thread for element type T: kCopyUnroll, except for the fp8 types in HIP's device code. gfx90a
/// has no fp8 instructions, and the software fp8 conversions unrolled kCopyUnroll times in each reduction loop held
/// hipcc (ROCm 5.2, clang 15) over the kernel for 9 to 11 minutes on the 2-core CI machine; unrolled once, under 4
/// (docs/build.md). CUDA converts fp8 in hardware and keeps kCopyUnroll.
template <typename T>
CHORUS_HOST_DEVICE constexpr int copyUnroll() {
#if CHORUS_ON_DEVICE && CHORUS_HIP
  if (sizeof(T) == 1 && !std::is_integral<T>::value) return kHipFp8Unroll;
#endif
  return kCopyUnroll;
}

/// dst[i] = f(i) for i in [0, n) split over the block's threads: thread tid takes i = tid + k nt, grouped
/// copyUnroll<T>() iterations at a time so that their loads (inside `load`) are all issued before any store.
template <typename T, typename Load>
CHORUS_HOST_DEVICE CHORUS_INLINE void blockStore(T* dst, size_t n, int tid, int nt, const Load& load) {
  constexpr int kUnroll = copyUnroll<T>();
  const size_t step = static_cast<size_t>(nt);
  const size_t group = step * kUnroll;
  const size_t full = n / group * group;
  for (size_t base = static_cast<size_t>(tid); base < full; base += group) {
    T v[kUnroll];
    CHORUS_UNROLL
    for (int u = 0; u < kUnroll; u++) v[u] = load(base + u * step);
    CHORUS_UNROLL
    for (int u = 0; u < kUnroll; u++) dst[base + u * step] = v[u];
  }
  for (size_t i = full + static_cast<size_t>(tid); i < n; i += step) dst[i] = load(i);
}

CHORUS_HOST_DEVICE inline void blockCopyBytes(char* dst, const char* src, size_t bytes, int tid, int nt) {
  if (dst == src || bytes == 0) return;
  uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  size_t done = 0;
  if (a % 16 == 0) {
    size_t n = bytes / 16;
    const Bytes16* s = reinterpret_cast<const Bytes16*>(src);
    blockStore(reinterpret_cast<Bytes16*>(dst), n, tid, nt, [s](size_t i) { return loadSrc(s + i); });
    done = n * 16;
  } else if (a % 4 == 0) {
    size_t n = bytes / 4;
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    blockStore(reinterpret_cast<uint32_t*>(dst), n, tid, nt, [s](size_t i) { return loadSrc(s + i); });
    done = n * 4;
  }
  for (size_t i = done + tid; i < bytes; i += nt) dst[i] = loadSrc(src + i);
}

namespace detail {

template <typename Fn>
CHORUS_HOST_DEVICE inline void reduceLoop(const Fn& fn, typename Fn::Elt* dst, const typename Fn::Elt* recv,
                                          const typename Fn::Elt* local, size_t n, bool pre, bool post, int tid,
                                          int nt) {
  using T = typename Fn::Elt;
  if (pre) {
    blockStore(dst, n, tid, nt, [&](size_t i) -> T {
      return applyReduce<true, false>(fn, loadSrc(recv + i), loadSrc(local + i));
    });
  } else if (post) {
    blockStore(dst, n, tid, nt, [&](size_t i) -> T {
      return applyReduce<false, true>(fn, loadSrc(recv + i), loadSrc(local + i));
    });
  } else {
    blockStore(dst, n, tid, nt, [&](size_t i) -> T {
      return applyReduce<false, false>(fn, loadSrc(recv + i), loadSrc(local + i));
    });
  }
}

template <typename T>
CHORUS_HOST_DEVICE inline void reduceTypedBlock(const RedOp& op, void* dst, const void* recv, const void* local,
                                                size_t n, uint32_t flags, int tid, int nt) {
  T* d = static_cast<T*>(dst);
  const T* r = static_cast<const T*>(recv);
  const T* l = static_cast<const T*>(local);
  bool pre = (flags & kPreLocal) && op.kind == RedKind::kPreMulSum;
  bool post = (flags & kPostOp) && op.kind == RedKind::kSumPostDiv;
  switch (op.kind) {
    case RedKind::kSum:
      return reduceLoop(FuncSum<T>(op), d, r, l, n, false, false, tid, nt);
    case RedKind::kProd:
      return reduceLoop(FuncProd<T>(op), d, r, l, n, false, false, tid, nt);
    case RedKind::kMin:
      return reduceLoop(FuncMin<T>(op), d, r, l, n, false, false, tid, nt);
    case RedKind::kMax:
      return reduceLoop(FuncMax<T>(op), d, r, l, n, false, false, tid, nt);
    case RedKind::kPreMulSum:
      return reduceLoop(FuncPreMulSum<T>(op), d, r, l, n, pre, false, tid, nt);
    case RedKind::kSumPostDiv:
      return reduceLoop(FuncSumPostDiv<T>(op), d, r, l, n, false, post, tid, nt);
  }
}

// Only called when the copy applies a step: premulsum's pre-multiplication or sumpostdiv's division.
template <typename T>
CHORUS_HOST_DEVICE inline void copyTypedBlock(const RedOp& op, void* dst, const void* src, size_t n, int tid, int nt) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  if (op.kind == RedKind::kPreMulSum) {
    const FuncPreMulSum<T> fn(op);
    blockStore(d, n, tid, nt, [&](size_t i) -> T { return applyCopy<true, false>(fn, loadSrc(s + i)); });
  } else {
    const FuncSumPostDiv<T> fn(op);
    blockStore(d, n, tid, nt, [&](size_t i) -> T { return applyCopy<false, true>(fn, loadSrc(s + i)); });
  }
}

}  // namespace detail

/// Whether copy with these flags changes values (premulsum's pre, sumpostdiv's post) rather than moving bytes.
CHORUS_HOST_DEVICE inline bool copyTransforms(const RedOp& op, uint32_t flags) {
  return ((flags & kPreLocal) && op.kind == RedKind::kPreMulSum) ||
         ((flags & kPostOp) && op.kind == RedKind::kSumPostDiv);
}

#define CHORUS_DTYPE_SWITCH(dtype, CALL) \
  switch (DataType(dtype)) {             \
    case DataType::kInt8:                \
      CALL(int8_t);                      \
      break;                             \
    case DataType::kUint8:               \
      CALL(uint8_t);                     \
      break;                             \
    case DataType::kInt32:               \
      CALL(int32_t);                     \
      break;                             \
    case DataType::kUint32:              \
      CALL(uint32_t);                    \
      break;                             \
    case DataType::kInt64:               \
      CALL(int64_t);                     \
      break;                             \
    case DataType::kUint64:              \
      CALL(uint64_t);                    \
      break;                             \
    case DataType::kFloat16:             \
      CALL(Half);                        \
      break;                             \
    case DataType::kFloat32:             \
      CALL(float);                       \
      break;                             \
    case DataType::kFloat64:             \
      CALL(double);                      \
      break;                             \
    case DataType::kBfloat16:            \
      CALL(BFloat16);                    \
      break;                             \
    case DataType::kFloat8e4m3:          \
      CALL(Fp8E4M3);                     \
      break;                             \
    case DataType::kFloat8e5m2:          \
      CALL(Fp8E5M2);                     \
      break;                             \
  }

/// dst[i] = post?(recv[i] op pre?(local[i])) over the block's threads; dst may equal recv or local.
CHORUS_HOST_DEVICE inline void blockReduce(const RedOp& op, void* dst, const void* recv, const void* local, size_t n,
                                           uint32_t flags, int tid, int nt){
#define CHORUS_REDUCE_CALL(T) detail::reduceTypedBlock<T>(op, dst, recv, local, n, flags, tid, nt)
    CHORUS_DTYPE_SWITCH(op.dtype, CHORUS_REDUCE_CALL)
#undef CHORUS_REDUCE_CALL
}

/// dst[i] = post?(pre?(src[i])) over the block's threads; a plain byte copy when no step applies.
CHORUS_HOST_DEVICE
    inline void blockCopy(const RedOp& op, void* dst, const void* src, size_t n, uint32_t flags, int tid, int nt) {
  if (!copyTransforms(op, flags) || op.dtype < 0) {
    blockCopyBytes(static_cast<char*>(dst), static_cast<const char*>(src), n * DType::size(op.dtype), tid, nt);
    return;
  }
#define CHORUS_COPY_CALL(T) detail::copyTypedBlock<T>(op, dst, src, n, tid, nt)
  CHORUS_DTYPE_SWITCH(op.dtype, CHORUS_COPY_CALL)
#undef CHORUS_COPY_CALL
}

}  // namespace chorus
