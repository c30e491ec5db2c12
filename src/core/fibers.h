// Fibers: several tasks side by side on one thread, each on a stack of its own, switching only where a task would
// otherwise wait. The host engine runs a rank's channels this way: when one channel's wait finds nothing ready, the
// thread goes on with another channel instead of spinning, so two trees (or several ring channels) keep their links
// busy at once without a thread each. Nothing is shared between threads, so the tasks need no locks.
#pragma once

#include <ucontext.h>

#include <functional>
#include <vector>

#include "core/timeout.h"
#include "nccl.h"

// The switch of a few instructions exists for x86-64; elsewhere (or with CHORUS_FIBERS_UCONTEXT defined, which
// tests that path on x86-64) switches go through swapcontext. So do builds for shadow stacks (-fcf-protection sets
// bit 2 of __CET__): the switch returns into a new stack where no call was made, which a shadow stack refuses, and
// glibc's swapcontext keeps the shadow stack in step.
#if defined(__x86_64__) && !defined(CHORUS_FIBERS_UCONTEXT) && !(defined(__CET__) && (__CET__ & 2))
#define CHORUS_FIBERS_ASM 1
#else
#define CHORUS_FIBERS_ASM 0
#endif

namespace chorus {

class Fibers {
 public:
  using Task = std::function<ncclResult_t()>;

  Fibers() = default;
  Fibers(const Fibers&) = delete;
  Fibers& operator=(const Fibers&) = delete;
  ~Fibers();

  /// Runs every task to its end on this thread. A task that fails stops the others: their next wait() returns with
  /// stopped() set, and they are expected to return it. Returns the first failure, or ncclSuccess.
  ncclResult_t run(const std::vector<Task>& tasks);
  /// With a poller, a sweep in which no task could run calls it (it moves data the tasks wait for: a rank's thread
  /// that drives its net) and, when it moved nothing, yields at once instead of spinning first. Null: none.
  void setPoller(bool (*poll)(void*), void* arg) {
    poll_ = poll;
    pollArg_ = arg;
  }

  /// From inside a task whose wait found nothing ready: hands the thread to the other tasks until ready(arg) holds,
  /// or until it has been polled kPolls times without (so the caller can make the checks of a long wait: deadline,
  /// liveness, abort). While no task can go on, the thread polls their conditions without switching, and backs off
  /// (spin, yield, sleep) as a lone waiter does. Returns false, at once, outside run() or when no other task is
  /// left: the caller waits on its own then. When it returns true, stopped() says whether another task failed.
  bool wait(bool (*ready)(void*), void* arg);
  template <class Ready>
  bool wait(Ready& ready) {
    return wait([](void* r) { return (*static_cast<Ready*>(r))(); }, &ready);
  }
  static constexpr int kPolls = 64;

  /// The first failure of a task in this run (ncclSuccess while there is none).
  ncclResult_t stopped() const { return stop_; }
  /// After run() returned ncclSystemError without running a task: the errno of mapping a stack; 0 otherwise.
  int mapErrno() const { return mapErrno_; }
  /// Index of the running task; 0 outside run().
  int current() const { return running_ ? cur_ : 0; }
  /// Whether the caller runs inside run().
  bool running() const { return running_; }

 private:
  /// Where a suspended task (or run() itself) resumes.
  struct Context {
#if CHORUS_FIBERS_ASM
    void* sp = nullptr;  ///< its stack pointer, the saved registers on top
#else
    ucontext_t uc;
    static void start(unsigned fLo, unsigned fHi, unsigned aLo, unsigned aHi);
#endif
    /// Makes a fresh context that calls fn(arg) on the stack [stack, stack + bytes); fn must not return.
    void prepare(void* stack, size_t bytes, void (*fn)(void*), void* arg);
    /// Saves the running context here and resumes `to`.
    void switchTo(Context* to);
  };
  struct Fiber {
    Context ctx;
    void* stack = nullptr;  ///< mmap'd, a guard page below
    size_t stackBytes = 0;
    bool done = false;
    bool (*ready)(void*) = nullptr;  ///< what the task waits for (null: it can run)
    void* arg = nullptr;
    int polls = 0;  ///< of ready while nothing else ran
  };
  static void entry(void* self);
  void body();

  std::vector<Fiber> fibers_;
  const std::vector<Task>* tasks_ = nullptr;
  Context main_;
  int cur_ = 0;
  int live_ = 0;
  bool running_ = false;
  Backoff backoff_;
  bool (*poll_)(void*) = nullptr;
  void* pollArg_ = nullptr;
  ncclResult_t stop_ = ncclSuccess;
  int mapErrno_ = 0;
};

}  // namespace chorus
