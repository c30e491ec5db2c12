// Collectives on registered windows (kernels/device_window.h, src/engine/windows.cc) through the emulated runtime:
// ranks that are processes of one host register windows (collectively), map each other's, and an allreduce,
// allgather, reduce-scatter or alltoall whose buffers lie in windows runs on the ranks' own buffers. These tests
// check that such calls take that path (and small ones, other collectives, unregistered buffers or
// CHORUS_DEVICE_WINDOWS=0 do not), every type and operation, sizes around the block splits, windows that start
// inside an allocation and sit at different offsets on different ranks, many calls in a row interleaved with inbox
// calls on blocks of several threads with random delays, graph replays, one process driving two GPUs, and the
// failures: a peer whose buffer is in no window or in another one, and a dead peer.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/params.h"
#include "device/device_checks.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "kernels/device_work.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

class WindowCollectives : public ::testing::Test {
 protected:
  void SetUp() override { installEmu(gEmu); }
  void TearDown() override {
    removeEmu(gEmu, {"CHORUS_DEVICE_WINDOWS", "CHORUS_DEVICE_ONESHOT_MAX_BYTES", "CHORUS_DEVICE_IPC",
                     "CHORUS_TIMEOUT_S", "CHORUS_DEVICE_CHANNEL_BYTES", "NCCL_P2P_DISABLE"});
  }
};

int windowCount() { return gEmu.windowLaunches.load(); }

size_t roundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

// A rank's window: one device allocation, registered from 4 KiB in (a window may start inside an allocation, as a
// caching allocator's blocks do), with room for an input and an output of `each` bytes. With NCCL_WIN_DEFAULT they
// sit at an offset that differs from rank to rank (NCCL allows it); symmetric windows keep them at the same offset.
// Registration is collective: every rank of the communicator makes its RankWindow at the same point.
class RankWindow {
 public:
  RankWindow(RankCtx& c, size_t each, bool symmetric = false) : comm_(c.comm) {
    const size_t lead = 4096, slot = roundUp(each, 256);
    const size_t bytes = 2 * slot + 256 * kMaxSkew;  // the same on every rank
    alloc_ = std::make_unique<DevBuf>(gEmu, lead + bytes);
    char* base = alloc_->as<char>() + lead;
    const size_t skew = symmetric ? 0 : 256 * static_cast<size_t>(c.rank % kMaxSkew);
    mem_.in = base + skew;
    mem_.out = base + skew + slot;
    EXPECT_EQ(ncclCommWindowRegister(comm_, base, bytes, &win_, symmetric ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT),
              ncclSuccess)
        << ncclGetLastError(comm_);
  }
  ~RankWindow() {
    if (win_ != nullptr) {
      EXPECT_EQ(ncclCommWindowDeregister(comm_, win_), ncclSuccess);
    }
  }
  const CheckMem& mem() const { return mem_; }

 private:
  static constexpr size_t kMaxSkew = 8;
  ncclComm_t comm_;
  std::unique_ptr<DevBuf> alloc_;
  ncclWindow_t win_ = nullptr;
  CheckMem mem_;
};

void allReduceIn(const RankWindow& w, RankCtx& c, ncclDataType_t t, int op, size_t count, bool inPlace,
                 bool expectWindows, int salt = 0, bool sameEverywhere = false, bool deviceScalar = false) {
  checkAllReduce(gEmu, c, t, op, count, inPlace, windowCount, expectWindows, deviceScalar, salt, sameEverywhere,
                 w.mem());
}

// Every type and operation (one-shot through inboxes only up to 1 KiB here, so that 3001 elements of every type go
// on windows), in place every other call; float sums are bitwise the same on every rank.
TEST_F(WindowCollectives, AllReduceEveryTypeAndOperation) {
  setenv("CHORUS_DEVICE_ONESHOT_MAX_BYTES", "1024", 1);
  chorus::paramsReload();
  runRanks(3, Driver::kProcesses, [](RankCtx& c) {
    const size_t count = 3001;
    RankWindow w(c, count * 8 + 1);
    int k = 0;
    for (int t = 0; t < ncclNumTypes; t++)
      for (int op : {int(ncclSum), int(ncclProd), int(ncclMax), int(ncclMin), int(ncclAvg), kPreMul2}) {
        k++;
        bool floatSum = op == ncclSum && (t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16);
        allReduceIn(w, c, static_cast<ncclDataType_t>(t), op, count, k % 2 == 0, true, k, floatSum,
                    op == kPreMul2 && t % 2);
      }
  });
}

