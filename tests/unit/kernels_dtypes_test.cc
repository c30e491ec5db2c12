// Conversions of the narrow float types against an independent reference (tests/unit/kernels_reference.h), known
// bit patterns, special values, and the DType helper.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kernels/dtypes.h"
#include "kernels_reference.h"

namespace chorus {
namespace {

namespace ref = reference;

float f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Type-erased access to the four narrow types, so every test runs on each.
struct Narrow {
  const char* name;
  ref::Format format;
  uint32_t (*fromFloat)(float);
  float (*toFloat)(uint32_t);
};

const Narrow kNarrow[] = {
    {"fp16", ref::kHalf, [](float f) -> uint32_t { return Half::fromFloat(f).bits; },
     [](uint32_t b) { return Half{uint16_t(b)}.toFloat(); }},
    {"bf16", ref::kBf16, [](float f) -> uint32_t { return BFloat16::fromFloat(f).bits; },
     [](uint32_t b) { return BFloat16{uint16_t(b)}.toFloat(); }},
    {"e4m3", ref::kE4M3, [](float f) -> uint32_t { return Fp8E4M3::fromFloat(f).bits; },
     [](uint32_t b) { return Fp8E4M3{uint8_t(b)}.toFloat(); }},
    {"e5m2", ref::kE5M2, [](float f) -> uint32_t { return Fp8E5M2::fromFloat(f).bits; },
     [](uint32_t b) { return Fp8E5M2{uint8_t(b)}.toFloat(); }},
};

uint32_t patternCount(const ref::Format& f) { return 1u << (1 + f.expBits + f.manBits); }

TEST(KernelsDtypes, KnownBitPatterns) {
  EXPECT_EQ(Half::fromFloat(1.0f).bits, 0x3C00);
  EXPECT_EQ(Half::fromFloat(-2.0f).bits, 0xC000);
  EXPECT_EQ(Half::fromFloat(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(Half::fromFloat(0.0f).bits, 0x0000);
  EXPECT_EQ(Half::fromFloat(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half::fromFloat(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(Half::fromFloat(std::ldexp(1.0f, -14)).bits, 0x0400);  // smallest normal
  EXPECT_EQ(BFloat16::fromFloat(1.0f).bits, 0x3F80);
  EXPECT_EQ(BFloat16::fromFloat(-1.5f).bits, 0xBFC0);
  EXPECT_EQ(Fp8E4M3::fromFloat(448.0f).bits, 0x7E);
  EXPECT_EQ(Fp8E4M3::fromFloat(1.0f).bits, 0x38);
  EXPECT_EQ(Fp8E4M3::fromFloat(-448.0f).bits, 0xFE);
  EXPECT_EQ(Fp8E4M3::fromFloat(std::ldexp(1.0f, -9)).bits, 0x01);
  EXPECT_EQ(Fp8E5M2::fromFloat(57344.0f).bits, 0x7B);
  EXPECT_EQ(Fp8E5M2::fromFloat(1.0f).bits, 0x3C);
  EXPECT_EQ(Fp8E5M2::fromFloat(std::ldexp(1.0f, -16)).bits, 0x01);

  EXPECT_EQ(Half{0x3C00}.toFloat(), 1.0f);
  EXPECT_EQ(Half{0x0001}.toFloat(), std::ldexp(1.0f, -24));
  EXPECT_EQ(BFloat16{0x3F80}.toFloat(), 1.0f);
  EXPECT_EQ(BFloat16{0x0001}.toFloat(), std::ldexp(1.0f, -133));
  EXPECT_EQ(Fp8E4M3{0x7E}.toFloat(), 448.0f);
  EXPECT_EQ(Fp8E5M2{0x7B}.toFloat(), 57344.0f);
  EXPECT_EQ(Fp8E4M3{0x01}.toFloat(), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E5M2{0x01}.toFloat(), std::ldexp(1.0f, -16));
}

TEST(KernelsDtypes, RoundToNearestEvenSpotChecks) {
  // fp16 around 1: ulp 2^-10. Halfway between 1 and 1+ulp goes to 1 (even); halfway above 1+ulp goes up.
  EXPECT_EQ(Half::fromFloat(1.0f + std::ldexp(1.0f, -11)).bits, 0x3C00);
  EXPECT_EQ(Half::fromFloat(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3C02);
  EXPECT_EQ(Half::fromFloat(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)).bits, 0x3C01);
  EXPECT_EQ(Half::fromFloat(std::ldexp(1.0f, -25)).bits, 0x0000);                          // tie: 0 is even
  EXPECT_EQ(Half::fromFloat(std::ldexp(3.0f, -25)).bits, 0x0002);                          // tie: 2 is even
  EXPECT_EQ(Half::fromFloat(std::ldexp(1.0f, -25) + std::ldexp(1.0f, -40)).bits, 0x0001);  // just above
  EXPECT_EQ(Half::fromFloat(65519.0f).bits, 0x7BFF);                                       // below the 65520 midpoint
  // bf16 around 1: ulp 2^-7.
  EXPECT_EQ(BFloat16::fromFloat(1.0f + std::ldexp(1.0f, -8)).bits, 0x3F80);
  EXPECT_EQ(BFloat16::fromFloat(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3F82);
  // e4m3 around 1: ulp 2^-3; the 464 midpoint between 448 and (unrepresentable) 480 goes to 448.
  EXPECT_EQ(Fp8E4M3::fromFloat(1.0625f).bits, 0x38);
  EXPECT_EQ(Fp8E4M3::fromFloat(1.1875f).bits, 0x3A);
  EXPECT_EQ(Fp8E4M3::fromFloat(464.0f).bits, 0x7E);
  // e5m2 around 1: ulp 2^-2.
  EXPECT_EQ(Fp8E5M2::fromFloat(1.125f).bits, 0x3C);
  EXPECT_EQ(Fp8E5M2::fromFloat(1.375f).bits, 0x3E);
}

TEST(KernelsDtypes, OverflowInfAndSaturation) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Half::fromFloat(65520.0f).bits, 0x7C00);  // midpoint to 2^16 rounds to even: inf
  EXPECT_EQ(Half::fromFloat(1e6f).bits, 0x7C00);
  EXPECT_EQ(Half::fromFloat(-1e6f).bits, 0xFC00);
  EXPECT_EQ(Half::fromFloat(inf).bits, 0x7C00);
  EXPECT_EQ(Half::fromFloat(-inf).bits, 0xFC00);
  EXPECT_EQ(BFloat16::fromFloat(std::numeric_limits<float>::max()).bits, 0x7F80);
  EXPECT_EQ(BFloat16::fromFloat(-inf).bits, 0xFF80);
  // fp8: CUDA's __NV_SATFINITE clamps everything beyond max finite, inf included.
  EXPECT_EQ(Fp8E4M3::fromFloat(465.0f).bits, 0x7E);
  EXPECT_EQ(Fp8E4M3::fromFloat(1e30f).bits, 0x7E);
  EXPECT_EQ(Fp8E4M3::fromFloat(inf).bits, 0x7E);
  EXPECT_EQ(Fp8E4M3::fromFloat(-inf).bits, 0xFE);
  EXPECT_EQ(Fp8E5M2::fromFloat(61440.0f).bits, 0x7B);
  EXPECT_EQ(Fp8E5M2::fromFloat(inf).bits, 0x7B);
  EXPECT_EQ(Fp8E5M2::fromFloat(-inf).bits, 0xFB);
  // e5m2 has an inf encoding; it reads back as inf even though no conversion produces it.
  EXPECT_TRUE(std::isinf(Fp8E5M2{0x7C}.toFloat()));
  EXPECT_TRUE(std::isinf(Half{0xFC00}.toFloat()) && Half{0xFC00}.toFloat() < 0);
}

TEST(KernelsDtypes, NaNHandling) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float negNan = -nan;
  // Canonical NaN of each format, sign dropped, as CUDA's conversions do.
  EXPECT_EQ(Half::fromFloat(nan).bits, 0x7FFF);
  EXPECT_EQ(Half::fromFloat(negNan).bits, 0x7FFF);
  EXPECT_EQ(BFloat16::fromFloat(nan).bits, 0x7FFF);
  EXPECT_EQ(Fp8E4M3::fromFloat(nan).bits, 0x7F);
  EXPECT_EQ(Fp8E5M2::fromFloat(negNan).bits, 0x7F);
  EXPECT_EQ(Half::fromFloat(f32(0x7F800001u)).bits, 0x7FFF);  // signalling NaN too
  // Every NaN encoding reads back as NaN; e4m3 has exactly two, e5m2 six.
  for (const Narrow& t : kNarrow) {
    int nans = 0;
    for (uint32_t b = 0; b < patternCount(t.format); ++b) {
      const bool isNan = std::isnan(t.toFloat(b));
      EXPECT_EQ(isNan, ref::isNaNBits(t.format, b)) << t.name << " bits " << b;
      nans += isNan;
    }
    if (t.format.expBits == 4) {
      EXPECT_EQ(nans, 2);
    }
    if (t.format.expBits == 5 && t.format.manBits == 2) {
      EXPECT_EQ(nans, 6);
    }
  }
}

TEST(KernelsDtypes, EveryEncodingDecodesExactlyAndRoundTrips) {
  for (const Narrow& t : kNarrow) {
    for (uint32_t b = 0; b < patternCount(t.format); ++b) {
      const double want = ref::valueOf(t.format, b);
      const float got = t.toFloat(b);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << t.name << " bits " << b;
        EXPECT_EQ(t.fromFloat(got), ref::roundTo(t.format, want)) << t.name << " NaN bits " << b;
        continue;
      }
      ASSERT_EQ(double(got), want) << t.name << " bits " << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << t.name << " bits " << b;
      if (std::isinf(want) && t.format.saturates) {
        // e5m2's inf encoding reads as inf, but converting inf saturates (SATFINITE): it does not round-trip.
        ASSERT_EQ(t.fromFloat(got), ref::roundTo(t.format, want)) << t.name << " bits " << b;
        continue;
      }
      ASSERT_EQ(t.fromFloat(got), b) << t.name << " bits " << b;
    }
  }
}

// Midpoints between neighbours, and points a hair either side, are where rounding goes wrong.
TEST(KernelsDtypes, MidpointsRoundToNearestEven) {
  for (const Narrow& t : kNarrow) {
    const ref::ValueTable& table = ref::tableOf(t.format);
    int64_t checked = 0;
    for (size_t i = 0; i + 1 < table.values.size(); ++i) {
      const double lo = table.values[i];
      const double hi = table.values[i + 1];
      const double mid = (lo + hi) / 2;  // exact: both have few mantissa bits
      const float midf = float(mid);
      ASSERT_EQ(double(midf), mid);
      for (const float x : {midf, std::nextafter(midf, 0.0f), std::nextafter(midf, 1e30f)}) {
        for (const float s : {x, -x}) {
          ASSERT_EQ(t.fromFloat(s), ref::roundTo(t.format, s)) << t.name << " x=" << s;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 6 * 120) << t.name;
  }
}

TEST(KernelsDtypes, RandomFloatsMatchReference) {
  std::mt19937 rng(1234);
  for (const Narrow& t : kNarrow) {
    for (int i = 0; i < 200000; ++i) {
      const uint32_t raw = rng();
      float x = f32(raw);
      // Half the samples span every float (subnormals, huge, NaN); half land in the format's own range.
      if (i % 2) x = std::ldexp(float(int32_t(raw) >> 8) / float(1 << 23), int(rng() % 48) - 30);
      ASSERT_EQ(t.fromFloat(x), ref::roundTo(t.format, x)) << t.name << " x bits " << bitsOf(x);
    }
  }
}

// fp16 has a branch-light encoder for speed; it must agree with the generic one on every float exponent.
TEST(KernelsDtypes, FastHalfEncoderMatchesGeneric) {
  std::mt19937 rng(99);
  for (uint32_t e = 0; e < 256; ++e) {
    for (int i = 0; i < 2000; ++i) {
      const uint32_t bits = (uint32_t(rng() & 1) << 31) | (e << 23) | (rng() & 0x7fffffu);
      const float x = f32(bits);
      ASSERT_EQ(detail::floatToHalfBits(x), detail::encodeNarrow<detail::HalfFormat>(x)) << "bits " << bits;
      ASSERT_EQ(detail::floatToBFloat16Bits(x), detail::encodeNarrow<detail::BFloat16Format>(x)) << "bits " << bits;
    }
  }
}

TEST(KernelsDtypes, DTypeHelper) {
  const size_t sizes[kNumDataTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int d = 0; d < kNumDataTypes; ++d) EXPECT_EQ(DType::size(d), sizes[d]) << DType::name(d);
  EXPECT_EQ(DType::size(-1), 0u);
  EXPECT_EQ(DType::size(kNumDataTypes), 0u);
  EXPECT_FALSE(DType::valid(12));
  EXPECT_TRUE(DType::valid(11));
  EXPECT_TRUE(DType::isFloat(int(DataType::kBfloat16)));
  EXPECT_TRUE(DType::isFloat(int(DataType::kFloat8e5m2)));
  EXPECT_FALSE(DType::isFloat(int(DataType::kUint64)));
  EXPECT_TRUE(DType::isSignedInt(int(DataType::kInt8)));
  EXPECT_FALSE(DType::isSignedInt(int(DataType::kUint32)));
  EXPECT_STREQ(DType::name(int(DataType::kFloat8e4m3)), "ncclFloat8e4m3");
  EXPECT_STREQ(DType::name(99), "unknown");
  static_assert(DType::size(int(DataType::kFloat64)) == 8, "usable at compile time");
  static_assert(sizeof(ElementType<int(DataType::kFloat16)>::Type) == 2, "fp16 element");
  static_assert(std::is_same<ElementType<int(DataType::kUint64)>::Type, uint64_t>::value, "uint64 element");
}

}  // namespace
}  // namespace chorus
