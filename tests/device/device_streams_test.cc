// The device path against the rules a real GPU runtime imposes, through the strict emulated runtime
// (tests/device/emu_runtime.h): asynchronous streams, device-wide synchronization in cudaFree, limited residency,
// graph capture. Each test reproduces a failure seen on an H100 (../shared/gpu/h100-2026-11-23.md) and fails
// without its fix:
//  - ncclMemAlloc gave host memory (nccl-tests' first cudaMemset failed);
//  - one communicator on two streams (FSDP2) ran its operations out of call order;
//  - thread ranks on one GPU deadlocked when a thread freed memory between calls;
//  - a call under graph capture invalidated the capture;
//  - 1-rank operations and sends to self ran a kernel instead of a copy.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/params.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

cudaStream_t stream(int k) { return reinterpret_cast<cudaStream_t>(uintptr_t(k)); }
// Rank r's streams: 100 + 10 r + k.
cudaStream_t rankStream(const RankCtx& c, int k) { return stream(100 + 10 * c.rank + k); }

void sync(cudaStream_t s) { ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess) << gEmu.lastError(); }

ncclResult_t asyncErrorOf(ncclComm_t comm) {
  ncclResult_t e = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &e), ncclSuccess);
  return e;
}

class Emulated : public ::testing::Test {
 protected:
  void SetUp() override { chorus::setGpuRuntimeForTesting(&gEmu); }
  void TearDown() override {
    chorus::setGpuRuntimeForTesting(nullptr);
    gEmu.residentBlocks = 1024;
    gEmu.threadsPerBlock = 1;
    gEmu.delayPercent = 0;
    for (const char* v : {"CHORUS_TIMEOUT_S", "NCCL_PROTO"}) unsetenv(v);
    chorus::paramsReload();
  }
};

// nccl-tests allocates every buffer with ncclMemAlloc and then cudaMemsets it: it must be device memory of the
// current GPU whenever a GPU runtime is in use, and ncclMemFree must free either kind.
TEST_F(Emulated, MemAllocGivesDeviceMemory) {
  size_t before = gEmu.allocationCount();
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 1 << 20), ncclSuccess) << ncclGetLastError(nullptr);
  int dev = -1;
  {
    chorus::SetupScope setup(&gEmu);
    EXPECT_EQ(gEmu.pointerKind(p, &dev), chorus::MemKind::kDevice);
  }
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(gEmu.allocationCount(), before + 1);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(gEmu.allocationCount(), before) << "ncclMemFree must free device memory";
  // Without a GPU runtime: host memory, usable at once.
  chorus::setGpuRuntimeForTesting(nullptr);
  if (chorus::gpuRuntime() == nullptr) {
    ASSERT_EQ(ncclMemAlloc(&p, 4096), ncclSuccess);
    std::memset(p, 1, 4096);
    EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  }
  EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
}

// Round k's allgather input of `rank`, element i.
int32_t gatherValue(int k, int rank, size_t i) { return int32_t(k * 1000 + rank * 100 + int(i % 50)); }

// Fills rank's allgather input for round k.
void fillGather(DevBuf& in, size_t N, int k, int rank) {
  for (size_t i = 0; i < N; i++) in.as<int32_t>()[i] = gatherValue(k, rank, i);
}

// Checks round k's allgather output over n ranks.
void expectGathered(DevBuf& out, size_t N, int n, int k) {
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < N; i++) ASSERT_EQ(out.as<int32_t>()[q * N + i], gatherValue(k, q, i)) << k << " " << q;
}

// FSDP2's pattern: one communicator, all-gathers on one stream and reduce-scatters on another, with the user's own
// work delaying the first stream on rank 0 only. The operations must still run in call order on every rank (the
// second stream waits for the first), or ranks would pair different operations. One stream alone costs no waits.
void callOrderBody(RankCtx& c) {
  const int n = c.nranks;
  const size_t N = 5000;
  DevBuf agIn(gEmu, N * 4), agOut(gEmu, N * n * 4), rsIn(gEmu, N * n * 4), rsOut(gEmu, N * 4);
  cudaStream_t a = rankStream(c, 1), b = rankStream(c, 2);
  int waits = gEmu.streamWaits;
  for (int k = 0; k < 4; k++) {
    fillGather(agIn, N, k, c.rank);
    for (size_t i = 0; i < N * n; i++) rsIn.as<int32_t>()[i] = int32_t(k + c.rank + int(i % 7));
    if (c.rank == 0) gEmu.enqueueHost(a, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
    ASSERT_EQ(ncclAllGather(agIn.as<int32_t>(), agOut.as<int32_t>(), N, ncclInt32, c.comm, a), ncclSuccess);
    ASSERT_EQ(ncclReduceScatter(rsIn.as<int32_t>(), rsOut.as<int32_t>(), N, ncclInt32, ncclSum, c.comm, b),
              ncclSuccess);
    sync(a);
    sync(b);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    expectGathered(agOut, N, n, k);
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += int32_t(k + q + int((c.rank * N + i) % 7));
      ASSERT_EQ(rsOut.as<int32_t>()[i], want) << k;
    }
  }
  EXPECT_GT(gEmu.streamWaits, waits) << "the second stream never waited for the first";
}