// Counts around the one-shot limit (64 KB: smaller calls go one-shot through inboxes), the blocks' split (256 KiB a
// block) and several blocks (4 MB: 16), in place and not, in symmetric windows and in windows at different offsets.
TEST_F(WindowCollectives, AllReduceSizes) {
  for (bool symmetric : {false, true}) {
    SCOPED_TRACE(symmetric ? "symmetric" : "offsets differ");
    runRanks(4, Driver::kProcesses, [symmetric](RankCtx& c) {
      RankWindow w(c, (size_t(1) << 22) + 4, symmetric);
      for (size_t count : {size_t(1), size_t(16384), size_t(16385), size_t(70001), size_t(262145), size_t(1) << 20})
        for (bool inPlace : {false, true})
          allReduceIn(w, c, ncclInt32, ncclSum, count, inPlace, count * 4 > 65536, int(count));
    });
  }
}

// As many blocks as the bytes warrant, up to what a launch through FIFOs could have (channels x lanes): 16 KiB a
// block here, so the largest call takes every block the build allows, the blocks running side by side as on a GPU.
TEST_F(WindowCollectives, AllReduceOnEveryBlock) {
  setenv("CHORUS_DEVICE_CHANNEL_BYTES", "16384", 1);
  chorus::paramsReload();
  gEmu.concurrentBlocks = true;
  runRanks(4, Driver::kProcesses, [](RankCtx& c) {
    RankWindow w(c, 262147 * 4 + 4);
    for (size_t count : {size_t(16385), size_t(100003), size_t(262147)}) {
      allReduceIn(w, c, ncclInt32, ncclSum, count, count == 100003, true, int(count));
      const size_t blocks = (count * 4 + 16383) / 16384;
      EXPECT_EQ(size_t(gEmu.lastChannels.load()), std::min<size_t>(blocks, chorus::kDevMaxBlocks)) << count;
    }
  });
}

// Allgather, reduce-scatter and alltoall go on windows above the one-shot limit (alltoall not in place: a rank
// would overwrite blocks its peers still read); broadcast, reduce, gather and scatter keep their paths.
void otherCollectivesIn(const RankWindow& w, RankCtx& c, size_t N) {
  checkOtherCollectives(
      gEmu, c, N, windowCount,
      [N](const std::string& coll, bool inPlace) {
        if (N * 4 <= 65536) return false;
        return coll == "AllGather" || coll == "ReduceScatter" || (coll == "AlltoAll" && !inPlace);
      },
      w.mem());
}

TEST_F(WindowCollectives, OtherCollectives) {
  runRanks(4, Driver::kProcesses, [](RankCtx& c) {
    const size_t maxN = 40000;
    RankWindow w(c, (maxN * 4 + 1) * 4);
    for (size_t N : {size_t(3), size_t(16385), size_t(maxN)}) otherCollectivesIn(w, c, N);
  });
  runRanks(3, Driver::kProcesses, [](RankCtx& c) {
    RankWindow w(c, (20011 * 3 + 1) * 4);
    otherCollectivesIn(w, c, 20011);
  });
}

