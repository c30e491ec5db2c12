// Reduction functors for every NCCL dtype x op, written once for the host path and the device kernels, and the
// type-erased host entry points the executor calls (implemented in reduce.cc).
//
// Semantics follow NCCL's src/device/reduce_kernel.h so that the host path and a GPU produce the same bits:
//   - integers wrap on overflow (sum, prod, premulsum);
//   - fp16/bf16/fp8 are computed in float and rounded to the element type after every operation, which is what
//     __hadd/__hmul (or NCCL's float fallback, or fp8-through-half) give: for + and * the float (or half) result
//     rounded once to the narrow type equals the exactly rounded result;
//   - min/max of floats ignore a NaN operand (fminf/fmaxf, __hmin/__hmax); both NaN gives NaN. For +-0 we order
//     -0 < +0 so the result never depends on operand order (fminf leaves that unspecified);
//   - premulsum multiplies this rank's contribution by a scalar (rounded to the element type), then sums;
//   - ncclAvg is premulsum by 1/nranks for floating types and sumpostdiv (sum, then integer division truncating
//     toward zero) for integers, exactly as NCCL maps it.
// A GPU build includes this header and instantiates only the functors it launches: FuncFor<T, kind>::Type plus
// applyReduce/applyCopy are everything a kernel needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "arch.h"
#include "dtypes.h"

namespace chorus {

/// What a reduction computes per element.
enum class RedKind : uint8_t { kSum, kProd, kMin, kMax, kPreMulSum, kSumPostDiv };

/// A reduction bound to a dtype: all a kernel needs, trivially copyable to the device as a kernel argument.
struct RedOp {
  RedKind kind;     ///< operation
  int dtype;        ///< ncclDataType_t; -1 marks an op built from invalid arguments (kernels then do nothing)
  uint64_t scalar;  ///< kPreMulSum factor, bits in the dtype's own format in the low bytes (little-endian)
  int nranks;       ///< kSumPostDiv divisor
};

/// Maps an NCCL op (ncclSum..ncclAvg) and dtype to a RedOp (avg -> premulsum 1/n or sumpostdiv).
RedOp makeRedOp(int ncclOp, int dtype, int nranks);
/// Pre-multiply scalar from a user pointer (host scalar) in the dtype's format.
RedOp makePreMulSum(int dtype, const void* scalar, int nranks);

/// Flags of reduceHost/copyHost: apply the op's pre-operation to the local input / its post-operation to the
/// result. A flag naming a step the op does not have (pre of kSum, post of kPreMulSum...) is ignored.
enum : uint32_t { kPreLocal = 1, kPostOp = 2 };

/// dst[i] = post?(recv[i] op pre?(local[i])) for n elements. dst may alias recv or local.
/// Exact aliasing only (dst == recv or dst == local), not partial overlap. Pointers need no alignment.
void reduceHost(const RedOp& op, void* dst, const void* recv, const void* local, size_t n, uint32_t flags);
/// dst[i] = post?(pre?(src[i])). dst may equal src. With no flags this is a memcpy.
void copyHost(const RedOp& op, void* dst, const void* src, size_t n, uint32_t flags);

/// How an element type is computed: native types in themselves (Acc == T), narrow floats in float.
template <typename T>
struct Arith {
  using Acc = T;
  /// Element to compute type (exact).
  static CHORUS_HOST_DEVICE CHORUS_INLINE Acc load(T x) { return x; }
  /// Compute type to element (rounds for narrow floats).
  static CHORUS_HOST_DEVICE CHORUS_INLINE T store(Acc x) { return x; }
  /// Rounds a computed value to the nearest element value, staying in the compute type.
  static CHORUS_HOST_DEVICE CHORUS_INLINE Acc round(Acc x) { return x; }
};

/// Narrow floats compute in float; every result is rounded back through the element type.
template <typename T>
struct NarrowArith {
  using Acc = float;
  /// Element to float (exact).
  static CHORUS_HOST_DEVICE CHORUS_INLINE float load(T x) { return x.toFloat(); }
  /// Float to element, nearest even (fp8 saturating).
  static CHORUS_HOST_DEVICE CHORUS_INLINE T store(float x) { return T::fromFloat(x); }
  /// Float rounded to the element's precision and range.
  static CHORUS_HOST_DEVICE CHORUS_INLINE float round(float x) { return T::fromFloat(x).toFloat(); }
};
/// fp16 computes in float.
template <>
struct Arith<Half> : NarrowArith<Half> {};
/// bf16 computes in float.
template <>
struct Arith<BFloat16> : NarrowArith<BFloat16> {};
/// fp8 e4m3 computes in float.
template <>
struct Arith<Fp8E4M3> : NarrowArith<Fp8E4M3> {};
/// fp8 e5m2 computes in float.
template <>
struct Arith<Fp8E5M2> : NarrowArith<Fp8E5M2> {};

namespace detail {

/// a + b; integers wrap (computed unsigned: signed overflow is undefined in C++).
template <typename A>
CHORUS_HOST_DEVICE CHORUS_INLINE A add(A a, A b) {
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    return A(U(U(a) + U(b)));
  } else {
    return a + b;
  }
}

/// a * b; integers wrap. On the device, __fmul_rn/__dmul_rn keep nvcc from fusing a premulsum's product into the
/// following add (an FMA would skip the rounding the host path does).
template <typename A>
CHORUS_HOST_DEVICE CHORUS_INLINE A mul(A a, A b) {
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    return A(U(U(a) * U(b)));
#if CHORUS_ON_DEVICE
  } else if constexpr (std::is_same<A, float>::value) {
    return __fmul_rn(a, b);
  } else if constexpr (std::is_same<A, double>::value) {
    return __dmul_rn(a, b);
#endif
  } else {
    return a * b;
  }
}

