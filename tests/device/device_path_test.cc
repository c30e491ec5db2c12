// The device path on the CPU: collectives and send/recv on "device" buffers of the emulated runtime run the
// device engine (DevWork planning, device connections and rendezvous, the kernel body with the device
// platform) and must give the closed-form results; failures must surface through ncclCommGetAsyncError with a
// message naming the peer. Thread ranks and forked ranks (IPC through the emulated handles).
#include <dirent.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/params.h"
#include "device/device_checks.h"
#include "device/emu_runtime.h"
#include "engine/device_connections.h"
#include "harness/ranks.h"
#include "harness/source_dir.h"
#include "kernels/device_work.h"
#include "nccl.h"
#include "runtime/runtime.h"
#include "topo/topology.h"
#include "transports/net/net.h"
#include "transports/shm/shm.h"
#if __has_include(<ucp/api/ucp.h>)
#include "transports/ucx/ucx_net.h"
#define CHORUS_TEST_UCX_INTERNALS 1
#endif

namespace chorus_test {
namespace {

EmuRuntime gEmu;

// Thread ranks sharing the GPU run collectives directly on each other's buffers by default, and process ranks small
// collectives through IPC inboxes; with CHORUS_DEVICE_DIRECT=0 and CHORUS_DEVICE_IPC=0 (the "_fifo" cases) both go
// through FIFOs. Every test runs in the four ways.
struct PathCase {
  Driver driver;
  bool direct;
};

class DevicePath : public ::testing::TestWithParam<PathCase> {
 protected:
  void SetUp() override {
    gEmu.peerAccess = true;
    if (!GetParam().direct) {
      setenv("CHORUS_DEVICE_DIRECT", "0", 1);
      setenv("CHORUS_DEVICE_IPC", "0", 1);
    }
    chorus::paramsReload();
    chorus::setGpuRuntimeForTesting(&gEmu);
  }
  void TearDown() override {
    chorus::setGpuRuntimeForTesting(nullptr);
    unsetenv("CHORUS_P2P_READ");
    unsetenv("NCCL_PROTO");
    unsetenv("CHORUS_DEVICE_DIRECT");
    unsetenv("CHORUS_DEVICE_IPC");
    chorus::paramsReload();
  }
  Driver driver() const { return GetParam().driver; }
  /// Whether thread ranks' collectives take the direct path (no FIFO, no schedule).
  bool directColls() const { return GetParam().driver == Driver::kThreads && GetParam().direct; }
};

// Fills the device buffer of rank r: value(r, i).
template <typename T, typename F>
void fill(T* p, size_t n, F value) {
  for (size_t i = 0; i < n; i++) p[i] = value(i);
}

// Each rank launches on its own (emulated) stream, as ranks sharing a GPU must.
cudaStream_t streamOf(const RankCtx& c) { return reinterpret_cast<cudaStream_t>(uintptr_t(c.rank + 1)); }

// Waits for the rank's stream: the emulated kernels run asynchronously, as on a GPU.
void sync(cudaStream_t s) { ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess) << gEmu.lastError(); }
void sync(const RankCtx& c) { sync(streamOf(c)); }

ncclResult_t asyncErrorOf(ncclComm_t comm) {
  ncclResult_t e = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &e), ncclSuccess);
  return e;
}

void allReduceCase(RankCtx& c, size_t count) {
  DevBuf send(gEmu, count * sizeof(float)), recv(gEmu, count * sizeof(float));
  fill(send.as<float>(), count, [&](size_t i) { return float((c.rank + 1) * ((i % 97) + 1)); });
  int launches = gEmu.launches;
  ASSERT_EQ(ncclAllReduce(send.as<float>(), recv.as<float>(), count, ncclFloat32, ncclSum, c.comm, streamOf(c)),
            ncclSuccess);
  EXPECT_GT(gEmu.launches, launches) << "the call did not take the device path";
  sync(c);
  ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess);
  float ranks = float(c.nranks * (c.nranks + 1) / 2);
  for (size_t i = 0; i < count; i++) ASSERT_EQ(recv.as<float>()[i], ranks * float((i % 97) + 1)) << "i=" << i;
}

TEST_P(DevicePath, AllReduceSimpleAndLL) {
  // 1001 floats (4004 B) take LL by default on the device path, 300000 (1.2 MB) Simple.
  for (int n : {2, 3, 4}) {
    runRanks(n, driver(), [](RankCtx& c) {
      for (size_t count : {size_t(1), size_t(1001), size_t(300000)}) allReduceCase(c, count);
    });
  }
}

TEST_P(DevicePath, ForcedProtocolsAndReadMode) {
  setenv("NCCL_PROTO", "LL", 1);
  setenv("CHORUS_P2P_READ", "1", 1);
  chorus::paramsReload();
  runRanks(3, driver(), [](RankCtx& c) { allReduceCase(c, 70000); });
  setenv("NCCL_PROTO", "Simple", 1);
  chorus::paramsReload();
  runRanks(3, driver(), [](RankCtx& c) { allReduceCase(c, 1001); });  // an LL size, forced to Simple
}

TEST_P(DevicePath, PinnedHostFifosWhenGpusCannotMapEachOther) {
  gEmu.peerAccess = false;
  runRanks(2, driver(), [](RankCtx& c) { allReduceCase(c, 50000); });
}

// 1 rank (copies), 4, 5 and 8 ranks (the ring and direct schedules, inboxes and direct launches at 8 ranks).
TEST_P(DevicePath, EveryCollective) {
  for (int nranks : {1, 4, 5, 8})
    runRanks(nranks, driver(), [](RankCtx& c) {
      const int n = c.nranks, r = c.rank;
      const int root1 = 1 % n, root2 = 2 % n;
      const size_t N = 1000;  // per-rank elements (4000 B of int32: LL); the Simple path is covered above
      DevBuf in(gEmu, N * n * sizeof(int32_t)), out(gEmu, N * n * sizeof(int32_t));
      int32_t* ip = in.as<int32_t>();
      int32_t* op = out.as<int32_t>();
      auto v = [](int rank, size_t i) { return int32_t(rank * 100000 + int32_t(i)); };
      int launches = gEmu.launches;

      fill(ip, N, [&](size_t i) { return v(r, i); });
      ASSERT_EQ(ncclAllGather(ip, op, N, ncclInt32, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < N; i++) ASSERT_EQ(op[q * N + i], v(q, i));

      fill(ip, N * n, [&](size_t i) { return v(r, i); });
      ASSERT_EQ(ncclReduceScatter(ip, op, N, ncclInt32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      for (size_t i = 0; i < N; i++) {
        int32_t want = 0;
        for (int q = 0; q < n; q++) want += v(q, r * N + i);
        ASSERT_EQ(op[i], want);
      }

      fill(ip, N, [&](size_t i) { return v(r, i); });
      ASSERT_EQ(ncclBroadcast(ip, op, N, ncclInt32, root1, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      for (size_t i = 0; i < N; i++) ASSERT_EQ(op[i], v(root1, i));

      ASSERT_EQ(ncclReduce(ip, op, N, ncclInt32, ncclMax, root2, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      if (r == root2) {
        for (size_t i = 0; i < N; i++) ASSERT_EQ(op[i], v(n - 1, i));
      }

      fill(ip, N * n, [&](size_t i) { return v(r, i); });
      ASSERT_EQ(ncclAlltoAll(ip, op, N, ncclInt32, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < N; i++) ASSERT_EQ(op[q * N + i], v(q, r * N + i));

      // Integer average: sum, then division truncating toward zero, on the device path too.
      fill(ip, N, [&](size_t i) { return int32_t(i) * (r + 1) - 7; });
      ASSERT_EQ(ncclAllReduce(ip, ip, N, ncclInt32, ncclAvg, c.comm, streamOf(c)), ncclSuccess);  // in place
      sync(c);
      for (size_t i = 0; i < N; i++) {
        int32_t sum = 0;
        for (int q = 0; q < n; q++) sum += int32_t(i) * (q + 1) - 7;
        ASSERT_EQ(ip[i], sum / n);
      }
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess);
      if (n > 1) {
        EXPECT_GE(gEmu.launches - launches, 6) << "every collective must have run as a kernel";
      }
    });
}

// A large alltoall over 6 ranks asks for every channel, but each channel of the direct schedule needs 10
// connection ends: the planner uses as many channels as one launch holds, and the result is still exact.
TEST_P(DevicePath, ChannelsShrinkToFitOneLaunch) {
  if (directColls()) GTEST_SKIP() << "direct launches have no FIFOs to fit";
  runRanks(6, driver(), [](RankCtx& c) {
    const int n = c.nranks, r = c.rank;
    const size_t N = 200000;  // per peer: 4.8 MB per rank, more than 16 channels' worth
    DevBuf in(gEmu, N * n * sizeof(int32_t)), out(gEmu, N * n * sizeof(int32_t));
    fill(in.as<int32_t>(), N * n, [&](size_t i) { return int32_t(r * 10000000 + int32_t(i)); });
    ASSERT_EQ(ncclAlltoAll(in.as<int32_t>(), out.as<int32_t>(), N, ncclInt32, c.comm, streamOf(c)), ncclSuccess);
    sync(c);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess);
    // Blocks are channels x lanes: the planner fits the channels to one lane's ends per block, and the lanes then
    // multiply the ends up to the launch's limit.
    const int lanes = gEmu.lastLanes.load(), ch = gEmu.lastChannels.load() / lanes;
    EXPECT_GE(ch, 2);
    EXPECT_LE(ch * 2 * (n - 1), chorus::kDevMaxBlockFifos);
    EXPECT_GT((ch + 1) * 2 * (n - 1), std::min(chorus::kDevMaxBlockFifos, chorus::kDevMaxChannels * 2 * (n - 1)))
        << "fewer channels than one launch holds";
    EXPECT_LE(lanes * ch * 2 * (n - 1), chorus::kDevMaxFifos);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i += 7) ASSERT_EQ(out.as<int32_t>()[q * N + i], int32_t(q * 10000000 + r * N + i));
  });
}

TEST_P(DevicePath, PreMulSumWithHostScalar) {
  runRanks(2, driver(), [](RankCtx& c) {
    const size_t N = 5000;
    DevBuf buf(gEmu, N * sizeof(double));
    fill(buf.as<double>(), N, [&](size_t i) { return double(i + c.rank); });
    double scalar = 0.5;
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, c.comm), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(buf.as<double>(), buf.as<double>(), N, ncclFloat64, op, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclRedOpDestroy(op, c.comm), ncclSuccess);
    sync(c);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(buf.as<double>()[i], 0.5 * double(i) + 0.5 * double(i + 1));
  });
}

// ncclScalarDevice with the factor in GPU memory: the kernel reads it when it runs. The same operator on host
// buffers is refused (the host path would have to read GPU memory).
TEST_P(DevicePath, PreMulSumWithDeviceScalar) {
  runRanks(3, driver(), [](RankCtx& c) {
    const size_t N = 70000;  // several channels in CUDA builds
    DevBuf buf(gEmu, N * sizeof(float)), factor(gEmu, sizeof(float));
    fill(buf.as<float>(), N, [&](size_t i) { return float(i % 100 + c.rank); });
    *factor.as<float>() = 0.25f;
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, factor.as<float>(), ncclFloat32, ncclScalarDevice, c.comm), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(buf.as<float>(), buf.as<float>(), N, ncclFloat32, op, c.comm, streamOf(c)), ncclSuccess);
    sync(c);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(buf.as<float>()[i], 0.25f * float(3 * (i % 100) + 3)) << i;
    *factor.as<float>() = 2.0f;  // read again by the next operation
    ASSERT_EQ(ncclReduceScatter(buf.as<float>(), buf.as<float>() + c.rank * (N / 3), N / 3, ncclFloat32, op, c.comm,
                                streamOf(c)),
              ncclSuccess);
    sync(c);
    for (size_t i = 0; i < N / 3; i++) {
      size_t j = c.rank * (N / 3) + i;
      ASSERT_EQ(buf.as<float>()[j], 2.0f * 3.0f * 0.25f * float(3 * (j % 100) + 3)) << i;
    }
    // A one-byte type: the factor is read at its own width.
    DevBuf bytes(gEmu, 1000), factor8(gEmu, 8);
    fill(bytes.as<uint8_t>(), 1000, [&](size_t i) { return uint8_t(i % 50 + c.rank); });
    std::memset(factor8.as<uint8_t>(), 0x7f, 8);  // bytes past the factor must not matter
    *factor8.as<uint8_t>() = 2;
    ncclRedOp_t op8;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op8, factor8.as<uint8_t>(), ncclUint8, ncclScalarDevice, c.comm), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(bytes.as<uint8_t>(), bytes.as<uint8_t>(), 1000, ncclUint8, op8, c.comm, streamOf(c)),
              ncclSuccess);
    sync(c);
    for (size_t i = 0; i < 1000; i++) ASSERT_EQ(bytes.as<uint8_t>()[i], uint8_t(2 * (3 * (i % 50) + 3))) << i;
    ASSERT_EQ(ncclRedOpDestroy(op8, c.comm), ncclSuccess);
    std::vector<float> h(16, 1.0f);
    EXPECT_EQ(ncclAllReduce(h.data(), h.data(), h.size(), ncclFloat32, op, c.comm, streamOf(c)), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(c.comm)).find("GPU memory"), std::string::npos) << ncclGetLastError(c.comm);
    ASSERT_EQ(ncclRedOpDestroy(op, c.comm), ncclSuccess);
  });
}

