// The per-thread part of the perf driver: nccl-tests' TimeTest, BenchTime, startColl and CheckData over a
// Backend, plus the thread team (barrier and reductions across threads and processes) and the -T watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perf/backend.h"
#include "perf/report.h"

namespace chorus {
namespace perf {

/// Exit statuses, nccl-tests' testResult_t values where one fits.
constexpr int kExitUsage = 1;
constexpr int kExitLibrary = 3;  ///< testNcclError: a call failed
constexpr int kExitTimeout = 4;  ///< testTimeout
constexpr int kExitResults = 5;  ///< testNumResults: wrong data, or busbw under NCCL_TESTS_MIN_BW

/// Ends the process now (flushing stdio). Used once a failure is printed: the other threads may be blocked in
/// the library or at a barrier, and the process's exit is what tells the peers (their store connection closes).
[[noreturn]] void die(int status);

/// Barrier and element-wise reduction over this process's threads, then over the processes (by the last
/// thread to arrive). Every thread must make the same calls in the same order.
class Team {
 public:
  Team(int nThreads, Control& ctl) : n_(nThreads), ctl_(ctl) {}
  /// Combines v over every thread of every process; kFirst keeps thread 0 of process 0's values.
  void reduce(int thread, std::vector<double>* v, Reduce op);
  /// Waits for every thread of every process.
  void barrier(int thread);

 private:
  const int n_;
  Control& ctl_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;          // guarded by mu_
  uint64_t generation_ = 0;  // bumped when a round completes; waiters leave on change
  std::vector<double> acc_, result_;
};

/// -T: ends the run (status kExitTimeout) when no call has completed for the given number of seconds.
class Watchdog {
 public:
  ~Watchdog();
  /// Starts watching (timeoutS <= 0: never fires).
  void start(int timeoutS, std::string host);
  /// Records progress.
  void poke() { last_.store(std::chrono::steady_clock::now().time_since_epoch().count()); }

 private:
  void loop();
  int timeoutS_ = 0;
  std::string host_;
  std::atomic<int64_t> last_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// One rank's buffers. send and recv are backend memory (device memory with --mem device); with device memory
/// hostSend/hostRecv mirror them for initData and result holds recv copied back for the check.
struct RankBuffers {
  char* send = nullptr;
  char* recv = nullptr;
  size_t bytes = 0;  ///< allocated size of send and recv
  std::vector<char> hostSend, hostRecv, result;
  std::vector<char> expected;
};

/// What one driving thread accumulates.
struct ThreadState {
  int thread = 0;
  double bwSum = 0;  ///< busbw of every placement, for "Avg bus bandwidth"
  int bwCount = 0;
  int errors = 0;    ///< placements where this thread's ranks saw wrong data
  uint64_t rep = 0;  ///< seed of the next check (nccl-tests' per-thread rep)
};

/// The benchmark of one tool over one backend, shared by the process's threads.
class Bench {
 public:
  Bench(const CollSpec& spec, Backend& backend, const Options& opts, const Topology& topo, Team& team, Reporter& report,
        Watchdog& watchdog, std::vector<RankBuffers>& buffers, size_t maxBytes, bool device);
  /// Runs every (dtype, op, root) the flags ask for on the calling thread's ranks.
  void runTests(ThreadState& st);

 private:
  // The current call's shape (nccl-tests' setupArgs), per thread because threads run it in step.
  struct Shape {
    size_t nbytes = 0, sendBytes = 0, expectedBytes = 0, sendInplaceOffset = 0, recvInplaceOffset = 0;
    CallShape elems;
    size_t unalignBytes = 0;
  };
  void setupArgs(Shape& sh, size_t size, ncclDataType_t type) const;
  void timeTest(ThreadState& st, ncclDataType_t type, int op, const char* opLabel, int root);
  void benchTime(ThreadState& st, Shape& sh, ncclDataType_t type, int op, int root, bool inPlace);
  void startColl(ThreadState& st, const Shape& sh, ncclDataType_t type, int op, int root, bool inPlace, int iter);
  void completeColl(ThreadState& st);
  void syncAll(ThreadState& st);
  /// Calls f(local) for each local rank of the calling thread; dies on the first false (f printed why).
  template <typename F>
  void forLocal(ThreadState& st, F&& f);
  void initData(ThreadState& st, const Shape& sh, ncclDataType_t type, int op, int root, uint64_t rep, bool inPlace);
  /// CHORUS_PERF_VERBOSE's detail of a wrong result: the output's blocks (one per rank) that are wrong.
  std::string describeWrongBlocks(const char* got, const char* want, size_t count, ncclDataType_t type, int op) const;
  int64_t checkData(ThreadState& st, const Shape& sh, ncclDataType_t type, int op, bool inPlace);
  bool printer(const ThreadState& st) const { return st.thread == 0 && report_.main(); }

  const CollSpec& spec_;
  Backend& be_;
  const Options& opts_;
  const Topology& topo_;
  Team& team_;
  Reporter& report_;
  Watchdog& watchdog_;
  std::vector<RankBuffers>& bufs_;
  const size_t maxBytes_;
  const bool device_;
};

}  // namespace perf
}  // namespace chorus
