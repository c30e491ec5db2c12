// The single-copy path (slices passed by address, read with process_vm_readv or directly
// between threads), forced on with CHORUS_SINGLE_COPY_MIN_BYTES for collectives and send/recv.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

class SingleCopy : public ::testing::TestWithParam<Driver> {
 protected:
  void SetUp() override {
    setenv("CHORUS_SINGLE_COPY_MIN_BYTES", "4096", 1);
    ncclResetDebugInit();
  }
  void TearDown() override {
    unsetenv("CHORUS_SINGLE_COPY_MIN_BYTES");
    ncclResetDebugInit();
  }
};

TEST_P(SingleCopy, CollectivesAndSendRecvMatch) {
  runRanks(3, GetParam(), [](RankCtx& ctx) {
    const int n = ctx.nranks, r = ctx.rank;
    const size_t count = 300001;
    for (const char* algo : {"Ring", "TwoShot"}) {
      setenv("NCCL_ALGO", algo, 1);
      ncclResetDebugInit();
      std::vector<float> in(count), out(count, -1);
      for (size_t i = 0; i < count; i++) in[i] = static_cast<float>((r + i) % 7);
      ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, ctx.comm, nullptr), ncclSuccess)
          << ncclGetLastError(ctx.comm);
      for (size_t i = 0; i < count; i += 997) {
        float want = 0;
        for (int k = 0; k < n; k++) want += static_cast<float>((k + i) % 7);
        ASSERT_EQ(out[i], want) << algo << " element " << i;
      }
      EXPECT_EQ(out[count - 1], static_cast<float>(((0 + count - 1) % 7) + ((1 + count - 1) % 7) +
                                                   ((2 + count - 1) % 7)));
    }
    unsetenv("NCCL_ALGO");
    ncclResetDebugInit();
    // Allgather, broadcast, alltoall.
    std::vector<int> mine(count, r * 1000 + 1), all(count * n, -1);
    ASSERT_EQ(ncclAllGather(mine.data(), all.data(), count, ncclInt32, ctx.comm, nullptr), ncclSuccess);
    for (int k = 0; k < n; k++) ASSERT_EQ(all[k * count + count / 2], k * 1000 + 1);
    std::vector<int> bc(count, r == 1 ? 77 : -1);
    ASSERT_EQ(ncclBroadcast(bc.data(), bc.data(), count, ncclInt32, 1, ctx.comm, nullptr), ncclSuccess);
    ASSERT_EQ(bc[count - 1], 77);
    std::vector<int> a2a(count * n), got(count * n, -1);
    for (int k = 0; k < n; k++)
      for (size_t i = 0; i < count; i++) a2a[k * count + i] = r * 100 + k;
    ASSERT_EQ(ncclAlltoAll(a2a.data(), got.data(), count, ncclInt32, ctx.comm, nullptr), ncclSuccess);
    for (int k = 0; k < n; k++) ASSERT_EQ(got[k * count + 5], k * 100 + r);
    // Send/recv, and a ring shift through one buffer (sent and received in the same group:
    // that group must not pass its send by address).
    std::vector<int> buf(count, r);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(buf.data(), count, ncclInt32, (r + 1) % n, ctx.comm, nullptr), ncclSuccess);
    ASSERT_EQ(ncclRecv(buf.data(), count, ncclInt32, (r + n - 1) % n, ctx.comm, nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(ctx.comm);
    ASSERT_EQ(buf[count - 1], (r + n - 1) % n);
  });
}

INSTANTIATE_TEST_SUITE_P(Drivers, SingleCopy, ::testing::Values(Driver::kThreads, Driver::kProcesses),
                         [](const auto& info) { return std::string(driverName(info.param)); });

}  // namespace
}  // namespace chorus_test
