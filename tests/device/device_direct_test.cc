// Direct collectives (kernels/device_direct.h) through the emulated runtime: when every rank of a communicator is a
// thread of one process on one GPU, collectives read and write the peers' buffers with no FIFO. These tests check
// that such calls do take that path (and others do not), allreduce for every type and operation, every other
// collective in and out of place, sizes that leave ranks or blocks without elements, many calls in a row (the
// counters the ranks meet at carry over), blocks of several threads with random delays, and a rank whose kernel
// never comes.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "coll/coll_util.h"
#include "core/params.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

class DirectCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    gEmu.threadsPerBlock = 1;
    gEmu.delayPercent = 0;
    chorus::setGpuRuntimeForTesting(&gEmu);
  }
  void TearDown() override {
    chorus::setGpuRuntimeForTesting(nullptr);
    gEmu.threadsPerBlock = 1;
    gEmu.delayPercent = 0;
    for (const char* v : {"CHORUS_DEVICE_DIRECT", "CHORUS_TIMEOUT_S", "CHORUS_DEVICE_CHANNEL_BYTES"}) unsetenv(v);
    chorus::paramsReload();
  }
};

// Blocks of 4 threads, 10% of barriers and kernel starts delayed up to 30 us, a block per 8 KB.
void withDelays() {
  setenv("CHORUS_DEVICE_CHANNEL_BYTES", "8192", 1);
  chorus::paramsReload();
  gEmu.threadsPerBlock = 4;
  gEmu.delayPercent = 10;
  gEmu.delayMaxUs = 30;
}

cudaStream_t streamOf(const RankCtx& c) { return reinterpret_cast<cudaStream_t>(uintptr_t(c.rank + 1)); }
void sync(const RankCtx& c) { ASSERT_EQ(gEmu.streamSynchronize(streamOf(c)), ncclSuccess) << gEmu.lastError(); }

ncclResult_t asyncErrorOf(ncclComm_t comm) {
  ncclResult_t e = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &e), ncclSuccess);
  return e;
}

// One allreduce of `count` elements of t with op (kPreMul2: premulsum by 2, the factor on the host or the device),
// in place or not; checks every element and that the call took (or did not take) the direct path.
void allReduceCheck(RankCtx& c, ncclDataType_t t, int op, size_t count, bool inPlace, bool expectDirect,
                    bool deviceScalar = false, int salt = 0) {
  const size_t es = dtSize(t);
  DevBuf send(gEmu, count * es + 1), recv(gEmu, count * es + 1), scalar(gEmu, 8);
  char* in = send.as<char>();
  char* out = inPlace ? in : recv.as<char>();
  for (size_t i = 0; i < count; i++) putElem(in, t, i, inputValue(op, c.rank, i + salt));
  if (!inPlace) std::memset(out, 0x5a, count * es);
  out[count * es] = 0x3c;  // past the end: must stay
  ncclRedOp_t rop = static_cast<ncclRedOp_t>(op == kPreMul2 ? ncclSum : op);
  if (op == kPreMul2) {
    putElem(scalar.as<char>(), t, 0, 2.0);
    char host[8];
    putElem(host, t, 0, 2.0);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&rop, deviceScalar ? scalar.as<void>() : static_cast<void*>(host), t,
                                       deviceScalar ? ncclScalarDevice : ncclScalarHostImmediate, c.comm),
              ncclSuccess);
  }
  int direct = EmuRuntime::directLaunchesOfThisThread();
  ASSERT_EQ(ncclAllReduce(in, out, count, t, rop, c.comm, streamOf(c)), ncclSuccess) << ncclGetLastError(c.comm);
  if (op == kPreMul2) {
    ASSERT_EQ(ncclRedOpDestroy(rop, c.comm), ncclSuccess);
  }
  EXPECT_EQ(EmuRuntime::directLaunchesOfThisThread(), direct + (expectDirect ? 1 : 0))
      << "direct launch expected: " << expectDirect;
  sync(c);
  ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
  std::vector<double> v(c.nranks);
  for (size_t i = 0; i < count; i++) {
    for (int q = 0; q < c.nranks; q++) v[q] = inputValue(op, q, i + salt);
    double want = reduceRef(op, t, v), got = getElem(out, t, i);
    ASSERT_LE(std::fabs(got - want), tolerance(op, t, want, c.nranks))
        << dtName(t) << " op " << op << " count " << count << " i " << i << " got " << got << " want " << want;
  }
  EXPECT_EQ(out[count * es], 0x3c) << "written past the end";
}

