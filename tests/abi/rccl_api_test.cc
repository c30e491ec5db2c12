// RCCL's additions (include/rccl.h, src/api/rccl_api.cc) on host buffers: ncclAllToAllv with uneven counts, gaps
// between blocks and zero-count pairs, checked element by element on 2-4 thread ranks; ncclAllToAll (RCCL's
// spelling); and the errors for bad input and for the unsupported MSCCL entry points.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/ranks.h"
#include "rccl.h"

namespace chorus_test {
namespace {

// Elements rank src sends to rank dst: uneven, and zero for some pairs.
size_t countOf(int src, int dst) { return static_cast<size_t>((src * 3 + dst * 2 + 1) % 5) * 7 + (src == dst ? 3 : 0); }
// Element i of the block src sends to dst.
int64_t valueOf(int src, int dst, size_t i) { return src * 1000000 + dst * 10000 + static_cast<int64_t>(i); }
constexpr int64_t kUntouched = -1;

// Block layout of one side: block p starts at displs[p]; one untouched element separates blocks, and blocks are
// laid out in reverse peer order so that displacements are not simply increasing.
size_t layout(int n, const std::vector<size_t>& counts, std::vector<size_t>* displs) {
  displs->assign(n, 0);
  size_t at = 1;
  for (int p = n - 1; p >= 0; p--) {
    (*displs)[p] = at;
    at += counts[p] + 1;
  }
  return at;
}

template <typename T>
void runAllToAllv(RankCtx& ctx, ncclDataType_t dtype) {
  const int n = ctx.nranks, r = ctx.rank;
  std::vector<size_t> scounts(n), rcounts(n), sdispls, rdispls;
  for (int p = 0; p < n; p++) {
    scounts[p] = countOf(r, p);
    rcounts[p] = countOf(p, r);
  }
  std::vector<T> send(layout(n, scounts, &sdispls), static_cast<T>(kUntouched));
  std::vector<T> recv(layout(n, rcounts, &rdispls), static_cast<T>(kUntouched));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < scounts[p]; i++) send[sdispls[p] + i] = static_cast<T>(valueOf(r, p, i));

  ASSERT_EQ(ncclAllToAllv(send.data(), scounts.data(), sdispls.data(), recv.data(), rcounts.data(), rdispls.data(),
                          dtype, ctx.comm, nullptr),
            ncclSuccess)
      << ncclGetLastError(ctx.comm);

  std::vector<bool> inBlock(recv.size(), false);
  for (int p = 0; p < n; p++) {
    for (size_t i = 0; i < rcounts[p]; i++) {
      inBlock[rdispls[p] + i] = true;
      ASSERT_EQ(recv[rdispls[p] + i], static_cast<T>(valueOf(p, r, i)))
          << "rank " << r << ": element " << i << " from rank " << p;
    }
  }
  for (size_t k = 0; k < recv.size(); k++) {
    if (!inBlock[k]) {
      ASSERT_EQ(recv[k], static_cast<T>(kUntouched)) << "rank " << r << " wrote outside its blocks at " << k;
    }
  }
}

class AllToAllv : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllv, UnevenCountsEveryElement) {
  runRanks(GetParam(), Driver::kThreads, [](RankCtx& ctx) {
    runAllToAllv<int64_t>(ctx, ncclInt64);
    runAllToAllv<double>(ctx, ncclFloat64);
    runAllToAllv<int32_t>(ctx, ncclInt32);
  });
}

TEST_P(AllToAllv, RcclSpellingOfAllToAll) {
  runRanks(GetParam(), Driver::kThreads, [](RankCtx& ctx) {
    const int n = ctx.nranks, r = ctx.rank;
    const size_t count = 5;
    std::vector<int32_t> send(n * count), recv(n * count, -1);
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++) send[p * count + i] = static_cast<int32_t>(valueOf(r, p, i));
    ASSERT_EQ(ncclAllToAll(send.data(), recv.data(), count, ncclInt32, ctx.comm, nullptr), ncclSuccess)
        << ncclGetLastError(ctx.comm);
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++) ASSERT_EQ(recv[p * count + i], static_cast<int32_t>(valueOf(p, r, i)));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllv, ::testing::Values(2, 3, 4));

