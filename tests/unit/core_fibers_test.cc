// Fibers (src/core/fibers.h): tasks side by side on one thread, switching where a task would wait. The host engine
// runs a rank's channels this way, so these check what it relies on: tasks that wait on each other finish on one
// thread, each task sees its own index, a failure stops the others and is what run() returns, stacks are deep
// enough and are reused from one run to the next.
#include "core/fibers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace chorus {
namespace {

// tests/CMakeLists.txt builds this file twice: with the x86-64 switch and with swapcontext.
#if CHORUS_FIBERS_ASM
#define FIBERS_SUITE Fibers
#else
#define FIBERS_SUITE FibersUcontext
#endif

// Waits for `done` through the fibers, as the host platform's waits do; returns the stopping failure if another task
// failed.
template <class Done>
ncclResult_t waitOn(Fibers& f, Done done) {
  while (!done()) {
    if (!f.wait(done)) return ncclInternalError;  // no other task could ever make `done` true
    if (f.stopped() != ncclSuccess) return f.stopped();
  }
  return ncclSuccess;
}

// Two tasks that hand a counter back and forth 1000 times: on one thread this finishes only if each wait lets the
// other task run.
TEST(FIBERS_SUITE, TasksThatWaitOnEachOtherFinishOnOneThread) {
  Fibers f;
  int a = 0, b = 0;
  std::string order;
  std::vector<Fibers::Task> tasks = {
      [&]() {
        for (int k = 1; k <= 1000; k++) {
          a = k;
          if (k <= 3) order += "a" + std::to_string(k);
          if (ncclResult_t r = waitOn(f, [&] { return b == k; })) return r;
        }
        return ncclSuccess;
      },
      [&]() {
        for (int k = 1; k <= 1000; k++) {
          if (ncclResult_t r = waitOn(f, [&] { return a == k; })) return r;
          if (k <= 3) order += "b" + std::to_string(k);
          b = k;
        }
        return ncclSuccess;
      }};
  EXPECT_EQ(f.run(tasks), ncclSuccess);
  EXPECT_EQ(a, 1000);
  EXPECT_EQ(b, 1000);
  EXPECT_EQ(order, "a1b1a2b2a3b3");
  EXPECT_FALSE(f.running());
  auto never = [] { return false; };
  EXPECT_FALSE(f.wait(never));  // outside run()
}

TEST(FIBERS_SUITE, EachTaskSeesItsOwnIndex) {
  Fibers f;
  std::vector<int> seen(4, -1), seenAfterPass(4, -1);
  int arrived = 0;
  std::vector<Fibers::Task> tasks;
  for (int i = 0; i < 4; i++) {
    tasks.push_back([&, i]() {
      seen[i] = f.current();
      arrived++;
      ncclResult_t r = waitOn(f, [&] { return arrived == 4; });  // every task has started before any ends
      seenAfterPass[i] = f.current();
      return r;
    });
  }
  EXPECT_EQ(f.run(tasks), ncclSuccess);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(seen[i], i);
    EXPECT_EQ(seenAfterPass[i], i);
  }
  EXPECT_EQ(f.current(), 0);
}

// Task 1 fails once tasks 0 and 2 wait for something that never comes: they see the failure at once and return it,
// run() returns the first failure, and the later ncclInternalError of task 2 does not replace it.
TEST(FIBERS_SUITE, AFailureStopsTheOthers) {
  Fibers f;
  std::vector<ncclResult_t> got(3, ncclSuccess);
  int waiting = 0;
  auto never = [] { return false; };
  std::vector<Fibers::Task> tasks = {
      [&]() {
        waiting++;
        return got[0] = waitOn(f, never);
      },
      [&]() {
        waitOn(f, [&] { return waiting == 2; });
        return got[1] = ncclRemoteError;
      },
      [&]() {
        waiting++;
        ncclResult_t r = waitOn(f, never);
        got[2] = r;
        return r == ncclSuccess ? ncclSuccess : ncclInternalError;
      }};
  EXPECT_EQ(f.run(tasks), ncclRemoteError);
  EXPECT_EQ(got[0], ncclRemoteError);
  EXPECT_EQ(got[1], ncclRemoteError);
  EXPECT_EQ(got[2], ncclRemoteError);
  // The next run starts clean, on the same stacks.
  int ran = 0;
  std::vector<Fibers::Task> ok = {[&]() { ran++; return ncclSuccess; }, [&]() { ran++; return ncclSuccess; }};
  EXPECT_EQ(f.run(ok), ncclSuccess);
  EXPECT_EQ(f.stopped(), ncclSuccess);
  EXPECT_EQ(ran, 2);
}

// A task whose condition stays false is still resumed every kPolls polls (a wait's deadline and liveness checks run
// then), here five times before it gives up; the other task waits for it to give up.
TEST(FIBERS_SUITE, AWaitIsResumedForItsChecks) {
  Fibers f;
  int resumed = 0;
  bool gaveUp = false;
  auto never = [] { return false; };
  std::vector<Fibers::Task> tasks = {
      [&]() {
        while (resumed < 5) {
          if (!f.wait(never)) return ncclInternalError;
          resumed++;
        }
        gaveUp = true;
        return ncclSuccess;
      },
      [&]() { return waitOn(f, [&] { return gaveUp; }); }};
  EXPECT_EQ(f.run(tasks), ncclSuccess);
  EXPECT_EQ(resumed, 5);
}

// A lone task runs on the caller's stack and has nobody to hand the thread to.
TEST(FIBERS_SUITE, ALoneTaskDoesNotPass) {
  Fibers f;
  bool passed = true;
  std::vector<Fibers::Task> one = {[&]() {
    auto never = [] { return false; };
    passed = f.wait(never);
    return ncclInvalidArgument;
  }};
  EXPECT_EQ(f.run(one), ncclInvalidArgument);
  EXPECT_FALSE(passed);
  // The last task left has nobody either.
  std::vector<bool> passes;
  std::vector<Fibers::Task> two = {[&]() { return ncclSuccess; },
                                   [&]() {
                                     auto never = [] { return false; };
                                     passes.push_back(f.wait(never));
                                     return ncclSuccess;
                                   }};
  EXPECT_EQ(f.run(two), ncclSuccess);
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_FALSE(passes[0]);
}

// Stacks hold a few hundred KB of locals (a task is executor code and error formatting: far less), and many runs
// reuse them.
TEST(FIBERS_SUITE, DeepStacksAndManyRuns) {
  Fibers f;
  long total = 0;
  for (int run = 0; run < 200; run++) {
    std::vector<Fibers::Task> tasks;
    int arrived = 0;
    for (int i = 0; i < 3; i++) {
      tasks.push_back([&, i]() {
        volatile char big[300 * 1024];
        for (size_t k = 0; k < sizeof(big); k += 4096) big[k] = static_cast<char>(i + 1);
        arrived++;
        if (ncclResult_t r = waitOn(f, [&] { return arrived == 3; })) return r;  // all three stacks in use at once
        long s = 0;
        for (size_t k = 0; k < sizeof(big); k += 4096) s += big[k];
        total += s;
        return ncclSuccess;
      });
    }
    ASSERT_EQ(f.run(tasks), ncclSuccess);
  }
  EXPECT_EQ(total, 200L * (1 + 2 + 3) * (300 * 1024 / 4096));
}

}  // namespace
}  // namespace chorus
