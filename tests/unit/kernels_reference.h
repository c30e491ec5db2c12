// Independent reference for the kernels tests: what each narrow float format's values are (from the format's
// definition, through ldexp), and rounding of an exact double to the nearest value by search over every value of
// the format, ties to the even encoding. Nothing here calls the code under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dtypes.h"

namespace chorus {
namespace reference {

/// Parameters of a narrow float format, as written in its specification.
struct Format {
  int expBits;
  int manBits;
  bool hasInf;     ///< IEEE-style top exponent (inf/NaN); false for e4m3 "FN" where only S.1111.111 is NaN
  bool saturates;  ///< overflow gives max finite (CUDA __NV_SATFINITE) rather than inf
};

/// fp16: IEEE binary16.
constexpr Format kHalf{5, 10, true, false};
/// bf16: top half of binary32.
constexpr Format kBf16{8, 7, true, false};
/// OCP E4M3FN, saturating as CUDA's constructors do.
constexpr Format kE4M3{4, 3, false, true};
/// OCP E5M2, saturating as CUDA's constructors do.
constexpr Format kE5M2{5, 2, true, true};

/// Format of a floating dtype with narrow storage.
inline Format formatOf(int dtype) {
  switch (DataType(dtype)) {
    case DataType::kFloat16:
      return kHalf;
    case DataType::kBfloat16:
      return kBf16;
    case DataType::kFloat8e4m3:
      return kE4M3;
    default:
      return kE5M2;
  }
}

/// Exact value of bits b in format f (NaN for NaN encodings).
inline double valueOf(const Format& f, uint32_t b) {
  const int bias = (1 << (f.expBits - 1)) - 1;
  const uint32_t signBit = 1u << (f.expBits + f.manBits);
  const uint32_t man = b & ((1u << f.manBits) - 1);
  const uint32_t field = (b >> f.manBits) & ((1u << f.expBits) - 1);
  const double sign = (b & signBit) ? -1.0 : 1.0;
  const uint32_t topField = (1u << f.expBits) - 1;
  if (f.hasInf && field == topField) {
    return man == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  }
  if (!f.hasInf && field == topField && man == (1u << f.manBits) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (field == 0) return sign * std::ldexp(double(man), 1 - bias - f.manBits);
  return sign * std::ldexp(double(man + (1u << f.manBits)), int(field) - bias - f.manBits);
}

/// True when bits b are a NaN in format f.
inline bool isNaNBits(const Format& f, uint32_t b) { return std::isnan(valueOf(f, b)); }

/// Every non-negative finite value of a format, ascending, with its encoding.
struct ValueTable {
  std::vector<double> values;
  std::vector<uint32_t> bits;
};

/// Builds (once per format) the ascending table of non-negative finite values.
inline const ValueTable& tableOf(const Format& f) {
  static ValueTable tables[4];
  static bool built[4] = {false, false, false, false};
  const int idx = f.manBits == 10 ? 0 : f.manBits == 7 ? 1 : f.manBits == 3 ? 2 : 3;
  if (!built[idx]) {
    const uint32_t signBit = 1u << (f.expBits + f.manBits);
    for (uint32_t b = 0; b < signBit; ++b) {
      const double v = valueOf(f, b);
      if (std::isfinite(v)) {
        tables[idx].values.push_back(v);
        tables[idx].bits.push_back(b);
      }
    }
    built[idx] = true;  // encodings of non-negative values ascend with their value
  }
  return tables[idx];
}

/// Nearest value of format f to exact v, ties to the even encoding; overflow per the format (inf or saturate).
/// NaN gives the canonical NaN (all ones but the sign).
inline uint32_t roundTo(const Format& f, double v) {
  const uint32_t signBit = 1u << (f.expBits + f.manBits);
  if (std::isnan(v)) return signBit - 1;
  const uint32_t sign = std::signbit(v) ? signBit : 0u;
  const double a = std::fabs(v);
  const ValueTable& t = tableOf(f);
  const double maxFinite = t.values.back();
  const uint32_t infBits = ((1u << f.expBits) - 1) << f.manBits;
  if (a > maxFinite) {
    if (f.saturates) return sign | t.bits.back();
    // Past max, RNE rounds to inf once |v| reaches max + half an ulp of max (the tie goes to the even "next" value,
    // which is 2^(emax+1), i.e. inf).
    const double ulp = maxFinite - t.values[t.values.size() - 2];
    if (a >= maxFinite + ulp / 2 || std::isinf(a)) return sign | infBits;
    return sign | t.bits.back();
  }
  const auto it = std::lower_bound(t.values.begin(), t.values.end(), a);
  const size_t hi = size_t(it - t.values.begin());
  if (t.values[hi] == a) return sign | t.bits[hi];
  const size_t lo = hi - 1;  // a > 0 here, and values[0] == 0
  const double dlo = a - t.values[lo];
  const double dhi = t.values[hi] - a;
  if (dlo < dhi) return sign | t.bits[lo];
  if (dhi < dlo) return sign | t.bits[hi];
  return sign | ((t.bits[lo] & 1u) == 0 ? t.bits[lo] : t.bits[hi]);
}

/// Position of an encoding on the number line (sign-magnitude to a signed integer), for ulp distances.
inline int64_t ordinal(const Format& f, uint32_t b) {
  const uint32_t signBit = 1u << (f.expBits + f.manBits);
  const int64_t mag = int64_t(b & (signBit - 1));
  return (b & signBit) ? -mag : mag;
}

/// Distance in representable steps between two encodings (both NaN: 0).
inline int64_t ulpDistance(const Format& f, uint32_t a, uint32_t b) {
  if (isNaNBits(f, a) || isNaNBits(f, b)) return (isNaNBits(f, a) && isNaNBits(f, b)) ? 0 : INT64_MAX;
  return std::llabs(ordinal(f, a) - ordinal(f, b));
}

/// Distance in representable steps between two doubles (both NaN: 0).
inline int64_t ulpDistance(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : INT64_MAX;
  int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  if (ia < 0) ia = INT64_MIN - ia;
  if (ib < 0) ib = INT64_MIN - ib;
  return ia > ib ? ia - ib : ib - ia;
}

/// Distance in representable steps between two floats (both NaN: 0).
inline int64_t ulpDistance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : INT64_MAX;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  const int64_t la = ia < 0 ? int64_t(INT32_MIN) - ia : ia;
  const int64_t lb = ib < 0 ? int64_t(INT32_MIN) - ib : ib;
  return la > lb ? la - lb : lb - la;
}

/// min as NCCL computes it: a NaN operand loses, both NaN is NaN, -0 < +0.
inline double minRef(double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

/// max as NCCL computes it: a NaN operand loses, both NaN is NaN, +0 > -0.
inline double maxRef(double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

}  // namespace reference
}  // namespace chorus