TEST_F(DirectCollectives, EveryTypeAndOperation) {
  runRanks(3, Driver::kThreads, [](RankCtx& c) {
    int k = 0;
    for (int t = 0; t < ncclNumTypes; t++)
      for (int op : {int(ncclSum), int(ncclProd), int(ncclMax), int(ncclMin), int(ncclAvg), kPreMul2}) {
        k++;
        allReduceCheck(c, static_cast<ncclDataType_t>(t), op, 1001, k % 2 == 0, true, op == kPreMul2 && t % 2, k);
      }
  });
}

// Counts smaller than the ranks (some own no element), odd counts, and counts split among several blocks.
TEST_F(DirectCollectives, SizesThatLeaveRanksOrBlocksEmpty) {
  setenv("CHORUS_DEVICE_CHANNEL_BYTES", "4096", 1);  // several blocks from 8 KB on
  chorus::paramsReload();
  runRanks(4, Driver::kThreads, [](RankCtx& c) {
    for (size_t count : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(1023), size_t(4099), size_t(70001)})
      for (bool inPlace : {false, true}) allReduceCheck(c, ncclInt32, ncclSum, count, inPlace, true);
    EXPECT_GT(gEmu.lastChannels.load(), 1) << "the largest call ran on one block";
  });
}

// Many calls in a row on blocks of several threads with random delays: the ranks' counters carry over from call
// to call, a fast rank's next call must not run into a slow rank's current one, and the block count varies.
TEST_F(DirectCollectives, ManyCallsWithDelays) {
  withDelays();
  runRanks(4, Driver::kThreads, [](RankCtx& c) {
    for (int k = 0; k < 24; k++) {
      size_t count = (k % 3 == 0) ? 9000 : (k % 3 == 1) ? 37 : 2500;
      allReduceCheck(c, k % 2 ? ncclFloat32 : ncclInt64, ncclSum, count, k % 4 == 0, true, false, k);
    }
  });
}

// Every other collective, out of place and in place (at each collective's in-place offset), with roots that move,
// on one block and on several: int32 values whose sums are exact, a guard word past every buffer. An alltoall in
// place cannot run directly (a rank would overwrite what a peer still reads) and takes the FIFOs, on every rank.
void otherCollectives(RankCtx& c, size_t N) {
  const int n = c.nranks, r = c.rank;
  const int32_t kGuard = 0x7eadbeef;
  auto v = [](int rank, size_t i) { return int32_t(rank * 1000003 + int32_t(i % 100000) * 7 + 1); };
  DevBuf inBuf(gEmu, (N * n + 1) * 4), outBuf(gEmu, (N * n + 1) * 4);
  int32_t* in = inBuf.as<int32_t>();
  int32_t* out = outBuf.as<int32_t>();
  cudaStream_t s = streamOf(c);
  for (bool inPlace : {false, true}) {
    const int root = int(N % n);
    SCOPED_TRACE(std::string(inPlace ? "in place" : "out of place") + " N=" + std::to_string(N));
    auto run = [&](ncclResult_t res, bool direct, int before) {
      ASSERT_EQ(res, ncclSuccess) << ncclGetLastError(c.comm);
      ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess);
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      EXPECT_EQ(EmuRuntime::directLaunchesOfThisThread(), before + (direct ? 1 : 0)) << "direct: " << direct;
      EXPECT_EQ(in[N * n], kGuard);
      EXPECT_EQ(out[N * n], kGuard);
    };
    in[N * n] = out[N * n] = kGuard;
    int before = EmuRuntime::directLaunchesOfThisThread();

    // allgather: in place, rank r's input is block r of its output.
    int32_t* agIn = inPlace ? out + r * N : in;
    for (size_t i = 0; i < N; i++) agIn[i] = v(r, i);
    run(ncclAllGather(agIn, out, N, ncclInt32, c.comm, s), true, before);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(out[q * N + i], v(q, i)) << "allgather q " << q << " i " << i;

    // reduce-scatter: in place, the output is block r of the input.
    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* rsOut = inPlace ? in + r * N : out;
    before = EmuRuntime::directLaunchesOfThisThread();
    run(ncclReduceScatter(in, rsOut, N, ncclInt32, ncclSum, c.comm, s), true, before);
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += v(q, r * N + i);
      ASSERT_EQ(rsOut[i], want) << "reduce-scatter i " << i;
    }

    // broadcast and reduce from `root`.
    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* bcOut = inPlace ? in : out;
    before = EmuRuntime::directLaunchesOfThisThread();
    run(ncclBroadcast(in, bcOut, N, ncclInt32, root, c.comm, s), true, before);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(bcOut[i], v(root, i)) << "broadcast i " << i;
    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* redOut = inPlace ? in : out;
    before = EmuRuntime::directLaunchesOfThisThread();
    run(ncclReduce(in, redOut, N, ncclInt32, ncclMax, root, c.comm, s), true, before);
    if (r == root) {
      for (size_t i = 0; i < N; i++) ASSERT_EQ(redOut[i], v(n - 1, i)) << "reduce i " << i;
    }

    // gather and scatter at `root`: in place, the root's own block is its input / output.
    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* gIn = inPlace && r == root ? out + root * N : in;
    if (gIn != in)
      for (size_t i = 0; i < N; i++) gIn[i] = v(r, i);
    before = EmuRuntime::directLaunchesOfThisThread();
    run(ncclGather(gIn, out, N, ncclInt32, root, c.comm, s), true, before);
    if (r == root) {
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < N; i++) ASSERT_EQ(out[q * N + i], v(q, i)) << "gather q " << q << " i " << i;
    }
    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* scOut = inPlace && r == root ? in + root * N : out;
    before = EmuRuntime::directLaunchesOfThisThread();
    run(ncclScatter(in, scOut, N, ncclInt32, root, c.comm, s), true, before);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(scOut[i], v(root, r * N + i)) << "scatter i " << i;

    // alltoall: block q of rank r's input goes to block r of rank q's output.
    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* aaOut = inPlace ? in : out;
    before = EmuRuntime::directLaunchesOfThisThread();
    run(ncclAlltoAll(in, aaOut, N, ncclInt32, c.comm, s), !inPlace, before);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(aaOut[q * N + i], v(q, r * N + i)) << "alltoall q " << q << " i " << i;
  }
}

