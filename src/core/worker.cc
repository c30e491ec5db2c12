#include "core/worker.h"

#include "core/timeout.h"

namespace chorus {

Worker::Worker() : thread_([this]() { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.store(kStop, std::memory_order_release);
  }
  cv_.notify_all();
  thread_.join();
}

void Worker::post(std::function<ncclResult_t()> job) {
  job_ = std::move(job);
  std::lock_guard<std::mutex> lock(mutex_);
  state_.store(kPosted, std::memory_order_release);
  if (sleeping_) cv_.notify_one();
}

ncclResult_t Worker::wait() {
  Backoff backoff;
  while (state_.load(std::memory_order_acquire) != kDone) backoff.pause();
  state_.store(kIdle, std::memory_order_relaxed);
  return result_;
}

void Worker::loop() {
  for (;;) {
    // Poll for a while (the next group usually follows at once), then sleep.
    Backoff backoff;
    int s;
    while ((s = state_.load(std::memory_order_acquire)) != kPosted && s != kStop && backoff.iterations() < 50000)
      backoff.pause();
    if (s != kPosted && s != kStop) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_ = true;
      cv_.wait(lock, [this]() {
        int v = state_.load(std::memory_order_acquire);
        return v == kPosted || v == kStop;
      });
      sleeping_ = false;
      s = state_.load(std::memory_order_acquire);
    }
    if (s == kStop) return;
    result_ = job_();
    job_ = nullptr;
    state_.store(kDone, std::memory_order_release);
  }
}

}  // namespace chorus