TEST_F(Emulated, CallOrderAcrossStreamsThreads) { runRanks(2, Driver::kThreads, callOrderBody); }
TEST_F(Emulated, CallOrderAcrossStreamsProcesses) { runRanks(2, Driver::kProcesses, callOrderBody); }

TEST_F(Emulated, OneStreamCostsNoWaits) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    DevBuf buf(gEmu, 4096 * 4);
    int waits = gEmu.streamWaits;
    for (int k = 0; k < 3; k++)
      ASSERT_EQ(ncclAllReduce(buf.as<float>(), buf.as<float>(), 4096, ncclFloat32, ncclSum, c.comm, rankStream(c, 1)),
                ncclSuccess);
    sync(rankStream(c, 1));
    EXPECT_EQ(gEmu.streamWaits, waits);
  });
}

// A stream a call, destroyed after it (the GPU tests' own pattern): a later call must not ask the destroyed stream
// anything (cudaStreamGetCaptureInfo on it crashed the driver of an H200). Rank 0 destroys its stream with the call
// still queued behind a delay and gets a new stream with the same handle, as CUDA may give: the next call is on
// another stream for all that, so it must wait for the first (or the ranks would pair different operations).
void streamPerCallBody(RankCtx& c) {
  const int n = c.nranks;
  const size_t N = 1031;
  DevBuf in(gEmu, N * 4), out(gEmu, N * n * 4);
  const int uses = gEmu.destroyedStreamUses;
  for (int k = 0; k < 6; k++) {
    cudaStream_t s = rankStream(c, 3 + k % 2);  // two handles, each made again after its destroy
    gEmu.createStream(s);
    fillGather(in, N, k, c.rank);
    const bool early = c.rank == 0 && k % 2 == 0;  // rank 0 destroys this one with its work still queued
    if (early) gEmu.enqueueHost(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
    ASSERT_EQ(ncclAllGather(in.as<int32_t>(), out.as<int32_t>(), N, ncclInt32, c.comm, s), ncclSuccess);
    if (early) {
      gEmu.destroyStream(s);
      gEmu.createStream(s);  // the same handle, a new stream
    }
    ASSERT_EQ(ncclAllReduce(in.as<int32_t>(), in.as<int32_t>(), N, ncclInt32, ncclSum, c.comm, s), ncclSuccess);
    sync(s);
    gEmu.destroyStream(s);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    expectGathered(out, N, n, k);
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += gatherValue(k, q, i);
      ASSERT_EQ(in.as<int32_t>()[i], want) << k;
    }
  }
  EXPECT_EQ(gEmu.destroyedStreamUses, uses) << "a call used a stream destroyed before it";
}

TEST_F(Emulated, StreamPerCallDestroyedAfterThreads) { runRanks(2, Driver::kThreads, streamPerCallBody); }
TEST_F(Emulated, StreamPerCallDestroyedAfterProcesses) { runRanks(2, Driver::kProcesses, streamPerCallBody); }

