// Element types of the NCCL API as host+device value types, and per-dtype facts (size, kind).
//
// The narrow floats (fp16, bf16, fp8 e4m3/e5m2) are plain structs holding raw bits, so the same code compiles with
// g++ (no CUDA headers) and on the device, and memory holding them can be reinterpreted freely. Conversions follow
// what CUDA does, because NCCL's reductions are built on CUDA's types and we must produce the same bits:
//   - float -> narrow rounds to nearest, ties to even;
//   - fp16/bf16 overflow to +-inf; fp8 saturates to +-max finite (CUDA's __nv_fp8_* constructors use
//     __NV_SATFINITE: 448 for e4m3, 57344 for e5m2), +-inf included;
//   - NaN becomes the canonical NaN of the format (fp16/bf16 0x7FFF, fp8 0x7F), sign dropped, as CUDA does;
//   - narrow -> float is exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "arch.h"

#if CHORUS_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

#if __has_include("nccl.h")
#include "nccl.h"
#define CHORUS_HAVE_NCCL_H 1
#else
#define CHORUS_HAVE_NCCL_H 0
#endif

namespace chorus {

/// Element types; mirrors ncclDataType_t value for value (checked against nccl.h when it is on the include path).
enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
};

/// Number of DataType values (ncclNumTypes).
constexpr int kNumDataTypes = 12;

#if CHORUS_HAVE_NCCL_H
static_assert(int(DataType::kInt8) == ncclInt8 && int(DataType::kUint8) == ncclUint8 &&
                  int(DataType::kInt32) == ncclInt32 && int(DataType::kUint32) == ncclUint32 &&
                  int(DataType::kInt64) == ncclInt64 && int(DataType::kUint64) == ncclUint64 &&
                  int(DataType::kFloat16) == ncclFloat16 && int(DataType::kFloat32) == ncclFloat32 &&
                  int(DataType::kFloat64) == ncclFloat64 && int(DataType::kBfloat16) == ncclBfloat16 &&
                  int(DataType::kFloat8e4m3) == ncclFloat8e4m3 && int(DataType::kFloat8e5m2) == ncclFloat8e5m2 &&
                  kNumDataTypes == ncclNumTypes,
              "chorus::DataType must mirror ncclDataType_t");
#endif