TEST_P(DevicePath, SendRecvRingShiftAndHostCallsOnTheSameComm) {
  runRanks(3, driver(), [](RankCtx& c) {
    const size_t N = 200000;  // bytes: several tiles
    DevBuf s(gEmu, N), d(gEmu, N);
    fill(s.as<uint8_t>(), N, [&](size_t i) { return uint8_t(i * 7 + c.rank); });
    int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(s.as<uint8_t>(), N, ncclUint8, next, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclRecv(d.as<uint8_t>(), N, ncclUint8, prev, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    sync(c);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(d.as<uint8_t>()[i], uint8_t(i * 7 + prev));
    // Host buffers on the same communicator still take the host path.
    std::vector<float> h(100, float(c.rank));
    ASSERT_EQ(ncclAllReduce(h.data(), h.data(), h.size(), ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
    EXPECT_EQ(h[99], 3.0f);
  });
}

// An operation of nothing uses no buffer, so it joins the group's GPU operations (an uneven all-to-all with empty
// pairs): here each rank also sends nothing to the previous rank and receives nothing from the next, and then makes
// a collective of nothing, grouped with a GPU collective or not.
TEST_P(DevicePath, EmptySendsJoinTheGroupsGpuOperations) {
  runRanks(3, driver(), [](RankCtx& c) {
    const size_t N = 5000;
    DevBuf s(gEmu, N), d(gEmu, N);
    fill(s.as<uint8_t>(), N, [&](size_t i) { return uint8_t(i * 5 + c.rank); });
    int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(s.as<uint8_t>(), N, ncclUint8, next, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclSend(nullptr, 0, ncclUint8, prev, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclRecv(d.as<uint8_t>(), N, ncclUint8, prev, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclRecv(nullptr, 0, ncclUint8, next, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(c.comm);
    sync(c);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(d.as<uint8_t>()[i], uint8_t(i * 5 + prev));
    // A collective of nothing keeps its place in the sequence on either path: rank 0 makes it alone (host path, it
    // uses no buffer), the others in a group with a GPU allreduce (device path), and the allreduce after it matches.
    DevBuf g(gEmu, 64 * sizeof(float));
    for (int round = 0; round < 2; round++) {
      fill(g.as<float>(), 64, [](size_t) { return 1.0f; });
      const bool grouped = c.rank != 0 && round == 0;
      if (grouped) {
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      }
      ASSERT_EQ(ncclAllReduce(g.as<float>(), g.as<float>(), 64, ncclFloat32, ncclSum, c.comm, streamOf(c)),
                ncclSuccess);
      if (round == 0) {
        ASSERT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
      }
      if (grouped) {
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(c.comm);
      }
      sync(c);
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      for (int k = 0; k < 64; k++) ASSERT_EQ(g.as<float>()[k], 3.0f) << "round " << round;
    }
  });
}

TEST_P(DevicePath, MixedHostAndDeviceBuffersAreRefused) {
  runRanks(2, driver(), [](RankCtx& c) {
    DevBuf d(gEmu, 64);
    std::vector<float> h(16);
    EXPECT_EQ(ncclAllReduce(d.as<float>(), h.data(), 16, ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(c.comm)).find("both be GPU memory or both host memory"), std::string::npos)
        << ncclGetLastError(c.comm);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(d.as<float>(), d.as<float>(), 16, ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(h.data(), h.data(), 16, ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(c.comm)).find("mixes operations on GPU buffers"), std::string::npos)
        << ncclGetLastError(c.comm);
  });
}

// NCCL_CHECK_POINTERS=1: a GPU buffer shorter than the length the call uses (an allgather's output is ranks x count;
// an allreduce from the middle of a buffer) is refused with ncclInvalidArgument naming it and its allocation, before
// anything is enqueued; buffers that hold the call run.
TEST_P(DevicePath, CheckPointersRefusesGpuBuffersShorterThanTheCall) {
  setenv("NCCL_CHECK_POINTERS", "1", 1);
  chorus::paramsReload();
  runRanks(2, driver(), [](RankCtx& c) {
    DevBuf in(gEmu, 16 * sizeof(float)), out(gEmu, 16 * sizeof(float));
    auto refused = [&c](ncclResult_t res, const char* buffer) {
      EXPECT_EQ(res, ncclInvalidArgument);
      const std::string text = ncclGetLastError(c.comm);
      EXPECT_NE(text.find(std::string(buffer) + " "), std::string::npos) << text;
      EXPECT_NE(text.find("runs past the end of its GPU allocation (64 bytes"), std::string::npos) << text;
    };
    refused(ncclAllGather(in.as<float>(), out.as<float>(), 16, ncclFloat32, c.comm, streamOf(c)), "recvbuff");
    refused(ncclAllReduce(in.as<float>() + 8, out.as<float>(), 16, ncclFloat32, ncclSum, c.comm, streamOf(c)),
            "sendbuff");
    for (int k = 0; k < 8; k++) in.as<float>()[k] = float(c.rank + k);
    ASSERT_EQ(ncclAllGather(in.as<float>(), out.as<float>(), 8, ncclFloat32, c.comm, streamOf(c)), ncclSuccess)
        << ncclGetLastError(c.comm);
    sync(c);
    for (int q = 0; q < 2; q++)
      for (int k = 0; k < 8; k++) EXPECT_EQ(out.as<float>()[q * 8 + k], float(q + k)) << q << " " << k;
    // A premulsum scalar by pointer (ncclScalarDevice) in GPU memory: one element within its allocation.
    DevBuf scalars(gEmu, 16 * sizeof(float));
    scalars.as<float>()[15] = 2.0f;
    ncclRedOp_t straddles, last;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&straddles, scalars.as<char>() + 62, ncclFloat32, ncclScalarDevice, c.comm),
              ncclSuccess);
    refused(ncclAllReduce(in.as<float>(), out.as<float>(), 8, ncclFloat32, straddles, c.comm, streamOf(c)),
            "the premulsum scalar");
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&last, scalars.as<float>() + 15, ncclFloat32, ncclScalarDevice, c.comm),
              ncclSuccess);
    ASSERT_EQ(ncclAllReduce(in.as<float>(), out.as<float>(), 8, ncclFloat32, last, c.comm, streamOf(c)), ncclSuccess)
        << ncclGetLastError(c.comm);
    sync(c);
    for (int k = 0; k < 8; k++) EXPECT_EQ(out.as<float>()[k], 2.0f * float(k) + 2.0f * float(1 + k)) << k;
    EXPECT_EQ(ncclRedOpDestroy(straddles, c.comm), ncclSuccess);
    EXPECT_EQ(ncclRedOpDestroy(last, c.comm), ncclSuccess);
    // A registration (ncclCommRegister) must lie within one allocation too.
    void* reg = nullptr;
    refused(ncclCommRegister(c.comm, in.as<float>() + 8, 16 * sizeof(float), &reg), "buff");
    EXPECT_EQ(reg, nullptr);
    ASSERT_EQ(ncclCommRegister(c.comm, in.as<float>() + 8, 8 * sizeof(float), &reg), ncclSuccess)
        << ncclGetLastError(c.comm);
    EXPECT_EQ(ncclCommDeregister(c.comm, reg), ncclSuccess);
  });
  unsetenv("NCCL_CHECK_POINTERS");
  chorus::paramsReload();
}

// An allgather and a reduce-scatter of N int32 a rank on the device, on stream s, each result checked element by
// element; `after`, when given, runs once each call has completed, with the call's name.
void allGatherReduceScatterChecked(ncclComm_t comm, int r, int n, cudaStream_t s, size_t N,
                                   const std::function<void(const char*)>& after = {}) {
  DevBuf in(gEmu, N * n * sizeof(int32_t)), out(gEmu, N * n * sizeof(int32_t));
  int32_t* ip = in.as<int32_t>();
  int32_t* op = out.as<int32_t>();
  fill(ip, N, [&](size_t i) { return int32_t(r * 100000 + int32_t(i)); });
  ASSERT_EQ(ncclAllGather(ip, op, N, ncclInt32, comm, s), ncclSuccess);
  sync(s);
  if (after) after("allgather");
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < N; i++) ASSERT_EQ(op[q * N + i], int32_t(q * 100000 + int32_t(i))) << q << " " << i;
  fill(ip, N * n, [&](size_t i) { return int32_t(r + int32_t(i)); });
  ASSERT_EQ(ncclReduceScatter(ip, op, N, ncclInt32, ncclSum, comm, s), ncclSuccess);
  sync(s);
  if (after) after("reduce-scatter");
  for (size_t i = 0; i < N; i++) ASSERT_EQ(op[i], int32_t(n * (r * N + i) + n * (n - 1) / 2)) << i;
}

// A launch holds a schedule as runs of steps, so a ring over more ranks than a launch has room for steps (40 in the
// 4 KiB layout of host and HIP builds: a ring allreduce over 21 ranks is 41 steps) still runs, on several channels.
TEST_P(DevicePath, RingsOverMoreRanksThanALaunchHasStepsFor) {
  if (GetParam().driver != Driver::kThreads || GetParam().direct) GTEST_SKIP() << "one case is enough: 24 threads";
  runRanks(24, driver(), [](RankCtx& c) {
    allReduceCase(c, 1001);    // LL
    allReduceCase(c, 300000);  // Simple, on more than one channel (1.2 MB: 5 in the large layout, 2 in this one)
    EXPECT_GE(gEmu.lastChannels.load() / std::max(1, gEmu.lastLanes.load()), 2);
    allGatherReduceScatterChecked(c.comm, c.rank, c.nranks, streamOf(c), 3000);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
  });
}

// An all-to-all written as one group of sends and receives (as PyTorch's all_to_all_single is) over more peers than
// one launch holds (8 sends and 8 receives in this build's layout, which HIP builds share): the group runs as several
// launches, each meeting its peers' launch of the same index. Every pair has its own size, some none, and rank r
// sends twice to r+1, so the group is two batches, the first of them split.
TEST_P(DevicePath, SendsToMorePeersThanALaunchHolds) {
  if (!GetParam().direct) GTEST_SKIP() << "sends and receives take FIFOs either way";
  runRanks(12, driver(), [](RankCtx& c) {
    const int n = c.nranks, r = c.rank;
    auto bytesOf = [n](int from, int to) { return size_t(((from * 7 + to * 3) % 5) * 9000 + (from + to) % 3); };
    auto value = [](int from, int to, size_t i) { return uint8_t(from * 31 + to * 7 + i); };
    std::vector<std::unique_ptr<DevBuf>> sends, recvs;
    for (int q = 0; q < n; q++) {
      sends.push_back(std::make_unique<DevBuf>(gEmu, bytesOf(r, q) + 1));
      recvs.push_back(std::make_unique<DevBuf>(gEmu, bytesOf(q, r) + 1));
      fill(sends[q]->as<uint8_t>(), bytesOf(r, q), [&](size_t i) { return value(r, q, i); });
    }
    DevBuf again(gEmu, 5000), gotAgain(gEmu, 5000);
    fill(again.as<uint8_t>(), 5000, [&](size_t i) { return uint8_t(i * 13 + r); });
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    const int launches = gEmu.launches;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int q = 0; q < n; q++) {
      ASSERT_EQ(ncclSend(sends[q]->as<uint8_t>(), bytesOf(r, q), ncclUint8, q, c.comm, streamOf(c)), ncclSuccess);
      ASSERT_EQ(ncclRecv(recvs[q]->as<uint8_t>(), bytesOf(q, r), ncclUint8, q, c.comm, streamOf(c)), ncclSuccess);
    }
    ASSERT_EQ(ncclSend(again.as<uint8_t>(), 5000, ncclUint8, next, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclRecv(gotAgain.as<uint8_t>(), 5000, ncclUint8, prev, c.comm, streamOf(c)), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    sync(c);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < bytesOf(q, r); i++) ASSERT_EQ(recvs[q]->as<uint8_t>()[i], value(q, r, i)) << q << " " << i;
    for (size_t i = 0; i < 5000; i++) ASSERT_EQ(gotAgain.as<uint8_t>()[i], uint8_t(i * 13 + prev)) << i;
    if (chorus::kDevMaxP2P < n - 1) {
      EXPECT_GE(gEmu.launches - launches, 3) << "the first batch was not split";
    }
  });
}

// ncclAlltoAll's direct schedule needs 2(n-1) connection ends on a channel, a gather's root and a scatter's n-1; past
// what one launch holds (24 in the 4 KiB layout of host and HIP builds, 128 in the large one) the collective runs as
// its sends and receives, split into launches as a group of them is; in place, from a copy of its input.
TEST_P(DevicePath, AllToAllGatherAndScatterPastTheConnectionsOfALaunch) {
  if (GetParam().driver != Driver::kThreads || GetParam().direct) GTEST_SKIP() << "one case is enough: 26 threads";
  runRanks(26, driver(), [](RankCtx& c) {
    const int n = c.nranks, r = c.rank;
    const size_t N = 1500;
    DevBuf in(gEmu, N * n * sizeof(int32_t)), out(gEmu, N * n * sizeof(int32_t));
    int32_t* ip = in.as<int32_t>();
    int32_t* op = out.as<int32_t>();
    auto v = [](int rank, size_t i) { return int32_t(rank * 1000000 + int32_t(i)); };
    fill(ip, N * n, [&](size_t i) { return v(r, i); });
    ASSERT_EQ(ncclAlltoAll(ip, op, N, ncclInt32, c.comm, streamOf(c)), ncclSuccess);
    sync(c);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(op[q * N + i], v(q, r * N + i)) << q << " " << i;
    for (int root : {0, 17}) {
      fill(op, N * n, [](size_t) { return int32_t(-1); });
      ASSERT_EQ(ncclGather(ip, op, N, ncclInt32, root, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      if (r == root) {
        for (int q = 0; q < n; q++)
          for (size_t i = 0; i < N; i++) ASSERT_EQ(op[q * N + i], v(q, i)) << q << " " << i;
      }
      ASSERT_EQ(ncclScatter(ip, op, N, ncclInt32, root, c.comm, streamOf(c)), ncclSuccess);
      sync(c);
      for (size_t i = 0; i < N; i++) ASSERT_EQ(op[i], v(root, r * N + i)) << i;
    }
    // In place: where it splits into launches, its sends read a copy of the input.
    ASSERT_EQ(ncclAlltoAll(ip, ip, N, ncclInt32, c.comm, streamOf(c)), ncclSuccess);
    sync(c);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(ip[q * N + i], v(q, r * N + i)) << q << " " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Drivers, DevicePath,
                         ::testing::Values(PathCase{Driver::kThreads, true}, PathCase{Driver::kThreads, false},
                                           PathCase{Driver::kProcesses, true}, PathCase{Driver::kProcesses, false}),
                         [](const auto& info) {
                           return std::string(driverName(info.param.driver)) + (!info.param.direct ? "_fifo" : "");
                         });

// Several ranks on one GPU in one process: ncclCommInitAll with a repeated device, one thread, one group.
TEST(DevicePathOneProcess, InitAllWithARepeatedDevice) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  const int n = 3;
  ncclComm_t comms[n];
  int devs[n] = {0, 0, 0};
  ASSERT_EQ(ncclCommInitAll(comms, n, devs), ncclSuccess);
  const size_t N = 40000;
  std::vector<std::unique_ptr<DevBuf>> bufs;
  for (int r = 0; r < n; r++) {
    bufs.push_back(std::make_unique<DevBuf>(gEmu, N * sizeof(float)));
    fill(bufs[r]->as<float>(), N, [&](size_t i) { return float(r) + float(i % 5); });
    int dev = -1;
    ASSERT_EQ(ncclCommCuDevice(comms[r], &dev), ncclSuccess);
    EXPECT_EQ(dev, 0);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(ncclAllReduce(bufs[r]->as<float>(), bufs[r]->as<float>(), N, ncclFloat32, ncclSum, comms[r],
                            reinterpret_cast<cudaStream_t>(uintptr_t(r + 1))),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) sync(reinterpret_cast<cudaStream_t>(uintptr_t(r + 1)));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < N; i++) ASSERT_EQ(bufs[r]->as<float>()[i], 3.0f + 3.0f * float(i % 5));
  for (int r = 0; r < n; r++) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  chorus::setGpuRuntimeForTesting(nullptr);
}

// Network staging: ranks on different hosts (NCCL_HOSTID) reach each other through the net transport, whose
// FIFOs the device path pins for its GPU. Ranks 0 and 2 share host "a" (IPC between them) and rank 1 is alone on
// host "b", so one launch mixes IPC connections (LL allowed) with staged ones (Simple only).
void stagingBody(RankCtx& c) {
  const int rank = c.rank, nranks = c.nranks;
  ncclComm_t comm = c.comm;
  for (size_t count : {size_t(1), size_t(1001), size_t(300000)}) allReduceCase(c, count);
  const size_t N = 20000;
  DevBuf in(gEmu, N * sizeof(int32_t)), out(gEmu, N * nranks * sizeof(int32_t));
  fill(in.as<int32_t>(), N, [&](size_t i) { return int32_t(rank * 1000000 + i); });
  EXPECT_EQ(ncclAllGather(in.as<int32_t>(), out.as<int32_t>(), N, ncclInt32, comm, streamOf(c)), ncclSuccess);
  sync(c);
  for (int q = 0; q < nranks; q++)
    for (size_t i = 0; i < N; i++) ASSERT_EQ(out.as<int32_t>()[q * N + i], int32_t(q * 1000000 + i)) << q;
  // Send/recv around the ring: every rank sends to the next and receives from the previous.
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(in.as<int32_t>(), N, ncclInt32, next, comm, streamOf(c)), ncclSuccess);
  EXPECT_EQ(ncclRecv(out.as<int32_t>(), N, ncclInt32, prev, comm, streamOf(c)), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  sync(c);
  for (size_t i = 0; i < N; i++) ASSERT_EQ(out.as<int32_t>()[i], int32_t(prev * 1000000 + i));
  EXPECT_EQ(asyncErrorOf(comm), ncclSuccess);
  // Staging FIFOs (and only they) are host memory registered with the runtime: every rank has some.
  EXPECT_GT(gEmu.registeredCount(), 0u) << "no staging connection was made";
}

int stagingRank(int rank, int nranks, const ncclUniqueId& id) {
  setenv("NCCL_HOSTID", rank == 1 ? "host-b" : "host-a", 1);
  chorus::paramsReload();
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 10;
  RankCtx c{rank, nranks, comm};
  stagingBody(c);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(gEmu.registeredCount(), 0u) << "staging FIFOs left registered after destroy";
  return ::testing::Test::HasFailure() ? 1 : 0;
}

TEST(DevicePathStaging, RanksOnDifferentHostsGoThroughPinnedSocketFifos) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  gEmu.peerAccess = true;
  auto status = forkRanks(3, [](int rank, const ncclUniqueId& id) { return stagingRank(rank, 3, id); });
  for (int r = 0; r < 3; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

// NCCL_RUNTIME_CONNECT=0 on a communicator with GPUs: init makes the device path's FIFOs of the collectives'
// schedules, lane 0 of each channel, as NCCL's init connects its channels: to the peer on this host (IPC) and to the
// one on the other (staged through the net). Ranks 0 and 2 on host "a", rank 1 on host "b"; the inboxes off, so that
// small calls use the FIFOs. Rank 0's log must say how many ends init made, and its allreduces and allgather that
// follow (one lane a channel at these sizes) make no FIFO of their own; their results are checked.
TEST(DevicePathStaging, RuntimeConnectZeroMakesTheFifosAtInit) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  gEmu.peerAccess = true;
  const std::string log = "/tmp/chorus-devconnect-" + std::to_string(getpid()) + ".log";
  const std::string text = forkRanksForLog(
      3,
      [&](int rank, const ncclUniqueId& id) {
        setenv("NCCL_HOSTID", rank == 1 ? "host-b" : "host-a", 1);
        setenv("NCCL_RUNTIME_CONNECT", "0", 1);
        setenv("CHORUS_DEVICE_IPC", "0", 1);
        if (rank == 0) logInfoTo(log, "INIT,P2P");
        reloadEnv();
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, 3, id, rank) != ncclSuccess) return 10;
        RankCtx c{rank, 3, comm};
        for (size_t count : {size_t(1), size_t(1001)}) allReduceCase(c, count);
        const size_t n = 2000;
        DevBuf in(gEmu, n * sizeof(int32_t)), out(gEmu, n * 3 * sizeof(int32_t));
        fill(in.as<int32_t>(), n, [&](size_t i) { return int32_t(rank * 1000000 + i); });
        EXPECT_EQ(ncclAllGather(in.as<int32_t>(), out.as<int32_t>(), n, ncclInt32, comm, streamOf(c)), ncclSuccess);
        sync(c);
        size_t wrong = 0;
        for (int q = 0; q < 3; q++)
          for (size_t i = 0; i < n; i++) wrong += out.as<int32_t>()[q * n + i] != int32_t(q * 1000000 + i) ? 1 : 0;
        EXPECT_EQ(wrong, 0u) << "elements of the allgather wrong";
        EXPECT_EQ(asyncErrorOf(comm), ncclSuccess);
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
        return ::testing::Test::HasFailure() ? 1 : 0;
      },
      log);
  chorus::setGpuRuntimeForTesting(nullptr);
  const size_t made = text.find("NCCL_RUNTIME_CONNECT=0: ");
  ASSERT_NE(made, std::string::npos) << text;
  EXPECT_NE(text.find("device connection ends made at init", made), std::string::npos) << text;
  EXPECT_EQ(text.find("NCCL_RUNTIME_CONNECT=0: 0 device"), std::string::npos) << text;
  // Made before the init's line: to the local peer and the remote one.
  const std::string before = text.substr(0, made), after = text.substr(made);
  EXPECT_NE(before.find("rank 0: device connection channel 0 "), std::string::npos) << text;
  EXPECT_NE(before.find(" rank 1 via "), std::string::npos) << "nothing to the other host\n" << text;
  EXPECT_NE(before.find(" rank 2 via "), std::string::npos) << "nothing to the peer on this host\n" << text;
  EXPECT_EQ(after.find("device connection channel"), std::string::npos) << "made on first use\n" << text;
}

// NCCL_RUNTIME_CONNECT=0 on a communicator where one rank has no GPU: the ranks with one make nothing at init (they
// would wait there for FIFOs the rank without one never makes), and init and a host-buffer allreduce work on both.
TEST(DevicePathStaging, RuntimeConnectZeroWithARankWithoutAGpuConnectsOnFirstUse) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  const std::string log = "/tmp/chorus-devconnect-nogpu-" + std::to_string(getpid()) + ".log";
  const std::string text = forkRanksForLog(
      2,
      [&](int rank, const ncclUniqueId& id) {
        if (rank == 1) chorus::setGpuRuntimeForTesting(nullptr);
        setenv("NCCL_RUNTIME_CONNECT", "0", 1);
        setenv("CHORUS_TIMEOUT_S", "30", 1);
        if (rank == 0) logInfoTo(log, "INIT");
        reloadEnv();
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
        std::vector<float> buf(1000, float(rank + 1));
        EXPECT_EQ(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr), ncclSuccess)
            << ncclGetLastError(comm);
        EXPECT_EQ(buf[999], 3.0f);
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
        return ::testing::Test::HasFailure() ? 1 : 0;
      },
      log);
  chorus::setGpuRuntimeForTesting(nullptr);
  EXPECT_NE(text.find("NCCL_RUNTIME_CONNECT=0: rank 1 has no GPU"), std::string::npos) << text;
}

// Rank 1 dies (without destroying its communicator) after an allreduce and a broadcast; rank 0's next allreduce
// must fail naming it, well before CHORUS_TIMEOUT_S. Returns the rank's exit status for forkRanks.
int deadPeerRank(int rank, const ncclUniqueId& id, bool acrossHosts) {
  if (acrossHosts) setenv("NCCL_HOSTID", rank == 0 ? "host-a" : "host-b", 1);
  setenv("CHORUS_TIMEOUT_S", "60", 1);
  chorus::paramsReload();
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
  DevBuf b(gEmu, 300000 * sizeof(float));
  cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
  if (ncclAllReduce(b.as<float>(), b.as<float>(), 300000, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return 11;
  // Rank 1 leaves only once it has rank 0's broadcast: rank 0 has then finished the allreduce, so rank 1's own
  // last slots (which a net proxy may still be sending when its kernel returns) are not lost with it.
  if (ncclBroadcast(b.as<float>(), b.as<float>(), 1024, ncclFloat32, 0, comm, s) != ncclSuccess) return 12;
  if (gEmu.streamSynchronize(s) != ncclSuccess || asyncErrorOf(comm) != ncclSuccess) return 13;
  if (rank == 1) _exit(0);
  expectPeerDeathNamed(gEmu, comm, b.as<float>(), 300000, s, "rank 1");
  ncclCommDestroy(comm);
  return ::testing::Test::HasFailure() ? 1 : 0;
}

// Across hosts: the net proxy sees the connection break and poisons the FIFO the kernel waits on.
TEST(DevicePathStaging, DeadPeerAcrossHostsIsReported) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) { return deadPeerRank(rank, id, true); });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

// On one host, through IPC: the kernel cannot see the death itself; the host's watchdog marks the peer and the
// waiting kernel stops.
TEST(DevicePathFaults, DeadLocalPeerStopsTheKernel) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) { return deadPeerRank(rank, id, false); });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

