// Host instantiations of the reduction functors behind a type-erased API: one switch on (dtype, kind, flags), then
// a loop the compiler can vectorize at -O3. 12 dtypes x 6 kinds, only the flag combinations an op has.
#include "kernels/reduce.h"

#include <algorithm>
#include <cstring>

#include "kernels/arch.h"

namespace chorus {

thread_local HostBlockBarrier* tHostBlockBarrier = nullptr;

namespace {

// Element-wise loops read index i before writing index i, so dst == recv or dst == local carries no dependence
// between iterations; ivdep lets the vectorizer skip the runtime overlap check that would reject exact aliasing.
#if defined(__clang__)
// assume_safety also requests vectorization, and clang warns where it cannot (fp8's conversions): that is fine.
#pragma clang diagnostic ignored "-Wpass-failed"
#define CHORUS_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define CHORUS_IVDEP _Pragma("GCC ivdep")
#else
#define CHORUS_IVDEP
#endif

// NCCL's op numbering (ncclRedOp_t).
constexpr int kNcclSum = 0;
constexpr int kNcclProd = 1;
constexpr int kNcclMax = 2;
constexpr int kNcclMin = 3;
constexpr int kNcclAvg = 4;
#if CHORUS_HAVE_NCCL_H
static_assert(kNcclSum == ncclSum && kNcclProd == ncclProd && kNcclMax == ncclMax && kNcclMin == ncclMin &&
                  kNcclAvg == ncclAvg,
              "op numbering must match ncclRedOp_t");
#endif

// Elements staged per block: three blocks of the widest type stay well inside L1.
constexpr size_t kBlock = 256;

template <typename T>
bool isAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(T) == 0;
}

// dst[i] = post?(recv[i] op pre?(local[i])) on element-aligned pointers.
template <bool kPre, bool kPost, typename Fn>
void reduceAligned(const Fn& fn, typename Fn::Elt* dst, const typename Fn::Elt* recv, const typename Fn::Elt* local,
                   size_t n) {
  using T = typename Fn::Elt;
  using A = Arith<T>;
  using Acc = typename A::Acc;
  constexpr bool kNarrow = !std::is_same<Acc, T>::value;
  constexpr bool kDoPre = kPre && Fn::kHasPre;
  constexpr bool kDoPost = kPost && Fn::kHasPost;
  // Native types without a floating pre-multiply: one loop. A float premulsum is staged too so that the product
  // is stored (rounded) before the add: with -ffp-contract=fast and FMA hardware one loop could become an FMA.
  if constexpr (!kNarrow && !(kDoPre && std::is_floating_point<T>::value)) {
    CHORUS_IVDEP
    for (size_t i = 0; i < n; ++i) dst[i] = applyReduce<kPre, kPost>(fn, recv[i], local[i]);
  } else {
    // Narrow floats convert a block to float, compute in simple float loops, and convert back: each loop
    // vectorizes on its own, where a per-element encode/decode/encode would not.
    Acc a[kBlock];
    Acc b[kBlock];
    for (size_t base = 0; base < n; base += kBlock) {
      const size_t m = std::min(kBlock, n - base);
      const T* r = recv + base;
      const T* l = local + base;
      T* d = dst + base;
      for (size_t i = 0; i < m; ++i) b[i] = A::load(l[i]);
      if constexpr (kDoPre) {
        for (size_t i = 0; i < m; ++i) b[i] = fn.pre(b[i]);
        if constexpr (kNarrow) {
          for (size_t i = 0; i < m; ++i) b[i] = A::round(b[i]);
        }
      }
      for (size_t i = 0; i < m; ++i) a[i] = fn.reduce(A::load(r[i]), b[i]);
      if constexpr (kDoPost) {
        for (size_t i = 0; i < m; ++i) a[i] = fn.post(A::round(a[i]));
      }
      // Every read of this block happened above, so writing dst is safe when it aliases recv or local.
      for (size_t i = 0; i < m; ++i) d[i] = A::store(a[i]);
    }
  }
}

// Any alignment: misaligned buffers (legal for the byte-addressed host API) are staged through aligned copies.
template <bool kPre, bool kPost, typename Fn>
void reduceAny(const Fn& fn, void* dst, const void* recv, const void* local, size_t n) {
  using T = typename Fn::Elt;
  if (isAligned<T>(dst) && isAligned<T>(recv) && isAligned<T>(local)) {
    reduceAligned<kPre, kPost>(fn, static_cast<T*>(dst), static_cast<const T*>(recv), static_cast<const T*>(local), n);
    return;
  }
  T td[kBlock];
  T tr[kBlock];
  T tl[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    const size_t off = base * sizeof(T);
    std::memcpy(tr, static_cast<const char*>(recv) + off, m * sizeof(T));
    std::memcpy(tl, static_cast<const char*>(local) + off, m * sizeof(T));
    reduceAligned<kPre, kPost>(fn, td, tr, tl, m);
    std::memcpy(static_cast<char*>(dst) + off, td, m * sizeof(T));
  }
}

template <typename T>
void reduceTyped(const RedOp& op, void* dst, const void* recv, const void* local, size_t n, uint32_t flags) {
  const bool pre = (flags & kPreLocal) != 0;
  const bool post = (flags & kPostOp) != 0;
  switch (op.kind) {
    case RedKind::kSum:
      return reduceAny<false, false>(FuncSum<T>(op), dst, recv, local, n);
    case RedKind::kProd:
      return reduceAny<false, false>(FuncProd<T>(op), dst, recv, local, n);
    case RedKind::kMin:
      return reduceAny<false, false>(FuncMin<T>(op), dst, recv, local, n);
    case RedKind::kMax:
      return reduceAny<false, false>(FuncMax<T>(op), dst, recv, local, n);
    case RedKind::kPreMulSum:
      if (pre) return reduceAny<true, false>(FuncPreMulSum<T>(op), dst, recv, local, n);
      return reduceAny<false, false>(FuncPreMulSum<T>(op), dst, recv, local, n);
    case RedKind::kSumPostDiv:
      if (post) return reduceAny<false, true>(FuncSumPostDiv<T>(op), dst, recv, local, n);
      return reduceAny<false, false>(FuncSumPostDiv<T>(op), dst, recv, local, n);
  }
}

// dst[i] = post?(pre?(src[i])), any alignment. Only called when there is a step to apply.
template <bool kPre, bool kPost, typename Fn>
void copyAny(const Fn& fn, void* dst, const void* src, size_t n) {
  using T = typename Fn::Elt;
  if (isAligned<T>(dst) && isAligned<T>(src)) {
    T* d = static_cast<T*>(dst);
    const T* s = static_cast<const T*>(src);
    CHORUS_IVDEP
    for (size_t i = 0; i < n; ++i) d[i] = applyCopy<kPre, kPost>(fn, s[i]);
    return;
  }
  T tmp[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    const size_t off = base * sizeof(T);
    std::memcpy(tmp, static_cast<const char*>(src) + off, m * sizeof(T));
    for (size_t i = 0; i < m; ++i) tmp[i] = applyCopy<kPre, kPost>(fn, tmp[i]);
    std::memcpy(static_cast<char*>(dst) + off, tmp, m * sizeof(T));
  }
}

template <typename T>
void copyTyped(const RedOp& op, void* dst, const void* src, size_t n) {
  if (op.kind == RedKind::kPreMulSum) {
    copyAny<true, false>(FuncPreMulSum<T>(op), dst, src, n);
  } else {
    copyAny<false, true>(FuncSumPostDiv<T>(op), dst, src, n);
  }
}

// Calls fn(T{}) with the element type of dtype; false if dtype is not one.
template <typename F>
bool withElementType(int dtype, F&& fn) {
  switch (DataType(dtype)) {
    case DataType::kInt8:
      fn(int8_t{});
      return true;
    case DataType::kUint8:
      fn(uint8_t{});
      return true;
    case DataType::kInt32:
      fn(int32_t{});
      return true;
    case DataType::kUint32:
      fn(uint32_t{});
      return true;
    case DataType::kInt64:
      fn(int64_t{});
      return true;
    case DataType::kUint64:
      fn(uint64_t{});
      return true;
    case DataType::kFloat16:
      fn(Half{});
      return true;
    case DataType::kFloat32:
      fn(float{});
      return true;
    case DataType::kFloat64:
      fn(double{});
      return true;
    case DataType::kBfloat16:
      fn(BFloat16{});
      return true;
    case DataType::kFloat8e4m3:
      fn(Fp8E4M3{});
      return true;
    case DataType::kFloat8e5m2:
      fn(Fp8E5M2{});
      return true;
  }
  return false;
}

// Bits of 1/nranks in a floating dtype, computed as NCCL does: the double quotient rounded to float, then to the
// element type (so fp16's scalar is __float2half(float(1.0/n)), fp8's __nv_cvt_float_to_fp8(..., SATFINITE)).
uint64_t reciprocalBits(int dtype, int nranks) {
  const double inv = 1.0 / nranks;
  const float invf = float(inv);
  uint64_t bits = 0;
  switch (DataType(dtype)) {
    case DataType::kFloat64:
      std::memcpy(&bits, &inv, sizeof(inv));
      break;
    case DataType::kFloat32:
      bits = floatBits(invf);
      break;
    case DataType::kFloat16:
      bits = Half::fromFloat(invf).bits;
      break;
    case DataType::kBfloat16:
      bits = BFloat16::fromFloat(invf).bits;
      break;
    case DataType::kFloat8e4m3:
      bits = Fp8E4M3::fromFloat(invf).bits;
      break;
    case DataType::kFloat8e5m2:
      bits = Fp8E5M2::fromFloat(invf).bits;
      break;
    default:
      break;
  }
  return bits;
}

}  // namespace