// Every rank makes the same bad calls, so none of them reaches a peer.
TEST(AllToAllvErrors, BadInputIsRefusedWithClearText) {
  runRanks(2, Driver::kThreads, [](RankCtx& ctx) {
    std::vector<size_t> counts = {2, 2}, displs = {0, 2}, zeros = {0, 0};
    std::vector<float> a(4), b(4);
    auto lastError = [&]() { return std::string(ncclGetLastError(ctx.comm)); };

    EXPECT_EQ(ncclAllToAllv(a.data(), nullptr, displs.data(), b.data(), counts.data(), displs.data(), ncclFloat,
                            ctx.comm, nullptr),
              ncclInvalidArgument);
    EXPECT_NE(lastError().find("sendcounts and sdispls must not be NULL"), std::string::npos) << lastError();

    EXPECT_EQ(ncclAllToAllv(a.data(), counts.data(), displs.data(), b.data(), counts.data(), nullptr, ncclFloat,
                            ctx.comm, nullptr),
              ncclInvalidArgument);
    EXPECT_NE(lastError().find("recvcounts and rdispls"), std::string::npos) << lastError();

    EXPECT_EQ(ncclAllToAllv(nullptr, counts.data(), displs.data(), b.data(), counts.data(), displs.data(), ncclFloat,
                            ctx.comm, nullptr),
              ncclInvalidArgument);
    EXPECT_NE(lastError().find("sendbuff is NULL but sendcounts[0] = 2"), std::string::npos) << lastError();

    std::vector<size_t> huge = {SIZE_MAX / 2, 0};
    EXPECT_EQ(ncclAllToAllv(a.data(), counts.data(), huge.data(), b.data(), counts.data(), displs.data(), ncclFloat,
                            ctx.comm, nullptr),
              ncclInvalidArgument);
    EXPECT_NE(lastError().find("overflows"), std::string::npos) << lastError();

    EXPECT_EQ(ncclAllToAllv(a.data(), counts.data(), displs.data(), b.data(), counts.data(), displs.data(),
                            static_cast<ncclDataType_t>(99), ctx.comm, nullptr),
              ncclInvalidArgument);
    EXPECT_NE(lastError().find("invalid datatype 99"), std::string::npos) << lastError();

    EXPECT_EQ(ncclAllToAllv(a.data(), counts.data(), displs.data(), a.data(), counts.data(), displs.data(), ncclFloat,
                            ctx.comm, nullptr),
              ncclInvalidUsage);
    EXPECT_NE(lastError().find("in-place"), std::string::npos) << lastError();

    EXPECT_NE(ncclAllToAllv(a.data(), counts.data(), displs.data(), b.data(), counts.data(), displs.data(), ncclFloat,
                            nullptr, nullptr),
              ncclSuccess);

    // All counts zero: nothing to move, NULL buffers allowed.
    EXPECT_EQ(ncclAllToAllv(nullptr, zeros.data(), zeros.data(), nullptr, zeros.data(), zeros.data(), ncclFloat,
                            ctx.comm, nullptr),
              ncclSuccess)
        << lastError();
  });
}

TEST(Msccl, EntryPointsAreRefused) {
  mscclAlgoHandle_t h = 0;
  EXPECT_EQ(mscclLoadAlgo("/nonexistent/algo.xml", &h, 0), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("MSCCL algorithms are not supported"), std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(mscclRunAlgo(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, ncclFloat, 0, 0, ncclSum, h, nullptr,
                         nullptr),
            ncclInvalidUsage);
  EXPECT_EQ(mscclUnloadAlgo(h), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("mscclUnloadAlgo"), std::string::npos);
}

}  // namespace
}  // namespace chorus_test