// A peer that finished its part and exited normally is no failure: the root of a ring broadcast writes its data,
// destroys its communicator and exits before the last rank even calls, and the last rank (which receives from the
// middle one) still completes.
TEST(DevicePathFaults, PeerThatFinishedAndExitedIsNotAFailure) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  auto status = forkRanks(3, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_ALGO", "Ring", 1);
    setenv("NCCL_PROTO", "Simple", 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 3, id, rank) != ncclSuccess) return 10;
    const size_t N = 1000;
    DevBuf b(gEmu, N * sizeof(float));
    fill(b.as<float>(), N, [&](size_t i) { return float(rank * 1000 + int(i)); });
    if (rank == 0) usleep(400 * 1000);  // well after rank 1 is gone and the watchdog has seen it
    cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
    EXPECT_EQ(ncclBroadcast(b.as<float>(), b.as<float>(), N, ncclFloat32, 1, comm, s), ncclSuccess);
    sync(s);
    EXPECT_EQ(asyncErrorOf(comm), ncclSuccess) << ncclGetLastError(comm);
    for (size_t i = 0; i < N; i++) EXPECT_EQ(b.as<float>()[i], float(1000 + int(i))) << i;
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 3; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

// The device-connection rendezvous records (/dev/shm, "chorus-<hash>-d...") that name this process.
std::vector<std::string> recordsOfThisProcess() {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  while (dir != nullptr) {
    struct dirent* e = readdir(dir);
    if (e == nullptr) break;
    std::string n = e->d_name;
    if (chorus::shmKind(n.c_str()) != chorus::ShmKind::kDeviceRecord) continue;
    constexpr size_t kHead = sizeof(chorus::RendezvousHead);
    const auto* head = static_cast<const chorus::RendezvousHead*>(chorus::shmMapMine("/" + n, kHead));
    if (head == nullptr) continue;
    if (head->pids[0] == uint64_t(getpid()) || head->pids[1] == uint64_t(getpid())) names.push_back("/" + n);
    munmap(const_cast<chorus::RendezvousHead*>(head), kHead);
  }
  if (dir != nullptr) closedir(dir);
  return names;
}