/// min with fminf's NaN rule (a NaN operand loses) and -0 < +0.
template <typename A>
CHORUS_HOST_DEVICE CHORUS_INLINE A minOf(A a, A b) {
  if constexpr (std::is_floating_point<A>::value) {
    if (a < b) return a;
    if (b < a) return b;
    if (a != a) return b;  // b may be NaN as well: then NaN
    if (b != b) return a;
    // Equal: only +-0 differ. -((-a) + (-b)) is -0 if either is -0 (round-to-nearest: +0 + -0 = +0).
    return a == A(0) ? -((-a) + (-b)) : a;
  } else {
    return a < b ? a : b;
  }
}

/// max with fmaxf's NaN rule (a NaN operand loses) and +0 > -0.
template <typename A>
CHORUS_HOST_DEVICE CHORUS_INLINE A maxOf(A a, A b) {
  if constexpr (std::is_floating_point<A>::value) {
    if (a > b) return a;
    if (b > a) return b;
    if (a != a) return b;
    if (b != b) return a;
    return a == A(0) ? a + b : a;  // +0 unless both are -0
  } else {
    return a > b ? a : b;
  }
}

/// Element value whose bits are the low bytes of v (RedOp::scalar). Little-endian, as every target is.
template <typename T>
CHORUS_HOST_DEVICE CHORUS_INLINE T fromLowBytes(uint64_t v) {
  T t;
  memcpy(&t, &v, sizeof(T));
  return t;
}

/// Shared parts of the functors: element/compute types and identity pre/post operations.
template <typename T>
struct FuncBase {
  using Elt = T;
  using Acc = typename Arith<T>::Acc;
  static constexpr bool kHasPre = false;
  static constexpr bool kHasPost = false;
  /// Identity: the op has no pre-operation.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc pre(Acc x) const { return x; }
  /// Identity: the op has no post-operation.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc post(Acc x) const { return x; }
};

}  // namespace detail

// Functors. reduce/pre/post take and return compute-type values and do NOT round: the caller rounds to the element
// type between steps (applyReduce, or the host's blocked loops), so a plain sum pays for one conversion only.

/// ncclSum.
template <typename T>
struct FuncSum : detail::FuncBase<T> {
  using Acc = typename detail::FuncBase<T>::Acc;
  /// Builds from a RedOp (no parameters used).
  CHORUS_HOST_DEVICE explicit FuncSum(const RedOp&) {}
  /// a + b.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc reduce(Acc a, Acc b) const { return detail::add(a, b); }
};

/// ncclProd.
template <typename T>
struct FuncProd : detail::FuncBase<T> {
  using Acc = typename detail::FuncBase<T>::Acc;
  /// Builds from a RedOp (no parameters used).
  CHORUS_HOST_DEVICE explicit FuncProd(const RedOp&) {}
  /// a * b.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc reduce(Acc a, Acc b) const { return detail::mul(a, b); }
};

/// ncclMin.
template <typename T>
struct FuncMin : detail::FuncBase<T> {
  using Acc = typename detail::FuncBase<T>::Acc;
  /// Builds from a RedOp (no parameters used).
  CHORUS_HOST_DEVICE explicit FuncMin(const RedOp&) {}
  /// min(a, b), NaN-avoiding.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc reduce(Acc a, Acc b) const { return detail::minOf(a, b); }
};

