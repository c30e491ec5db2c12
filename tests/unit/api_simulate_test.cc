// ncclGroupSimulateEnd answers with the cost model (src/topo/cost_model.h) under the link costs CHORUS_COST_INTRA
// sets, and launches nothing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <vector>

#include "nccl.h"

// ncclResetDebugInit (deprecated in NCCL's header) makes chorus re-read the environment's parameters.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

class Simulate : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CHORUS_HOST_NCHANNELS", "1", 1);
    ncclResetDebugInit();
    ASSERT_EQ(ncclCommInitAll(comms_, 2, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  }
  void TearDown() override {
    for (auto c : comms_) {
      if (c != nullptr) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
    }
    unsetenv("CHORUS_COST_INTRA");
    unsetenv("CHORUS_HOST_NCHANNELS");
    ncclResetDebugInit();
  }
  // The estimate for one allreduce of `count` floats on rank 0.
  float allReduceUs(size_t count, std::vector<float>* buf) {
    buf->assign(count, 1.0f);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(buf->data(), buf->data(), count, ncclFloat, ncclSum, comms_[0], nullptr), ncclSuccess);
    EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess) << ncclGetLastError(comms_[0]);
    return sim.estimatedTime;
  }
  ncclComm_t comms_[2] = {nullptr, nullptr};
};

TEST_F(Simulate, AllReduceOnOneHostIsStepsPlusBytes) {
  setenv("CHORUS_COST_INTRA", "10,1", 1);  // 10 us a step, 1 GB/s = 1000 bytes a us
  ncclResetDebugInit();
  std::vector<float> buf;
  const size_t count = 1 << 18;  // 1 MiB: above one-shot's limit, so a ring of 2
  // A ring of 2 ranks: 3 steps with a peer (send, receive-reduce-send, receive), and each rank sends the buffer once
  // (two blocks of half).
  EXPECT_NEAR(allReduceUs(count, &buf), 3 * 10 + (count * 4) / 1000.0, 0.5);
  EXPECT_EQ(buf[0], 1.0f);  // nothing ran
  // Twice the bandwidth halves the bytes' part.
  setenv("CHORUS_COST_INTRA", "10,2", 1);
  ncclResetDebugInit();
  EXPECT_NEAR(allReduceUs(count, &buf), 3 * 10 + (count * 4) / 2000.0, 0.5);
  // A bad setting falls back to the default (5 us, 5 GB/s).
  setenv("CHORUS_COST_INTRA", "fast", 1);
  ncclResetDebugInit();
  EXPECT_NEAR(allReduceUs(count, &buf), 3 * 5 + (count * 4) / 5000.0, 0.5);
}

}  // namespace
