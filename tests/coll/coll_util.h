// Helpers for collective tests: element encode/decode for every dtype, closed-form inputs
// and expected values, and a per-dtype tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtypes.h"
#include "nccl.h"

namespace chorus_test {

inline size_t dtSize(ncclDataType_t t) {
  static const size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return kSizes[t];
}

inline bool dtIsFloat(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

inline const char* dtName(ncclDataType_t t) {
  static const char* kNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                 "f16", "f32", "f64", "bf16", "e4m3", "e5m2"};
  return kNames[t];
}

/// Writes value v (exactly representable, or rounded as the dtype rounds) at element i.
inline void putElem(void* buf, ncclDataType_t t, size_t i, double v) {
  char* p = static_cast<char*>(buf) + i * dtSize(t);
  switch (t) {
    case ncclInt8: { int8_t x = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = static_cast<uint32_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 8); break; }
    case ncclFloat16: { uint16_t x = chorus::Half::fromFloat(static_cast<float>(v)).bits; std::memcpy(p, &x, 2); break; }
    case ncclBfloat16: { uint16_t x = chorus::BFloat16::fromFloat(static_cast<float>(v)).bits; std::memcpy(p, &x, 2); break; }
    case ncclFloat32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case ncclFloat64: std::memcpy(p, &v, 8); break;
    case ncclFloat8e4m3: { uint8_t x = chorus::Fp8E4M3::fromFloat(static_cast<float>(v)).bits; std::memcpy(p, &x, 1); break; }
    case ncclFloat8e5m2: { uint8_t x = chorus::Fp8E5M2::fromFloat(static_cast<float>(v)).bits; std::memcpy(p, &x, 1); break; }
    default: break;
  }
}

/// Reads element i as a double.
inline double getElem(const void* buf, ncclDataType_t t, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * dtSize(t);
  switch (t) {
    case ncclInt8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; std::memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ncclUint64: { uint64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ncclFloat16: { chorus::Half h; std::memcpy(&h.bits, p, 2); return h.toFloat(); }
    case ncclBfloat16: { chorus::BFloat16 h; std::memcpy(&h.bits, p, 2); return h.toFloat(); }
    case ncclFloat32: { float x; std::memcpy(&x, p, 4); return x; }
    case ncclFloat64: { double x; std::memcpy(&x, p, 8); return x; }
    case ncclFloat8e4m3: { chorus::Fp8E4M3 h; std::memcpy(&h.bits, p, 1); return h.toFloat(); }
    case ncclFloat8e5m2: { chorus::Fp8E5M2 h; std::memcpy(&h.bits, p, 1); return h.toFloat(); }
    default: return 0;
  }
}

/// Wraps an exact integer result into the dtype's range (integer ops wrap as in NCCL).
inline double wrapInt(ncclDataType_t t, double v) {
  int64_t x = static_cast<int64_t>(v);
  switch (t) {
    case ncclInt8: return static_cast<int8_t>(x);
    case ncclUint8: return static_cast<uint8_t>(x);
    case ncclInt32: return static_cast<int32_t>(x);
    case ncclUint32: return static_cast<uint32_t>(x);
    default: return v;
  }
}

/// Pseudo-op id for "premulsum with scalar 2" in test tables.
constexpr int kPreMul2 = 100;

/// Rank r's input element i for op: small integers whose sums/products are exact in every dtype for <= 8 ranks.
inline double inputValue(int op, int r, size_t i) {
  if (op == ncclProd) return 1.0 + static_cast<double>((r + i) % 2);
  return static_cast<double>((static_cast<size_t>(r) + 2 * i) % 3);
}

/// Expected reduction of inputs v[0..n) for op and dtype.
inline double reduceRef(int op, ncclDataType_t t, const std::vector<double>& v) {
  double acc = v[0];
  for (size_t k = 1; k < v.size(); k++) {
    switch (op) {
      case ncclProd: acc *= v[k]; break;
      case ncclMin: acc = std::min(acc, v[k]); break;
      case ncclMax: acc = std::max(acc, v[k]); break;
      default: acc += v[k]; break;
    }
  }
  if (op == kPreMul2) acc *= 2;
  if (op == ncclAvg) acc = dtIsFloat(t) ? acc / v.size() : std::trunc(acc / v.size());
  return dtIsFloat(t) ? acc : wrapInt(t, acc);
}

/// Allowed absolute difference for a result of magnitude `expect`.
inline double tolerance(int op, ncclDataType_t t, double expect, int nranks) {
  if (!dtIsFloat(t)) return 0;
  if (op != ncclAvg) return 0;  // inputs are chosen so that every other op is exact
  double eps = t == ncclFloat64 ? 1e-15 : t == ncclFloat32 ? 1e-7 : t == ncclFloat16 ? 1e-3
             : t == ncclBfloat16 ? 8e-3 : t == ncclFloat8e4m3 ? 0.07 : 0.13;
  return (std::fabs(expect) + 1) * eps * (nranks + 1);
}

}  // namespace chorus_test
