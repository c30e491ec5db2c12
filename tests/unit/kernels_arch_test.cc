// kernels/arch.h on the host path: macros, bit casts, and the 64-bit load/store helpers used for FIFO counters,
// including a two-thread release/acquire handoff.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/arch.h"

namespace chorus {
namespace {

TEST(KernelsArch, HostPathMacros) {
  EXPECT_EQ(CHORUS_ON_DEVICE, 0);
  EXPECT_EQ(CHORUS_CUDA, 0);
  EXPECT_EQ(CHORUS_HIP, 0);
  static_assert(kWarpSize == 32, "host path slices like CUDA");
  EXPECT_EQ(kWarpSize, 32);
}

TEST(KernelsArch, BitCastsAndClz) {
  EXPECT_EQ(floatBits(1.0f), 0x3F800000u);
  EXPECT_EQ(floatBits(-0.0f), 0x80000000u);
  EXPECT_EQ(bitsFloat(0x40490FDBu), 3.14159274f);
  EXPECT_EQ(countLeadingZeros(1u), 31);
  EXPECT_EQ(countLeadingZeros(0x80000000u), 0);
  EXPECT_EQ(countLeadingZeros(0x00010000u), 15);
}

TEST(KernelsArch, LoadStoreHelpers) {
  uint64_t v = 0;
  storeRelaxed(&v, 0x0123456789ABCDEFull);
  EXPECT_EQ(loadRelaxed(&v), 0x0123456789ABCDEFull);
  storeRelease(&v, ~uint64_t(0));
  EXPECT_EQ(loadAcquire(&v), ~uint64_t(0));
  memoryFence();
  cpuRelax();
  EXPECT_EQ(v, ~uint64_t(0));
}

// A producer fills a payload and publishes a step counter with storeRelease; the consumer polls with loadAcquire
// and must see the payload of every step it observes. This is the connection FIFO's pattern. Both sides give up
// at a deadline (through `abort`) so a broken helper fails the test instead of hanging it.
TEST(KernelsArch, ReleaseAcquireHandoff) {
  constexpr uint64_t kSteps = 20000;
  constexpr int kWords = 16;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<uint64_t> payload(kWords, 0);
  uint64_t step = 0;
  uint64_t ack = 0;
  uint64_t abort = 0;
  // Spins until *p == want; false if the deadline passed or the other side aborted.
  auto waitFor = [&](const uint64_t* p, uint64_t want) {
    for (uint64_t spins = 1; loadAcquire(p) != want; ++spins) {
      cpuRelax();
      if (loadRelaxed(&abort) != 0) return false;
      if (spins % 4096 == 0 && std::chrono::steady_clock::now() > deadline) {
        storeRelease(&abort, 1);
        return false;
      }
    }
    return true;
  };
  std::thread producer([&] {
    for (uint64_t s = 1; s <= kSteps; ++s) {
      if (!waitFor(&ack, s - 1)) return;  // the consumer has read step s-1: the payload is ours again
      for (int w = 0; w < kWords; ++w) payload[w] = s * 1000 + uint64_t(w);
      storeRelease(&step, s);
    }
  });
  uint64_t bad = 0;
  uint64_t seen = 0;
  for (uint64_t s = 1; s <= kSteps; ++s) {
    if (!waitFor(&step, s)) break;
    for (int w = 0; w < kWords; ++w) bad += payload[w] != s * 1000 + uint64_t(w);
    seen = s;
    storeRelease(&ack, s);
  }
  producer.join();
  EXPECT_EQ(loadRelaxed(&abort), 0u) << "handoff did not finish within the deadline";
  EXPECT_EQ(seen, kSteps);
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace chorus
