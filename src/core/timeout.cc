#include "core/timeout.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/debug.h"
#include "core/params.h"

namespace chorus {
namespace {
IntParam kTimeoutS{"CHORUS_TIMEOUT_S", 300,
                   "Seconds any single wait (bootstrap, connection, peer progress) may last before the call fails "
                   "with an error naming the rank and peer; 0 waits forever.",
                   "reliability"};
IntParam kWaitWarnS{"CHORUS_WAIT_WARN_S", 10,
                    "Seconds after which a bootstrap or connection wait that is still going logs one WARN naming the "
                    "communicator, the step and the ranks it still waits for; 0 never does.",
                    "reliability"};
IntParam kSpinIters{"CHORUS_SPIN_ITERS", 100,
                    "Polls a waiting thread spins before it starts yielding the core (then sleeping). A yield costs "
                    "little on a core of its own and hands over a shared one: 2000 made 4 ranks on 2 cores 2-9x "
                    "slower (docs/perf/cpu.md).",
                    "performance"};
IntParam kSocketRetryCnt{"NCCL_SOCKET_RETRY_CNT", 34,
                         "As in NCCL, with NCCL_SOCKET_RETRY_SLEEP_MSEC: where either is set, a rank keeps trying a "
                         "bootstrap root that refuses it (not listening yet: NCCL_COMM_ID's rank 0 not started) for "
                         "NCCL's window, the sum of its linear back-off, SLEEP_MSEC x (1 + 2 + ... + CNT) ms (59.5 s "
                         "with NCCL's defaults), instead of CHORUS_TIMEOUT_S; and the rendezvous (the root's wait for "
                         "the last rank, a rank's wait for the root's answer) lasts at least that long, so ranks "
                         "started that far apart still meet. Unset: CHORUS_TIMEOUT_S bounds each.",
                         "reliability"};
IntParam kSocketRetrySleepMs{"NCCL_SOCKET_RETRY_SLEEP_MSEC", 100,
                             "As in NCCL: the back-off step of NCCL_SOCKET_RETRY_CNT's retries, in ms (see there).",
                             "reliability"};
}  // namespace

double timeoutSeconds() { return static_cast<double>(kTimeoutS.get()); }

double socketRetryWindowSeconds() {
  if (!kSocketRetryCnt.isSet() && !kSocketRetrySleepMs.isSet()) return -1;
  const double n = static_cast<double>(std::max<int64_t>(0, kSocketRetryCnt.get()));
  const double sleepMs = static_cast<double>(std::max<int64_t>(0, kSocketRetrySleepMs.get()));
  return sleepMs * n * (n + 1) / 2 / 1000;
}

double rendezvousSeconds() {
  const double timeoutS = timeoutSeconds(), window = socketRetryWindowSeconds();
  return timeoutS > 0 && window > timeoutS ? window : timeoutS;
}

std::string secondsText(double s) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string rankListText(const std::vector<int>& ranks) {
  constexpr size_t kShown = 16;
  std::string text;
  for (size_t i = 0; i < ranks.size() && i < kShown; i++) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) text += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return text;
}

double waitWarnSeconds() { return static_cast<double>(kWaitWarnS.get()); }

SlowWait::SlowWait() : start_(Deadline::Clock::now()), after_(waitWarnSeconds()) {}

double SlowWait::elapsed() const { return std::chrono::duration<double>(Deadline::Clock::now() - start_).count(); }

std::string SlowWait::elapsedText() const {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.0f", elapsed());
  return buf;
}

bool SlowWait::due() const { return after_ > 0 && elapsed() >= after_; }

void SlowWait::warn(const std::string& text) { WARN("%s", text.c_str()); }

Deadline Deadline::after(double seconds) {
  Deadline d;
  d.seconds_ = seconds;
  d.infinite_ = seconds <= 0;
  if (!d.infinite_) d.end_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return d;
}

int Deadline::remainingMs() const {
  if (infinite_) return INT_MAX;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - Clock::now()).count();
  if (left < 0) return 0;
  if (left > INT_MAX) return INT_MAX;
  return static_cast<int>(left);
}

void Backoff::pause() {
  static thread_local int64_t spin = -1;
  if (spin < 0) spin = kSpinIters.get();
  ++iter_;
  if (static_cast<int64_t>(iter_) < spin) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    yieldOrSleep(static_cast<uint64_t>(static_cast<int64_t>(iter_) - spin));
  }
}

void Backoff::yield() { yieldOrSleep(++iter_); }

void Backoff::yieldOrSleep(uint64_t polls) {
  if (polls < 20000) {
    // Yielding hands the core to a rank that shares it and costs nothing when none does;
    // this phase covers peers that arrive a few milliseconds late without adding latency.
    sched_yield();
  } else {
    // A long wait: sleep briefly so an idle rank does not burn a core.
    struct timespec ts = {0, 20000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace chorus
