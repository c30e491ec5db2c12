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

namespace {

// The estimate includes the cost model's pipeline term under the communicator's own FIFO geometry: a ring broadcast
// over 3 ranks is a chain of two links, so its last slot arrives one slot time after the busiest rank's bytes.
TEST(SimulatePipeline, ABroadcastChainAddsOneSlot) {
  setenv("CHORUS_HOST_NCHANNELS", "1", 1);
  setenv("CHORUS_FIFO_SLOTS", "8", 1);
  setenv("CHORUS_FIFO_SLOT_BYTES", "65536", 1);
  setenv("CHORUS_COST_INTRA", "10,1", 1);  // 10 us a step, 1000 bytes a us
  setenv("NCCL_ALGO", "Ring", 1);
  ncclResetDebugInit();
  ncclComm_t comms[3] = {nullptr, nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 3, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  const size_t count = 4 * 65536 / 4;  // four slots of floats
  std::vector<float> buf(count, 1.0f);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(buf.data(), buf.data(), count, ncclFloat, 0, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess) << ncclGetLastError(comms[0]);
  // Three steps on the critical path (send, receive-copy-send, receive); rank 1 takes and passes on the buffer; the
  // chain's fill: one slot.
  EXPECT_NEAR(sim.estimatedTime, 3 * 10 + count * 4 / 1000.0 + 65536 / 1000.0, 0.5);
  for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  for (const char* v : {"CHORUS_HOST_NCHANNELS", "CHORUS_FIFO_SLOTS", "CHORUS_FIFO_SLOT_BYTES", "CHORUS_COST_INTRA",
                        "NCCL_ALGO"})
    unsetenv(v);
  ncclResetDebugInit();
}

}  // namespace
