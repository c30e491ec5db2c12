// Host buffers between hosts whose net offers several devices run a channel a device (docs/net.md): two processes
// on two NCCL_HOSTID hosts over the test net plugin with two devices each. From CHORUS_NIC_CHANNELS_MIN_BYTES a
// collective runs two channels, below it one, and ncclGroupSimulateEnd's estimate must follow the same rule: it
// equals the estimate of a communicator set to one channel (CHORUS_HOST_NCHANNELS=1) below the floor, and that of
// one set to two above it, where two channels over two NICs take about half the time of one.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

#ifdef CHORUS_TEST_NET_V11

// Rank 0's estimate for one allreduce of `bytes` on `comm` (nothing runs).
float estimateUs(ncclComm_t comm, size_t bytes) {
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess) << ncclGetLastError(comm);
  EXPECT_EQ(buf[0], 1.0f) << "a simulated call ran";
  return sim.estimatedTime;
}

// A communicator split from `parent` with CHORUS_HOST_NCHANNELS=`channels` (read at its init only).
ncclComm_t splitWithChannels(ncclComm_t parent, int rank, const char* channels) {
  setenv("CHORUS_HOST_NCHANNELS", channels, 1);
  chorus::paramsReload();
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommSplit(parent, 0, rank, &c, nullptr), ncclSuccess) << ncclGetLastError(parent);
  unsetenv("CHORUS_HOST_NCHANNELS");
  chorus::paramsReload();
  return c;
}

TEST(NicChannels, SimulatedEstimateFollowsTheChannelsARunUses) {
  const std::vector<int> status = forkRanks(
      2,
      [](int rank, const ncclUniqueId& id) {
        setenv("NCCL_HOSTID", rank == 0 ? "nic-host-a" : "nic-host-b", 1);
        setenv("NCCL_NET_PLUGIN", CHORUS_TEST_NET_V11, 1);
        setenv("NCCL_NET", "ChorusTestNet", 1);
        setenv("CHORUS_TEST_NET_DEVICES", "nic0,nic1", 1);
        setenv("CHORUS_COST_INTER", "20,0.1", 1);  // a slow link: the bytes' part is most of every estimate
        setenv("NCCL_ALGO", "Ring", 1);            // a tree runs two channels at any size
        ncclResetDebugInit();
        chorus::paramsReload();
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
        ncclComm_t one = splitWithChannels(comm, rank, "1");
        ncclComm_t two = splitWithChannels(comm, rank, "2");
        if (one == nullptr || two == nullptr) return 11;
        const size_t small = 64 << 10, large = 4 << 20;  // below and above the 256 KB floor
        EXPECT_FLOAT_EQ(estimateUs(comm, small), estimateUs(one, small));
        EXPECT_LT(estimateUs(two, small), estimateUs(one, small)) << "two channels on two NICs";
        EXPECT_FLOAT_EQ(estimateUs(comm, large), estimateUs(two, large));
        EXPECT_LT(estimateUs(comm, large), 0.6 * estimateUs(one, large)) << "two NICs should take about half";
        // And a run: the result is exact at both sizes.
        for (size_t bytes : {small, large}) {
          std::vector<float> in(bytes / sizeof(float), float(rank + 1)), out(in.size(), 0.0f);
          EXPECT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
          for (size_t i = 0; i < out.size(); i += 997) EXPECT_EQ(out[i], 3.0f) << bytes << " " << i;
        }
        for (ncclComm_t c : {two, one, comm}) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
        return ::testing::Test::HasFailure() ? 1 : 0;
      },
      60);
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

#endif  // CHORUS_TEST_NET_V11

}  // namespace
}  // namespace chorus_test
