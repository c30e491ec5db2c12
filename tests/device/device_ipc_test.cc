// Allreduce through inboxes (kernels/device_ipc.h) through the emulated runtime: ranks that are processes of one
// host push their input into inboxes in the peers' device memory (IPC-mapped) and reduce there, one-shot for small
// calls and two-shot up to CHORUS_DEVICE_IPC_MAX_BYTES. These tests check that such calls take that path (and
// larger ones, or with CHORUS_DEVICE_IPC=0, do not), every type and operation, sizes around every threshold and
// block split, in place and not, results bitwise equal on every rank, many calls in a row on blocks of several
// threads with random delays (the inbox halves and counters carry over), graph replays, a mismatched call, a dead
// peer and a late one.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
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

class IpcAllReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    gEmu.threadsPerBlock = 1;
    gEmu.delayPercent = 0;
    chorus::setGpuRuntimeForTesting(&gEmu);
  }
  void TearDown() override {
    chorus::setGpuRuntimeForTesting(nullptr);
    for (const char* v : {"CHORUS_DEVICE_IPC", "CHORUS_DEVICE_ONESHOT_MAX_BYTES", "CHORUS_DEVICE_IPC_MAX_BYTES",
                          "CHORUS_DEVICE_IPC_BLOCKS", "CHORUS_TIMEOUT_S"})
      unsetenv(v);
    chorus::paramsReload();
  }
};

cudaStream_t streamOf(const RankCtx& c) { return reinterpret_cast<cudaStream_t>(uintptr_t(c.rank + 1)); }

ncclResult_t asyncErrorOf(ncclComm_t comm) {
  ncclResult_t e = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &e), ncclSuccess);
  return e;
}

// FNV-1a of n bytes.
uint64_t hashBytes(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

// Every rank's hash of its output, gathered (through FIFOs): all must be equal.
void expectSameOnEveryRank(RankCtx& c, const char* out, size_t bytes) {
  DevBuf h(gEmu, sizeof(uint64_t) * c.nranks);
  h.as<uint64_t>()[c.rank] = hashBytes(out, bytes);
  ASSERT_EQ(ncclAllGather(h.as<uint64_t>() + c.rank, h.as<uint64_t>(), 1, ncclUint64, c.comm, streamOf(c)),
            ncclSuccess);
  ASSERT_EQ(gEmu.streamSynchronize(streamOf(c)), ncclSuccess);
  for (int q = 1; q < c.nranks; q++) EXPECT_EQ(h.as<uint64_t>()[q], h.as<uint64_t>()[0]) << "rank " << q << " differs";
}

// One allreduce of `count` elements of t with op (kPreMul2: premulsum by 2, the factor on the host or the device),
// in place or not; checks every element against the reference, a guard byte past the end, and whether the call
// went through the inboxes.
void allReduceCheck(RankCtx& c, ncclDataType_t t, int op, size_t count, bool inPlace, bool expectIpc,
                    bool deviceScalar = false, int salt = 0, bool sameEverywhere = false) {
  const size_t es = dtSize(t);
  DevBuf send(gEmu, count * es + 1), recv(gEmu, count * es + 1), scalar(gEmu, 8);
  char* in = send.as<char>();
  char* out = inPlace ? in : recv.as<char>();
  for (size_t i = 0; i < count; i++) putElem(in, t, i, inputValue(op, c.rank, i + salt));
  if (!inPlace) std::memset(out, 0x5a, count * es);
  out[count * es] = 0x3c;
  ncclRedOp_t rop = static_cast<ncclRedOp_t>(op == kPreMul2 ? ncclSum : op);
  if (op == kPreMul2) {
    putElem(scalar.as<char>(), t, 0, 2.0);
    char host[8];
    putElem(host, t, 0, 2.0);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&rop, deviceScalar ? scalar.as<void>() : static_cast<void*>(host), t,
                                       deviceScalar ? ncclScalarDevice : ncclScalarHostImmediate, c.comm),
              ncclSuccess);
  }
  int before = gEmu.ipcLaunches;
  ASSERT_EQ(ncclAllReduce(in, out, count, t, rop, c.comm, streamOf(c)), ncclSuccess) << ncclGetLastError(c.comm);
  if (op == kPreMul2) {
    ASSERT_EQ(ncclRedOpDestroy(rop, c.comm), ncclSuccess);
  }
  EXPECT_EQ(gEmu.ipcLaunches.load(), before + (expectIpc ? 1 : 0)) << "through inboxes expected: " << expectIpc;
  ASSERT_EQ(gEmu.streamSynchronize(streamOf(c)), ncclSuccess) << gEmu.lastError();
  ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
  std::vector<double> v(c.nranks);
  for (size_t i = 0; i < count; i++) {
    for (int q = 0; q < c.nranks; q++) v[q] = inputValue(op, q, i + salt);
    double want = reduceRef(op, t, v), got = getElem(out, t, i);
    ASSERT_LE(std::fabs(got - want), tolerance(op, t, want, c.nranks))
        << dtName(t) << " op " << op << " count " << count << " i " << i << " got " << got << " want " << want;
  }
  EXPECT_EQ(out[count * es], 0x3c) << "written past the end";
  if (sameEverywhere) expectSameOnEveryRank(c, out, count * es);
}