TEST_F(DirectCollectives, EveryOtherCollective) {
  setenv("CHORUS_DEVICE_CHANNEL_BYTES", "4096", 1);  // several blocks from 4 KB on
  chorus::paramsReload();
  runRanks(4, Driver::kThreads, [](RankCtx& c) {
    for (size_t N : {size_t(1), size_t(3), size_t(1001), size_t(20011)}) otherCollectives(c, N);
  });
  runRanks(3, Driver::kThreads, [](RankCtx& c) { otherCollectives(c, 5003); });
}

// The same on blocks of several threads with random delays at barriers and kernel starts, twice in a row.
TEST_F(DirectCollectives, EveryOtherCollectiveWithDelays) {
  withDelays();
  runRanks(4, Driver::kThreads, [](RankCtx& c) {
    for (size_t N : {size_t(2500), size_t(777)}) otherCollectives(c, N);
  });
}

// The same calls between processes, and with CHORUS_DEVICE_DIRECT=0, go through FIFOs.
TEST_F(DirectCollectives, OnlyThreadRanksOfOneGpuAndOnlyWhenEnabled) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) { allReduceCheck(c, ncclFloat32, ncclSum, 5000, false, false); });
  setenv("CHORUS_DEVICE_DIRECT", "0", 1);
  chorus::paramsReload();
  int direct = gEmu.directLaunches;
  runRanks(2, Driver::kThreads, [](RankCtx& c) { allReduceCheck(c, ncclFloat32, ncclSum, 5000, true, false); });
  EXPECT_EQ(gEmu.directLaunches.load(), direct) << "CHORUS_DEVICE_DIRECT=0 still launched direct";
}

// Rank 1's stream is held up by its own earlier work until rank 0's kernel has given up: rank 0's kernel waits
// for rank 1's block to start, stops at CHORUS_TIMEOUT_S and names rank 1; rank 1's kernel, when it comes, waits
// for rank 0's to finish with rank 1's buffers, stops too and names rank 0. Neither hangs.
TEST_F(DirectCollectives, PeerKernelThatNeverComesTimesOut) {
  setenv("CHORUS_TIMEOUT_S", "1", 1);
  chorus::paramsReload();
  static std::atomic<bool> rank0Done{false};
  rank0Done = false;
  runRanks(2, Driver::kThreads, [](RankCtx& c) {
    DevBuf buf(gEmu, 4096 * sizeof(float));
    if (c.rank == 1)
      gEmu.enqueueHost(streamOf(c), [] {
        while (!rank0Done) usleep(1000);
      });
    ASSERT_EQ(ncclAllReduce(buf.as<float>(), buf.as<float>(), 4096, ncclFloat32, ncclSum, c.comm, streamOf(c)),
              ncclSuccess);
    sync(c);
    if (c.rank == 0) rank0Done = true;
    EXPECT_NE(asyncErrorOf(c.comm), ncclSuccess);
    std::string text = ncclGetLastError(c.comm);
    EXPECT_NE(text.find(c.rank == 0 ? "rank 1's kernel to start" : "rank 0's kernel to finish"), std::string::npos)
        << text;
    EXPECT_NE(text.find("CHORUS_TIMEOUT_S"), std::string::npos) << text;
    EXPECT_NE(text.find("direct collective"), std::string::npos) << text;
  });
}

}  // namespace
}  // namespace chorus_test