// `calls` allreduces in a row on `nranks` processes, on blocks of 4 threads with random delays (`percent` of the
// barriers and kernel starts, up to `maxUs`), cycling through `counts`, int32 or (mixTypes) float32 and int64 in
// turn, in place every fourth call if mixTypes: calls above 64 KB on windows, the others one-shot through inboxes.
void callsWithDelays(int nranks, int percent, int maxUs, const std::vector<size_t>& counts, int calls, bool mixTypes) {
  gEmu.threadsPerBlock = 4;
  gEmu.delayPercent = percent;
  gEmu.delayMaxUs = maxUs;
  runRanks(nranks, Driver::kProcesses, [&](RankCtx& c) {
    RankWindow w(c, *std::max_element(counts.begin(), counts.end()) * 8 + 1);
    for (int k = 0; k < calls; k++) {
      const size_t count = counts[k % counts.size()];
      const ncclDataType_t t = !mixTypes ? ncclInt32 : k % 2 ? ncclFloat32 : ncclInt64;
      allReduceIn(w, c, t, ncclSum, count, mixTypes && k % 4 == 0, count * dtSize(t) > 65536, k);
    }
  });
}

// Window calls interleaved with inbox calls (which use fewer blocks and the same flag lines and counters): a fast
// rank's next call must not overwrite what a slow rank still reads, and every launch must find the counters where
// the last one left them.
TEST_F(WindowCollectives, ManyCallsWithDelays) { callsWithDelays(4, 10, 30, {300000, 37, 30000}, 24, true); }

// A one-block window call, then two inbox calls of 4 blocks, the second larger, with long delays, many times: the
// order in which the counters must move together (were only a launch's own blocks' to move, block 0 of the second
// inbox call would use the inbox half that block 1 of the first one used, over a region that block, on a slow peer,
// may still be reading). The results are checked here; the rule itself, which this race seldom exposes, is checked
// by KernelsIpc.EveryLaunchMovesEveryBlocksCounter.
TEST_F(WindowCollectives, InboxCallsAfterWindowCalls) { callsWithDelays(2, 30, 200, {30000, 2000, 16000}, 30, false); }

// The same calls take their usual paths with CHORUS_DEVICE_WINDOWS=0, on buffers outside any window, and after
// the window is deregistered; results stay right.
TEST_F(WindowCollectives, OnlyOnRegisteredWindowsAndWhenEnabled) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    const size_t count = 100000;
    checkAllReduce(gEmu, c, ncclFloat32, ncclSum, count, false, windowCount, false);  // buffers of its own
    {
      RankWindow w(c, count * 4 + 1);
      allReduceIn(w, c, ncclFloat32, ncclSum, count, false, true);
    }
    // Deregistered (the RankWindow is gone): new buffers in no window.
    checkAllReduce(gEmu, c, ncclFloat32, ncclSum, count, true, windowCount, false);
  });
  setenv("CHORUS_DEVICE_WINDOWS", "0", 1);
  chorus::paramsReload();
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    RankWindow w(c, 100000 * 4 + 1);
    allReduceIn(w, c, ncclFloat32, ncclSum, 100000, true, false);
  });
}

// Windows in host memory (a communicator without a GPU runtime's device memory) register but change no path.
TEST_F(WindowCollectives, HostMemoryWindowsRegisterWithoutEffect) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    std::vector<int32_t> buf(100000, c.rank + 1);
    ncclWindow_t win = nullptr;
    ASSERT_EQ(ncclCommWindowRegister(c.comm, buf.data(), buf.size() * 4, &win, NCCL_WIN_DEFAULT), ncclSuccess)
        << ncclGetLastError(c.comm);
    int before = windowCount();
    ASSERT_EQ(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclSum, c.comm, nullptr), ncclSuccess)
        << ncclGetLastError(c.comm);
    EXPECT_EQ(windowCount(), before);
    for (size_t i = 0; i < buf.size(); i += 997) ASSERT_EQ(buf[i], 3) << i;
    EXPECT_EQ(ncclCommWindowDeregister(c.comm, win), ncclSuccess);
  });
}