// Every type and operation, one-shot and (with a lower one-shot limit) two-shot, in place every other call; float
// sums are bitwise the same on every rank.
TEST_F(IpcAllReduce, EveryTypeAndOperation) {
  for (const char* oneShotMax : {"65536", "1024"}) {
    SCOPED_TRACE(std::string("one-shot up to ") + oneShotMax);
    setenv("CHORUS_DEVICE_ONESHOT_MAX_BYTES", oneShotMax, 1);
    chorus::paramsReload();
    runRanks(3, Driver::kProcesses, [](RankCtx& c) {
      int k = 0;
      for (int t = 0; t < ncclNumTypes; t++)
        for (int op : {int(ncclSum), int(ncclProd), int(ncclMax), int(ncclMin), int(ncclAvg), kPreMul2}) {
          k++;
          bool floatSum = op == ncclSum && (t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16);
          allReduceCheck(c, static_cast<ncclDataType_t>(t), op, 1001, k % 2 == 0, true, op == kPreMul2 && t % 2, k,
                         floatSum);
        }
    });
  }
}

// Counts that leave blocks or two-shot chunks empty, around the one-shot limit (64 KB) and the inbox limit (1 MB:
// larger calls take the FIFOs), in place and not.
TEST_F(IpcAllReduce, SizesAroundEveryLimit) {
  runRanks(4, Driver::kProcesses, [](RankCtx& c) {
    for (size_t count : {size_t(1), size_t(3), size_t(5), size_t(1023), size_t(16384), size_t(16385), size_t(70001),
                         size_t(262144), size_t(262145)})
      for (bool inPlace : {false, true})
        allReduceCheck(c, ncclInt32, ncclSum, count, inPlace, count * 4 <= (1u << 20), false, int(count));
  });
}

// Many calls in a row on blocks of 4 threads with random delays: the halves alternate, the counters carry over,
// one-shot and two-shot interleave, and a fast rank's next call must not overwrite what a slow rank still reads.
TEST_F(IpcAllReduce, ManyCallsWithDelays) {
  gEmu.threadsPerBlock = 4;
  gEmu.delayPercent = 10;
  gEmu.delayMaxUs = 30;
  runRanks(4, Driver::kProcesses, [](RankCtx& c) {
    for (int k = 0; k < 24; k++) {
      size_t count = (k % 3 == 0) ? 30000 : (k % 3 == 1) ? 37 : 2500;
      allReduceCheck(c, k % 2 ? ncclFloat32 : ncclInt64, ncclSum, count, k % 4 == 0, true, false, k);
    }
  });
  gEmu.threadsPerBlock = 1;
  gEmu.delayPercent = 0;
}

