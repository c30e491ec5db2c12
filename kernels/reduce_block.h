// Copies and reductions shared by the threads of one block: the device executor's data movement. Type-erased
// by one switch on (dtype, kind) so that the kernel holds one loop per pair (12 x 6), not one kernel per pair.
// On the host (the emulation the CPU tests run) a block is one thread: tid 0 of 1.
//
// Elements must be aligned to their size (user buffers, tiles, FIFO slots and staging all are). Results match
// reduceHost/copyHost bit for bit: both apply the functors of kernels/reduce.h element by element.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/arch.h"
#include "kernels/dtypes.h"
#include "kernels/reduce.h"

namespace chorus {

/// 16 bytes moved as one vector load/store.
struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

/// dst = src for `bytes` bytes, the block's threads striding over 16-byte (or 4-byte, or 1-byte) units.
CHORUS_HOST_DEVICE inline void blockCopyBytes(char* dst, const char* src, size_t bytes, int tid, int nt) {
  if (dst == src || bytes == 0) return;
  uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  size_t done = 0;
  if (a % 16 == 0) {
    size_t n = bytes / 16;
    Bytes16* d = reinterpret_cast<Bytes16*>(dst);
    const Bytes16* s = reinterpret_cast<const Bytes16*>(src);
    for (size_t i = tid; i < n; i += nt) d[i] = s[i];
    done = n * 16;
  } else if (a % 4 == 0) {
    size_t n = bytes / 4;
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    for (size_t i = tid; i < n; i += nt) d[i] = s[i];
    done = n * 4;
  }
  for (size_t i = done + tid; i < bytes; i += nt) dst[i] = src[i];
}

namespace detail {

template <typename Fn>
CHORUS_HOST_DEVICE inline void reduceLoop(const Fn& fn, typename Fn::Elt* dst, const typename Fn::Elt* recv,
                                          const typename Fn::Elt* local, size_t n, bool pre, bool post, int tid,
                                          int nt) {
  if (pre) {
    for (size_t i = tid; i < n; i += nt) dst[i] = applyReduce<true, false>(fn, recv[i], local[i]);
  } else if (post) {
    for (size_t i = tid; i < n; i += nt) dst[i] = applyReduce<false, true>(fn, recv[i], local[i]);
  } else {
    for (size_t i = tid; i < n; i += nt) dst[i] = applyReduce<false, false>(fn, recv[i], local[i]);
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
    for (size_t i = tid; i < n; i += nt) d[i] = applyCopy<true, false>(fn, s[i]);
  } else {
    const FuncSumPostDiv<T> fn(op);
    for (size_t i = tid; i < n; i += nt) d[i] = applyCopy<false, true>(fn, s[i]);
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
