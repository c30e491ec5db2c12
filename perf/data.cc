// Verifiable inputs and expected results (see data.h for the value model).
#include "perf/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace chorus {
namespace perf {
namespace {

// An IEEE-like binary format narrower than float: half, bfloat16 and the two fp8 formats.
struct MiniFormat {
  int expBits;
  int mantBits;
  bool finiteOnly;  // e4m3 ("fn"): no infinities, only S.1111.111 is NaN, so 448 is the largest value
};
constexpr MiniFormat kHalf{5, 10, false};
constexpr MiniFormat kBf16{8, 7, false};
constexpr MiniFormat kE4m3{4, 3, true};
constexpr MiniFormat kE5m2{5, 2, false};

// Round to nearest, ties to even (the default floating-point environment).
double roundEven(double x) { return std::nearbyint(x); }

uint32_t encodeMini(double x, MiniFormat f) {
  const uint32_t signBit = 1u << (f.expBits + f.mantBits);
  const uint32_t expMax = (1u << f.expBits) - 1;
  const int bias = static_cast<int>(expMax >> 1);
  uint32_t sign = std::signbit(x) ? signBit : 0;
  if (std::isnan(x)) return f.finiteOnly ? (signBit - 1) : ((expMax << f.mantBits) | (1u << (f.mantBits - 1)));
  double a = std::fabs(x);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  int exp = e - 1;  // a is in [2^exp, 2^(exp+1))
  const int minExp = 1 - bias;
  uint32_t bits;
  if (exp < minExp) {
    // Subnormal: units of 2^(minExp - mantBits). A carry into 2^mantBits is exactly the smallest normal.
    bits = static_cast<uint32_t>(roundEven(std::ldexp(a, f.mantBits - minExp)));
  } else {
    auto mant = static_cast<uint32_t>(roundEven((std::ldexp(a, -exp) - 1.0) * (1u << f.mantBits)));
    if (mant == (1u << f.mantBits)) {
      mant = 0;
      exp++;
    }
    int field = exp + bias;
    if (f.finiteOnly) {
      uint32_t maxBits = (expMax << f.mantBits) | ((1u << f.mantBits) - 2);  // S.1111.110 = 448
      bits = field > static_cast<int>(expMax) ? maxBits
                                              : std::min(maxBits, (static_cast<uint32_t>(field) << f.mantBits) | mant);
    } else if (field >= static_cast<int>(expMax)) {
      bits = expMax << f.mantBits;  // infinity
    } else {
      bits = (static_cast<uint32_t>(field) << f.mantBits) | mant;
    }
  }
  return sign | bits;
}

double decodeMini(uint32_t bits, MiniFormat f) {
  const uint32_t expMax = (1u << f.expBits) - 1;
  const int bias = static_cast<int>(expMax >> 1);
  bool neg = (bits >> (f.expBits + f.mantBits)) & 1;
  uint32_t field = (bits >> f.mantBits) & expMax;
  uint32_t mant = bits & ((1u << f.mantBits) - 1);
  double v;
  if (f.finiteOnly && field == expMax && mant == (1u << f.mantBits) - 1) {
    v = NAN;
  } else if (!f.finiteOnly && field == expMax) {
    v = mant ? NAN : INFINITY;
  } else if (field == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - f.mantBits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mantBits), static_cast<int>(field) - bias);
  }
  return neg ? -v : v;
}

// Largest integer every partial result may reach and still be exact in the dtype.
double maxExact(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return 127;
    case ncclUint8:
      return 255;
    case ncclFloat16:
      return 2048;
    case ncclBfloat16:
      return 256;
    case ncclFloat8e4m3:
      return 16;
    case ncclFloat8e5m2:
      return 8;
    default:
      return 1 << 20;  // 32/64-bit types: plenty, and keeps values readable in a debugger
  }
}

bool isSignedType(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64 || isFloatType(t); }

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The input of (rank, index) for one (dtype, op, nranks, seed): small integers sized so no reduction overflows.
struct ValueGen {
  int op;
  int nranks;
  uint64_t seed;
  int64_t span = 0;  // inputs are u - (centered ? span/2 : 0) for u in [0, span]
  bool centered = false;

  ValueGen(ncclDataType_t t, int op_, int nranks_, uint64_t seed_) : op(op_), nranks(nranks_), seed(seed_) {
    double m = maxExact(t);
    if (op == kOpSum || op == kOpAvg) m /= nranks;
    if (op == kOpMulSum) m /= 2.0 * nranks;
    span = static_cast<int64_t>(std::min(62.0, std::floor(m)));
    centered = isSignedType(t);
  }

  double input(int rank, size_t index) const {
    uint64_t h = mix(seed * 0x100000001b3ull ^ mix(static_cast<uint64_t>(rank) << 40 ^ index));
    if (op == kOpProd) {
      // At most one rank contributes a 2 per element, so every product is 1 or 2 and never overflows.
      return (index % static_cast<size_t>(nranks) == static_cast<size_t>(rank) && ((h >> 7) & 1)) ? 2 : 1;
    }
    auto u = static_cast<int64_t>(h % static_cast<uint64_t>(span + 1));
    return static_cast<double>(centered ? u - span / 2 : u);
  }

  double expected(size_t index, bool integer) const {
    double acc = input(0, index);
    if (op == kOpMulSum) acc *= premulScalar(0);
    for (int r = 1; r < nranks; r++) {
      double v = input(r, index);
      switch (op) {
        case kOpProd:
          acc *= v;
          break;
        case kOpMax:
          acc = std::max(acc, v);
          break;
        case kOpMin:
          acc = std::min(acc, v);
          break;
        case kOpMulSum:
          acc += premulScalar(r) * v;
          break;
        default:
          acc += v;
          break;
      }
    }
    if (op == kOpAvg) acc = integer ? std::trunc(acc / nranks) : acc / nranks;
    return acc;
  }
};

