// One suite, every transport: the same collectives and point-to-point exchanges, with
// closed-form expected values, over shared memory and, forced with NCCL_SHM_DISABLE=1, over the socket
// transport and the net proxy (UCX, and an external net plugin), on 2 and 3 ranks, as threads and as
// forked processes; and chorus's IB net through the proxy over the fake verbs, as threads.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "transport/ib_fake_net.h"
#include "transport/transport_env.h"
#include "transports/net/net.h"

namespace chorus_test {
namespace {

/// Counts: one element, an odd count that leaves partial slices, and a count of several MB.
const size_t kCounts[] = {1, 1031, (1u << 20) + 3};

// Small integers keep every float sum exact, so results compare with ==.
float valueOf(int rank, size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 97)); }
// What allreduce (sum over n ranks) and allgather (element i of ranks' `count` each) of valueOf give, with every input
// index shifted by `shift`.
float sumOf(int n, size_t i, size_t shift = 0) {
  return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>((i + shift) % 97));
}
float gatheredOf(size_t count, size_t i, size_t shift = 0) {
  return valueOf(static_cast<int>(i / count), i % count + shift);
}
float pairValue(int src, int dst, size_t i) {
  return static_cast<float>(src * 100 + dst * 10 + static_cast<int>(i % 7));
}

using Param = std::tuple<Transport, Driver, int>;

std::string paramName(const testing::TestParamInfo<Param>& info) {
  std::ostringstream s;
  s << transportName(std::get<0>(info.param)) << "_" << driverName(std::get<1>(info.param)) << "_r"
    << std::get<2>(info.param);
  return s.str();
}

// Checks got[i] == want(i) for every element, reporting the first mismatch only so that a
// broken 1M-element run stays readable.
template <class Want>
void expectAll(const RankCtx& ctx, const char* what, size_t count, const std::vector<float>& got, Want want) {
  for (size_t i = 0; i < got.size(); i++) {
    float w = want(i);
    if (got[i] != w) {
      ADD_FAILURE() << "rank " << ctx.rank << " of " << ctx.nranks << ": " << what << " count " << count << ": element "
                    << i << " is " << got[i] << ", expected " << w;
      return;
    }
  }
}

class TransportSuite : public testing::TestWithParam<Param> {
 protected:
  Transport transport() const { return std::get<0>(GetParam()); }
  Driver driver() const { return std::get<1>(GetParam()); }
  int nranks() const { return std::get<2>(GetParam()); }

  /// Runs body on every rank with the transport selected (and the settings in `extra`), then checks the transport
  /// was the one in use.
  void run(const std::function<void(RankCtx&)>& body,
           const std::vector<std::pair<const char*, const char*>>& extra = {}) {
    Transport t = transport();
    if (t == Transport::kUcx && chorus::ucxNet() == nullptr) GTEST_SKIP() << "chorus was built without UCX";
    if (t == Transport::kPlugin && kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
    if (t == Transport::kIbFake && chorus::ibNet() == nullptr) GTEST_SKIP() << "chorus was built without verbs";
    std::unique_ptr<FakeIbProcessNet> ib;
    if (t == Transport::kIbFake) {
      ib = std::make_unique<FakeIbProcessNet>();
      ASSERT_TRUE(ib->ok()) << ib->why();
    }
    ScopedEnv env;
    env.select(t);
    for (const auto& kv : extra) env.set(kv.first, kv.second);
    runRanks(nranks(), driver(), [&](RankCtx& ctx) {
      body(ctx);
      // The proxy thread lives as long as the communicator: its presence tells which transport ran.
      std::vector<int> counts = countThreadsNamed({"chorus-net-*", t == Transport::kShm ? "-" : proxyThreadName(t)});
      int any = counts[0];
      if (t == Transport::kShm) {
        EXPECT_EQ(any, 0) << "rank " << ctx.rank << ": shm run started a proxy thread";
      } else {
        int mine = counts[1];
        EXPECT_GE(mine, 1) << "rank " << ctx.rank << ": " << transportName(t) << " run has no " << proxyThreadName(t)
                           << " thread";
        EXPECT_EQ(any, mine) << "rank " << ctx.rank << ": " << transportName(t) << " run started another net's proxy";
      }
    });
    if (ib != nullptr) {
      // The communicators are gone: their proxies closed every queue pair and released every registration.
      EXPECT_GT(ib->fabric().writes().size(), 0u) << "nothing went over the fake fabric";
      EXPECT_EQ(ib->fabric().liveQps(), 0);
      EXPECT_EQ(ib->fabric().liveMrs(), 0);
    }
  }
};

TEST_P(TransportSuite, AllReduce) {
  run([](RankCtx& ctx) {
    const int n = ctx.nranks;
    for (size_t count : kCounts) {
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; i++) in[i] = valueOf(ctx.rank, i);
      ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, ctx.comm, nullptr), ncclSuccess)
          << ncclGetLastError(ctx.comm);
      expectAll(ctx, "allreduce", count, out, [&](size_t i) { return sumOf(n, i); });
    }
  });
}

