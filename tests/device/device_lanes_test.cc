// Several blocks per channel on the FIFO path ("lanes", kernels/device_work.h DevWork::lanes) through the emulated
// runtime. Once a collective's channels are at CHORUS_DEVICE_NCHANNELS, each channel runs on up to
// CHORUS_DEVICE_CHANNEL_BLOCKS blocks, one per CHORUS_DEVICE_CHANNEL_BYTES of its part: lane j takes tiles j, j +
// lanes, ... through FIFOs of its own. These tests make that happen at small sizes (2 channels, 4 KiB a block, FIFOs
// of 4 slots of 4 KiB) and check the launch's shape, every collective and every type and operation on processes and
// threads, sizes on each side of the lane and tile splits, many calls on blocks of several threads with random
// delays, sends and receives whose launches differ in blocks from rank to rank, and network staging (ranks with
// different settings are refused at init: device_path_test.cc).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/params.h"
#include "device/device_checks.h"
#include "device/emu_runtime.h"
#include "engine/device_connections.h"
#include "harness/ranks.h"
#include "kernels/device_work.h"
#include "nccl.h"
#include "runtime/runtime.h"
#include "transports/remote.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

constexpr size_t kChannelBytes = 4096;
constexpr int kChannels = 2;

const char* const kVars[] = {"CHORUS_DEVICE_DIRECT",         "CHORUS_DEVICE_IPC", "CHORUS_DEVICE_NCHANNELS",
                             "CHORUS_DEVICE_CHANNEL_BYTES",  "CHORUS_FIFO_SLOTS", "CHORUS_FIFO_SLOT_BYTES",
                             "CHORUS_DEVICE_CHANNEL_BLOCKS", "NCCL_PROTO",        "CHORUS_TIMEOUT_S"};

class DeviceLanes : public ::testing::TestWithParam<Driver> {
 protected:
  void SetUp() override {
    setenv("CHORUS_DEVICE_DIRECT", "0", 1);  // the FIFOs, for thread ranks too
    setenv("CHORUS_DEVICE_IPC", "0", 1);     // and for small process calls
    setenv("CHORUS_DEVICE_NCHANNELS", std::to_string(kChannels).c_str(), 1);
    setenv("CHORUS_DEVICE_CHANNEL_BYTES", std::to_string(kChannelBytes).c_str(), 1);
    setenv("CHORUS_FIFO_SLOTS", "4", 1);
    setenv("CHORUS_FIFO_SLOT_BYTES", "4096", 1);
    setenv("NCCL_PROTO", "Simple", 1);
    chorus::paramsReload();
    installEmu(gEmu);
    gEmu.concurrentBlocks = true;  // lanes of a channel run side by side, as on a GPU
  }
  void TearDown() override {
    removeEmu(gEmu, {});
    for (const char* v : kVars) unsetenv(v);
    chorus::paramsReload();
  }
};

int laneLaunches() { return EmuRuntime::laneLaunchesOfThisThread(); }

// Blocks per channel the engine gives a collective of `bytes` (its larger buffer) with the settings above and
// the build's most lanes: one per kChannelBytes of a channel's part, once both channels are in use.
int lanesFor(size_t bytes) {
  size_t per = kChannelBytes * kChannels;
  size_t want = (bytes + per - 1) / per;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(chorus::kDevMaxLanes, want)));
}

bool usesLanes(size_t bytes) { return lanesFor(bytes) > 1; }

// The launch's shape: channels x lanes blocks, as many lanes as the bytes warrant (up to the build's limit).
TEST_P(DeviceLanes, BlocksGrowWithTheBytes) {
  if (chorus::kDevMaxLanes < 2) GTEST_SKIP() << "this build runs one block per channel";
  runRanks(2, GetParam(), [](RankCtx& c) {
    for (size_t count : {size_t(1024), size_t(2048), size_t(2049), size_t(5000), size_t(100000)}) {
      checkAllReduce(gEmu, c, ncclInt32, ncclSum, count, false, laneLaunches, usesLanes(count * 4));
      const int lanes = lanesFor(count * 4);
      // Two ranks: a ring of one channel per channel asked for (the planner keeps both at this size).
      EXPECT_EQ(gEmu.lastLanes.load(), lanes) << count;
      EXPECT_EQ(gEmu.lastChannels.load(), (count * 4 > kChannelBytes ? kChannels : 1) * lanes) << count;
    }
  });
}