// Reduce, broadcast, allgather, reduce-scatter and alltoall through inboxes, out of place and at each collective's
// in-place offset, with roots that move: int32 values whose sums are exact, a guard word past every buffer. Past
// CHORUS_DEVICE_ONESHOT_MAX_BYTES a rank's block takes the FIFOs.
void otherCollectives(RankCtx& c, size_t N) {
  const int n = c.nranks, r = c.rank;
  const int32_t kGuard = 0x7eadbeef;
  const bool ipc = N * 4 <= 65536;
  auto v = [](int rank, size_t i) { return int32_t(rank * 1000003 + int32_t(i % 100000) * 7 + 1); };
  DevBuf inBuf(gEmu, (N * n + 1) * 4), outBuf(gEmu, (N * n + 1) * 4);
  int32_t* in = inBuf.as<int32_t>();
  int32_t* out = outBuf.as<int32_t>();
  cudaStream_t s = streamOf(c);
  for (bool inPlace : {false, true}) {
    const int root = int((N + (inPlace ? 1 : 0)) % n);
    SCOPED_TRACE(std::string(inPlace ? "in place" : "out of place") + " N=" + std::to_string(N));
    int before = 0;
    auto run = [&](ncclResult_t res) {
      ASSERT_EQ(res, ncclSuccess) << ncclGetLastError(c.comm);
      ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess);
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      EXPECT_EQ(gEmu.ipcLaunches.load(), before + (ipc ? 1 : 0)) << "through inboxes: " << ipc;
      EXPECT_EQ(in[N * n], kGuard);
      EXPECT_EQ(out[N * n], kGuard);
    };
    in[N * n] = out[N * n] = kGuard;

    int32_t* agIn = inPlace ? out + r * N : in;
    for (size_t i = 0; i < N; i++) agIn[i] = v(r, i);
    before = gEmu.ipcLaunches;
    run(ncclAllGather(agIn, out, N, ncclInt32, c.comm, s));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(out[q * N + i], v(q, i)) << "allgather q " << q << " i " << i;

    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* rsOut = inPlace ? in + r * N : out;
    before = gEmu.ipcLaunches;
    run(ncclReduceScatter(in, rsOut, N, ncclInt32, ncclSum, c.comm, s));
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += v(q, r * N + i);
      ASSERT_EQ(rsOut[i], want) << "reduce-scatter i " << i;
    }

    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* bcOut = inPlace ? in : out;
    before = gEmu.ipcLaunches;
    run(ncclBroadcast(in, bcOut, N, ncclInt32, root, c.comm, s));
    for (size_t i = 0; i < N; i++) ASSERT_EQ(bcOut[i], v(root, i)) << "broadcast i " << i;

    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* redOut = inPlace ? in : out;
    before = gEmu.ipcLaunches;
    run(ncclReduce(in, redOut, N, ncclInt32, ncclSum, root, c.comm, s));
    if (r == root) {
      for (size_t i = 0; i < N; i++) {
        int32_t want = 0;
        for (int q = 0; q < n; q++) want += v(q, i);
        ASSERT_EQ(redOut[i], want) << "reduce i " << i;
      }
    }

    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* aaOut = inPlace ? in : out;
    before = gEmu.ipcLaunches;
    run(ncclAlltoAll(in, aaOut, N, ncclInt32, c.comm, s));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(aaOut[q * N + i], v(q, r * N + i)) << "alltoall q " << q << " i " << i;
  }
}

TEST_F(IpcAllReduce, OtherCollectives) {
  runRanks(4, Driver::kProcesses, [](RankCtx& c) {
    for (size_t N : {size_t(1), size_t(3), size_t(1001), size_t(16384), size_t(16385)}) otherCollectives(c, N);
  });
  runRanks(3, Driver::kProcesses, [](RankCtx& c) { otherCollectives(c, 5003); });
}

// The same on blocks of 4 threads with random delays, twice in a row.
TEST_F(IpcAllReduce, OtherCollectivesWithDelays) {
  gEmu.threadsPerBlock = 4;
  gEmu.delayPercent = 10;
  gEmu.delayMaxUs = 30;
  runRanks(4, Driver::kProcesses, [](RankCtx& c) {
    for (size_t N : {size_t(2500), size_t(777)}) otherCollectives(c, N);
  });
  gEmu.threadsPerBlock = 1;
  gEmu.delayPercent = 0;
}

// Two ranks: the same calls with CHORUS_DEVICE_IPC=0 go through FIFOs; threads of one process on one GPU take their
// own direct path, not the inboxes.
TEST_F(IpcAllReduce, OnlyWhenEnabledAndNotForThreadsOfOneGpu) {
  runRanks(2, Driver::kThreads, [](RankCtx& c) { allReduceCheck(c, ncclFloat32, ncclSum, 5000, false, false); });
  setenv("CHORUS_DEVICE_IPC", "0", 1);
  chorus::paramsReload();
  runRanks(2, Driver::kProcesses, [](RankCtx& c) { allReduceCheck(c, ncclFloat32, ncclSum, 5000, true, false); });
}

