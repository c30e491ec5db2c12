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

#include "core/params.h"
#include "device/device_checks.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

class DirectCollectives : public ::testing::Test {
 protected:
  void SetUp() override { installEmu(gEmu); }
  void TearDown() override {
    removeEmu(gEmu, {"CHORUS_DEVICE_DIRECT", "CHORUS_TIMEOUT_S", "CHORUS_DEVICE_CHANNEL_BYTES"});
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

cudaStream_t streamOf(const RankCtx& c) { return rankStream(c); }
void sync(const RankCtx& c) { ASSERT_EQ(gEmu.streamSynchronize(streamOf(c)), ncclSuccess) << gEmu.lastError(); }
ncclResult_t asyncErrorOf(ncclComm_t comm) { return commAsyncError(comm); }
int directCount() { return EmuRuntime::directLaunchesOfThisThread(); }

// One allreduce, checked, and whether it took the direct path.
void allReduceCheck(RankCtx& c, ncclDataType_t t, int op, size_t count, bool inPlace, bool expectDirect,
                    bool deviceScalar = false, int salt = 0) {
  checkAllReduce(gEmu, c, t, op, count, inPlace, directCount, expectDirect, deviceScalar, salt);
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

// Every other collective, out of place and in place, with roots that move, on one block and on several. An alltoall
// in place cannot run directly (a rank would overwrite what a peer still reads) and takes the FIFOs, on every rank.
void otherCollectives(RankCtx& c, size_t N) {
  checkOtherCollectives(gEmu, c, N, directCount,
                        [](const std::string& coll, bool inPlace) { return !(coll == "AlltoAll" && inPlace); });
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