// Ranks that are threads of one process on one GPU, each allocating and freeing device memory around every call,
// as PyTorch's caching allocator and the GPU tests do. cudaFree waits for the whole device: a kernel launched by
// one rank, waiting for a rank whose thread is in cudaFree, would hang both until CHORUS_TIMEOUT_S. Kernels start
// in random order (delays), and the GPU holds only what the ranks' channels need together.
TEST_F(Emulated, ThreadRanksOnOneGpuFreeingBetweenCalls) {
  setenv("CHORUS_TIMEOUT_S", "20", 1);
  chorus::paramsReload();
  gEmu.residentBlocks = 4;  // 4 ranks: one channel each fits, two would not
  gEmu.delayPercent = 30;
  runRanks(4, Driver::kThreads, [](RankCtx& c) {
    for (size_t count : {size_t(7), size_t(3000), size_t(300000), size_t(65)}) {
      auto t0 = std::chrono::steady_clock::now();
      DevBuf send(gEmu, count * 4), recv(gEmu, count * 4);
      for (size_t i = 0; i < count; i++) send.as<float>()[i] = float(c.rank + 1);
      ASSERT_EQ(
          ncclAllReduce(send.as<float>(), recv.as<float>(), count, ncclFloat32, ncclSum, c.comm, rankStream(c, 1)),
          ncclSuccess)
          << ncclGetLastError(c.comm);
      EXPECT_LE(gEmu.lastChannels.load(), 1) << "the ranks' kernels would not fit the GPU together";
      sync(rankStream(c, 1));
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      for (size_t i = 0; i < count; i++) ASSERT_EQ(recv.as<float>()[i], 10.0f);
      double secs = secondsSince(t0);
      ASSERT_LT(secs, 15.0) << "a rank waited for a timeout: the kernels deadlocked";
    }  // send and recv are freed here: the device is synchronized while other ranks may already be in their next call
  });
}