// Captured once (a window call and an inbox call), replayed three times with new inputs: the counters move on in
// device memory and every replay's result is right.
TEST_F(WindowCollectives, GraphReplays) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    const size_t small = 3000, big = 100000;
    RankWindow w(c, big * 4 + 1);
    int32_t* a = reinterpret_cast<int32_t*>(w.mem().out);  // the small call's buffer (in the window, but one-shot)
    int32_t* b = reinterpret_cast<int32_t*>(w.mem().in);
    cudaStream_t s = rankStream(c);
    int before = windowCount();
    ASSERT_EQ(gEmu.beginCapture(s, EmuRuntime::Capture::kGlobal), ncclSuccess) << gEmu.lastError();
    ASSERT_EQ(ncclAllReduce(b, b, big, ncclInt32, ncclSum, c.comm, s), ncclSuccess) << ncclGetLastError(c.comm);
    ASSERT_EQ(ncclAllReduce(a, a, small, ncclInt32, ncclSum, c.comm, s), ncclSuccess) << ncclGetLastError(c.comm);
    std::shared_ptr<EmuGraph> g;
    ASSERT_EQ(gEmu.endCapture(s, &g), ncclSuccess) << gEmu.lastError();
    EXPECT_EQ(windowCount(), before + 1);
    for (int rep = 0; rep < 3; rep++) {
      for (size_t i = 0; i < small; i++) a[i] = int32_t(c.rank * 7 + rep + i);
      for (size_t i = 0; i < big; i++) b[i] = int32_t(c.rank * 5 - rep + i);
      ASSERT_EQ(gEmu.graphLaunch(g, s), ncclSuccess) << gEmu.lastError();
      ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess);
      ASSERT_EQ(commAsyncError(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      for (size_t i = 0; i < small; i++) ASSERT_EQ(a[i], int32_t(7 + 2 * (rep + i))) << rep << " " << i;
      for (size_t i = 0; i < big; i++) ASSERT_EQ(b[i], int32_t(5 + 2 * (i - rep))) << rep << " " << i;
    }
  });
}

// One process driving two GPUs (ncclCommInitAll, one thread): the windows are registered in one group, each rank
// reaches the other's by pointer, and an allreduce and an allgather run on them (`onWindows`); with GPUs that may not
// map each other's memory (NCCL_P2P_DISABLE=1) they take their usual path, with the same results.
void oneProcessTwoGpus(bool onWindows) {
  setenv("CHORUS_TIMEOUT_S", "20", 1);
  chorus::paramsReload();
  gEmu.devices = 2;
  const int n = 2;
  const size_t count = 100000;
  ncclComm_t comms[n];
  int devs[n] = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms, n, devs), ncclSuccess);
  std::vector<std::unique_ptr<DevBuf>> bufs;
  ncclWindow_t wins[n] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(gEmu.setDevice(r), ncclSuccess);
    bufs.push_back(std::make_unique<DevBuf>(gEmu, (n + 1) * count * sizeof(int32_t)));
    ASSERT_EQ(ncclCommWindowRegister(comms[r], bufs[r]->as<void>(), (n + 1) * count * 4, &wins[r], NCCL_WIN_DEFAULT),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  auto stream = [](int r) { return reinterpret_cast<cudaStream_t>(uintptr_t(r + 1)); };
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) bufs[r]->as<int32_t>()[i] = int32_t(r * 3 + i);
  int before = gEmu.windowLaunches;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    int32_t* b = bufs[r]->as<int32_t>();
    ASSERT_EQ(ncclAllReduce(b, b, count, ncclInt32, ncclSum, comms[r], stream(r)), ncclSuccess);
    ASSERT_EQ(ncclAllGather(b, b + count, count, ncclInt32, comms[r], stream(r)), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(gEmu.windowLaunches.load(), before + (onWindows ? 2 * n : 0));
  for (int r = 0; r < n; r++) ASSERT_EQ(gEmu.streamSynchronize(stream(r)), ncclSuccess);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(commAsyncError(comms[r]), ncclSuccess) << ncclGetLastError(comms[r]);
    const int32_t* b = bufs[r]->as<int32_t>();
    for (size_t i = 0; i < count; i++) ASSERT_EQ(b[i], int32_t(3 + 2 * i)) << r << " " << i;
    for (size_t i = 0; i < n * count; i++) ASSERT_EQ(b[count + i], int32_t(3 + 2 * (i % count))) << r << " " << i;
  }
  for (int r = 0; r < n; r++) EXPECT_EQ(ncclCommWindowDeregister(comms[r], wins[r]), ncclSuccess);
  bufs.clear();
  for (int r = 0; r < n; r++) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  gEmu.setDevice(0);
  gEmu.devices = 1;
}

