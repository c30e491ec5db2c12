#include "harness/ranks.h"

#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

namespace chorus_test {

const char* driverName(Driver d) { return d == Driver::kThreads ? "threads" : "processes"; }

std::string describeStatus(int status) {
  if (status == -1) return "missed the deadline (killed)";
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

namespace {

void onCrash(int sig) {
  // Only async-signal-safe calls: write and backtrace_symbols_fd (backtrace ran once when the handler was installed,
  // so it does not load its library here).
  char head[32] = "\n*** signal ";
  size_t k = strlen(head);
  if (sig >= 10) head[k++] = static_cast<char>('0' + sig / 10);
  head[k++] = static_cast<char>('0' + sig % 10);
  memcpy(head + k, ", stack:\n", 9);
  if (write(STDERR_FILENO, head, k + 9) < 0) _exit(128 + sig);
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  raise(sig);  // the default action again (SA_RESETHAND): the process dies of the signal
}

}  // namespace

void printStackOnCrash() {
  void* warm[1];
  backtrace(warm, 1);
  struct sigaction sa = {};
  sa.sa_handler = onCrash;
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

std::vector<int> forkRanks(int n, const std::function<int(int, const ncclUniqueId&)>& child, double deadlineS,
                           const std::vector<int>& killWhenOthersExit) {
  // Fork before creating the id: the id's root thread must not exist in the children.
  std::vector<int> pipes(n * 2);
  std::vector<pid_t> pids(n);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    if (pipe(&pipes[2 * r]) != 0) ADD_FAILURE() << "pipe failed";
    pids[r] = fork();
    if (pids[r] == 0) {
      printStackOnCrash();
      close(pipes[2 * r + 1]);
      ncclUniqueId id;
      size_t got = 0;
      while (got < sizeof(id)) {
        ssize_t k = read(pipes[2 * r], reinterpret_cast<char*>(&id) + got, sizeof(id) - got);
        if (k <= 0) _exit(98);
        got += static_cast<size_t>(k);
      }
      int rc = child(r, id);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    close(pipes[2 * r]);
  }
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  EXPECT_EQ(res, ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; r++) {
    if (write(pipes[2 * r + 1], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) ADD_FAILURE() << "write failed";
    close(pipes[2 * r + 1]);
  }
  std::vector<int> status(n, -1);
  std::vector<bool> done(n, false);
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadlineS);
  // Once every other rank has exited, the ranks of killWhenOthersExit get a moment to end by themselves before they
  // are killed: a rank that killed itself looks dead to its peers (its main thread a zombie, processGone) while its
  // other threads are still being torn down, before waitpid reports it.
  constexpr std::chrono::milliseconds kGrace{500};
  std::chrono::steady_clock::time_point graceEnd{};
  int remaining = n;
  while (remaining > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < n; r++) {
      if (done[r]) continue;
      int st;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        done[r] = true;
        remaining--;
      }
    }
    int othersLeft = 0;
    for (int r = 0; r < n; r++)
      if (!done[r] && std::find(killWhenOthersExit.begin(), killWhenOthersExit.end(), r) == killWhenOthersExit.end())
        othersLeft++;
    if (othersLeft == 0 && remaining > 0) {
      const auto now = std::chrono::steady_clock::now();
      if (graceEnd == std::chrono::steady_clock::time_point{}) graceEnd = now + kGrace;
      if (now >= graceEnd) break;
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; r++) {
    if (!done[r]) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
      status[r] = -1;
    }
  }
  return status;
}

void runRanks(int nranks, Driver driver, const std::function<void(RankCtx&)>& body, double deadlineS) {
  if (driver == Driver::kProcesses) {
    auto status = forkRanks(
        nranks,
        [&](int rank, const ncclUniqueId& id) {
          RankCtx ctx{rank, nranks, nullptr};
          ncclResult_t res = ncclCommInitRank(&ctx.comm, nranks, id, rank);
          if (res != ncclSuccess) {
            fprintf(stderr, "rank %d: ncclCommInitRank failed: %s (%s)\n", rank, ncclGetErrorString(res),
                    ncclGetLastError(nullptr));
            return 2;
          }
          body(ctx);
          ncclCommDestroy(ctx.comm);
          return ::testing::Test::HasFailure() ? 1 : 0;
        },
        deadlineS);
    for (int r = 0; r < nranks; r++)
      EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
          << "rank " << r << " " << describeStatus(status[r]) << " (its failures are printed above)";
    return;
  }
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<std::future<void>> futures;
  // Threads are detached through std::async's shared state only when they finish; a rank
  // past the deadline is reported and the process exits so the suite cannot hang.
  for (int r = 0; r < nranks; r++) {
    futures.push_back(std::async(std::launch::async, [&, r]() {
      RankCtx ctx{r, nranks, nullptr};
      ncclResult_t res = ncclCommInitRank(&ctx.comm, nranks, id, r);
      ASSERT_EQ(res, ncclSuccess) << "rank " << r << ": " << ncclGetLastError(nullptr);
      body(ctx);
      EXPECT_EQ(ncclCommDestroy(ctx.comm), ncclSuccess);
    }));
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadlineS);
  for (int r = 0; r < nranks; r++) {
    if (futures[r].wait_until(end) != std::future_status::ready) {
      ADD_FAILURE() << "rank " << r << " missed the " << deadlineS << " s deadline";
      fprintf(stderr, "chorus test harness: rank %d hung past the deadline; exiting\n", r);
      fflush(stdout);
      _exit(3);
    }
  }
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string forkRanksForLog(int n, const std::function<int(int rank, const ncclUniqueId& id)>& child,
                            const std::string& logPath, double deadlineS) {
  unlink(logPath.c_str());
  std::vector<int> status = forkRanks(n, child, deadlineS);
  for (int r = 0; r < n; r++)
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " " << describeStatus(status[r]);
  std::string text = readFile(logPath);
  unlink(logPath.c_str());
  return text;
}

void logInfoTo(const std::string& logPath, const char* subsys) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
  setenv("NCCL_DEBUG_FILE", logPath.c_str(), 1);
}

void reloadEnv() {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
}

}  // namespace chorus_test