// CHORUS_DEVICE_CHANNEL_BLOCKS=1: one block per channel whatever the size.
TEST_P(DeviceLanes, OneBlockPerChannelWhenAskedFor) {
  setenv("CHORUS_DEVICE_CHANNEL_BLOCKS", "1", 1);
  chorus::paramsReload();
  runRanks(3, GetParam(), [](RankCtx& c) {
    checkAllReduce(gEmu, c, ncclFloat32, ncclSum, 100000, false, laneLaunches, false);
    EXPECT_EQ(gEmu.lastLanes.load(), 1);
  });
}

// Every type and operation, in place every other call, across lanes and tiles; float sums the same on every rank.
TEST_P(DeviceLanes, AllReduceEveryTypeAndOperation) {
  runRanks(3, GetParam(), [](RankCtx& c) {
    const size_t count = 7001;
    int k = 0;
    for (int t = 0; t < ncclNumTypes; t++)
      for (int op : {int(ncclSum), int(ncclProd), int(ncclMax), int(ncclMin), int(ncclAvg), kPreMul2}) {
        k++;
        const ncclDataType_t type = static_cast<ncclDataType_t>(t);
        bool floatSum = op == ncclSum && (t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16);
        checkAllReduce(gEmu, c, type, op, count, k % 2 == 0, laneLaunches, usesLanes(count * dtSize(type)),
                       op == kPreMul2 && t % 2, k, floatSum);
      }
  });
}

// Counts on each side of the lane split (one lane per 8 KiB here), the tile split (tiles shrink to a lane's share,
// at most 8 KiB: two slots) and the FIFO's wrap, in and out of place, on 2 to 4 ranks.
TEST_P(DeviceLanes, AllReduceSizes) {
  for (int n : {2, 3, 4}) {
    runRanks(n, GetParam(), [](RankCtx& c) {
      for (size_t count : {size_t(1), size_t(2047), size_t(2048), size_t(2049), size_t(4097), size_t(6143),
                           size_t(8193), size_t(40001), size_t(262147)})
        for (bool inPlace : {false, true})
          checkAllReduce(gEmu, c, ncclInt32, ncclSum, count, inPlace, laneLaunches, usesLanes(count * 4), false,
                         int(count));
    });
  }
}

// NCCL_NTHREADS sizes the kernel's blocks as NCCL reads it, within the kernel's launch bound (256): a multiple of
// the warp size from two warps up; one that is not a multiple takes the most, one out of bounds is clamped. The results
// stay right (the emulated blocks run on 2 host threads each, dividing the work as a block of any size does).
TEST_P(DeviceLanes, NcclNThreadsSizesTheBlocks) {
  struct Case {
    const char* value;  // nullptr: unset
    int threads;
  };
  const int warp = chorus::kWarpSize;             // 32; 64 in HIP builds
  const int least = (CHORUS_HIP ? 4 : 2) * warp;  // NCCL's two warps, RCCL's four wavefronts
  const std::string atLeast = std::to_string(least), one = std::to_string(warp),
                    notMultiple = std::to_string(3 * warp + 1);
  const Case cases[] = {
      {nullptr, 256}, {"-2", 256},  {atLeast.c_str(), least}, {"128", std::max(least, 128)}, {"256", 256},
      {"512", 256},   {"640", 256}, {one.c_str(), least},     {notMultiple.c_str(), 256}};
  const int before = gEmu.threadsPerBlock;
  gEmu.threadsPerBlock = 2;
  for (const Case& k : cases) {
    if (k.value != nullptr) setenv("NCCL_NTHREADS", k.value, 1);
    chorus::paramsReload();
    runRanks(2, GetParam(), [&k](RankCtx& c) {
      checkAllReduce(gEmu, c, ncclFloat32, ncclSum, 5000, false, laneLaunches, usesLanes(5000 * 4));
      EXPECT_EQ(gEmu.lastThreads.load(), k.threads) << "NCCL_NTHREADS=" << (k.value ? k.value : "(unset)");
    });
    unsetenv("NCCL_NTHREADS");
  }
  gEmu.threadsPerBlock = before;
  chorus::paramsReload();
}