/// ncclMax.
template <typename T>
struct FuncMax : detail::FuncBase<T> {
  using Acc = typename detail::FuncBase<T>::Acc;
  /// Builds from a RedOp (no parameters used).
  CHORUS_HOST_DEVICE explicit FuncMax(const RedOp&) {}
  /// max(a, b), NaN-avoiding.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc reduce(Acc a, Acc b) const { return detail::maxOf(a, b); }
};

/// Sum of scalar * contribution (ncclRedOpCreatePreMulSum; ncclAvg on floating types with scalar 1/nranks).
template <typename T>
struct FuncPreMulSum : detail::FuncBase<T> {
  using Acc = typename detail::FuncBase<T>::Acc;
  static constexpr bool kHasPre = true;
  /// Reads the scalar from op.scalar (element format).
  CHORUS_HOST_DEVICE explicit FuncPreMulSum(const RedOp& op)
      : scalar_(Arith<T>::load(detail::fromLowBytes<T>(op.scalar))) {}
  /// a + b.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc reduce(Acc a, Acc b) const { return detail::add(a, b); }
  /// x * scalar, applied once to each rank's own contribution.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc pre(Acc x) const { return detail::mul(x, scalar_); }

  Acc scalar_;
};

/// Sum, then divide by nranks once at the end (ncclAvg on integers: truncates toward zero, after a wrapping sum).
/// Floating types divide in the compute type; makeRedOp never picks this for them (NCCL uses premulsum there).
template <typename T>
struct FuncSumPostDiv : detail::FuncBase<T> {
  using Acc = typename detail::FuncBase<T>::Acc;
  static constexpr bool kHasPost = true;
  /// Reads the divisor from op.nranks (at least 1).
  CHORUS_HOST_DEVICE explicit FuncSumPostDiv(const RedOp& op) : divisor_(op.nranks > 0 ? op.nranks : 1) {}
  /// a + b.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc reduce(Acc a, Acc b) const { return detail::add(a, b); }
  /// x / nranks.
  CHORUS_HOST_DEVICE CHORUS_INLINE Acc post(Acc x) const {
    if constexpr (std::is_integral<Acc>::value && std::is_signed<Acc>::value) {
      return Acc(int64_t(x) / int64_t(divisor_));  // wide: a divisor above 127 must not wrap for int8
    } else if constexpr (std::is_integral<Acc>::value) {
      return Acc(uint64_t(x) / uint64_t(divisor_));
    } else {
      return x / Acc(divisor_);
    }
  }

  int divisor_;
};

/// Functor type for an element type and kind, for compile-time dispatch: FuncFor<float, RedKind::kSum>::Type.
template <typename T, RedKind K>
struct FuncFor;
/// kSum.
template <typename T>
struct FuncFor<T, RedKind::kSum> {
  using Type = FuncSum<T>;
};
/// kProd.
template <typename T>
struct FuncFor<T, RedKind::kProd> {
  using Type = FuncProd<T>;
};
/// kMin.
template <typename T>
struct FuncFor<T, RedKind::kMin> {
  using Type = FuncMin<T>;
};
/// kMax.
template <typename T>
struct FuncFor<T, RedKind::kMax> {
  using Type = FuncMax<T>;
};
/// kPreMulSum.
template <typename T>
struct FuncFor<T, RedKind::kPreMulSum> {
  using Type = FuncPreMulSum<T>;
};
/// kSumPostDiv.
template <typename T>
struct FuncFor<T, RedKind::kSumPostDiv> {
  using Type = FuncSumPostDiv<T>;
};

/// One element of a reduction: post?(recv op pre?(local)), rounded to the element type after each step.
template <bool kPre, bool kPost, typename Fn>
CHORUS_HOST_DEVICE CHORUS_INLINE typename Fn::Elt applyReduce(const Fn& fn, typename Fn::Elt recv,
                                                              typename Fn::Elt local) {
  using A = Arith<typename Fn::Elt>;
  typename A::Acc y = A::load(local);
  if constexpr (kPre && Fn::kHasPre) y = A::round(fn.pre(y));
  typename A::Acc r = fn.reduce(A::load(recv), y);
  if constexpr (kPost && Fn::kHasPost) r = fn.post(A::round(r));
  return A::store(r);
}

/// One element of a copy: post?(pre?(src)), rounded after each step.
template <bool kPre, bool kPost, typename Fn>
CHORUS_HOST_DEVICE CHORUS_INLINE typename Fn::Elt applyCopy(const Fn& fn, typename Fn::Elt src) {
  using A = Arith<typename Fn::Elt>;
  typename A::Acc x = A::load(src);
  if constexpr (kPre && Fn::kHasPre) x = A::round(fn.pre(x));
  if constexpr (kPost && Fn::kHasPost) x = fn.post(x);
  return A::store(x);
}

}  // namespace chorus