RedOp makeRedOp(int ncclOp, int dtype, int nranks) {
  RedOp op{RedKind::kSum, dtype, 0, nranks};
  if (!DType::valid(dtype) || nranks < 1) {
    op.dtype = -1;
    return op;
  }
  switch (ncclOp) {
    case kNcclSum:
      op.kind = RedKind::kSum;
      break;
    case kNcclProd:
      op.kind = RedKind::kProd;
      break;
    case kNcclMax:
      op.kind = RedKind::kMax;
      break;
    case kNcclMin:
      op.kind = RedKind::kMin;
      break;
    case kNcclAvg:
      if (DType::isFloat(dtype)) {
        op.kind = RedKind::kPreMulSum;
        op.scalar = reciprocalBits(dtype, nranks);
      } else {
        op.kind = RedKind::kSumPostDiv;
      }
      break;
    default:
      op.dtype = -1;
      break;
  }
  return op;
}

RedOp makePreMulSum(int dtype, const void* scalar, int nranks) {
  RedOp op{RedKind::kPreMulSum, dtype, 0, nranks};
  if (!DType::valid(dtype) || scalar == nullptr) {
    op.dtype = -1;
    return op;
  }
  std::memcpy(&op.scalar, scalar, DType::size(dtype));  // low bytes on little-endian targets
  return op;
}

void reduceHost(const RedOp& op, void* dst, const void* recv, const void* local, size_t n, uint32_t flags) {
  if (n == 0) return;
  withElementType(op.dtype, [&](auto elt) { reduceTyped<decltype(elt)>(op, dst, recv, local, n, flags); });
}

void copyHost(const RedOp& op, void* dst, const void* src, size_t n, uint32_t flags) {
  if (n == 0) return;
  const bool pre = (flags & kPreLocal) != 0 && op.kind == RedKind::kPreMulSum;
  const bool post = (flags & kPostOp) != 0 && op.kind == RedKind::kSumPostDiv;
  if (!pre && !post) {
    // memmove, not memcpy: dst == src is allowed and memcpy on overlapping ranges is undefined.
    if (dst != src) std::memmove(dst, src, n * DType::size(op.dtype));
    return;
  }
  withElementType(op.dtype, [&](auto elt) { copyTyped<decltype(elt)>(op, dst, src, n); });
}

}  // namespace chorus