/// Facts about an ncclDataType_t value. Every function accepts any int and answers 0/false/"unknown" for values
/// that are not a data type, so callers can use them while validating user input.
struct DType {
  /// True for 0 <= dtype < kNumDataTypes.
  static constexpr CHORUS_HOST_DEVICE bool valid(int dtype) { return dtype >= 0 && dtype < kNumDataTypes; }
  /// Bytes per element, 0 if not a data type.
  static constexpr CHORUS_HOST_DEVICE size_t size(int dtype) {
    switch (DataType(dtype)) {
      case DataType::kInt8:
      case DataType::kUint8:
      case DataType::kFloat8e4m3:
      case DataType::kFloat8e5m2:
        return 1;
      case DataType::kFloat16:
      case DataType::kBfloat16:
        return 2;
      case DataType::kInt32:
      case DataType::kUint32:
      case DataType::kFloat32:
        return 4;
      case DataType::kInt64:
      case DataType::kUint64:
      case DataType::kFloat64:
        return 8;
    }
    return 0;
  }
  /// True for the floating-point types (fp16, fp32, fp64, bf16, both fp8).
  static constexpr CHORUS_HOST_DEVICE bool isFloat(int dtype) {
    return dtype == int(DataType::kFloat16) || dtype == int(DataType::kFloat32) || dtype == int(DataType::kFloat64) ||
           dtype == int(DataType::kBfloat16) || dtype == int(DataType::kFloat8e4m3) ||
           dtype == int(DataType::kFloat8e5m2);
  }
  /// True for the signed integer types (int8, int32, int64).
  static constexpr CHORUS_HOST_DEVICE bool isSignedInt(int dtype) {
    return dtype == int(DataType::kInt8) || dtype == int(DataType::kInt32) || dtype == int(DataType::kInt64);
  }
  /// NCCL's spelling of the type ("ncclFloat16"...), for logs and test names.
  static const char* name(int dtype) {
    constexpr const char* kNames[kNumDataTypes] = {"ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
                                                   "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
                                                   "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
    return valid(dtype) ? kNames[dtype] : "unknown";
  }
};

namespace detail {

// One description for every narrow float format, so rounding is written (and tested) once.
// kIeee: the top exponent encodes inf/NaN (fp16, bf16, e5m2). Otherwise (e4m3 "FN") only S.1111.111 is NaN and the
// top exponent holds normal numbers. kSatFinite: overflow saturates to max finite instead of becoming inf.
template <int kExpBits, int kManBits, bool kIeeeInf, bool kSaturate>
struct NarrowFormat {
  static_assert(kManBits < 23 && kExpBits <= 8, "must be narrower than float");
  static_assert(kIeeeInf || kSaturate, "a format without inf has to saturate");
  static constexpr bool kIeee = kIeeeInf;
  static constexpr bool kSatFinite = kSaturate;
  static constexpr int kMan = kManBits;
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kEmin = 1 - kBias;  // exponent of the smallest normal, and of the subnormals
  static constexpr uint32_t kSignBit = 1u << (kExpBits + kManBits);
  static constexpr uint32_t kInf = ((1u << kExpBits) - 1) << kManBits;  // meaningful only when kIeee
  static constexpr uint32_t kNaN = kSignBit - 1;                        // canonical: all ones but the sign
  static constexpr uint32_t kMaxFinite = kIeeeInf ? kInf - 1 : kSignBit - 2;
};

using HalfFormat = NarrowFormat<5, 10, true, false>;
using BFloat16Format = NarrowFormat<8, 7, true, false>;
using E4M3Format = NarrowFormat<4, 3, false, true>;
using E5M2Format = NarrowFormat<5, 2, true, true>;

/// Rounds a float to the nearest value of format F (ties to even) and returns its bits.
template <typename F>
CHORUS_HOST_DEVICE CHORUS_INLINE uint32_t encodeNarrow(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 31) ? F::kSignBit : 0u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return F::kNaN;
  if (ax == 0x7f800000u) return sign | (F::kSatFinite ? F::kMaxFinite : F::kInf);
  if (ax == 0) return sign;
  // value = sig * 2^exp2, sig an integer below 2^24.
  uint32_t sig;
  int exp2;
  if ((ax >> 23) == 0) {
    sig = ax;
    exp2 = -149;
  } else {
    sig = (ax & 0x7fffffu) | 0x800000u;
    exp2 = int(ax >> 23) - 150;
  }
  const int top = 31 - countLeadingZeros(sig) + exp2;  // floor(log2(value))
  const int te = top < F::kEmin ? F::kEmin : top;      // exponent of the result (subnormals share kEmin)
  // Bits of sig below the result's last mantissa bit. Always >= 1 since the format is narrower than float.
  const int shift = te - F::kMan - exp2;
  uint32_t q = 0;
  if (shift <= 25) {  // beyond, value < half the smallest quantum: rounds to zero
    q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  }
  // q holds the implicit bit for normals, so adding it to the exponent field minus one gives the encoding, and a
  // rounding carry (q == 2^(kMan+1)) moves to the next exponent by itself. Subnormals have te == kEmin.
  uint32_t bits = (uint32_t(te - F::kEmin) << F::kMan) + q;
  if (bits > F::kMaxFinite) bits = F::kSatFinite ? F::kMaxFinite : F::kInf;
  return sign | bits;
}

/// Exact value of format F's bits as a float. Needs the format's subnormals to be float normals (not bf16).
template <typename F>
CHORUS_HOST_DEVICE CHORUS_INLINE float decodeNarrow(uint32_t b) {
  static_assert(F::kEmin - F::kMan > -127, "subnormals must be float normals");
  const uint32_t sign = (b & F::kSignBit) ? 0x80000000u : 0u;
  const uint32_t mag = b & (F::kSignBit - 1);
  uint32_t man = mag & ((1u << F::kMan) - 1);
  const uint32_t field = mag >> F::kMan;
  if (F::kIeee ? mag >= F::kInf : mag == F::kNaN) {
    if (F::kIeee && mag == F::kInf) return bitsFloat(sign | 0x7f800000u);
    return bitsFloat(sign | 0x7fc00000u | (man << (23 - F::kMan)));
  }
  int exp;
  if (field == 0) {
    if (man == 0) return bitsFloat(sign);
    const int s = countLeadingZeros(man) - (31 - F::kMan);  // shifts that bring the top bit to the implicit place
    man = (man << s) & ((1u << F::kMan) - 1);
    exp = F::kEmin - s;
  } else {
    exp = int(field) - F::kBias;
  }
  return bitsFloat(sign | (uint32_t(exp + 127) << 23) | (man << (23 - F::kMan)));
}

/// float -> fp16 bits, rounding to nearest even (same results as encodeNarrow<HalfFormat>). Every case is
/// computed and then selected, without branches, so that host loops over it vectorize.
CHORUS_HOST_DEVICE CHORUS_INLINE uint16_t floatToHalfBits(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t normal = (ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  // Subnormal: in 0.5f + |f| the float's last mantissa bit weighs 2^-24, the fp16 subnormal quantum, so the
  // addition itself rounds to nearest even; what is left above 0.5f is the encoding (0x400 = smallest normal).
  // Flush-to-zero does not hurt: float subnormals round to fp16 zero anyway.
  const uint32_t subnormal = floatBits(bitsFloat(ax) + 0.5f) - 0x3f000000u;
  // Selected with masks rather than ?: so that the compiler keeps the float add unconditional (it will not
  // speculate a possibly trapping add out of a branch, and a branch stops vectorization).
  const uint32_t isNormal = 0u - uint32_t(ax >= 0x38800000u);
  const uint32_t isInf = 0u - uint32_t(ax >= 0x477ff000u);  // >= 65520 rounds past 65504: inf (inf included)
  const uint32_t isNaN = 0u - uint32_t(ax > 0x7f800000u);
  uint32_t r = (normal & isNormal) | (subnormal & ~isNormal);
  r = ((0x7c00u & isInf) | (r & ~isInf)) | sign;
  return uint16_t((0x7fffu & isNaN) | (r & ~isNaN));
}

/// fp16 bits -> float, exact. Branch-free (mask selects) like floatToHalfBits.
CHORUS_HOST_DEVICE CHORUS_INLINE float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = uint32_t(h & 0x7fffu) << 13;  // exponent and mantissa at float's positions
  const uint32_t e = em & 0x0f800000u;
  const uint32_t rebiased = em + 0x38000000u;  // exponent 15 -> 127 bias
  // Subnormal m * 2^-24: give it the smallest normal's exponent, 2^-14 * (1 + m/1024), and subtract 2^-14 (exact).
  const uint32_t subnormal = floatBits(bitsFloat(rebiased + 0x00800000u) - bitsFloat(0x38800000u));
  // Inf/NaN: exponent all ones; a NaN keeps its payload and is made quiet.
  const uint32_t special = (rebiased + 0x38000000u) | ((em & 0x007fe000u) ? 0x00400000u : 0u);
  const uint32_t isSpecial = 0u - uint32_t(e == 0x0f800000u);
  const uint32_t isSubnormal = 0u - uint32_t(e == 0);
  const uint32_t mag = (special & isSpecial) | (subnormal & isSubnormal) | (rebiased & ~(isSpecial | isSubnormal));
  return bitsFloat(sign | mag);
}

/// float -> bf16 bits, rounding to nearest even; bf16 is the top half of a float.
CHORUS_HOST_DEVICE CHORUS_INLINE uint16_t floatToBFloat16Bits(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // overflow carries into the exponent: inf
}

/// bf16 bits -> float, exact.
CHORUS_HOST_DEVICE CHORUS_INLINE float bfloat16BitsToFloat(uint16_t b) { return bitsFloat(uint32_t(b) << 16); }

}  // namespace detail

