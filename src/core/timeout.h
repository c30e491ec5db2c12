// Deadlines: every wait in chorus has one (CHORUS_TIMEOUT_S) and watches an abort flag.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace chorus {

/// CHORUS_TIMEOUT_S: seconds any single wait may last before it fails with a message.
double timeoutSeconds();

/// A point in time after which a wait gives up.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  /// A deadline `seconds` from now (<= 0: never).
  static Deadline after(double seconds);
  /// The default deadline: CHORUS_TIMEOUT_S from now.
  static Deadline fromEnv() { return after(timeoutSeconds()); }
  bool expired() const { return !infinite_ && Clock::now() >= end_; }
  /// Milliseconds left (clamped to [0, INT32_MAX]; INT32_MAX when infinite).
  int remainingMs() const;
  double seconds() const { return seconds_; }

 private:
  Clock::time_point end_{};
  double seconds_ = 0;
  bool infinite_ = true;
};

/// Backoff for a polling wait: spins briefly, then yields, then sleeps (ranks may outnumber cores).
class Backoff {
 public:
  void pause();
  void reset() { iter_ = 0; }
  uint64_t iterations() const { return iter_; }

 private:
  uint64_t iter_ = 0;
};

}  // namespace chorus
