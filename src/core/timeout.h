// Deadlines: every wait in chorus has one (CHORUS_TIMEOUT_S) and watches an abort flag.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

/// CHORUS_TIMEOUT_S: seconds any single wait may last before it fails with a message.
double timeoutSeconds();

/// NCCL_SOCKET_RETRY_CNT / NCCL_SOCKET_RETRY_SLEEP_MSEC, where either is set: how long NCCL keeps connecting to a
/// bootstrap root that refuses (the sum of its linear back-off), in seconds; -1 when neither is set.
double socketRetryWindowSeconds();
/// How long the bootstrap's rendezvous may last (the root's wait for every rank, a rank's wait for its answer):
/// CHORUS_TIMEOUT_S, or socketRetryWindowSeconds() where that is longer (0: forever, as CHORUS_TIMEOUT_S=0).
double rendezvousSeconds();

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

/// A duration in seconds as messages print it ("2.5").
std::string secondsText(double s);
/// "2, 5, 7": a list of ranks for messages, cut after 16 with the total count.
std::string rankListText(const std::vector<int>& ranks);

/// CHORUS_WAIT_WARN_S: seconds after which a wait that is still going says what it waits for (0: never).
double waitWarnSeconds();

/// One WARN line for a wait that has lasted long (CHORUS_WAIT_WARN_S) but not yet reached its deadline, so that a
/// user sees what it waits for (the communicator, the step, the ranks still missing) long before the timeout ends
/// it. Construct it when the wait starts and call check() from the wait's loop; the text is built only when due.
class SlowWait {
 public:
  SlowWait();
  /// Logs describe()'s text once, the first time it is called after the threshold.
  template <class Describe>
  void check(Describe&& describe) {
    if (!warned_ && due()) {
      warned_ = true;
      warn(describe());
    }
  }
  /// Seconds since the wait started.
  double elapsed() const;
  /// The same, whole, for messages ("10").
  std::string elapsedText() const;

 private:
  bool due() const;
  static void warn(const std::string& text);
  Deadline::Clock::time_point start_;
  double after_;
  bool warned_ = false;
};

/// Backoff for a polling wait: spins briefly, then yields, then sleeps (ranks may outnumber cores).
class Backoff {
 public:
  void pause();
  /// pause() without the spinning phase: yields at once (then sleeps as pause() does). For a wait whose polls are
  /// system calls, which a rank sharing the core should not wait behind.
  void yield();
  void reset() { iter_ = 0; }
  uint64_t iterations() const { return iter_; }

 private:
  /// The phases after spinning: yields for the first 20000 polls, then sleeps 20 us a poll.
  static void yieldOrSleep(uint64_t polls);
  uint64_t iter_ = 0;
};

}  // namespace chorus