// Allgather, reduce-scatter, broadcast, reduce, gather, scatter and alltoall, out of place and in place, with their
// roots moving, on 4 and 3 ranks: each takes lanes when its larger buffer warrants them.
TEST_P(DeviceLanes, OtherCollectives) {
  for (int n : {4, 3}) {
    runRanks(n, GetParam(), [](RankCtx& c) {
      for (size_t N : {size_t(700), size_t(3001), size_t(9000)}) {
        const int ranks = c.nranks;
        checkOtherCollectives(gEmu, c, N, laneLaunches, [N, ranks](const std::string& coll, bool) {
          const bool whole = coll == "Broadcast" || coll == "Reduce";
          return usesLanes(N * 4 * (whole ? 1 : ranks));
        });
      }
    });
  }
}

// A tree allreduce (NCCL_ALGO=Tree) over 5 ranks runs each rank's down phase its depth in tiles behind its up phase
// (Schedule::lag, algo/schedule.h's TileOrder over the lane's own tiles): sizes of one tile to many tiles a lane, in and
// out of place, with the launch carrying the lags; then on blocks of 4 threads with random delays.
// Runs body(pass) under NCCL_ALGO=algo twice: as configured, then (pass 1) on blocks of 4 threads with random delays.
void forcedAlgoTwoPasses(const char* algo, const std::function<void(int pass)>& body) {
  setenv("NCCL_ALGO", algo, 1);
  chorus::paramsReload();
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      gEmu.threadsPerBlock = 4;
      gEmu.delayPercent = 10;
      gEmu.delayMaxUs = 30;
    }
    body(pass);
  }
  unsetenv("NCCL_ALGO");
  chorus::paramsReload();
}

TEST_P(DeviceLanes, TreeAllReducePipelined) {
  forcedAlgoTwoPasses("Tree", [this](int pass) {
    const Driver driver = GetParam();
    runRanks(5, driver, [pass, driver](RankCtx& c) {
      for (size_t count : {size_t(1), size_t(2049), size_t(40001), size_t(262147)}) {
        if (pass == 1 && count > 40001) continue;
        for (bool inPlace : {false, true}) {
          checkAllReduce(gEmu, c, ncclInt32, ncclSum, count, inPlace, laneLaunches, usesLanes(count * 4), false,
                         int(count));
          // Every rank is below the root in one tree at least. Below CHORUS_TREE_DUAL_MIN_BYTES (16 KB) one tree
          // runs, whose root (rank 0) waits for nothing; threads share the emulated runtime, whose last launch may
          // then be the root's, so only a process other than the root checks there.
          const bool oneTree = count * 4 < 16384;
          if (!oneTree || (driver == Driver::kProcesses && c.rank != 0)) {
            EXPECT_GE(gEmu.lastMaxLag.load(), 1) << count;
          }
        }
      }
      checkAllReduce(gEmu, c, ncclFloat32, ncclAvg, 40001, false, laneLaunches, true, false, 3);
    });
  });
}

// Recursive doubling (NCCL_ALGO=RecDoubling) through device launches: allreduce over a power of two ranks and over 3
// (a rank folded in), every op, in and out of place, one tile to many tiles a lane, on blocks of 4 threads with random
// delays too; and allgather (the other collectives, which it does not implement, run the ring).
TEST_P(DeviceLanes, RecursiveDoubling) {
  forcedAlgoTwoPasses("RecDoubling", [this](int pass) {
    for (int n : {4, 3}) {
      runRanks(n, GetParam(), [pass](RankCtx& c) {
        for (size_t count : {size_t(1), size_t(2049), size_t(40001), size_t(262147)}) {
          if (pass == 1 && count > 40001) continue;
          for (bool inPlace : {false, true})
            checkAllReduce(gEmu, c, ncclInt32, ncclSum, count, inPlace, laneLaunches, usesLanes(count * 4), false,
                           int(count));
        }
        for (int op : {int(ncclProd), int(ncclMax), int(ncclMin), int(ncclAvg), kPreMul2})
          checkAllReduce(gEmu, c, ncclFloat32, op, 3001, op % 2 == 0, laneLaunches, usesLanes(3001 * 4), false, op);
        const int ranks = c.nranks;
        for (size_t N : {size_t(700), size_t(9000)}) {
          if (pass == 1 && N > 700) continue;
          checkOtherCollectives(gEmu, c, N, laneLaunches, [N, ranks](const std::string& coll, bool) {
            const bool whole = coll == "Broadcast" || coll == "Reduce";
            return usesLanes(N * 4 * (whole ? 1 : ranks));
          });
        }
      });
    }
  });
}