// A rank killed before it sets up its device connections leaves its peer's half-made rendezvous records behind
// (the peer created them to wait for its records). Once both processes have exited, the next device-path init on
// the host removes them.
TEST(DevicePathFaults, RecordsLeftByExitedRanksAreSwept) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  const std::string list = "/tmp/chorus-records-" + std::to_string(getpid());
  auto status = forkRanks(2, [&list](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    if (rank == 1) _exit(0);  // before any device connection
    DevBuf b(gEmu, 1000 * sizeof(float));
    cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
    ncclResult_t res = ncclAllReduce(b.as<float>(), b.as<float>(), 1000, ncclFloat32, ncclSum, comm, s);
    if (res == ncclSuccess) res = gEmu.streamSynchronize(s) == ncclSuccess ? asyncErrorOf(comm) : ncclInternalError;
    EXPECT_NE(res, ncclSuccess) << "rank 1 never set up its connections";
    ncclCommAbort(comm);
    std::vector<std::string> left = recordsOfThisProcess();
    EXPECT_FALSE(left.empty()) << "the records this rank created for rank 1's FIFOs outlive it";
    std::ofstream out(list);
    for (const std::string& n : left) out << n << "\n";
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  std::vector<std::string> left;
  std::ifstream in(list);
  for (std::string n; std::getline(in, n);) left.push_back(n);
  std::remove(list.c_str());
  ASSERT_FALSE(left.empty());
  // (Another test's communicator on this host may sweep them first: either way they must be gone.)
  chorus::sweepStaleRendezvous();  // what the next communicator's device path does at init
  for (const std::string& n : left) {
    const void* p = chorus::shmMapMine(n, 8);
    EXPECT_EQ(p, nullptr) << n << " is still in /dev/shm";
    if (p != nullptr) munmap(const_cast<void*>(p), 8), shm_unlink(n.c_str());
  }
  chorus::setGpuRuntimeForTesting(nullptr);
}

// Rings group a host's ranks by the NUMA node of their GPU (topo/ring_order.h). The DGX H100 topology file with four
// of its GPUs renumbered to the emulated runtime's bus ids (device d at 0000:00:0d.0), alternating between the two
// sockets: devices 0 and 2 on NUMA node 0, 1 and 3 on node 1. Four processes, rank r on device r, so the ring is
// 0 2 1 3. (The topology is resolved once per process: ctest runs each test in its own.)
// Writes the DGX H100 topology file with the GPUs at the given bus ids moved to the emulated runtime's (device d at
// 0000:00:0d.0, the d-th id given) and returns its path (under /tmp, named after `what` and this process).
std::string dgxWithEmulatedGpus(const std::vector<std::string>& busIds, const char* what) {
  std::string xml = readFile(sourceDir() + "/topo/dgx-h100.xml");
  EXPECT_FALSE(xml.empty());
  for (size_t d = 0; d < busIds.size(); d++) {
    char emu[32];
    snprintf(emu, sizeof(emu), "0000:00:%02x.0", static_cast<unsigned>(d));
    for (size_t at = xml.find(busIds[d]); at != std::string::npos; at = xml.find(busIds[d], at))
      xml.replace(at, 12, emu);
  }
  const std::string topo = std::string("/tmp/chorus-") + what + "-topo-" + std::to_string(getpid()) + ".xml";
  std::ofstream(topo) << xml;
  return topo;
}

// One allreduce of `count` floats on the device, its result checked (gtest failures).
void allReduceChecked(ncclComm_t comm, int rank, int nranks, size_t count) {
  DevBuf b(gEmu, count * sizeof(float));
  fill(b.as<float>(), count, [&](size_t i) { return float(rank + 1) * float(i % 97); });
  cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
  EXPECT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, comm, s), ncclSuccess);
  sync(s);
  EXPECT_EQ(asyncErrorOf(comm), ncclSuccess) << ncclGetLastError(comm);
  const float ranksSum = float(nranks * (nranks + 1) / 2);
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += b.as<float>()[i] != ranksSum * float(i % 97);
  EXPECT_EQ(wrong, 0u) << "elements of the allreduce differ from the sum";
}

// A rank process of the topology tests: on emulated device `device`, one float allreduce of `count` elements
// checked against the sum, then destroy. Returns the exit status for forkRanks.
int allReduceOnDevice(int rank, int nranks, int device, const ncclUniqueId& id, size_t count) {
  if (gEmu.setDevice(device) != ncclSuccess) return 9;
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 10;
  allReduceChecked(comm, rank, nranks, count);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  return ::testing::Test::HasFailure() ? 1 : 0;
}

// An allreduce, an allgather and a reduce-scatter on the device, each checked. With expectOrdered, the launches of
// the last two must have named blocks by ring position (StepRun::ordered).
int ringCollectivesOnDevice(int rank, int nranks, int device, const ncclUniqueId& id, bool expectOrdered) {
  if (gEmu.setDevice(device) != ncclSuccess) return 9;
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 10;
  allReduceChecked(comm, rank, nranks, 100000);
  allGatherReduceScatterChecked(comm, rank, nranks, reinterpret_cast<cudaStream_t>(uintptr_t(1)), 3001,
                                [expectOrdered](const char* call) {
                                  if (expectOrdered) {
                                    EXPECT_GT(gEmu.lastOrderedRuns.load(), 0)
                                        << "the " << call << "'s blocks did not go by ring position";
                                  }
                                });
  EXPECT_EQ(asyncErrorOf(comm), ncclSuccess) << ncclGetLastError(comm);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  return ::testing::Test::HasFailure() ? 1 : 0;
}

// Six processes on two hosts, placed round-robin (rank r on host r mod 2, as srun --distribution=cyclic does): the
// ring laid host by host is 0 2 4 1 3 5, so allgather's and reduce-scatter's per-rank blocks come in no fixed stride,
// and the launches name them by ring position, looked up in the communicator's ring order on the device. Rank 0 (ring
// position 0) is sure to: its blocks 5 3 1 4 are positions 5 4 3 2. Elsewhere a position wraps, and the runs by
// rank are as few.
TEST(DevicePathStaging, RanksPlacedRoundRobinRunRingsByPosition) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  gEmu.peerAccess = true;
  auto status = forkRanks(6, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", rank % 2 == 0 ? "host-a" : "host-b", 1);
    setenv("NCCL_ALGO", "Ring", 1);
    chorus::paramsReload();
    return ringCollectivesOnDevice(rank, 6, 0, id, rank == 0);
  });
  for (int r = 0; r < 6; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

TEST(DevicePathTopology, RingsGroupEachHostsRanksByGpuNumaNode) {
  const std::string topo =
      dgxWithEmulatedGpus({"0000:19:00.0", "0000:99:00.0", "0000:1b:00.0", "0000:9b:00.0"}, "numa");
  chorus::HostTopology t;
  std::string err;
  ASSERT_TRUE(chorus::loadHostTopology(topo, &t, &err)) << err;
  for (int d = 0; d < 4; d++) ASSERT_EQ(chorus::topologyGpuNuma(t, d), d % 2) << "device " << d;

  gEmu.devices = 4;
  gEmu.peerAccess = true;
  chorus::setGpuRuntimeForTesting(&gEmu);
  const std::string log = "/tmp/chorus-numa-log-" + std::to_string(getpid());
  std::string text = forkRanksForLog(
      4,
      [&](int rank, const ncclUniqueId& id) {
        setenv("CHORUS_TOPO_FILE", topo.c_str(), 1);
        setenv("NCCL_ALGO", "Ring", 1);
        setenv("CHORUS_DEVICE_IPC", "0", 1);  // the ring's FIFOs, not the inboxes
        if (rank == 0) logInfoTo(log, "INIT");
        ncclResetDebugInit();
        chorus::paramsReload();
        return allReduceOnDevice(rank, 4, rank, id, 100000);
      },
      log);
  EXPECT_NE(text.find("rings host by host (CHORUS_RING_BY_HOST): 0 2 1 3"), std::string::npos) << text;
  chorus::setGpuRuntimeForTesting(nullptr);
  gEmu.devices = 1;
  std::remove(topo.c_str());
}

// The CPUs the calling thread may run on, comma-separated ("0,1").
std::string threadCpus() {
  cpu_set_t cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof(cpus), &cpus) != 0) return "?";
  std::string list;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &cpus)) list += (list.empty() ? "" : ",") + std::to_string(c);
  return list;
}