/// IEEE 754 binary16 value (ncclFloat16), raw bits.
struct Half {
  uint16_t bits;
  /// Nearest fp16 (ties to even); overflow gives inf.
  static CHORUS_HOST_DEVICE CHORUS_INLINE Half fromFloat(float f) {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return Half{__half_as_ushort(__float2half_rn(f))};
#else
    return Half{detail::floatToHalfBits(f)};
#endif
  }
  /// Exact value as float.
  CHORUS_HOST_DEVICE CHORUS_INLINE float toFloat() const {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return __half2float(__ushort_as_half(bits));
#else
    return detail::halfBitsToFloat(bits);
#endif
  }
};

/// bfloat16 value (ncclBfloat16), raw bits.
struct BFloat16 {
  uint16_t bits;
  /// Nearest bf16 (ties to even); overflow gives inf.
  static CHORUS_HOST_DEVICE CHORUS_INLINE BFloat16 fromFloat(float f) {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(f))};
#else
    return BFloat16{detail::floatToBFloat16Bits(f)};
#endif
  }
  /// Exact value as float.
  CHORUS_HOST_DEVICE CHORUS_INLINE float toFloat() const { return detail::bfloat16BitsToFloat(bits); }
};

/// OCP fp8 E4M3FN value (ncclFloat8e4m3): no inf, NaN = 0x7F/0xFF, max 448. Raw bits.
struct Fp8E4M3 {
  uint8_t bits;
  /// Nearest e4m3 (ties to even), saturating to +-448 like CUDA's __NV_SATFINITE; NaN stays NaN.
  static CHORUS_HOST_DEVICE CHORUS_INLINE Fp8E4M3 fromFloat(float f) {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return Fp8E4M3{uint8_t(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3))};
#else
    return Fp8E4M3{uint8_t(detail::encodeNarrow<detail::E4M3Format>(f))};
#endif
  }
  /// Exact value as float.
  CHORUS_HOST_DEVICE CHORUS_INLINE float toFloat() const {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(bits, __NV_E4M3)));