// Every collective and a grouped send/recv captured into a graph, the first call on the communicator included,
// in each capture mode, then replayed with new inputs: each replay gives fresh results, and no call made under
// capture invalidated it.
void captureBody(RankCtx& c, EmuRuntime::Capture mode) {
  const int n = c.nranks, r = c.rank;
  const size_t N = 3000;
  DevBuf in(gEmu, N * n * 4), out(gEmu, N * n * 4), acc(gEmu, N * 4), p2pIn(gEmu, N * 4), p2pOut(gEmu, N * 4);
  DevBuf ag(gEmu, N * n * 4), rs(gEmu, N * 4), bc(gEmu, N * 4), red(gEmu, N * 4);
  cudaStream_t s = rankStream(c, 1);
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  ASSERT_EQ(gEmu.beginCapture(s, mode), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(acc.as<float>(), acc.as<float>(), N, ncclFloat32, ncclSum, c.comm, s), ncclSuccess)
      << ncclGetLastError(c.comm);
  ASSERT_EQ(ncclAllGather(in.as<int32_t>(), ag.as<int32_t>(), N, ncclInt32, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(in.as<int32_t>(), rs.as<int32_t>(), N, ncclInt32, ncclSum, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclBroadcast(in.as<int32_t>(), bc.as<int32_t>(), N, ncclInt32, 1, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclReduce(in.as<int32_t>(), red.as<int32_t>(), N, ncclInt32, ncclMax, 0, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclAlltoAll(in.as<int32_t>(), out.as<int32_t>(), N, ncclInt32, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(p2pIn.as<int32_t>(), N, ncclInt32, next, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclRecv(p2pOut.as<int32_t>(), N, ncclInt32, prev, c.comm, s), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::shared_ptr<EmuGraph> graph;
  ASSERT_EQ(gEmu.endCapture(s, &graph), ncclSuccess) << "the capture was invalidated: " << gEmu.lastError();
  for (size_t i = 0; i < N; i++) acc.as<float>()[i] = 1.0f;
  auto v = [](int k, int rank, size_t i) { return int32_t(k * 100000 + rank * 1000 + int32_t(i % 997)); };
  for (int k = 1; k <= 3; k++) {
    for (size_t i = 0; i < N * n; i++) in.as<int32_t>()[i] = v(k, r, i);
    for (size_t i = 0; i < N; i++) p2pIn.as<int32_t>()[i] = v(k, r, i);
    ASSERT_EQ(gEmu.graphLaunch(graph, s), ncclSuccess);
    sync(s);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    float pw = 1;
    for (int j = 0; j < k; j++) pw *= float(n);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(acc.as<float>()[i], pw) << "replay " << k;
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(ag.as<int32_t>()[q * N + i], v(k, q, i)) << "replay " << k;
    for (size_t i = 0; i < N; i++) {
      int32_t sum = 0;
      for (int q = 0; q < n; q++) sum += v(k, q, r * N + i);
      ASSERT_EQ(rs.as<int32_t>()[i], sum) << "replay " << k;
      ASSERT_EQ(bc.as<int32_t>()[i], v(k, 1, i)) << "replay " << k;
      if (r == 0) {
        ASSERT_EQ(red.as<int32_t>()[i], v(k, n - 1, i)) << "replay " << k;
      }
      ASSERT_EQ(p2pOut.as<int32_t>()[i], v(k, prev, i)) << "replay " << k;
    }
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(out.as<int32_t>()[q * N + i], v(k, q, r * N + i)) << "replay " << k;
  }
}

TEST_F(Emulated, GraphCaptureEveryCollectiveGlobalModeThreads) {
  runRanks(3, Driver::kThreads, [](RankCtx& c) { captureBody(c, EmuRuntime::Capture::kGlobal); });
}
TEST_F(Emulated, GraphCaptureEveryCollectiveGlobalModeProcesses) {
  runRanks(3, Driver::kProcesses, [](RankCtx& c) { captureBody(c, EmuRuntime::Capture::kGlobal); });
}
TEST_F(Emulated, GraphCaptureEveryCollectiveThreadLocalMode) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) { captureBody(c, EmuRuntime::Capture::kThreadLocal); });
}
TEST_F(Emulated, GraphCaptureEveryCollectiveRelaxedMode) {
  runRanks(2, Driver::kThreads, [](RankCtx& c) { captureBody(c, EmuRuntime::Capture::kRelaxed); });
}

// The emulator refuses what CUDA refuses under capture, so the tests above mean something: an allocation outside
// a setup scope during a global capture, a device synchronization in any mode, a synchronization of the capturing
// stream. Each invalidates the capture.
TEST_F(Emulated, EmulatorRefusesWhatCudaRefusesUnderCapture) {
  cudaStream_t s = stream(7);
  std::shared_ptr<EmuGraph> g;
  void* p = nullptr;
  ASSERT_EQ(gEmu.beginCapture(s, EmuRuntime::Capture::kGlobal), ncclSuccess);
  std::thread([&] { EXPECT_NE(gEmu.deviceAlloc(64, &p), ncclSuccess) << "global mode restricts every thread"; }).join();
  EXPECT_NE(gEmu.endCapture(s, &g), ncclSuccess);
  EXPECT_NE(gEmu.lastError().find("deviceAlloc"), std::string::npos) << gEmu.lastError();

  ASSERT_EQ(gEmu.beginCapture(s, EmuRuntime::Capture::kThreadLocal), ncclSuccess);
  std::thread([&] {
    EXPECT_EQ(gEmu.deviceAlloc(64, &p), ncclSuccess) << "other threads are free in this mode";
  }).join();
  {
    chorus::SetupScope setup(&gEmu);
    void* q = nullptr;
    EXPECT_EQ(gEmu.deviceAlloc(64, &q), ncclSuccess) << "a setup scope allows it";
  }
  EXPECT_EQ(gEmu.endCapture(s, &g), ncclSuccess) << gEmu.lastError();

  for (auto mode : {EmuRuntime::Capture::kRelaxed, EmuRuntime::Capture::kThreadLocal}) {
    ASSERT_EQ(gEmu.beginCapture(s, mode), ncclSuccess);
    {
      chorus::SetupScope setup(&gEmu);
      EXPECT_NE(gEmu.deviceSynchronize(), ncclSuccess) << "never during a capture";
    }
    EXPECT_NE(gEmu.endCapture(s, &g), ncclSuccess);
  }
  ASSERT_EQ(gEmu.beginCapture(s, EmuRuntime::Capture::kRelaxed), ncclSuccess);
  EXPECT_NE(gEmu.streamSynchronize(s), ncclSuccess);
  EXPECT_NE(gEmu.endCapture(s, &g), ncclSuccess);
}

// One rank: every collective is a copy (or nothing, in place): by the copy kernel up to
// CHORUS_DEVICE_COPY_KERNEL_MAX_BYTES, by the copy engine above; a premulsum, which scales, still runs the collective
// kernel. Sends to self are copies too, beside the kernel for the other peers.
TEST_F(Emulated, OneRankAndSelfSendsAreCopies) {
  runRanks(1, Driver::kThreads, [](RankCtx& c) {
    const size_t N = 10000;
    DevBuf a(gEmu, N * 4), b(gEmu, N * 4);
    for (size_t i = 0; i < N; i++) a.as<float>()[i] = float(i);
    cudaStream_t s = rankStream(c, 1);
    // At the limit a copy is the kernel's; one byte under, the copy engine's.
    for (size_t limit : {N * 4, N * 4 - 1}) {
      setenv("CHORUS_DEVICE_COPY_KERNEL_MAX_BYTES", std::to_string(limit).c_str(), 1);
      chorus::paramsReload();
      int kernels = gEmu.copyKernels, copies = gEmu.copies;
      ASSERT_EQ(ncclAllGather(a.as<float>(), b.as<float>(), N, ncclFloat32, c.comm, s), ncclSuccess);
      sync(s);
      EXPECT_EQ(gEmu.copies - copies, 1);
      EXPECT_EQ(gEmu.copyKernels - kernels, limit == N * 4 ? 1 : 0) << "limit " << limit;
    }
    unsetenv("CHORUS_DEVICE_COPY_KERNEL_MAX_BYTES");
    chorus::paramsReload();
    int launches = gEmu.launches, copies = gEmu.copies;
    ASSERT_EQ(ncclAllReduce(a.as<float>(), b.as<float>(), N, ncclFloat32, ncclSum, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclAllGather(a.as<float>(), b.as<float>(), N, ncclFloat32, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclReduceScatter(a.as<float>(), b.as<float>(), N, ncclFloat32, ncclAvg, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclBroadcast(a.as<float>(), b.as<float>(), N, ncclFloat32, 0, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclAlltoAll(a.as<float>(), b.as<float>(), N, ncclFloat32, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), N, ncclFloat32, ncclSum, c.comm, s), ncclSuccess);
    sync(s);
    EXPECT_EQ(gEmu.launches, launches) << "a kernel ran for a 1-rank operation";
    EXPECT_EQ(gEmu.copies - copies, 5) << "five out-of-place copies, none in place";
    for (size_t i = 0; i < N; i++) ASSERT_EQ(b.as<float>()[i], float(i));
    float half = 0.5f;
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, c.comm), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(a.as<float>(), b.as<float>(), N, ncclFloat32, op, c.comm, s), ncclSuccess);
    sync(s);
    EXPECT_EQ(gEmu.launches, launches + 1);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(b.as<float>()[i], 0.5f * float(i));
    ASSERT_EQ(ncclRedOpDestroy(op, c.comm), ncclSuccess);
  });
  runRanks(2, Driver::kThreads, [](RankCtx& c) {
    const size_t N = 5000;
    DevBuf a(gEmu, N * 4), self(gEmu, N * 4), other(gEmu, N * 4);
    for (size_t i = 0; i < N; i++) a.as<int32_t>()[i] = int32_t(c.rank * 10000 + int(i));
    cudaStream_t s = rankStream(c, 1);
    int copies = gEmu.copies;
    int peer = 1 - c.rank;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(a.as<int32_t>(), N, ncclInt32, c.rank, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclSend(a.as<int32_t>(), N, ncclInt32, peer, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclRecv(self.as<int32_t>(), N, ncclInt32, c.rank, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclRecv(other.as<int32_t>(), N, ncclInt32, peer, c.comm, s), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    sync(s);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    EXPECT_GE(gEmu.copies - copies, 1);
    for (size_t i = 0; i < N; i++) {
      ASSERT_EQ(self.as<int32_t>()[i], int32_t(c.rank * 10000 + int(i)));
      ASSERT_EQ(other.as<int32_t>()[i], int32_t(peer * 10000 + int(i)));
    }
  });
}

// A step that only copies the input into the output (an out-of-place allgather's own block, a broadcast root's
// copy) is done by the copy engine before the kernel; the kernel leaves it out, and results stay exact.
TEST_F(Emulated, PlainCopyStepsGoToTheCopyEngine) {
  runRanks(3, Driver::kProcesses, [](RankCtx& c) {
    const int n = c.nranks;
    const size_t N = 20000;
    DevBuf in(gEmu, N * 4), out(gEmu, N * n * 4);
    for (size_t i = 0; i < N; i++) in.as<int32_t>()[i] = int32_t(c.rank * 100000 + int(i));
    cudaStream_t s = rankStream(c, 1);
    int copies = gEmu.copies;
    ASSERT_EQ(ncclAllGather(in.as<int32_t>(), out.as<int32_t>(), N, ncclInt32, c.comm, s), ncclSuccess);
    sync(s);
    EXPECT_EQ(gEmu.copies - copies, 1) << "the own block of an out-of-place allgather";
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(out.as<int32_t>()[q * N + i], int32_t(q * 100000 + int(i)));
    copies = gEmu.copies;
    int32_t* own = out.as<int32_t>() + c.rank * N;
    ASSERT_EQ(ncclAllGather(own, out.as<int32_t>(), N, ncclInt32, c.comm, s), ncclSuccess);  // in place
    ASSERT_EQ(ncclBroadcast(in.as<int32_t>(), out.as<int32_t>(), N, ncclInt32, 2, c.comm, s), ncclSuccess);
    sync(s);
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    EXPECT_EQ(gEmu.copies - copies, c.rank == 2 ? 1 : 0) << "none in place; the root's own copy";
    for (size_t i = 0; i < N; i++) ASSERT_EQ(out.as<int32_t>()[i], int32_t(2 * 100000 + int(i)));
  });
}

}  // namespace
}  // namespace chorus_test