// Integer types: the values are exact small integers, so a cast is the encoding.
template <class T, class Fn>
void storeInts(void* buf, size_t count, const Fn& value) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; i++) p[i] = static_cast<T>(static_cast<int64_t>(value(i)));
}

template <class T, class Fn>
void storeFloats(void* buf, size_t count, const Fn& value) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; i++) p[i] = static_cast<T>(value(i));
}

template <class Bits, class Fn>
void storeMini(void* buf, size_t count, MiniFormat f, const Fn& value) {
  Bits* p = static_cast<Bits*>(buf);
  for (size_t i = 0; i < count; i++) p[i] = static_cast<Bits>(encodeMini(value(i), f));
}

// Writes value(i) for i < count in dtype t; the dtype switch happens once, not per element.
template <class Fn>
void storeValues(ncclDataType_t t, void* buf, size_t count, const Fn& value) {
  switch (t) {
    case ncclInt8:
      return storeInts<int8_t>(buf, count, value);
    case ncclUint8:
      return storeInts<uint8_t>(buf, count, value);
    case ncclInt32:
      return storeInts<int32_t>(buf, count, value);
    case ncclUint32:
      return storeInts<uint32_t>(buf, count, value);
    case ncclInt64:
      return storeInts<int64_t>(buf, count, value);
    case ncclUint64:
      return storeInts<uint64_t>(buf, count, value);
    case ncclFloat16:
      return storeMini<uint16_t>(buf, count, kHalf, value);
    case ncclBfloat16:
      return storeMini<uint16_t>(buf, count, kBf16, value);
    case ncclFloat8e4m3:
      return storeMini<uint8_t>(buf, count, kE4m3, value);
    case ncclFloat8e5m2:
      return storeMini<uint8_t>(buf, count, kE5m2, value);
    case ncclFloat32:
      return storeFloats<float>(buf, count, value);
    case ncclFloat64:
      return storeFloats<double>(buf, count, value);
    default:
      return;
  }
}

double decode(ncclDataType_t t, const void* p) {
  switch (t) {
    case ncclFloat16:
      return decodeMini(*static_cast<const uint16_t*>(p), kHalf);
    case ncclBfloat16:
      return decodeMini(*static_cast<const uint16_t*>(p), kBf16);
    case ncclFloat8e4m3:
      return decodeMini(*static_cast<const uint8_t*>(p), kE4m3);
    case ncclFloat8e5m2:
      return decodeMini(*static_cast<const uint8_t*>(p), kE5m2);
    case ncclFloat32:
      return *static_cast<const float*>(p);
    case ncclFloat64:
      return *static_cast<const double*>(p);
    default:
      return 0;
  }
}

// Unit roundoff of the floating types (relative spacing at 1).
double epsilon(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
      return std::ldexp(1.0, -10);
    case ncclBfloat16:
      return std::ldexp(1.0, -7);
    case ncclFloat8e4m3:
      return std::ldexp(1.0, -3);
    case ncclFloat8e5m2:
      return std::ldexp(1.0, -2);
    case ncclFloat32:
      return std::ldexp(1.0, -23);
    default:
      return std::ldexp(1.0, -52);
  }
}

}  // namespace

size_t wordSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* typeName(ncclDataType_t type) {
  static const char* const kNames[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                       "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  int t = static_cast<int>(type);
  return t >= 0 && t < ncclNumTypes ? kNames[t] : "?";
}

const char* opName(int op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "mulsum"};
  return op >= 0 && op < kNumPerfOps ? kNames[op] : "?";
}

bool isFloatType(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

double premulScalar(int rank) { return (rank & 1) ? 2.0 : 1.0; }

void encodeScalar(double value, ncclDataType_t type, uint64_t* out) {
  *out = 0;
  storeValues(type, out, 1, [&](size_t) { return value; });
}

void fillInput(void* buf, size_t count, size_t offset, ncclDataType_t type, int op, int nranks, int rank,
               uint64_t seed) {
  ValueGen gen(type, op, nranks, seed);
  storeValues(type, buf, count, [&](size_t i) { return gen.input(rank, offset + i); });
}

void fillExpected(void* buf, size_t count, size_t offset, ncclDataType_t type, int op, int nranks, uint64_t seed) {
  ValueGen gen(type, op, nranks, seed);
  bool integer = !isFloatType(type);
  storeValues(type, buf, count, [&](size_t i) { return gen.expected(offset + i, integer); });
}

int64_t countWrong(const void* got, const void* want, size_t count, ncclDataType_t type, int op, int nranks) {
  size_t w = wordSize(type);
  auto g = static_cast<const char*>(got);
  auto e = static_cast<const char*>(want);
  int64_t wrong = 0;
  if (op == kOpAvg && isFloatType(type)) {
    // Premulsum by 1/n rounds each term; inputs are at most 31 in magnitude, so n terms may each be off by
    // half a unit at 32 (generous, but still catches a missing or doubled contribution).
    double tol = epsilon(type) * 32.0 * nranks;
    for (size_t i = 0; i < count; i++) {
      double a = decode(type, g + i * w), b = decode(type, e + i * w);
      if (!(std::fabs(a - b) <= tol)) wrong++;  // NaN counts as wrong
    }
    return wrong;
  }
  if (std::memcmp(got, want, count * w) == 0) return 0;  // the common case, at memory speed
  for (size_t i = 0; i < count; i++) wrong += std::memcmp(g + i * w, e + i * w, w) != 0;
  return wrong;
}

}  // namespace perf
}  // namespace chorus