TEST_P(TransportSuite, AllGather) {
  run([](RankCtx& ctx) {
    const int n = ctx.nranks;
    for (size_t count : kCounts) {
      std::vector<float> in(count), out(count * n, -1.0f);
      for (size_t i = 0; i < count; i++) in[i] = valueOf(ctx.rank, i);
      ASSERT_EQ(ncclAllGather(in.data(), out.data(), count, ncclFloat32, ctx.comm, nullptr), ncclSuccess)
          << ncclGetLastError(ctx.comm);
      expectAll(ctx, "allgather", count, out, [&](size_t i) { return gatheredOf(count, i); });
    }
  });
}

TEST_P(TransportSuite, Broadcast) {
  run([](RankCtx& ctx) {
    const int root = ctx.nranks - 1;  // not rank 0, so that a root-0 assumption cannot pass by accident
    for (size_t count : kCounts) {
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; i++) in[i] = valueOf(ctx.rank, i);
      ASSERT_EQ(ncclBroadcast(in.data(), out.data(), count, ncclFloat32, root, ctx.comm, nullptr), ncclSuccess)
          << ncclGetLastError(ctx.comm);
      expectAll(ctx, "broadcast", count, out, [&](size_t i) { return valueOf(root, i); });
    }
  });
}

TEST_P(TransportSuite, AllToAll) {
  run([](RankCtx& ctx) {
    const int n = ctx.nranks;
    for (size_t count : kCounts) {
      std::vector<float> in(count * n), out(count * n, -1.0f);
      for (int dst = 0; dst < n; dst++)
        for (size_t i = 0; i < count; i++) in[dst * count + i] = pairValue(ctx.rank, dst, i);
      ASSERT_EQ(ncclAlltoAll(in.data(), out.data(), count, ncclFloat32, ctx.comm, nullptr), ncclSuccess)
          << ncclGetLastError(ctx.comm);
      expectAll(ctx, "alltoall", count, out,
                [&](size_t i) { return pairValue(static_cast<int>(i / count), ctx.rank, i % count); });
    }
  });
}

// Every rank sends to its successor and receives from its predecessor in one group, then the
// reverse direction: both directions of every pair connection carry data.
TEST_P(TransportSuite, SendRecv) {
  run([](RankCtx& ctx) {
    const int n = ctx.nranks, r = ctx.rank;
    for (size_t count : kCounts) {
      for (int dir : {1, -1}) {
        int to = (r + dir + n) % n, from = (r - dir + n) % n;
        std::vector<float> in(count), out(count, -1.0f);
        for (size_t i = 0; i < count; i++) in[i] = pairValue(r, to, i);
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        ASSERT_EQ(ncclSend(in.data(), count, ncclFloat32, to, ctx.comm, nullptr), ncclSuccess);
        ASSERT_EQ(ncclRecv(out.data(), count, ncclFloat32, from, ctx.comm, nullptr), ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(ctx.comm);
        expectAll(ctx, dir > 0 ? "send/recv forward" : "send/recv backward", count, out,
                  [&](size_t i) { return pairValue(from, r, i); });
      }
    }
  });
}

// Many small operations back to back: exercises slot reuse, header batching and the proxy's
// switch between spinning and blocking in poll().
TEST_P(TransportSuite, ManySmallAllReduces) {
  run([](RankCtx& ctx) {
    const int n = ctx.nranks;
    const size_t count = 7;
    for (int iter = 0; iter < 200; iter++) {
      std::vector<float> in(count, static_cast<float>(ctx.rank + iter)), out(count, -1.0f);
      ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, ctx.comm, nullptr), ncclSuccess)
          << ncclGetLastError(ctx.comm);
      float want = static_cast<float>(n * (n - 1) / 2 + n * iter);
      expectAll(ctx, "small allreduce", count, out, [&](size_t) { return want; });
    }
  });
}

