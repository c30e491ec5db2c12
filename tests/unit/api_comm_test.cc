// Communicator lifecycle: nonblocking init, grouped init, split, shrink, scalable init,
// abort from another thread while a call is blocked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

using chorus_test::Driver;
using chorus_test::RankCtx;
using chorus_test::runRanks;
using chorus_test::secondsSince;

namespace {

// All-reduces rank+1 over comm and checks the sum n(n+1)/2.
void checkSum(ncclComm_t comm) {
  int n = 0, r = 0;
  ASSERT_EQ(ncclCommCount(comm, &n), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(comm, &r), ncclSuccess);
  std::vector<int> v(33, r + 1);
  ASSERT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  for (int x : v) ASSERT_EQ(x, n * (n + 1) / 2);
}

// Polls a communicator whose init may still run in the background until it is ready (30 s at most), then checks an
// allreduce on it and destroys it.
void awaitThenCheckAndDestroy(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (async == ncclInProgress && std::chrono::steady_clock::now() < end) {
    ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(async, ncclSuccess) << ncclGetLastError(comm);
  checkSum(comm);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(ApiComm, NonblockingInit) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; r++) {
    threads.emplace_back([&, r]() {
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      ncclComm_t comm = nullptr;
      ncclResult_t res = ncclCommInitRankConfig(&comm, 3, id, r, &cfg);
      ASSERT_TRUE(res == ncclInProgress || res == ncclSuccess) << ncclGetErrorString(res);
      awaitThenCheckAndDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
}

// NCCL_COMM_BLOCKING overrides every communicator's config.blocking, as in NCCL: 0 makes ncclCommInitRank and
// ncclCommInitAll (whose default config blocks) return ncclInProgress and finish in the background; 1 makes a
// nonblocking config block.
TEST(ApiComm, CommBlockingOverridesTheConfig) {
  for (const char* blocking : {"0", "1"}) {
    setenv("NCCL_COMM_BLOCKING", blocking, 1);
    chorus_test::reloadEnv();
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; r++) {
      threads.emplace_back([&, r]() {
        ncclComm_t comm = nullptr;
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        const bool nonblocking = blocking[0] == '0';
        ncclResult_t res =
            nonblocking ? ncclCommInitRank(&comm, 3, id, r) : ncclCommInitRankConfig(&comm, 3, id, r, &cfg);
        ASSERT_EQ(res, nonblocking ? ncclInProgress : ncclSuccess) << ncclGetErrorString(res);
        awaitThenCheckAndDestroy(comm);
      });
    }
    for (auto& t : threads) t.join();
    // ncclCommInitAll too (it takes no config): at 0 it returns ncclInProgress with every communicator made.
    ncclComm_t comms[3] = {nullptr, nullptr, nullptr};
    ASSERT_EQ(ncclCommInitAll(comms, 3, nullptr), blocking[0] == '0' ? ncclInProgress : ncclSuccess)
        << ncclGetLastError(nullptr);
    threads.clear();
    for (ncclComm_t comm : comms) {
      ASSERT_NE(comm, nullptr);
      threads.emplace_back([comm]() { awaitThenCheckAndDestroy(comm); });
    }
    for (auto& t : threads) t.join();
  }
  unsetenv("NCCL_COMM_BLOCKING");
  chorus_test::reloadEnv();
}

TEST(ApiComm, GroupedInitFromOneThread) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[3];
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; r++) ASSERT_EQ(ncclCommInitRank(&comms[r], 3, id, r), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<std::vector<float>> bufs(3, std::vector<float>(10));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; r++) {
    for (auto& x : bufs[r]) x = static_cast<float>(r);
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 10, ncclFloat, ncclMax, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (auto& b : bufs)
    for (float x : b) EXPECT_EQ(x, 2.0f);
  for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(ApiComm, ScalableInitWithSeveralIds) {
  ncclUniqueId ids[2];
  ASSERT_EQ(ncclGetUniqueId(&ids[0]), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&ids[1]), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; r++) {
    threads.emplace_back([&, r]() {
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRankScalable(&comm, 2, r, 2, ids, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
      checkSum(comm);
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

class ApiCommDriver : public ::testing::TestWithParam<Driver> {};

TEST_P(ApiCommDriver, SplitByParityWithNoColor) {
  runRanks(5, GetParam(), [](RankCtx& ctx) {
    // Rank 4 opts out; evens and odds form two communicators ordered by descending rank.
    int color = ctx.rank == 4 ? NCCL_SPLIT_NOCOLOR : ctx.rank % 2;
    ncclComm_t sub = reinterpret_cast<ncclComm_t>(0x1);
    ASSERT_EQ(ncclCommSplit(ctx.comm, color, -ctx.rank, &sub, nullptr), ncclSuccess) << ncclGetLastError(ctx.comm);
    if (ctx.rank == 4) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    int n = 0, r = 0;
    ASSERT_EQ(ncclCommCount(sub, &n), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(sub, &r), ncclSuccess);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(r, ctx.rank < 2 ? 1 : 0);  // key = -rank: the higher rank comes first
    checkSum(sub);
    checkSum(ctx.comm == nullptr ? sub : sub);
    EXPECT_EQ(ncclCommDestroy(sub), ncclSuccess);
  });
}

TEST_P(ApiCommDriver, ShrinkExcludingRanks) {
  runRanks(4, GetParam(), [](RankCtx& ctx) {
    int excluded[] = {1};
    if (ctx.rank == 1) return;  // the excluded rank does not take part
    ncclComm_t sub = nullptr;
    ASSERT_EQ(ncclCommShrink(ctx.comm, excluded, 1, &sub, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess)
        << ncclGetLastError(ctx.comm);
    int n = 0, r = 0;
    ASSERT_EQ(ncclCommCount(sub, &n), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(sub, &r), ncclSuccess);
    EXPECT_EQ(n, 3);
    EXPECT_EQ(r, ctx.rank == 0 ? 0 : ctx.rank - 1);
    checkSum(sub);
    EXPECT_EQ(ncclCommDestroy(sub), ncclSuccess);
  });
}

INSTANTIATE_TEST_SUITE_P(Drivers, ApiCommDriver, ::testing::Values(Driver::kThreads, Driver::kProcesses),
                         [](const auto& info) { return std::string(chorus_test::driverName(info.param)); });

TEST(ApiComm, ShrinkArgumentErrors) {
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  ncclComm_t sub = nullptr;
  int bad[] = {7};
  EXPECT_EQ(ncclCommShrink(comms[0], bad, 1, &sub, nullptr, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("out of range"), std::string::npos);
  int self[] = {0};
  EXPECT_EQ(ncclCommShrink(comms[0], self, 1, &sub, nullptr, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("own exclude list"), std::string::npos);
  EXPECT_EQ(ncclCommSplit(comms[0], -5, 0, &sub, nullptr), ncclInvalidArgument);
  for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(ApiComm, AbortFromAnotherThreadReleasesABlockedCall) {
  // Rank 1 never joins the allreduce, so rank 0 blocks; another thread aborts rank 0's comm.
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  std::vector<float> v(1 << 16, 1.0f);
  std::atomic<bool> returned{false};
  ncclResult_t res = ncclSuccess;
  std::thread blocked([&]() {
    res = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comms[0], nullptr);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned.load());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  blocked.join();
  double s = secondsSince(t0);
  EXPECT_TRUE(returned.load());
  EXPECT_NE(res, ncclSuccess);
  EXPECT_LT(s, 5.0) << "abort took too long to release the call";
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
}

}  // namespace