#else
    return detail::decodeNarrow<detail::E4M3Format>(bits);
#endif
  }
};

/// OCP fp8 E5M2 value (ncclFloat8e5m2): IEEE-like with inf, max finite 57344. Raw bits.
struct Fp8E5M2 {
  uint8_t bits;
  /// Nearest e5m2 (ties to even), saturating to +-57344 (inf included) like CUDA's __NV_SATFINITE.
  static CHORUS_HOST_DEVICE CHORUS_INLINE Fp8E5M2 fromFloat(float f) {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return Fp8E5M2{uint8_t(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2))};
#else
    return Fp8E5M2{uint8_t(detail::encodeNarrow<detail::E5M2Format>(f))};
#endif
  }
  /// Exact value as float.
  CHORUS_HOST_DEVICE CHORUS_INLINE float toFloat() const {
#if CHORUS_ON_DEVICE && CHORUS_CUDA
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(bits, __NV_E5M2)));
#else
    return detail::decodeNarrow<detail::E5M2Format>(bits);
#endif
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2 && sizeof(Fp8E4M3) == 1 && sizeof(Fp8E5M2) == 1,
              "narrow floats must have the size of their wire format");

/// Element type of a dtype, for compile-time dispatch: ElementType<int(DataType::kFloat16)>::Type is Half.
template <int kDType>
struct ElementType;
template <>
struct ElementType<int(DataType::kInt8)> {
  using Type = int8_t;
};
template <>
struct ElementType<int(DataType::kUint8)> {
  using Type = uint8_t;
};
template <>
struct ElementType<int(DataType::kInt32)> {
  using Type = int32_t;
};
template <>
struct ElementType<int(DataType::kUint32)> {
  using Type = uint32_t;
};
template <>
struct ElementType<int(DataType::kInt64)> {
  using Type = int64_t;
};
template <>
struct ElementType<int(DataType::kUint64)> {
  using Type = uint64_t;
};
template <>
struct ElementType<int(DataType::kFloat16)> {
  using Type = Half;
};
template <>
struct ElementType<int(DataType::kFloat32)> {
  using Type = float;
};
template <>
struct ElementType<int(DataType::kFloat64)> {
  using Type = double;
};
template <>
struct ElementType<int(DataType::kBfloat16)> {
  using Type = BFloat16;
};
template <>
struct ElementType<int(DataType::kFloat8e4m3)> {
  using Type = Fp8E4M3;
};
template <>
struct ElementType<int(DataType::kFloat8e5m2)> {
  using Type = Fp8E5M2;
};

}  // namespace chorus