TEST_F(WindowCollectives, OneProcessTwoGpus) { oneProcessTwoGpus(true); }

TEST_F(WindowCollectives, OneProcessTwoGpusWithoutP2pTakeTheUsualPath) {
  setenv("NCCL_P2P_DISABLE", "1", 1);
  oneProcessTwoGpus(false);
}

// Rank 1's buffer is in no window (it takes the inbox path) while rank 0's is: rank 0's kernel refuses rank 1's call,
// saying why. Rank 1's fails too, naming rank 0: its block 0 refuses rank 0's call, or one of its other blocks,
// waiting for flags rank 0's one-block launch never raises, stops on rank 0's poison first.
TEST_F(WindowCollectives, PeerOutsideAnyWindowIsNamed) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    const size_t count = 50000;  // 200 KB: two-shot through inboxes, or on windows
    RankWindow w(c, count * 4 + 1);
    DevBuf plain(gEmu, count * 4);
    float* b = c.rank == 0 ? reinterpret_cast<float*>(w.mem().in) : plain.as<float>();
    ASSERT_EQ(ncclAllReduce(b, b, count, ncclFloat32, ncclSum, c.comm, rankStream(c)), ncclSuccess);
    gEmu.streamSynchronize(rankStream(c));
    EXPECT_EQ(commAsyncError(c.comm), ncclInvalidUsage);
    std::string text = ncclGetLastError(c.comm);
    if (c.rank == 0) {
      EXPECT_NE(text.find("has its buffers in registered windows but rank 1's matching call has none there"),
                std::string::npos)
          << text;
    } else {
      EXPECT_NE(text.find("rank 0"), std::string::npos) << text;
    }
  });
}

// Both ranks' buffers are in windows, but in different ones: both kernels refuse, naming the windows.
TEST_F(WindowCollectives, PeerInAnotherWindowIsNamed) {
  runRanks(2, Driver::kProcesses, [](RankCtx& c) {
    const size_t count = 50000;
    RankWindow first(c, count * 4 + 1), second(c, count * 4 + 1);  // windows #1 and #2
    float* b = reinterpret_cast<float*>((c.rank == 0 ? first : second).mem().in);
    ASSERT_EQ(ncclAllReduce(b, b, count, ncclFloat32, ncclSum, c.comm, rankStream(c)), ncclSuccess);
    gEmu.streamSynchronize(rankStream(c));
    EXPECT_EQ(commAsyncError(c.comm), ncclInvalidUsage);
    std::string text = ncclGetLastError(c.comm);
    const std::string theirs = c.rank == 0 ? "window #2" : "window #1", mine = c.rank == 0 ? "window #1" : "window #2";
    EXPECT_NE(text.find("rank " + std::to_string(1 - c.rank) + "'s input buffer is in " + theirs +
                        " but this rank's is in " + mine),
              std::string::npos)
        << text;
  });
}

// Rank 1's process exits instead of calling: rank 0's kernel stops once the watchdog sees it, naming rank 1, long
// before CHORUS_TIMEOUT_S.
TEST_F(WindowCollectives, DeadPeerIsNamed) {
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    setenv("CHORUS_TIMEOUT_S", "60", 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    const size_t count = 50000;
    {
      RankCtx c{rank, 2, comm};
      RankWindow w(c, count * 4 + 1);
      float* b = reinterpret_cast<float*>(w.mem().in);
      cudaStream_t s = rankStream(c);
      int before = windowCount();
      if (ncclAllReduce(b, b, count, ncclFloat32, ncclSum, comm, s) != ncclSuccess) return 11;
      if (gEmu.streamSynchronize(s) != ncclSuccess || commAsyncError(comm) != ncclSuccess) return 12;
      if (windowCount() != before + 1) return 13;
      if (rank == 1) _exit(0);
      expectPeerDeathNamed(gEmu, comm, b, count, s, "rank 1's kernel to start");
    }
    ncclCommDestroy(comm);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

}  // namespace
}  // namespace chorus_test
