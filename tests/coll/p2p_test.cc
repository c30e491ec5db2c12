// Send/recv patterns, back-to-back groups, several communicators driven concurrently, and
// split communicators running collectives.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

class P2P : public ::testing::TestWithParam<std::tuple<Driver, int>> {};

// Value rank `src` sends to rank `dst`, element i.
int valueOf(int src, int dst, size_t i) { return src * 1000003 + dst * 1009 + static_cast<int>(i % 997); }

void checkFrom(const std::vector<int>& got, int src, int dst, const std::string& what) {
  for (size_t i = 0; i < got.size(); i++) {
    if (got[i] != valueOf(src, dst, i)) {
      ADD_FAILURE() << what << ": rank " << dst << " element " << i << " from " << src << " is " << got[i];
      return;
    }
  }
}

std::vector<int> payload(int src, int dst, size_t n) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; i++) v[i] = valueOf(src, dst, i);
  return v;
}

TEST_P(P2P, RingShiftAllPairsAndSelf) {
  auto [driver, n] = GetParam();
  runRanks(n, driver, [](RankCtx& ctx) {
    const int n = ctx.nranks, r = ctx.rank;
    for (size_t count : {size_t(1), size_t(1031), size_t(300000)}) {
      // Ring shift: send to r+1, receive from r-1.
      int next = (r + 1) % n, prev = (r + n - 1) % n;
      auto out = payload(r, next, count);
      std::vector<int> in(count, -1);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      ASSERT_EQ(ncclSend(out.data(), count, ncclInt32, next, ctx.comm, nullptr), ncclSuccess);
      ASSERT_EQ(ncclRecv(in.data(), count, ncclInt32, prev, ctx.comm, nullptr), ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(ctx.comm);
      checkFrom(in, prev, r, "ring shift");

      // All pairs, including self, in one group; receives posted before sends on odd ranks.
      std::vector<std::vector<int>> outs(n), ins(n, std::vector<int>(count, -1));
      for (int p = 0; p < n; p++) outs[p] = payload(r, p, count);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int k = 0; k < n; k++) {
        int p = (r + k) % n;
        if (r % 2) {
          ASSERT_EQ(ncclRecv(ins[p].data(), count, ncclInt32, p, ctx.comm, nullptr), ncclSuccess);
        }
        ASSERT_EQ(ncclSend(outs[p].data(), count, ncclInt32, p, ctx.comm, nullptr), ncclSuccess);
        if (!(r % 2)) {
          ASSERT_EQ(ncclRecv(ins[p].data(), count, ncclInt32, p, ctx.comm, nullptr), ncclSuccess);
        }
      }
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(ctx.comm);
      for (int p = 0; p < n; p++) checkFrom(ins[p], p, r, "all pairs");
    }
  });
}

TEST_P(P2P, SeveralMessagesToOnePeerKeepTheirOrder) {
  auto [driver, n] = GetParam();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  runRanks(n, driver, [](RankCtx& ctx) {
    const int n = ctx.nranks, r = ctx.rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    const int kMsgs = 5;
    std::vector<std::vector<int>> outs(kMsgs), ins(kMsgs);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int m = 0; m < kMsgs; m++) {
      size_t count = 100 + 70000 * m;  // different sizes: order, not size, must match them
      outs[m] = payload(r * 10 + m, next, count);
      ins[m].assign(count, -1);
      ASSERT_EQ(ncclSend(outs[m].data(), count, ncclInt32, next, ctx.comm, nullptr), ncclSuccess);
      ASSERT_EQ(ncclRecv(ins[m].data(), count, ncclInt32, prev, ctx.comm, nullptr), ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(ctx.comm);
    for (int m = 0; m < kMsgs; m++) checkFrom(ins[m], prev * 10 + m, r, "message " + std::to_string(m));
  });
}

TEST_P(P2P, GroupsBackToBackMixingCollectivesAndSendRecv) {
  auto [driver, n] = GetParam();
  runRanks(n, driver, [](RankCtx& ctx) {
    const int n = ctx.nranks, r = ctx.rank;
    for (int iter = 0; iter < 20; iter++) {
      std::vector<float> a(257, static_cast<float>(r + iter));
      std::vector<int> out = payload(r, (r + 1) % n, 64), in(64, -1);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      ASSERT_EQ(ncclSend(out.data(), 64, ncclInt32, (r + 1) % n, ctx.comm, nullptr), ncclSuccess);
      ASSERT_EQ(ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat, ncclSum, ctx.comm, nullptr), ncclSuccess);
      ASSERT_EQ(ncclRecv(in.data(), 64, ncclInt32, (r + n - 1) % n, ctx.comm, nullptr), ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(ctx.comm);
      float want = static_cast<float>(n * (n - 1) / 2 + n * iter);
      ASSERT_EQ(a[0], want);
      ASSERT_EQ(a[256], want);
      checkFrom(in, (r + n - 1) % n, r, "mixed group");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Drivers, P2P,
                         ::testing::Combine(::testing::Values(Driver::kThreads, Driver::kProcesses),
                                            ::testing::Values(1, 2, 3, 5)),
                         [](const auto& info) {
                           return std::string(driverName(std::get<0>(info.param))) + "_r" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Two independent sets of communicators, each driven by its own thread at the same time.
TEST(Concurrency, SeveralCommunicatorsFromDifferentThreads) {
  auto work = [](int salt) {
    ncclComm_t comms[3];
    ASSERT_EQ(ncclCommInitAll(comms, 3, nullptr), ncclSuccess);
    for (int iter = 0; iter < 30; iter++) {
      std::vector<std::vector<int>> bufs(3, std::vector<int>(5000));
      for (int r = 0; r < 3; r++) std::fill(bufs[r].begin(), bufs[r].end(), r + salt + iter);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int r = 0; r < 3; r++)
        ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 5000, ncclInt32, ncclSum, comms[r], nullptr),
                  ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
      for (int r = 0; r < 3; r++) ASSERT_EQ(bufs[r][4999], 3 + 3 * (salt + iter));
    }
    for (auto c : comms) ncclCommDestroy(c);
  };
  std::thread a(work, 100), b(work, 7);
  a.join();
  b.join();
}

// A split communicator works alongside its parent.
TEST(Concurrency, SplitCommunicatorsRunCollectives) {
  runRanks(4, Driver::kThreads, [](RankCtx& ctx) {
    ncclComm_t half;
    ASSERT_EQ(ncclCommSplit(ctx.comm, ctx.rank / 2, ctx.rank, &half, nullptr), ncclSuccess);
    std::vector<double> v(1000, ctx.rank);
    ASSERT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclDouble, ncclMax, half, nullptr), ncclSuccess);
    EXPECT_EQ(v[0], ctx.rank / 2 * 2 + 1);
    std::vector<double> w(1000, 1.0);
    ASSERT_EQ(ncclAllReduce(w.data(), w.data(), w.size(), ncclDouble, ncclSum, ctx.comm, nullptr), ncclSuccess);
    EXPECT_EQ(w[999], 4.0);
    EXPECT_EQ(ncclCommDestroy(half), ncclSuccess);
  });
}

}  // namespace
}  // namespace chorus_test