// Many calls in a row on blocks of 4 threads with random delays: a lane's FIFO is its own, and its step counters carry
// over from call to call whatever number of lanes each call used.
TEST_P(DeviceLanes, ManyCallsOnBlocksOfThreadsWithDelays) {
  gEmu.threadsPerBlock = 4;
  gEmu.delayPercent = 10;
  gEmu.delayMaxUs = 30;
  runRanks(3, GetParam(), [](RankCtx& c) {
    const size_t counts[] = {30001, 1500, 9000, 2049, 17000};
    for (int i = 0; i < 15; i++) {
      const size_t count = counts[i % 5];
      checkAllReduce(gEmu, c, i % 2 ? ncclFloat32 : ncclInt32, ncclSum, count, i % 3 == 0, laneLaunches,
                     usesLanes(count * 4), false, i);
    }
  });
}

// Point-to-point: tile t of a message (8 KiB tiles here: half the FIFO) goes through lane t mod the launch's lanes,
// as many as its largest message has tiles (at most the build's lanes), so ranks' launches differ in blocks while
// both ends of each pair agree on every tile's lane. An uneven all-to-all of sends and receives in one group,
// messages of 0 to 50 KB that differ by pair and direction, five times with the sizes moving; each rank's launch has
// as many blocks as its largest message takes tiles (at most the build's lanes).
constexpr size_t kP2PTile = 8192;

size_t unevenBytes(int from, int to, int round) {
  return static_cast<size_t>(((from * 7 + to * 13 + round * 5) % 6) * 10000 + ((from + to + round) % 3) * 4);
}