// As NCCL's init does, a rank's init runs on the CPUs near its GPU (those within the thread's affinity), and so do the
// setup of its device engine and of new GPU connections, so that the pinned host memory they first touch is on the
// GPU's NUMA node; the thread has its own affinity back after each. A host of two NUMA nodes, GPU 0 near CPU 0 and
// GPU 1 near CPU 1 (this machine's two CPUs), and a process on each GPU, their FIFOs in pinned host memory
// (NCCL_P2P_DISABLE=1). A thread kept off its GPU's CPUs stays where it is, unless NCCL_IGNORE_CPU_AFFINITY=1.
TEST(DevicePathTopology, InitAndConnectionsRunNearTheGpu) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  if (!CPU_ISSET(0, &mine) || !CPU_ISSET(1, &mine)) GTEST_SKIP() << "needs CPUs 0 and 1";
  const std::string topo = "/tmp/chorus-neargpu-topo-" + std::to_string(getpid()) + ".xml";
  {
    std::ofstream f(topo);
    f << "<system version=\"1\">\n";
    for (int g = 0; g < 2; g++) {
      f << "  <cpu numaid=\"" << g << "\" affinity=\"0000000" << (g + 1)
        << "\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">\n"
        << "    <pci busid=\"0000:00:0" << g << ".0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\" "
        << "link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
        << "      <gpu dev=\"" << g << "\" sm=\"90\" rank=\"" << g << "\" gdr=\"1\"/>\n"
        << "    </pci>\n  </cpu>\n";
    }
    f << "</system>\n";
  }
  gEmu.devices = 2;
  gEmu.peerAccess = true;
  chorus::setGpuRuntimeForTesting(&gEmu);
  const std::string log = "/tmp/chorus-neargpu-log-" + std::to_string(getpid());
  struct Case {
    const char* rank1Cpus;  // rank 1's thread (rank 0's: CPUs 0 and 1)
    bool ignore;            // NCCL_IGNORE_CPU_AFFINITY=1
    const char* rank1Mem;   // the CPUs rank 1's thread had when it allocated and pinned host memory
  };
  for (const Case& c : {Case{"0,1", false, "1"}, Case{"0", false, "0"}, Case{"0", true, "1"}}) {
    SCOPED_TRACE(std::string("rank 1 on CPUs ") + c.rank1Cpus + (c.ignore ? ", NCCL_IGNORE_CPU_AFFINITY=1" : ""));
    const std::string text = forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("CHORUS_TOPO_FILE", topo.c_str(), 1);
          setenv("NCCL_P2P_DISABLE", "1", 1);
          setenv("CHORUS_DEVICE_IPC", "0", 1);  // the ring's FIFOs, not the inboxes
          setenv("NCCL_ALGO", "Ring", 1);
          if (c.ignore) setenv("NCCL_IGNORE_CPU_AFFINITY", "1", 1);
          if (rank == 0) logInfoTo(log, "INIT");
          ncclResetDebugInit();
          chorus::paramsReload();
          const std::string pin = rank == 0 ? "0,1" : c.rank1Cpus;
          cpu_set_t set;
          CPU_ZERO(&set);
          CPU_SET(0, &set);
          if (pin == "0,1") CPU_SET(1, &set);
          if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) return 8;
          if (gEmu.setDevice(rank) != ncclSuccess) return 9;
          ncclComm_t comm = nullptr;
          if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
          EXPECT_EQ(threadCpus(), pin) << "rank " << rank << ": the init gave the thread its affinity back";
          allReduceChecked(comm, rank, 2, 100000);
          const std::string near = rank == 0 ? "0" : c.rank1Mem;
          EXPECT_EQ(gEmu.hostAllocCpus, near) << "rank " << rank << ": the device engine's pinned host memory";
          EXPECT_EQ(gEmu.hostRegisterCpus, near) << "rank " << rank << ": the pinned host FIFOs";
          EXPECT_EQ(threadCpus(), pin) << "rank " << rank << ": the call gave the thread its affinity back";
          EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
          return ::testing::Test::HasFailure() ? 1 : 0;
        },
        log);
    EXPECT_NE(text.find("init near GPU 0: CPUs 0 (the GPU's 0"), std::string::npos) << text;
  }
  chorus::setGpuRuntimeForTesting(nullptr);
  gEmu.devices = 1;
  std::remove(topo.c_str());
}

// NCCL_P2P_DISABLE and NCCL_P2P_LEVEL, as NCCL's P2P transport takes them, and NCCL's default without them: two
// processes of one host on emulated GPUs that can map each other's memory, over the DGX H100 topology with three of
// its GPUs at the emulated bus ids (devices 0 and 1 on one PCI switch, PIX; device 2 behind the host bridge, PHB),
// with or without its NVLink, on its Intel CPUs or on AMD ones. The device FIFOs between them are in GPU memory where
// the setting allows it, else in pinned host memory with an INFO line that says why; the allreduce is right either
// way.
TEST(DevicePathTopology, P2pLevelAndDisableDecideWhereFifosLive) {
  const std::string linked = dgxWithEmulatedGpus({"0000:19:00.0", "0000:1b:00.0", "0000:43:00.0"}, "p2p");
  std::string xml = readFile(linked), unlinkedXml;
  for (size_t at = 0, end; at < xml.size(); at = end + 1) {
    end = xml.find('\n', at);
    if (end == std::string::npos) end = xml.size();
    const std::string line = xml.substr(at, end - at);
    if (line.find("ChorusGPULink") == std::string::npos) unlinkedXml += line + "\n";
  }
  const std::string unlinked = linked + ".pci.xml";
  std::ofstream(unlinked) << unlinkedXml;
  // The same PCI tree on AMD CPUs, where NCCL's default reaches SYS for a communicator of two GPUs.
  std::string amdXml = unlinkedXml;
  for (size_t at; (at = amdXml.find("GenuineIntel")) != std::string::npos;) amdXml.replace(at, 12, "AuthenticAMD");
  const std::string unlinkedAmd = linked + ".amd.xml";
  std::ofstream(unlinkedAmd) << amdXml;

  gEmu.devices = 3;
  gEmu.peerAccess = true;
  chorus::setGpuRuntimeForTesting(&gEmu);
  const std::string log = "/tmp/chorus-p2p-log-" + std::to_string(getpid());
  // Rank 0 on device 0, rank 1 on `peerDevice`; returns what rank 0 logged of its device connections.
  auto run = [&](const std::string& topo, int peerDevice, const char* name, const char* value) {
    return forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("CHORUS_TOPO_FILE", topo.c_str(), 1);
          setenv("NCCL_ALGO", "Ring", 1);
          setenv("CHORUS_DEVICE_IPC", "0", 1);  // the ring's FIFOs, not the inboxes (which are placed alike)
          if (name != nullptr) setenv(name, value, 1);
          if (rank == 0) logInfoTo(log, "P2P");  // rank 0 owns the FIFOs it receives on: it says where they are
          ncclResetDebugInit();
          chorus::paramsReload();
          return allReduceOnDevice(rank, 2, rank == 0 ? 0 : peerDevice, id, 100000);
        },
        log);
  };
  const std::string inGpu = "via p2p/IPC", inHost = "via shm (pinned host memory)";
  struct Case {
    const std::string& topo;
    int peerDevice;
    const char* name;
    const char* value;
    const char* why;  // nullptr: in GPU memory
  };
  const Case cases[] = {
      // Unset: NCCL's default on the file's Intel CPUs, PXB (as for NVLinked GPUs, since NVLink is nearer).
      {unlinked, 1, nullptr, nullptr, nullptr},
      {unlinked, 2, nullptr, nullptr,
       "NCCL_P2P_LEVEL unset: NCCL's default on this host (x86_64 GenuineIntel CPUs, 2 GPU(s) of the communicator) is "
       "PXB, and GPUs 0000:00:00.0 and 0000:00:02.0 are PHB apart with no NVLink or xGMI link between them "
       "(NCCL_P2P_LEVEL=PHB allows it)"},
      {linked, 2, nullptr, nullptr, nullptr},
      {unlinkedAmd, 2, nullptr, nullptr, nullptr},  // AMD CPUs, two GPUs: SYS
      {unlinked, 2, "NCCL_P2P_LEVEL", "SYS", nullptr},
      {unlinked, 1, "NCCL_P2P_LEVEL", "PIX", nullptr},
      {unlinked, 2, "NCCL_P2P_LEVEL", "PIX",
       "NCCL_P2P_LEVEL=PIX, and GPUs 0000:00:00.0 and 0000:00:02.0 are PHB apart"},
      {unlinked, 2, "NCCL_P2P_LEVEL", "3", nullptr},  // NCCL's number for PHB
      {unlinked, 1, "NCCL_P2P_LEVEL", "LOC", "NCCL_P2P_LEVEL=LOC"},
      {unlinked, 1, "NCCL_P2P_DISABLE", "1", "NCCL_P2P_DISABLE=1"},
      {unlinked, 1, "NCCL_P2P_LEVEL", "NVL",
       "NCCL_P2P_LEVEL=NVL, and the host topology has no NVLink or xGMI link between GPUs 0000:00:00.0 and "
       "0000:00:01.0"},
      {linked, 2, "NCCL_P2P_LEVEL", "NVL", nullptr},  // NVLink is nearer than any PCI path
      {linked, 2, "NCCL_P2P_LEVEL", "PIX", nullptr},
  };
  for (const Case& c : cases) {
    const std::string text = run(c.topo, c.peerDevice, c.name, c.value);
    const std::string what = std::string(c.name ? c.name : "unset") + "=" + (c.value ? c.value : "") + ", device " +
                             std::to_string(c.peerDevice) +
                             (&c.topo == &linked        ? ", NVLink"
                              : &c.topo == &unlinkedAmd ? ", AMD CPUs"
                                                        : ", PCI only");
    if (c.why == nullptr) {
      EXPECT_NE(text.find(inGpu), std::string::npos) << what << "\n" << text;
      EXPECT_EQ(text.find(inHost), std::string::npos) << what << "\n" << text;
    } else {
      EXPECT_NE(text.find(inHost), std::string::npos) << what << "\n" << text;
      EXPECT_EQ(text.find(inGpu), std::string::npos) << what << "\n" << text;
      EXPECT_NE(text.find(std::string("in pinned host memory: ") + c.why), std::string::npos) << what << "\n" << text;
    }
  }
  chorus::setGpuRuntimeForTesting(nullptr);
  gEmu.devices = 1;
  std::remove(linked.c_str());
  std::remove(unlinked.c_str());
  std::remove(unlinkedAmd.c_str());
}

