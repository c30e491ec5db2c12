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

#include "core/params.h"
#include "device/device_checks.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

class IpcAllReduce : public ::testing::Test {
 protected:
  void SetUp() override { installEmu(gEmu); }
  void TearDown() override {
    removeEmu(gEmu, {"CHORUS_DEVICE_IPC", "CHORUS_DEVICE_ONESHOT_MAX_BYTES", "CHORUS_DEVICE_IPC_MAX_BYTES",
                     "CHORUS_DEVICE_IPC_BLOCKS", "CHORUS_TIMEOUT_S"});
  }
};

cudaStream_t streamOf(const RankCtx& c) { return rankStream(c); }
ncclResult_t asyncErrorOf(ncclComm_t comm) { return commAsyncError(comm); }
int ipcCount() { return gEmu.ipcLaunches.load(); }

// One allreduce, checked, and whether it went through the inboxes.
void allReduceCheck(RankCtx& c, ncclDataType_t t, int op, size_t count, bool inPlace, bool expectIpc,
                    bool deviceScalar = false, int salt = 0, bool sameEverywhere = false) {
  checkAllReduce(gEmu, c, t, op, count, inPlace, ipcCount, expectIpc, deviceScalar, salt, sameEverywhere);
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

// Reduce, broadcast, allgather, reduce-scatter and alltoall go through inboxes, out of place and at each
// collective's in-place offset, up to CHORUS_DEVICE_ONESHOT_MAX_BYTES a rank's block; gather and scatter, and larger
// blocks, take the FIFOs.
void otherCollectives(RankCtx& c, size_t N) {
  checkOtherCollectives(gEmu, c, N, ipcCount, [N](const std::string& coll, bool) {
    return N * 4 <= 65536 && coll != "Gather" && coll != "Scatter";
  });
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
    expectPeerDeathNamed(gEmu, comm, b.as<float>(), 4096, s, "rank 1's input");
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