// Captured once (a one-shot and a two-shot call), replayed three times with new inputs: every replay's result is
// right, so the counters and halves move on in device memory.
TEST_F(IpcAllReduce, GraphReplays) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    const size_t small = 3000, big = 100000;
    DevBuf a(gEmu, small * 4), b(gEmu, big * 4);
    cudaStream_t s = streamOf(c);
    ASSERT_EQ(gEmu.beginCapture(s, EmuRuntime::Capture::kGlobal), ncclSuccess) << gEmu.lastError();
    ASSERT_EQ(ncclAllReduce(a.as<int32_t>(), a.as<int32_t>(), small, ncclInt32, ncclSum, c.comm, s), ncclSuccess)
        << ncclGetLastError(c.comm);
    ASSERT_EQ(ncclAllReduce(b.as<int32_t>(), b.as<int32_t>(), big, ncclInt32, ncclSum, c.comm, s), ncclSuccess)
        << ncclGetLastError(c.comm);
    std::shared_ptr<EmuGraph> g;
    ASSERT_EQ(gEmu.endCapture(s, &g), ncclSuccess) << gEmu.lastError();
    for (int rep = 0; rep < 3; rep++) {
      for (size_t i = 0; i < small; i++) a.as<int32_t>()[i] = int32_t(c.rank * 7 + rep + i);
      for (size_t i = 0; i < big; i++) b.as<int32_t>()[i] = int32_t(c.rank * 5 - rep + i);
      ASSERT_EQ(gEmu.graphLaunch(g, s), ncclSuccess) << gEmu.lastError();
      ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess);
      ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      for (size_t i = 0; i < small; i++) ASSERT_EQ(a.as<int32_t>()[i], int32_t(7 + 2 * (rep + i))) << rep << " " << i;
      for (size_t i = 0; i < big; i++) ASSERT_EQ(b.as<int32_t>()[i], int32_t(5 + 2 * (i - rep))) << rep << " " << i;
    }
  });
}

// One process driving two GPUs (ncclCommInitAll, one thread, one group): the ranks are not threads of one GPU,
// so the allreduce goes through inboxes, which they reach by pointer.
TEST_F(IpcAllReduce, OneProcessTwoGpus) {
  setenv("CHORUS_TIMEOUT_S", "20", 1);
  chorus::paramsReload();
  gEmu.devices = 2;
  const int n = 2;
  ncclComm_t comms[n];
  int devs[n] = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms, n, devs), ncclSuccess);
  for (size_t count : {size_t(1000), size_t(100000)}) {
    std::vector<std::unique_ptr<DevBuf>> bufs;
    for (int r = 0; r < n; r++) {
      ASSERT_EQ(gEmu.setDevice(r), ncclSuccess);
      bufs.push_back(std::make_unique<DevBuf>(gEmu, count * sizeof(int32_t)));
      for (size_t i = 0; i < count; i++) bufs[r]->as<int32_t>()[i] = int32_t(r * 3 + i);
    }
    int before = gEmu.ipcLaunches;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      ASSERT_EQ(ncclAllReduce(bufs[r]->as<int32_t>(), bufs[r]->as<int32_t>(), count, ncclInt32, ncclSum, comms[r],
                              reinterpret_cast<cudaStream_t>(uintptr_t(r + 1))),
                ncclSuccess)
          << ncclGetLastError(comms[r]);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
    EXPECT_EQ(gEmu.ipcLaunches.load(), before + n);
    for (int r = 0; r < n; r++)
      ASSERT_EQ(gEmu.streamSynchronize(reinterpret_cast<cudaStream_t>(uintptr_t(r + 1))), ncclSuccess);
    for (int r = 0; r < n; r++) {
      ASSERT_EQ(asyncErrorOf(comms[r]), ncclSuccess) << ncclGetLastError(comms[r]);
      for (size_t i = 0; i < count; i++) ASSERT_EQ(bufs[r]->as<int32_t>()[i], int32_t(3 + 2 * i)) << r << " " << i;
    }
  }
  for (int r = 0; r < n; r++) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  gEmu.setDevice(0);
  gEmu.devices = 1;
}

// Rank 1 calls with another count: both kernels refuse the other's call, naming it.
TEST_F(IpcAllReduce, MismatchedCallIsNamed) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    DevBuf b(gEmu, 4096);
    size_t count = c.rank == 0 ? 100 : 200;
    ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), count, ncclFloat32, ncclSum, c.comm, streamOf(c)),
              ncclSuccess);
    gEmu.streamSynchronize(streamOf(c));
    EXPECT_EQ(asyncErrorOf(c.comm), ncclInvalidUsage);
    std::string text = ncclGetLastError(c.comm);
    EXPECT_NE(text.find("does not match rank " + std::to_string(1 - c.rank)), std::string::npos) << text;
    EXPECT_NE(text.find(std::to_string(c.rank == 0 ? 200 : 100)), std::string::npos) << text;
  });
}

// Rank 1 broadcasts from another root: both kernels refuse the other's call.
TEST_F(IpcAllReduce, MismatchedRootIsNamed) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    DevBuf b(gEmu, 4096);
    ASSERT_EQ(ncclBroadcast(b.as<float>(), b.as<float>(), 100, ncclFloat32, c.rank, c.comm, streamOf(c)), ncclSuccess);
    gEmu.streamSynchronize(streamOf(c));
    EXPECT_EQ(asyncErrorOf(c.comm), ncclInvalidUsage);
    std::string text = ncclGetLastError(c.comm);
    EXPECT_NE(text.find("does not match rank " + std::to_string(1 - c.rank)), std::string::npos) << text;
    EXPECT_NE(text.find("root " + std::to_string(1 - c.rank)), std::string::npos) << text;
  });
}

