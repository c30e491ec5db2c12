#include "core/comm.h"

#include <atomic>
#include <cstdio>
#include <unordered_set>

#include "core/worker.h"
#include "engine/engine.h"

namespace {
// Live communicators. A handle is valid only while it is in this set, so a destroyed
// communicator is recognised without reading freed memory.
std::mutex gLiveMutex;
// Bumped whenever a communicator is destroyed: a thread's cached "this handle is live"
// answer stays valid while the generation is unchanged (the check runs on every call).
std::atomic<uint64_t> gDestroyGen{1};
thread_local const ncclComm* tLastValid = nullptr;
thread_local uint64_t tLastValidGen = 0;
std::unordered_set<const ncclComm*>& liveComms() {
  static std::unordered_set<const ncclComm*> live;
  return live;
}
}  // namespace

ncclComm::ncclComm() {
  std::lock_guard<std::mutex> lock(gLiveMutex);
  liveComms().insert(this);
}

ncclComm::~ncclComm() {
  {
    std::lock_guard<std::mutex> lock(gLiveMutex);
    liveComms().erase(this);
    gDestroyGen.fetch_add(1);
  }
  if (initThread.joinable()) initThread.join();
  if (childJobs.joinable()) childJobs.join();
  worker.reset();
  // Abort poisons the connections so peers stop waiting; a plain destroy leaves data that
  // peers have yet to read where it is.
  if (engine && abortFlag.load()) engine->shutdown();
  engine.reset();
  if (bootstrap) bootstrap->close();
  bootstrap.reset();
  magic = chorus::kCommDeadMagic;
}

namespace chorus {

void commStoreLastError(ncclComm* comm, const char* text) {
  if (!commValid(comm)) return;
  std::lock_guard<std::mutex> lock(comm->errMutex);
  comm->lastError = text;
}

bool commValid(const ncclComm* comm) {
  if (comm == nullptr) return false;
  uint64_t gen = gDestroyGen.load(std::memory_order_acquire);
  if (comm == tLastValid && gen == tLastValidGen) return true;
  std::lock_guard<std::mutex> lock(gLiveMutex);
  bool ok = liveComms().count(comm) != 0 && comm->magic == kCommMagic;
  if (ok) {
    tLastValid = comm;
    tLastValidGen = gDestroyGen.load(std::memory_order_relaxed);
  }
  return ok;
}

std::string commLastError(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(comm->errMutex);
  return comm->lastError;
}

std::string commLabel(const ncclComm* comm) {
  if (comm == nullptr) return "(no communicator)";
  char buf[96];
  snprintf(buf, sizeof(buf), "comm %p rank %d of %d", static_cast<const void*>(comm), comm->rank, comm->nranks);
  std::string text = buf;
  if (!comm->config.commName.empty()) text += " \"" + comm->config.commName + "\"";
  return text;
}

}  // namespace chorus