// The default P2P level by CPU and GPU vendor: NVIDIA GPUs as NCCL 2.28's ncclTopoCheckP2p, AMD GPUs as RCCL's.
TEST(DevicePathTopology, P2pDefaultLevelFollowsNcclAndRccl) {
  using chorus::p2pDefaultLevel;
  using chorus::PathClass;
  struct Case {
    const char* arch;
    const char* vendor;
    bool amdGpus;
    int gpus;
    PathClass want;
  };
  const Case cases[] = {
      {"x86_64", "GenuineIntel", false, 8, PathClass::kPXB},
      {"x86_64", "GenuineIntel", false, 2, PathClass::kPXB},
      {"x86_64", "AuthenticAMD", false, 2, PathClass::kSYS},
      {"x86_64", "AuthenticAMD", false, 4, PathClass::kPXB},
      {"aarch64", "", false, 2, PathClass::kPXB},
      {"ppc64le", "", false, 2, PathClass::kPXB},
      {"x86_64", "AuthenticAMD", true, 8, PathClass::kSYS},
      {"x86_64", "GenuineIntel", true, 8, PathClass::kPXB},
      {"x86_64", "CentaurHauls", true, 8, PathClass::kPXB},
      {"x86_64", "  Shanghai  ", true, 8, PathClass::kPXB},
      {"aarch64", "", true, 8, PathClass::kPXB},
      {"ppc64le", "", true, 8, PathClass::kSYS},
      {"", "", false, 2, PathClass::kNone},
      {"", "", true, 2, PathClass::kNone},
  };
  for (const Case& c : cases)
    EXPECT_EQ(p2pDefaultLevel(c.arch, c.vendor, c.amdGpus, c.gpus), c.want)
        << c.arch << " " << c.vendor << (c.amdGpus ? " AMD" : " NVIDIA") << " GPUs, " << c.gpus;
}

#ifdef CHORUS_TEST_NET_V11
// In a rank process of two ranks: rank 0 on host dgx-a and rank 1 on dgx-b, both with the topology file `topo`,
// over the test net plugin offering the node's eight HCAs by name (all over one TCP interface), logging INIT and NET
// to `log`.RANK.
void onDgxHostsOverTestNet(int rank, const std::string& topo, const std::string& log) {
  setenv("NCCL_HOSTID", rank == 0 ? "dgx-a" : "dgx-b", 1);
  setenv("CHORUS_TOPO_FILE", topo.c_str(), 1);
  setenv("NCCL_NET_PLUGIN", CHORUS_TEST_NET_V11, 1);
  setenv("NCCL_NET", "ChorusTestNet", 1);
  setenv("CHORUS_TEST_NET_DEVICES", "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", 1);
  logInfoTo(log + "." + std::to_string(rank), "INIT,NET");
  ncclResetDebugInit();
  chorus::paramsReload();
}

// Rank r's log of a forkRanksForLog run whose ranks logged to `log`.RANK (onDgxHostsOverTestNet), removed once read.
std::string takeRankLog(const std::string& log, int r) {
  const std::string file = log + "." + std::to_string(r);
  std::string text = readFile(file);
  std::remove(file.c_str());
  return text;
}

// For a test's life: the DGX H100 topology file with GPU0, GPU1 and GPU4 renumbered to emulated devices 0, 1 and 2
// (keeping their PCI order), three emulated devices, and the emulated runtime installed.
struct DgxGpus {
  std::string topo;
  explicit DgxGpus(const char* what)
      : topo(dgxWithEmulatedGpus({"0000:19:00.0", "0000:1b:00.0", "0000:99:00.0"}, what)) {
    gEmu.devices = 3;
    chorus::setGpuRuntimeForTesting(&gEmu);
  }
  ~DgxGpus() {
    gEmu.gpuDirect = false;
    chorus::setGpuRuntimeForTesting(nullptr);
    gEmu.devices = 1;
    std::remove(topo.c_str());
  }
};

// Net connections between hosts leave through the NICs nearest each rank's GPU (topo/nic_choice.h). Two DGX H100-like
// hosts (the topology file, with GPU0, GPU1 and GPU4 renumbered to emulated devices 0, 1 and 2, keeping their PCI
// order), the test net plugin offering the node's eight HCAs by name (all over one TCP interface; it logs the device
// each listen and connect is given). Rank 0 runs on GPU1, which shares mlx5_0 and mlx5_1 under its switch with GPU0;
// rank 1 on GPU4, on the other socket, which shares mlx5_4 and mlx5_5 with GPU5. Two channels. With
// NCCL_NETDEVS_POLICY unset (AUTO), as NCCL, each GPU takes one of its switch's two NICs: rank 0 mlx5_1 (GPU0 has
// mlx5_0), rank 1 mlx5_4. With ALL each takes both, its own first, and both carry connections.
TEST(DevicePathTopology, NetConnectionsUseTheNicsNearestEachGpu) {
  DgxGpus dgx("nic");
  const std::string& topo = dgx.topo;
  const std::string log = "/tmp/chorus-nic-log-" + std::to_string(getpid());
  for (const char* policy : {"", "ALL"}) {
    SCOPED_TRACE(std::string("NCCL_NETDEVS_POLICY=") + policy);
    const bool all = policy[0] != '\0';
    std::vector<std::string> logs(2);
    forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("CHORUS_DEVICE_NCHANNELS", "2", 1);
          if (all) setenv("NCCL_NETDEVS_POLICY", policy, 1);
          onDgxHostsOverTestNet(rank, topo, log);
          return allReduceOnDevice(rank, 2, rank + 1, id, 300000);  // enough that both channels carry data
        },
        log);
    for (int r = 0; r < 2; r++) logs[r] = takeRankLog(log, r);
    const char* said[2] = {
        all ? "devices by channel: 1 (mlx5_1, PIX), 0 (mlx5_0, PIX)" : "devices by channel: 1 (mlx5_1, PIX) (",
        all ? "devices by channel: 4 (mlx5_4, PIX), 5 (mlx5_5, PIX)" : "devices by channel: 4 (mlx5_4, PIX) ("};
    // What the plugin was asked for: each rank's own NICs, each used, and no other.
    const std::vector<std::vector<std::string>> own =
        all ? std::vector<std::vector<std::string>>{{"mlx5_0", "mlx5_1"}, {"mlx5_4", "mlx5_5"}}
            : std::vector<std::vector<std::string>>{{"mlx5_1"}, {"mlx5_4"}};
    for (int r = 0; r < 2; r++) {
      EXPECT_NE(logs[r].find(said[r]), std::string::npos) << logs[r];
      std::vector<std::string> used;
      for (size_t at = logs[r].find(" on device "); at != std::string::npos; at = logs[r].find(" on device ", at + 1)) {
        const size_t open = logs[r].find('(', at), close = logs[r].find(')', at);
        if (open != std::string::npos && close != std::string::npos)
          used.push_back(logs[r].substr(open + 1, close - open - 1));
      }
      EXPECT_GE(used.size(), 4u) << "rank " << r << ": a listen and a connect per channel\n" << logs[r];
      for (const std::string& nic : own[static_cast<size_t>(r)])
        EXPECT_NE(std::count(used.begin(), used.end(), nic), 0) << "rank " << r << " " << nic;
      for (const std::string& u : used)
        EXPECT_NE(std::count(own[static_cast<size_t>(r)].begin(), own[static_cast<size_t>(r)].end(), u), 0)
            << "rank " << r << " used " << u;
    }
  }
}

// GPUDirect RDMA: where the net registers GPU memory (the test plugin with CHORUS_TEST_NET_PTR_CUDA=1), the runtime
// supports it and the NIC is near enough the GPU (NCCL_NET_GDR_LEVEL, default PXB; here PIX), a device connection to
// another host keeps its slot data in GPU memory: the proxy registers it as such, sends and receives there, and
// flushes each receive where NCCL would (below 9.0, or as the net or NCCL_NET_FORCE_FLUSH asks; on a host that is not
// x86, which may be Grace's C2C). Rank 0 on GPU1 and rank 1 on GPU4 of two DGX H100-like hosts (as above). Every
// collective is checked; the logs say which connections took GPU memory, how it was registered (regMr through peer
// memory, or regMrDmaBuf of the runtime's dma-buf export) and why the others did not. Settings that turn it off, one
// at a time: NCCL_NET_GDR_LEVEL=LOC; NCCL_NET_GDR_READ=0 (the receiving sides only); a runtime without it; a net
// without NCCL_PTR_CUDA; a runtime with dma-buf only and a net without NCCL_PTR_DMABUF.
TEST(DevicePathGpuDirect, NetFifosTakeGpuMemoryWhereNetRuntimeAndDistanceAllow) {
  DgxGpus dgx("gdr");
  const std::string& topo = dgx.topo;
  // The same node with Arm CPUs (as a Grace host's), for the flush.
  const std::string armTopo = topo + ".arm.xml";
  {
    std::string xml = readFile(topo);
    const size_t at = xml.find("\"x86_64\"");
    ASSERT_NE(at, std::string::npos);
    xml.replace(at, 8, "\"aarch64\"");
    std::ofstream(armTopo) << xml;
  }
  // What the runtime offers; kBothExportFails: both, but its dma-buf export then fails.
  enum Runtime { kNone, kPeerMemory, kDmaBuf, kBoth, kBothExportFails };
  struct Case {
    const char* name;
    const char* env;  // VAR=VALUE or ""
    Runtime runtime;
    bool netCuda;    // the net registers GPU memory
    bool netDmaBuf;  // ... also as a dma-buf (regMrDmaBuf)
    bool sendGdr, recvGdr;
    bool viaDmaBuf;   // the GPU memory is registered through regMrDmaBuf
    const char* why;  // in the log of a staged connection
    bool flushed = false;  // a receive into GPU memory is flushed before the kernel reads it
    int computeCap = 90;
    bool arm = false;  // the hosts' CPUs are aarch64
  };
  const Case cases[] = {
      {"default", "", kPeerMemory, true, false, true, true, false, ""},
      {"level LOC", "NCCL_NET_GDR_LEVEL=LOC", kPeerMemory, true, false, false, false, false,
       "(NCCL_NET_GDR_LEVEL=LOC)"},
      {"level 1 (PIX)", "NCCL_NET_GDR_LEVEL=1", kPeerMemory, true, false, true, true, false, ""},
      {"no GDR read", "NCCL_NET_GDR_READ=0", kPeerMemory, true, false, false, true, false, "(NCCL_NET_GDR_READ=0)"},
      {"runtime without it", "", kNone, true, false, false, false, false, "(the GPU runtime: emu: gpuDirect is off)"},
      {"net without it", "", kPeerMemory, false, false, false, false, false, "does not register GPU memory)"},
      // dma-buf: the runtime exports the FIFO's GPU memory and the net registers that (no peer-memory module needed);
      // preferred where both ways exist, as NCCL; NCCL_DMABUF_ENABLE=0 leaves peer memory; a net that takes no
      // dma-buf cannot use a runtime that offers only that.
      {"dma-buf", "", kDmaBuf, true, true, true, true, true, ""},
      {"dma-buf disabled", "NCCL_DMABUF_ENABLE=0", kBoth, true, true, true, true, false, ""},
      {"dma-buf, net without it", "", kDmaBuf, true, false, false, false, false,
       "does not take dma-buf registrations)"},
      // An export that fails after the runtime said it works: peer memory instead, the failure named.
      {"dma-buf export fails", "", kBothExportFails, true, true, true, true, false, ""},
      // The flush, as NCCL decides it: none from compute capability 9.0 on x86 (above); below 9.0, where the net
      // device or NCCL_NET_FORCE_FLUSH asks, or on an Arm host, one a receive.
      {"compute 8.0", "", kPeerMemory, true, false, true, true, false, "", true, 80},
      {"force flush", "NCCL_NET_FORCE_FLUSH=1", kPeerMemory, true, false, true, true, false, "", true},
      {"net asks for flushes", "CHORUS_TEST_NET_FORCE_FLUSH=1", kPeerMemory, true, false, true, true, false, "", true},
      {"Arm host", "", kPeerMemory, true, false, true, true, false, "", true, 90, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    gEmu.gpuDirect = k.runtime != kNone;
    gEmu.peerMemory = k.runtime == kPeerMemory || k.runtime == kBoth || k.runtime == kBothExportFails;
    gEmu.dmaBuf = k.runtime == kDmaBuf || k.runtime == kBoth || k.runtime == kBothExportFails;
    gEmu.dmaBufFails = k.runtime == kBothExportFails;
    gEmu.computeCap = k.computeCap;
    const std::string log = "/tmp/chorus-gdr-log-" + std::to_string(getpid());
    forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("CHORUS_TEST_NET_PTR_CUDA", k.netCuda ? "1" : "0", 1);
          setenv("CHORUS_TEST_NET_PTR_DMABUF", k.netDmaBuf ? "1" : "0", 1);
          if (k.env[0] != '\0') putenv(const_cast<char*>(k.env));
          onDgxHostsOverTestNet(rank, k.arm ? armTopo : topo, log);
          return ringCollectivesOnDevice(rank, 2, rank == 0 ? 1 : 2, id, false);
        },
        log);
    for (int r = 0; r < 2; r++) {
      const std::string text = takeRankLog(log, r);
      SCOPED_TRACE("rank " + std::to_string(r) + "\n" + text);
      for (bool isSend : {true, false}) {
        const bool gdr = isSend ? k.sendGdr : k.recvGdr;
        const std::string line = std::string(isSend ? "-> rank " : "<- rank ") + std::to_string(1 - r) + ": ";
        const size_t at = text.find(line + (gdr ? "GPUDirect RDMA (net device mlx5_" : "staged through pinned host"));
        EXPECT_NE(at, std::string::npos) << (isSend ? "send" : "receive") << " side: expected " << (gdr ? "GPU" : "host")
                                         << " memory";
        if (!gdr && at != std::string::npos) {
          EXPECT_NE(text.find(k.why, at), std::string::npos) << "the reason given";
        }
      }
      const bool anyGdr = k.sendGdr || k.recvGdr;
      EXPECT_EQ(text.find("ChorusTestNet: regMr: GPU memory") != std::string::npos, anyGdr && !k.viaDmaBuf);
      // The dma-buf the net got is the FIFO's own GPU memory (the net checks it against the process's mappings).
      EXPECT_EQ(text.find("ChorusTestNet: regMrDmaBuf: GPU memory") != std::string::npos, anyGdr && k.viaDmaBuf);
      if (k.viaDmaBuf) {
        EXPECT_NE(text.find("from the GPU, dma-buf)"), std::string::npos);
      }
      if (k.runtime == kBothExportFails) {
        EXPECT_NE(text.find("exporting the FIFO's GPU memory as a dma-buf failed"), std::string::npos);
        EXPECT_NE(text.find("from the GPU (dma-buf export failed: emu: dmaBufFd"), std::string::npos);
      }
      // A receive into GPU memory is flushed before the kernel reads it where it needs one, and the log says why.
      EXPECT_EQ(text.find("ChorusTestNet: iflush of GPU memory") != std::string::npos, k.recvGdr && k.flushed);
      if (k.recvGdr) {
        EXPECT_NE(
            text.find(k.flushed ? "; each receive flushed: " : "; no flush: compute capability 9.0 or more on an x86"),
            std::string::npos);
      }
      EXPECT_EQ(text.find("connected (GPUDirect RDMA: payloads in GPU memory)") != std::string::npos, anyGdr);
    }
  }
  gEmu.peerMemory = true;
  gEmu.dmaBuf = false;
  gEmu.dmaBufFails = false;
  gEmu.computeCap = 90;
  std::remove(armTopo.c_str());
}