TEST_P(DeviceLanes, UnevenSendsAndReceivesInOneGroup) {
  runRanks(4, GetParam(), [](RankCtx& c) {
    const int n = c.nranks, r = c.rank;
    const size_t most = 50008;
    DevBuf in(gEmu, most * n), out(gEmu, most * n);
    for (int round = 0; round < 5; round++) {
      size_t largest = 0;
      for (int q = 0; q < n; q++) {
        if (q == r) continue;
        for (size_t i = 0; i < unevenBytes(r, q, round); i++) in.as<uint8_t>()[q * most + i] = uint8_t(r * 31 + q + i);
        std::memset(out.as<char>() + q * most, 0, most);
        largest = std::max({largest, unevenBytes(r, q, round), unevenBytes(q, r, round)});
      }
      const int before = laneLaunches();
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int q = 0; q < n; q++) {
        if (q == r) continue;
        ASSERT_EQ(ncclSend(in.as<char>() + q * most, unevenBytes(r, q, round), ncclUint8, q, c.comm, rankStream(c)),
                  ncclSuccess);
        ASSERT_EQ(ncclRecv(out.as<char>() + q * most, unevenBytes(q, r, round), ncclUint8, q, c.comm, rankStream(c)),
                  ncclSuccess);
      }
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(c.comm);
      ASSERT_EQ(gEmu.streamSynchronize(rankStream(c)), ncclSuccess);
      ASSERT_EQ(commAsyncError(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      const size_t tiles = (largest + kP2PTile - 1) / kP2PTile;
      EXPECT_EQ(laneLaunches(), before + (chorus::kDevMaxLanes > 1 && tiles > 1 ? 1 : 0)) << "round " << round;
      for (int q = 0; q < n; q++) {
        if (q == r) continue;
        for (size_t i = 0; i < unevenBytes(q, r, round); i++)
          ASSERT_EQ(out.as<uint8_t>()[q * most + i], uint8_t(q * 31 + r + i)) << "from " << q << " i " << i;
        for (size_t i = unevenBytes(q, r, round); i < most; i++)
          ASSERT_EQ(out.as<uint8_t>()[q * most + i], 0) << "written past the message from " << q << " at " << i;
      }
    }
  });
}

// A ring shift of one message a rank, sizes around the tile and lane splits.
TEST_P(DeviceLanes, SendRecvSizes) {
  runRanks(3, GetParam(), [](RankCtx& c) {
    const int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
    DevBuf in(gEmu, 70000 * 4), out(gEmu, 70000 * 4);
    for (size_t count : {size_t(1), size_t(2048), size_t(2049), size_t(6145), size_t(16385), size_t(70000)}) {
      for (size_t i = 0; i < count; i++) in.as<int32_t>()[i] = int32_t(c.rank * 1000003 + i);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      ASSERT_EQ(ncclSend(in.as<int32_t>(), count, ncclInt32, next, c.comm, rankStream(c)), ncclSuccess);
      ASSERT_EQ(ncclRecv(out.as<int32_t>(), count, ncclInt32, prev, c.comm, rankStream(c)), ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
      ASSERT_EQ(gEmu.streamSynchronize(rankStream(c)), ncclSuccess);
      ASSERT_EQ(commAsyncError(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      const size_t tiles = (count * 4 + kP2PTile - 1) / kP2PTile;
      EXPECT_EQ(gEmu.lastLanes.load(), int(std::min<size_t>(chorus::kDevMaxLanes, tiles))) << count;
      for (size_t i = 0; i < count; i++) ASSERT_EQ(out.as<int32_t>()[i], int32_t(prev * 1000003 + i)) << count;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Drivers, DeviceLanes, ::testing::Values(Driver::kThreads, Driver::kProcesses),
                         [](const ::testing::TestParamInfo<Driver>& i) {
                           return i.param == Driver::kThreads ? "threads" : "processes";
                         });

// Ranks on two hosts: a remote peer's lanes are network staging connections of their own (the net proxy carries
// each lane's FIFO), beside IPC lanes to the local peer in the same launch.
TEST(DeviceLanesStaging, AcrossHostsThroughTheNetProxy) {
  for (const char* v : kVars) unsetenv(v);
  chorus::setGpuRuntimeForTesting(&gEmu);
  gEmu.peerAccess = true;
  auto status = forkRanks(3, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", rank == 1 ? "host-b" : "host-a", 1);
    setenv("CHORUS_DEVICE_NCHANNELS", std::to_string(kChannels).c_str(), 1);
    setenv("CHORUS_DEVICE_CHANNEL_BYTES", std::to_string(kChannelBytes).c_str(), 1);
    setenv("CHORUS_FIFO_SLOTS", "4", 1);
    setenv("CHORUS_FIFO_SLOT_BYTES", "4096", 1);
    setenv("CHORUS_DEVICE_IPC", "0", 1);
    setenv("CHORUS_TIMEOUT_S", "60", 1);
    chorus::paramsReload();
    gEmu.concurrentBlocks = true;
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 3, id, rank) != ncclSuccess) return 10;
    RankCtx c{rank, 3, comm};
    for (size_t count : {size_t(2049), size_t(40001)})
      checkAllReduce(gEmu, c, ncclFloat32, ncclSum, count, false, laneLaunches, usesLanes(count * 4));
    checkOtherCollectives(gEmu, c, 3001, laneLaunches, [](const std::string& coll, bool) {
      return usesLanes(3001 * 4 * (coll == "Broadcast" || coll == "Reduce" ? 1 : 3));
    });
    EXPECT_GT(gEmu.registeredCount(), 0u) << "no staging connection was made";
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 3; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
  chorus::setGpuRuntimeForTesting(nullptr);
}

#ifdef CHORUS_TEST_NET_V11
// A send and a receive of GPU buffers between two hosts whose net offers two devices (the test net plugin): the launch
// runs one channel on the most lanes (kernels/device_work.h), and the lanes' staging connections leave through both
// devices, lane j of channel c on device (c + j) mod 2, as a collective's channels spread over the NICs. Rank 0's log
// must show each lane's connections both ways on its device; the bytes arrive exact. With NCCL_MAX_P2P_NCHANNELS=1
// the launch runs one block, and only lane 0's connections are made.
// A rank process on one of two hosts (lane-host-a, lane-host-b) whose net, the test net plugin, offers two devices;
// FIFOs of 4 slots of 4 KiB, the emulated runtime installed with blocks side by side.
void onTwoNicHosts(int rank) {
  setenv("NCCL_HOSTID", rank == 0 ? "lane-host-a" : "lane-host-b", 1);
  setenv("NCCL_NET_PLUGIN", CHORUS_TEST_NET_V11, 1);
  setenv("NCCL_NET", "ChorusTestNet", 1);
  setenv("CHORUS_TEST_NET_DEVICES", "nic0,nic1", 1);
  setenv("CHORUS_FIFO_SLOTS", "4", 1);
  setenv("CHORUS_FIFO_SLOT_BYTES", "4096", 1);
  reloadEnv();
  installEmu(gEmu);
  gEmu.concurrentBlocks = true;
}

// Rank `rank` sends `count` int32s of GPU memory to its peer and receives as many from it, in one group on one
// stream; the group's result and the stream's.
ncclResult_t exchangeOnDevice(ncclComm_t comm, int rank, size_t count, const DevBuf& in, const DevBuf& out) {
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(1));
  for (size_t i = 0; i < count; i++) in.as<int32_t>()[i] = int32_t(rank * 1000003 + i);
  ncclGroupStart();
  ncclSend(in.as<int32_t>(), count, ncclInt32, 1 - rank, comm, s);
  ncclRecv(out.as<int32_t>(), count, ncclInt32, 1 - rank, comm, s);
  ncclResult_t res = ncclGroupEnd();
  if (res != ncclSuccess) return res;
  if (gEmu.streamSynchronize(s) != ncclSuccess) return ncclUnhandledCudaError;
  return commAsyncError(comm);
}

TEST(DeviceLanesStaging, SendAndReceiveLanesSpreadOverTheNics) {
  for (const char* most : {"", "1"}) {
    SCOPED_TRACE(std::string("NCCL_MAX_P2P_NCHANNELS=") + most);
    const int lanes = most[0] == '\0' ? chorus::kDevMaxLanes : 1;
    const std::string log = "/tmp/chorus-lane-nics-" + std::to_string(getpid()) + ".log";
    const std::string text = forkRanksForLog(
        2,
        [&](int rank, const ncclUniqueId& id) {
          setenv("CHORUS_TIMEOUT_S", "60", 1);
          if (most[0] != '\0') setenv("NCCL_MAX_P2P_NCHANNELS", most, 1);
          if (rank == 0) logInfoTo(log, "INIT,NET");
          onTwoNicHosts(rank);
          ncclComm_t comm = nullptr;
          if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
          const size_t count = 70001;  // int32s: many 8 KiB tiles, so the launch takes the most lanes
          DevBuf in(gEmu, count * 4), out(gEmu, count * 4);
          EXPECT_EQ(exchangeOnDevice(comm, rank, count, in, out), ncclSuccess) << ncclGetLastError(comm);
          EXPECT_EQ(gEmu.lastLanes.load(), lanes);
          const int peer = 1 - rank;
          for (size_t i = 0; i < count; i++)
            if (out.as<int32_t>()[i] != int32_t(peer * 1000003 + i)) {
              ADD_FAILURE() << "rank " << rank << ": element " << i << " is " << out.as<int32_t>()[i];
              break;
            }
          EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
          removeEmu(gEmu, {"NCCL_MAX_P2P_NCHANNELS"});
          return ::testing::Test::HasFailure() ? 1 : 0;
        },
        log);
    for (int lane = 0; lane < chorus::kDevMaxLanes; lane++)
      for (const char* way : {"->", "<-"}) {
        const int channel = chorus::kDeviceNetChannelBase + chorus::devLaneChannel(0, lane);
        const std::string conn =
            "dev " + std::to_string(lane % 2) + " channel " + std::to_string(channel) + " " + way + " rank 1";
        EXPECT_EQ(text.find(conn) != std::string::npos, lane < lanes) << conn << "\n" << text;
      }
  }
}

// The same exchange where the net cannot reach the peer through device 1 and says so at once (the test net's connects
// there fail, as a connect to an address without a route does): lane 1's connections never open, and lane 0's block
// waits on its own. Each rank's launch must stop with ncclRemoteError about a second later (once the proxy has judged
// the failure, NetProxy::judged), not at CHORUS_TIMEOUT_S (30 s here), naming the connection and what its net said.
TEST(DeviceLanesStaging, ALaneTheNetFailsInSetupEndsTheLaunch) {
  if (chorus::kDevMaxLanes < 2) GTEST_SKIP() << "this build runs one block per channel";
  const std::vector<int> status = forkRanks(
      2,
      [](int rank, const ncclUniqueId& id) {
        setenv("CHORUS_TIMEOUT_S", "30", 1);
        setenv("CHORUS_TEST_NET_UNREACHABLE_DEV", "1", 1);
        onTwoNicHosts(rank);
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
        const size_t count = 70001;
        DevBuf in(gEmu, count * 4), out(gEmu, count * 4);
        EXPECT_EQ(exchangeOnDevice(comm, rank, count, in, out), ncclRemoteError);
        const std::string err = ncclGetLastError(comm);
        EXPECT_EQ(err.find("CHORUS_TIMEOUT_S"), std::string::npos) << "waited for the deadline: " << err;
        EXPECT_NE(err.find("no route to the peer (CHORUS_TEST_NET_UNREACHABLE_DEV)"), std::string::npos)
            << "without what the net said: " << err;
        const int channel = chorus::kDeviceNetChannelBase + chorus::devLaneChannel(0, 1);
        EXPECT_NE(err.find("its connection over net ChorusTestNet (dev 1, channel " + std::to_string(channel) +
                           ", to rank " + std::to_string(1 - rank) + ") failed while it was set up"),
                  std::string::npos)
            << "the connection is not named: " << err;
        EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
        removeEmu(gEmu, {});
        return ::testing::Test::HasFailure() ? 1 : 0;
      },
      60);
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

// NCCL_RUNTIME_CONNECT=0 with GPUs: init makes the device path's FIFOs, and a channel over a device through which the
// net cannot reach the peer (it says so at once) fails the init itself on both ranks, not the first collective at
// CHORUS_TIMEOUT_S (30 s here). At least one rank's error carries what its net said; the other's may be its own or
// another connection the first rank's failed init reset.
TEST(DeviceLanesStaging, RuntimeConnectZeroFailsTheInitOverADeviceThatCannotConnect) {
  constexpr int kNamed = 0, kOther = 2;
  const std::vector<int> status = forkRanks(
      2,
      [](int rank, const ncclUniqueId& id) {
        setenv("CHORUS_TIMEOUT_S", "30", 1);
        setenv("CHORUS_TEST_NET_UNREACHABLE_DEV", "1", 1);
        setenv("CHORUS_DEVICE_NCHANNELS", "2", 1);  // channel 1's FIFOs over device 1
        setenv("NCCL_RUNTIME_CONNECT", "0", 1);
        onTwoNicHosts(rank);
        ncclComm_t comm = nullptr;
        EXPECT_NE(ncclCommInitRank(&comm, 2, id, rank), ncclSuccess) << "init made no connection over device 1";
        const std::string err = ncclGetLastError(comm);
        EXPECT_NE(err.find("NCCL_RUNTIME_CONNECT=0: connecting at init failed"), std::string::npos) << err;
        EXPECT_EQ(err.find("CHORUS_TIMEOUT_S"), std::string::npos) << "waited for the deadline: " << err;
        const bool named = err.find("no route to the peer (CHORUS_TEST_NET_UNREACHABLE_DEV)") != std::string::npos;
        if (comm != nullptr) ncclCommAbort(comm);
        removeEmu(gEmu, {});
        return ::testing::Test::HasFailure() ? 1 : named ? kNamed : kOther;
      },
      60);
  auto exited = [&](int r, int code) { return WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == code; };
  for (int r = 0; r < 2; r++)
    EXPECT_TRUE(exited(r, kNamed) || exited(r, kOther)) << "rank " << r << " " << describeStatus(status[r]);
  EXPECT_TRUE(exited(0, kNamed) || exited(1, kNamed)) << "no rank said what its net said of device 1";
}
#endif

// A rank process of the CTA tests below: the lane settings above with NCCL_ALGO `algo` and the inboxes on or off,
// `env` set to `value` on rank 1 (null: nothing), rank 0's config as `configure` leaves it; an allreduce of `count`
// floats, checked, whose launch must have `blocks` blocks (lanes: whether it has lanes).
int ctaRank(int rank, const ncclUniqueId& id, const char* algo, bool ipc, const char* env, const std::string& value,
            const std::function<void(ncclConfig_t*)>& configure, size_t count, int blocks, bool lanes) {
  setenv("CHORUS_DEVICE_IPC", ipc ? "1" : "0", 1);
  setenv("CHORUS_DEVICE_IPC_BLOCKS", "1", 1);
  setenv("CHORUS_DEVICE_NCHANNELS", std::to_string(kChannels).c_str(), 1);
  setenv("CHORUS_DEVICE_CHANNEL_BYTES", std::to_string(kChannelBytes).c_str(), 1);
  setenv("CHORUS_FIFO_SLOTS", "4", 1);
  setenv("CHORUS_FIFO_SLOT_BYTES", "4096", 1);
  setenv("NCCL_PROTO", "Simple", 1);
  setenv("NCCL_ALGO", algo, 1);
  if (rank == 1 && env != nullptr) setenv(env, value.c_str(), 1);
  chorus::paramsReload();
  installEmu(gEmu);
  gEmu.concurrentBlocks = true;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (rank == 0) configure(&config);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRankConfig(&comm, 2, id, rank, &config) != ncclSuccess) return 10;
  RankCtx c{rank, 2, comm};
  checkAllReduce(gEmu, c, ncclFloat32, ncclSum, count, false, laneLaunches, lanes);
  EXPECT_EQ(gEmu.lastChannels.load(), blocks);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  return ::testing::Test::HasFailure() ? 1 : 0;
}

// config.maxCTAs, NCCL_MAX_CTAS and NCCL_MAX_NCHANNELS cap the blocks of every launch (NCCL's CTAs); ranks that
// disagree take the smallest, so that their launches still pair up. Two processes with the lane settings above: rank
// 0 asks for `config0` blocks in its config (0: the default), rank 1 sets `env1` (NCCL_MAX_CTAS or
// NCCL_MAX_NCHANNELS) to 1; the allreduce's launch has the blocks the smallest cap leaves, and its result is right.
TEST(DeviceLanesCap, MaxCtasCapsEveryLaunchAtTheRanksSmallest) {
  struct Case {
    int config0;
    const char* env1;
    int blocks;  // of the launch: channels x lanes
    const char* algo = "Ring";
  };
  const Case cases[] = {
      {0, nullptr, kChannels * chorus::kDevMaxLanes},  // no cap: every lane the bytes warrant
      {3, nullptr, kChannels},                         // 3 blocks: both channels, one lane each
      {0, "NCCL_MAX_CTAS", 1},
      {0, "NCCL_MAX_NCHANNELS", 1},
      {0, nullptr, kChannels * chorus::kDevMaxLanes, "Tree"},  // the double binary tree: a tree a channel
      {0, "NCCL_MAX_CTAS", 1, "Tree"},                         // one block: one tree
  };
  for (const Case& k : cases) {
    auto status = forkRanks(2, [&k](int rank, const ncclUniqueId& id) {
      return ctaRank(
          rank, id, k.algo, false, k.env1, "1",
          [&k](ncclConfig_t* c) {
            if (k.config0 > 0) c->maxCTAs = k.config0;
          },
          100000, k.blocks, k.blocks > kChannels);
    });
    for (int r = 0; r < 2; r++)
      EXPECT_EQ(status[r], 0) << k.algo << ", config.maxCTAs " << k.config0 << ", " << (k.env1 ? k.env1 : "-")
                              << ": rank " << r << " " << describeStatus(status[r]);
  }
}

// config.minCTAs, NCCL_MIN_CTAS and NCCL_MIN_NCHANNELS raise the blocks of a collective's launch (NCCL's "fewest CTAs
// a kernel uses"); ranks that disagree take the largest, within the cap. A small allreduce (one block by its bytes)
// between two processes: rank 0 asks for `config0` blocks in its config, rank 1 sets `env1` to `val1`; through FIFOs
// (channels, then lanes) or through the inboxes (`ipc`, whose default here is one block). The result must be right.
TEST(DeviceLanesCap, MinCtasRaisesEveryCollectiveLaunchAtTheRanksLargest) {
  struct Case {
    int config0;
    const char* env1;
    int val1;
    bool ipc;
    int blocks;  // of the launch
  };
  const Case cases[] = {
      {0, nullptr, 0, false, 1},               // by its bytes: one block
      {2, nullptr, 0, false, kChannels},       // both channels
      {0, "NCCL_MIN_CTAS", 3, false, 4},       // both channels, two lanes each: the fewest that make 3
      {0, "NCCL_MIN_NCHANNELS", 2, false, 2},  // the same from the channels' variable
      {2, "NCCL_MIN_NRINGS", 1, false, 2},     // the larger of the two ranks'
      {4, "NCCL_MAX_CTAS", 1, false, 1},       // within the cap
      {0, nullptr, 0, true, 1},                // inboxes: CHORUS_DEVICE_IPC_BLOCKS
      {0, "NCCL_MIN_CTAS", 2, true, 2},        // raised
  };
  for (const Case& k : cases) {
    auto status = forkRanks(2, [&k](int rank, const ncclUniqueId& id) {
      return ctaRank(
          rank, id, "Ring", k.ipc, k.env1, std::to_string(k.val1),
          [&k](ncclConfig_t* c) {
            if (k.config0 > 0) c->minCTAs = k.config0;
          },
          100, k.blocks, !k.ipc && k.blocks > kChannels);
    });
    for (int r = 0; r < 2; r++)
      EXPECT_EQ(status[r], 0) << "config.minCTAs " << k.config0 << ", " << (k.env1 ? k.env1 : "-") << " " << k.val1
                              << (k.ipc ? ", inboxes" : ", FIFOs") << ": rank " << r << " "
                              << describeStatus(status[r]);
  }
}

}  // namespace
}  // namespace chorus_test