// Allgather and allreduce, overwriting the buffers as soon as each call returns (below).
void buffersMayChange(RankCtx& ctx) {
  const int n = ctx.nranks;
  const size_t count = (1u << 18) + 5;  // several FIFO slots a rank, and a partial one
  std::vector<float> in(count), out(count * n);
  for (int iter = 0; iter < 4; iter++) {
    for (size_t i = 0; i < count; i++) in[i] = valueOf(ctx.rank, i + iter);
    ASSERT_EQ(ncclAllGather(in.data(), out.data(), count, ncclFloat32, ctx.comm, nullptr), ncclSuccess)
        << ncclGetLastError(ctx.comm);
    std::fill(in.begin(), in.end(), -1.0f);
    std::vector<float> got = out;
    std::fill(out.begin(), out.end(), -2.0f);
    expectAll(ctx, "allgather, buffers overwritten on return", count, got,
              [&](size_t i) { return gatheredOf(count, i, iter); });

    for (size_t i = 0; i < count; i++) in[i] = valueOf(ctx.rank, i + iter);
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, ctx.comm, nullptr), ncclSuccess)
        << ncclGetLastError(ctx.comm);
    std::fill(in.begin(), in.end(), -1.0f);
    std::vector<float> sum(out.begin(), out.begin() + count);
    std::fill(out.begin(), out.end(), -2.0f);
    expectAll(ctx, "allreduce, buffers overwritten on return", count, sum, [&](size_t i) { return sumOf(n, i, iter); });
  }
}

// A caller may reuse its buffers as soon as a call returns, also where the net proxy sends straight from them
// (CHORUS_NET_SEND_BY_ADDRESS=1: the socket net sends host buffers by address; other nets ignore it): each rank
// overwrites its input at once, and its output once it has a copy, so data a proxy sent late would show in a peer's
// result. Run with the setting off (the default) and on.
TEST_P(TransportSuite, BuffersMayChangeAsSoonAsACallReturns) {
  for (const char* byAddress : {"0", "1"}) {
    SCOPED_TRACE(std::string("CHORUS_NET_SEND_BY_ADDRESS=") + byAddress);
    run(buffersMayChange, {{"CHORUS_NET_SEND_BY_ADDRESS", byAddress}});
    if (HasFatalFailure() || IsSkipped()) return;
  }
}

// The UCX net's slot messages (CHORUS_NET_SLOT_MESSAGE_MAX_BYTES, transports/net/net_proxy.cc): a receiver takes a
// slot's payload with its header or as a message of its own, whichever the sender chose, so ranks with different
// settings work together. Rank 0 sends every payload apart, rank 1 those to 64 KB with their header, rank 2 every
// payload with it; ring, tree and recursive-doubling steps carry slots of every size between them.
TEST(UcxSlotMessages, RanksWithDifferentSettingsWorkTogether) {
  if (chorus::ucxNet() == nullptr) GTEST_SKIP() << "chorus was built without UCX";
  ScopedEnv env;
  env.select(Transport::kUcx);
  const int n = 3;
  std::vector<int> status = forkRanks(n, [&](int rank, const ncclUniqueId& id) {
    const char* setting[] = {"0", "65536", "1000000000"};
    setenv("CHORUS_NET_SLOT_MESSAGE_MAX_BYTES", setting[rank], 1);
    chorus::paramsReload();
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return 1;
    int bad = 0;
    for (const char* algo : {"Ring", "Tree", "RecDoubling"}) {
      setenv("NCCL_ALGO", algo, 1);
      chorus::paramsReload();
      for (size_t count : kCounts) {
        std::vector<float> in(count), out(count * n, -1.0f);
        for (size_t i = 0; i < count; i++) in[i] = valueOf(rank, i);
        if (ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) {
          fprintf(stderr, "rank %d: %s allreduce of %zu: %s\n", rank, algo, count, ncclGetLastError(comm));
          return 2;
        }
        for (size_t i = 0; i < count && bad == 0; i++)
          if (out[i] != sumOf(n, i)) bad = 3;
        if (ncclAllGather(in.data(), out.data(), count, ncclFloat32, comm, nullptr) != ncclSuccess) {
          fprintf(stderr, "rank %d: %s allgather of %zu: %s\n", rank, algo, count, ncclGetLastError(comm));
          return 4;
        }
        for (size_t i = 0; i < count * n && bad == 0; i++)
          if (out[i] != gatheredOf(count, i)) bad = 5;
        if (bad != 0) fprintf(stderr, "rank %d: %s, count %zu: a wrong result\n", rank, algo, count);
      }
    }
    ncclCommDestroy(comm);
    return bad;
  });
  for (int r = 0; r < n; r++) EXPECT_EQ(status[r], 0) << "rank " << r << ": " << describeStatus(status[r]);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportSuite,
                         testing::Combine(testing::Values(Transport::kShm, Transport::kSocket,
                                                          Transport::kSocketStriped, Transport::kUcx,
                                                          Transport::kPlugin),
                                          testing::Values(Driver::kThreads, Driver::kProcesses), testing::Values(2, 3)),
                         paramName);
// The IB net through the proxy, over the fake verbs: thread ranks only (the fake fabric is this process's memory).
INSTANTIATE_TEST_SUITE_P(FakeVerbs, TransportSuite,
                         testing::Combine(testing::Values(Transport::kIbFake), testing::Values(Driver::kThreads),
                                          testing::Values(2, 3)),
                         paramName);

}  // namespace
}  // namespace chorus_test