// A mismatch across hosts, with the slot data in GPU memory and staged: rank 1 calls another count. A kernel that sees
// the peer's slot header names the peer's call. A kernel that fails poisons its FIFOs, and the net proxy passes that
// on as a failure notice, so a peer whose kernel did not get as far (its slot was not sent) stops at once with the
// mismatch as the cause: not at CHORUS_TIMEOUT_S, nor as a death once the first rank exits. (Before the proxy passed
// kernel failures on, 6 of 20 runs of each mode ended that way.)
TEST(DevicePathGpuDirect, MismatchAcrossHostsIsNamedOnBothRanks) {
  DgxGpus dgx("gdrfail");
  const std::string& topo = dgx.topo;
  for (bool gdr : {true, false}) {
    SCOPED_TRACE(gdr ? "GPUDirect RDMA" : "staged");
    gEmu.gpuDirect = gdr;
    const std::string log = "/tmp/chorus-gdrfail-log-" + std::to_string(getpid());
    forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("CHORUS_TEST_NET_PTR_CUDA", "1", 1);
          setenv("CHORUS_TIMEOUT_S", "30", 1);
          onDgxHostsOverTestNet(rank, topo, log);
          if (gEmu.setDevice(rank == 0 ? 1 : 2) != ncclSuccess) return 9;
          ncclComm_t comm = nullptr;
          if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
          allReduceChecked(comm, rank, 2, 100000);
          DevBuf b(gEmu, 4096 * sizeof(float));
          cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
          const size_t count = rank == 0 ? 1024 : 2048;
          EXPECT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, comm, s), ncclSuccess);
          sync(s);
          EXPECT_EQ(asyncErrorOf(comm), ncclInvalidUsage);
          // The rank whose kernel saw the other's call names it; the other, if its kernel did not get that far,
          // learns it from the first's failure notice. Never "died": each is alive when the other fails.
          const std::string text = ncclGetLastError(comm);
          const std::string other = rank == 0 ? "rank 1's call ncclAllReduce #2 (count 2048" : "rank 0's call "
                                                                                              "ncclAllReduce #2 (count 1024";
          EXPECT_TRUE(text.find("does not match " + other) != std::string::npos ||
                      text.find("another rank found that this rank's call does not match its own") != std::string::npos)
              << text;
          EXPECT_EQ(text.find("died"), std::string::npos) << text;
          ncclCommDestroy(comm);
          return ::testing::Test::HasFailure() ? 1 : 0;
        },
        log);
    for (int r = 0; r < 2; r++) {
      const std::string text = takeRankLog(log, r);
      EXPECT_EQ(text.find("connected (GPUDirect RDMA") != std::string::npos, gdr) << "rank " << r << "\n" << text;
    }
  }
}

#ifdef CHORUS_TEST_UCX_INTERNALS
// GPUDirect RDMA over the UCX net, which frames a small slot as one message (header and payload) and posts one
// receive for it. A payload sent from host memory that comes with its header lands in host memory and is copied to
// the receiver's GPU memory; a payload apart (sent from GPU memory, or over CHORUS_NET_SLOT_MESSAGE_MAX_BYTES) lands
// in GPU memory and is flushed with a UCX get (NCCL_NET_FORCE_FLUSH=1: the emulated GPU is 9.0 on an x86 host, which
// NCCL, and chorus, would not flush). UCX here has no CUDA memory, so it is made to act as if it had
// (ucx::forceGpuMemoryForTests; the emulated runtime's "GPU memory" is host memory), and the DGX topology's NIC
// nearest GPU0 takes the name of UCX's device (NCCL_NET_GDR_LEVEL=SYS: rank 1's GPU4 is on the other socket). Rank
// 0 on GPU1 of one host, rank 1 on GPU4 of another; every collective is checked: an allreduce of 400 KB and
// allgather and reduce-scatter of 3001 floats a rank (slots of 12 KB, which go with their headers).
TEST(DevicePathGpuDirect, UcxSlotMessagesTakeGpuMemory) {
  if (chorus::ucxNet() == nullptr) GTEST_SKIP() << "chorus was built without UCX";
  DgxGpus dgx("gdrucx");
  gEmu.gpuDirect = true;
  gEmu.peerMemory = true;
  struct Case {
    const char* name;
    const char* gdrRead;  // NCCL_NET_GDR_READ: 0 stages the sends, so payloads leave from host memory
    const char* slotMax;  // CHORUS_NET_SLOT_MESSAGE_MAX_BYTES
    bool sendGdr;
  };
  const Case cases[] = {
      {"both ways in GPU memory: payloads apart", "1", "65536", true},
      {"sends staged: small payloads with their headers, copied", "0", "65536", false},
      {"sends staged, every payload apart", "0", "0", false},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::string log = "/tmp/chorus-gdrucx-log-" + std::to_string(getpid());
    forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("UCX_TLS", "tcp", 1);
          chorus::ucx::forceGpuMemoryForTests(true);
          int ndev = 0;
          ncclNetProperties_v11_t props{};
          if (chorus::ucxNet()->devices(&ndev) != ncclSuccess || ndev < 1 ||
              chorus::ucxNet()->getProperties(0, &props) != ncclSuccess || props.name == nullptr)
            return 8;
          const std::string dev = props.name;
          setenv("UCX_NET_DEVICES", dev.c_str(), 1);
          // The topology's mlx5_0 becomes UCX's device (the topology knows NICs by name).
          std::string xml = readFile(dgx.topo);
          for (size_t at = xml.find("mlx5_0"); at != std::string::npos; at = xml.find("mlx5_0", at + dev.size()))
            xml.replace(at, 6, dev);
          const std::string topo = dgx.topo + "." + std::to_string(rank);
          std::ofstream(topo) << xml;
          setenv("CHORUS_TOPO_FILE", topo.c_str(), 1);
          setenv("NCCL_HOSTID", rank == 0 ? "dgx-a" : "dgx-b", 1);
          setenv("NCCL_NET", "UCX", 1);
          setenv("NCCL_NET_GDR_LEVEL", "SYS", 1);
          setenv("NCCL_NET_GDR_READ", k.gdrRead, 1);
          setenv("CHORUS_NET_SLOT_MESSAGE_MAX_BYTES", k.slotMax, 1);
          setenv("NCCL_NET_FORCE_FLUSH", "1", 1);
          setenv("CHORUS_TIMEOUT_S", "30", 1);
          logInfoTo(log + "." + std::to_string(rank), "INIT,NET");
          ncclResetDebugInit();
          chorus::paramsReload();
          const int rc = ringCollectivesOnDevice(rank, 2, rank == 0 ? 1 : 2, id, false);
          std::remove(topo.c_str());
          return rc;
        },
        log);
    for (int r = 0; r < 2; r++) {
      const std::string text = takeRankLog(log, r);
      SCOPED_TRACE("rank " + std::to_string(r) + "\n" + text);
      const std::string to = "-> rank " + std::to_string(1 - r) + ": ", from = "<- rank " + std::to_string(1 - r) + ": ";
      EXPECT_NE(text.find(from + "GPUDirect RDMA (net device "), std::string::npos) << "receives into GPU memory";
      EXPECT_NE(text.find("; each receive flushed: NCCL_NET_FORCE_FLUSH=1"), std::string::npos);
      EXPECT_NE(text.find(to + (k.sendGdr ? "GPUDirect RDMA (net device " : "staged through pinned host")),
                std::string::npos)
          << "sends";
      // The proxy's line for the receive connection: "... <- rank N (HOST): connected (GPUDirect RDMA: ...)".
      bool connected = false;
      for (size_t at = text.find("<- rank " + std::to_string(1 - r) + " ("); at != std::string::npos && !connected;
           at = text.find("<- rank " + std::to_string(1 - r) + " (", at + 1))
        connected = text.substr(at, text.find('\n', at) - at).find("): connected (GPUDirect RDMA") != std::string::npos;
      EXPECT_TRUE(connected) << "the proxy's receive connection in GPU memory";
    }
  }
  gEmu.gpuDirect = false;
}

// A net call that fails under a device-path collective across hosts (the test plugin fails rank 0's 40th test(), with
// a WARN): both ranks' kernels stop with ncclRemoteError, and rank 0's error carries what its net said (the plugin's
// WARN), as the host path's does.
TEST(DevicePathStaging, AFailedNetCallIsReportedInTheNetsWords) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", rank == 0 ? "host-a" : "host-b", 1);
    setenv("NCCL_NET_PLUGIN", CHORUS_TEST_NET_V11, 1);
    setenv("NCCL_NET", "ChorusTestNet", 1);
    setenv("CHORUS_TEST_NET_FAIL", rank == 0 ? "test:40" : "", 1);
    setenv("CHORUS_TIMEOUT_S", "10", 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    const size_t count = 300000;
    DevBuf b(gEmu, count * sizeof(float));
    cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
    ncclResult_t e = ncclSuccess;
    for (int i = 0; i < 100 && e == ncclSuccess; i++) {
      e = ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, comm, s);
      if (e == ncclSuccess) {
        gEmu.streamSynchronize(s);
        e = commAsyncError(comm);
      }
    }
    const std::string text = ncclGetLastError(comm);
    fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(e), text.c_str());
    EXPECT_EQ(e, ncclRemoteError) << text;
    if (rank == 0) {
      EXPECT_NE(text.find("this rank's net said: rank 0: net ChorusTestNet dev 0 channel"), std::string::npos) << text;
      EXPECT_NE(text.find("ChorusTestNet: test: call 40 failed the connection"), std::string::npos) << text;
    }
    ncclCommAbort(comm);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}