// Rank 1's process exits instead of calling: rank 0's kernel stops once the watchdog sees it, naming rank 1, long
// before CHORUS_TIMEOUT_S.
TEST_F(IpcAllReduce, DeadPeerIsNamed) {
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    setenv("CHORUS_TIMEOUT_S", "60", 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    DevBuf b(gEmu, 4096 * sizeof(float));
    cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
    int before = gEmu.ipcLaunches;
    if (ncclAllReduce(b.as<float>(), b.as<float>(), 4096, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return 11;
    if (gEmu.streamSynchronize(s) != ncclSuccess || asyncErrorOf(comm) != ncclSuccess) return 12;
    if (gEmu.ipcLaunches != before + 1) return 13;
    if (rank == 1) _exit(0);
    auto start = std::chrono::steady_clock::now();
    ncclResult_t e = ncclAllReduce(b.as<float>(), b.as<float>(), 4096, ncclFloat32, ncclSum, comm, s);
    if (e == ncclSuccess) {
      gEmu.streamSynchronize(s);
      e = asyncErrorOf(comm);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string text = ncclGetLastError(comm);
    EXPECT_EQ(e, ncclRemoteError) << text;
    EXPECT_NE(text.find("rank 1's input"), std::string::npos) << text;
    EXPECT_NE(text.find("died"), std::string::npos) << text;
    EXPECT_LT(secs, 30.0) << text;
    ncclCommDestroy(comm);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

// Rank 1's stream is held by its own earlier work until rank 0 has given up: rank 0's kernel, which had already
// pushed its input, stops at CHORUS_TIMEOUT_S naming rank 1 and poisons its inboxes. Rank 1's kernel, when it comes,
// finds rank 0's input and completes with the right result; its next call stops at once on the poison, naming
// rank 0. Neither hangs.
TEST_F(IpcAllReduce, LatePeerTimesOutAndStopsTheOther) {
  setenv("CHORUS_TIMEOUT_S", "1", 1);
  chorus::paramsReload();
  // Shared between the forked ranks: rank 0 sets it once its call has failed.
  auto* rank0Done =
      static_cast<volatile int*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(rank0Done, MAP_FAILED);
  *rank0Done = 0;
  runRanks(2, Driver::kProcesses, [rank0Done](RankCtx& c) {
    const size_t n = 4096;
    DevBuf b(gEmu, n * sizeof(float));
    for (size_t i = 0; i < n; i++) b.as<float>()[i] = float(c.rank + i);
    if (c.rank == 1)
      gEmu.enqueueHost(streamOf(c), [rank0Done] {
        while (*rank0Done == 0) usleep(1000);
      });
    ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), n, ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
    gEmu.streamSynchronize(streamOf(c));
    if (c.rank == 0) {
      *rank0Done = 1;
      EXPECT_EQ(asyncErrorOf(c.comm), ncclRemoteError);
      std::string text = ncclGetLastError(c.comm);
      EXPECT_NE(text.find("through IPC inboxes"), std::string::npos) << text;
      EXPECT_NE(text.find("rank 1's input"), std::string::npos) << text;
      EXPECT_NE(text.find("CHORUS_TIMEOUT_S"), std::string::npos) << text;
      return;
    }
    ASSERT_EQ(asyncErrorOf(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(b.as<float>()[i], float(2 * i + 1)) << i;
    // Its own deadline far away: only rank 0's poison can stop this call.
    setenv("CHORUS_TIMEOUT_S", "60", 1);
    chorus::paramsReload();
    ASSERT_EQ(ncclAllReduce(b.as<float>(), b.as<float>(), n, ncclFloat32, ncclSum, c.comm, streamOf(c)), ncclSuccess);
    gEmu.streamSynchronize(streamOf(c));
    EXPECT_EQ(asyncErrorOf(c.comm), ncclRemoteError);
    std::string text = ncclGetLastError(c.comm);
    EXPECT_NE(text.find("rank 0's input"), std::string::npos) << text;
    EXPECT_NE(text.find("given up on this rank"), std::string::npos) << text;
    EXPECT_EQ(text.find("CHORUS_TIMEOUT_S"), std::string::npos) << text;
  });
  munmap(const_cast<int*>(rank0Done), 4096);
}

}  // namespace
}  // namespace chorus_test
