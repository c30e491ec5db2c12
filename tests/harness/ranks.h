// Multi-rank test harness: one test body, two drivers.
//   Driver::kThreads   every rank is a thread of this process (ncclCommInitRank per thread)
//   Driver::kProcesses every rank is a forked process; the id travels through a pipe
// Every run has a deadline; a rank that overruns it fails the test (and, for processes,
// is killed) instead of hanging the suite.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus_test {

enum class Driver { kThreads, kProcesses };

/// What a rank's body gets.
struct RankCtx {
  int rank = 0;
  int nranks = 0;
  ncclComm_t comm = nullptr;
};

/// Name of a driver, for parameterised test names.
const char* driverName(Driver d);

/// Runs `body` on nranks ranks, each with a fresh communicator (destroyed afterwards).
/// Failures inside the body are reported with gtest as usual (forked ranks report through
/// their exit status). Fails the calling test if a rank misses the deadline.
void runRanks(int nranks, Driver driver, const std::function<void(RankCtx&)>& body, double deadlineS = 120);

/// Forks n processes running child(rank, id) (id made by the parent after the fork) and
/// returns each one's wait status; processes alive at the deadline are killed with SIGKILL
/// and reported as such. Use for fault tests that kill or stop ranks.
/// Ranks listed in `killWhenOthersExit` (e.g. one that froze itself) are killed once every
/// other rank has exited and they have not ended by themselves within 500 ms after.
std::vector<int> forkRanks(int n, const std::function<int(int rank, const ncclUniqueId& id)>& child,
                           double deadlineS = 120, const std::vector<int>& killWhenOthersExit = {});

/// Makes a crash of this process (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) print the signal and the stack to stderr
/// before it dies of that signal, so that a rank that crashes leaves more than "killed by signal 11". Every forked
/// rank calls it.
void printStackOnCrash();

/// Seconds from `t0` to now (steady clock): how long a call took. Inline, for tests that do not link the harness.
inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// "exited with 0", "killed by signal 9"...
std::string describeStatus(int status);

/// The whole text of a file ("" when it cannot be read).
std::string readFile(const std::string& path);

/// forkRanks for tests that judge a log: removes `logPath`, runs the ranks, expects each to exit 0 (a gtest failure
/// names any other), and returns what the ranks wrote to `logPath` (their NCCL_DEBUG_FILE), removed afterwards.
std::string forkRanksForLog(int n, const std::function<int(int rank, const ncclUniqueId& id)>& child,
                            const std::string& logPath, double deadlineS = 120);

/// Sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=`subsys` and NCCL_DEBUG_FILE=`logPath` in this process's environment; the
/// caller then reloads the parameters (chorus::paramsReload or ncclResetDebugInit) before its communicator.
void logInfoTo(const std::string& logPath, const char* subsys);

/// Makes chorus read its NCCL_* and CHORUS_* variables again (ncclResetDebugInit, which nccl.h marks deprecated).
void reloadEnv();

}  // namespace chorus_test