#endif
#endif

// A rank whose `var` differs from the other's is refused at init, on both ranks.
void settingDisagreementIsRefused(const char* var) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  auto status = forkRanks(2, [var](int rank, const ncclUniqueId& id) {
    if (rank == 1) setenv(var, "1", 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    ncclResult_t res = ncclCommInitRank(&comm, 2, id, rank);
    EXPECT_EQ(res, ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("device-path"), std::string::npos)
        << ncclGetLastError(nullptr);
    if (res == ncclSuccess) ncclCommDestroy(comm);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

// The device path's settings decide channels, blocks per channel, protocol and FIFO ownership: ranks that differ are
// refused at init, on every rank, rather than mismatching inside a kernel.
TEST(DevicePathSettings, RanksThatDisagreeAreRefusedAtInit) {
  for (const char* var : {"CHORUS_DEVICE_NCHANNELS", "CHORUS_DEVICE_CHANNEL_BLOCKS"}) {
    SCOPED_TRACE(var);
    settingDisagreementIsRefused(var);
  }
}

// Two ranks of one communicator on one stream would wait for each other forever: the second launch is refused at
// once, naming the rank that holds the stream.
TEST(DevicePathFaults, TwoRanksOnOneStreamAreRefused) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  setenv("CHORUS_TIMEOUT_S", "2", 1);
  chorus::paramsReload();
  std::atomic<int> refused{0};
  runRanks(2, Driver::kThreads, [&](RankCtx& c) {
    DevBuf b(gEmu, 1024 * sizeof(float));
    ncclResult_t res = ncclAllReduce(b.as<float>(), b.as<float>(), 1024, ncclFloat32, ncclSum, c.comm, nullptr);
    std::string text = ncclGetLastError(c.comm);
    if (res == ncclInvalidUsage && text.find("own stream") != std::string::npos) {
      refused++;
    } else {
      // The other rank fails too, at once (its launch waited for the refused one) or in its kernel.
      if (res == ncclSuccess) {
        sync(nullptr);
        res = asyncErrorOf(c.comm);
        text = ncclGetLastError(c.comm);
      }
      EXPECT_NE(res, ncclSuccess) << "the peer never ran its part";
    }
    EXPECT_NE(text.find(c.rank == 0 ? "rank 1" : "rank 0"), std::string::npos) << text;
  });
  EXPECT_EQ(refused.load(), 1);
  unsetenv("CHORUS_TIMEOUT_S");
  chorus::paramsReload();
  chorus::setGpuRuntimeForTesting(nullptr);
}

// A count mismatch and a rank that stops calling: neither hangs, and each names the peer. Between processes the
// kernel finds them (asynchronous errors); between threads of one process on one GPU the launch does, before any
// kernel runs (the ranks compare their calls at the launch gate).
TEST(DevicePathFaults, MismatchAndTimeoutAreReportedAsync) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  setenv("CHORUS_TIMEOUT_S", "2", 1);
  chorus::paramsReload();
  for (Driver d : {Driver::kProcesses, Driver::kThreads}) {
    runRanks(2, d, [d](RankCtx& c) {
      DevBuf b(gEmu, 4096 * sizeof(float));
      ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), 1024, ncclFloat32, ncclSum, c.comm, streamOf(c)),
                ncclSuccess);
      size_t count = c.rank == 0 ? 1024 : 2048;
      ncclResult_t e = ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, c.comm, streamOf(c));
      if (d == Driver::kThreads) {
        EXPECT_EQ(e, ncclInvalidUsage) << "thread ranks compare their calls before launching";
      } else {
        EXPECT_EQ(e, ncclSuccess);
        sync(c);
        e = asyncErrorOf(c.comm);
        EXPECT_TRUE(e == ncclInvalidUsage || e == ncclRemoteError) << e;
      }
      std::string text = ncclGetLastError(c.comm);
      EXPECT_NE(text.find(c.rank == 0 ? "rank 1" : "rank 0"), std::string::npos) << text;
      // Threads refuse the call itself, naming both counts; a kernel may see the mismatch or only its timeout.
      if (d == Driver::kThreads) {
        EXPECT_NE(text.find("count 2048"), std::string::npos) << text;
      }
    });
  }
  // Rank 1 stops calling but keeps its communicator (whose GPU memory holds rank 0's FIFOs) alive. As processes
  // the kernel gives up after CHORUS_TIMEOUT_S; as threads of one process on one GPU the launch itself waits for
  // rank 1's matching call (LaunchGate) and gives up then. Both name rank 1 and the timeout.
  for (Driver d : {Driver::kProcesses, Driver::kThreads}) {
    auto* rank0Done = static_cast<std::atomic<bool>*>(
        mmap(nullptr, sizeof(std::atomic<bool>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(rank0Done, MAP_FAILED);
    new (rank0Done) std::atomic<bool>(false);
    runRanks(2, d, [&](RankCtx& c) {
      DevBuf b(gEmu, 1024 * sizeof(float));
      ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), 1024, ncclFloat32, ncclSum, c.comm, streamOf(c)),
                ncclSuccess);
      sync(c);
      if (c.rank == 1) {
        while (!rank0Done->load()) usleep(1000);
        return;
      }
      ncclResult_t e = ncclAllReduce(b.as<float>(), b.as<float>(), 1024, ncclFloat32, ncclSum, c.comm, streamOf(c));
      if (e == ncclSuccess) {
        EXPECT_EQ(d, Driver::kProcesses) << "thread ranks must not launch a kernel that waits for a missing call";
        sync(c);
        e = asyncErrorOf(c.comm);
      }
      EXPECT_EQ(e, ncclRemoteError);
      std::string text = ncclGetLastError(c.comm);
      EXPECT_NE(text.find("CHORUS_TIMEOUT_S"), std::string::npos) << text;
      EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
      rank0Done->store(true);
    });
    munmap(rank0Done, sizeof(std::atomic<bool>));
  }
  unsetenv("CHORUS_TIMEOUT_S");
  chorus::paramsReload();
  chorus::setGpuRuntimeForTesting(nullptr);
}

// A slot read at another place on its connection than its sender wrote it (the ends' step counters apart) would give
// another slice's data, or an older one's, with nothing else to notice when the sizes agree: the receiver stops,
// naming both places, and the sender learns that its peer failed. Rank 0's send counters are moved one slot on
// under its second call's kernel.
TEST(DevicePathFaults, SlotsOutOfStepStopTheKernel) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  setenv("CHORUS_TIMEOUT_S", "20", 1);
  setenv("CHORUS_DEVICE_DIRECT", "0", 1);
  setenv("CHORUS_DEVICE_IPC", "0", 1);
  setenv("NCCL_PROTO", "Simple", 1);  // an LL line's flag is its slot's count already
  chorus::paramsReload();
  for (Driver d : {Driver::kProcesses, Driver::kThreads}) {
    // Set before the ranks start (processes inherit it); it acts on rank 0's launches after the first.
    std::atomic<int> rank0Launches{0}, moved{0};
    gEmu.beforeLaunch = [&](chorus::DevWork& w) {
      if (w.rank != 0 || rank0Launches++ == 0) return;
      for (int i = 0; i < w.nFifos; i++) {
        if (w.fifos[i].isSend == 0) continue;
        (*w.fifos[i].step)++;
        moved++;
      }
    };
    runRanks(2, d, [&](RankCtx& c) {
      const size_t count = 8192;
      DevBuf b(gEmu, count * sizeof(float));
      fill(b.as<float>(), count, [](size_t) { return 1.0f; });
      ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, c.comm, streamOf(c)),
                ncclSuccess);
      sync(c);
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      ASSERT_EQ(b.as<float>()[0], 2.0f);
      ncclResult_t e = ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, c.comm, streamOf(c));
      EXPECT_EQ(e, ncclSuccess);
      sync(c);
      e = asyncErrorOf(c.comm);
      std::string text = ncclGetLastError(c.comm);
      if (c.rank == 1) {
        EXPECT_EQ(e, ncclInternalError) << text;
        EXPECT_NE(text.find("out of step"), std::string::npos) << text;
        EXPECT_NE(text.find("connection from rank 0"), std::string::npos) << text;
      } else {
        EXPECT_NE(e, ncclSuccess) << "rank 0's kernel learns that rank 1 stopped";
        EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
        EXPECT_GT(moved.load(), 0) << "no send counter was moved";
      }
    });
    gEmu.beforeLaunch = nullptr;
  }
  for (const char* v : {"CHORUS_TIMEOUT_S", "CHORUS_DEVICE_DIRECT", "CHORUS_DEVICE_IPC", "NCCL_PROTO"}) unsetenv(v);
  chorus::paramsReload();
  chorus::setGpuRuntimeForTesting(nullptr);
}

// Two processes whose calls at one point take different paths: each waits for what the other never writes (inbox
// flags, FIFO data, or a connection of a channel the peer does not have). The call board finds it: both ranks fail
// with ncclInvalidUsage naming both calls, long before CHORUS_TIMEOUT_S (30 s here; a failure at the timeout says
// so, and these checks refuse that text).
TEST(DevicePathFaults, CallsThatTakeDifferentPathsAreNamed) {
  chorus::setGpuRuntimeForTesting(&gEmu);
  setenv("CHORUS_TIMEOUT_S", "30", 1);
  struct Case {
    const char* what;
    bool fifosOnly;       // CHORUS_DEVICE_IPC=0
    bool broadcast[2];    // rank 0's, rank 1's call: ncclBroadcast from rank 0, or ncclAllReduce
    size_t count[2];      // floats
    const char* path[2];  // as the text names them
  };
  const Case cases[] = {
      // 4 KB goes one-shot through inboxes; 1.6 MB is past CHORUS_DEVICE_IPC_MAX_BYTES.
      {"inboxes against FIFOs",
       false,
       {false, false},
       {1000, 400000},
       {"through IPC inboxes (one-shot)", "through FIFOs"}},
      // 4 MB takes two channels, 4 KB one: the first waits for a channel-1 connection the second never makes.
      {"another shape on FIFOs", true, {false, false}, {1 << 20, 1000}, {"through FIFOs", "through FIFOs"}},
      {"another collective", false, {false, true}, {1000, 400000}, {"through IPC inboxes (one-shot)", "through FIFOs"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    if (k.fifosOnly) setenv("CHORUS_DEVICE_IPC", "0", 1);
    chorus::paramsReload();
    runRanks(2, Driver::kProcesses, [&k](RankCtx& c) {
      const int me = c.rank, peer = 1 - c.rank;
      DevBuf b(gEmu, (1 << 20) * sizeof(float));
      ncclResult_t e =
          k.broadcast[me]
              ? ncclBroadcast(b.as<float>(), b.as<float>(), k.count[me], ncclFloat32, 0, c.comm, streamOf(c))
              : ncclAllReduce(b.as<float>(), b.as<float>(), k.count[me], ncclFloat32, ncclSum, c.comm, streamOf(c));
      // A rank waiting on the host for a connection fails the call itself; one whose kernel waits, asynchronously.
      if (e == ncclSuccess) {
        gEmu.streamSynchronize(streamOf(c));
        e = asyncErrorOf(c.comm);
      }
      EXPECT_EQ(e, ncclInvalidUsage);
      const std::string text = ncclGetLastError(c.comm);
      EXPECT_NE(text.find("does not match rank " + std::to_string(peer) + "'s call"), std::string::npos) << text;
      EXPECT_NE(text.find("count " + std::to_string(k.count[peer]) + ", ncclFloat32"), std::string::npos) << text;
      EXPECT_NE(text.find(std::string("rank ") + std::to_string(peer) + " called " +
                          (k.broadcast[peer] ? "ncclBroadcast" : "ncclAllReduce")),
                std::string::npos)
          << text;
      EXPECT_NE(text.find(k.path[peer]), std::string::npos) << text;
      EXPECT_EQ(text.find("CHORUS_TIMEOUT_S"), std::string::npos) << text;
    });
    unsetenv("CHORUS_DEVICE_IPC");
  }
  unsetenv("CHORUS_TIMEOUT_S");
  chorus::paramsReload();
  chorus::setGpuRuntimeForTesting(nullptr);
}

}  // namespace
}  // namespace chorus_test
