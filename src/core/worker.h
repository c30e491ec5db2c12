// A communicator's worker thread: runs that communicator's share of a group that spans
// several communicators (one thread driving several ranks, as ncclCommInitAll users and
// nccl-tests -g do), so that their exchanges can meet. It spins briefly after each job,
// since groups usually come back to back, then sleeps on a condition variable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "nccl.h"

namespace chorus {

/// One persistent thread that runs posted jobs one at a time.
class Worker {
 public:
  Worker();
  ~Worker();
  /// Hands `job` to the thread (the previous job must have been waited for).
  void post(std::function<ncclResult_t()> job);
  /// Waits for the posted job and returns its result.
  ncclResult_t wait();

 private:
  void loop();

  enum : int { kIdle = 0, kPosted = 1, kDone = 2, kStop = 3 };
  std::atomic<int> state_{kIdle};
  std::function<ncclResult_t()> job_;
  ncclResult_t result_ = ncclSuccess;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool sleeping_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace chorus
