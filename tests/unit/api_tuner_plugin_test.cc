// NCCL_TUNER_PLUGIN: chorus loads a tuner plugin of NCCL 2.28's ABI (the suite's own, tests/plugins/test_tuner.c,
// built as ncclTunerPlugin_v5 and _v2), hands it the cost model's times for the ring and the tree, and runs what
// it picks; NCCL_ALGO still forces; a plugin that changes nothing, fails, or is missing leaves chorus's choice.
// Every scenario runs in two forked rank processes, as the plugin is loaded once per process.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit: re-reads the parameters

namespace chorus_test {
namespace {

using Env = std::vector<std::pair<const char*, const char*>>;

// Runs an allreduce of 1 MiB of floats on 2 process ranks with `env` set, checks the sum, and returns rank 0's log
// (INFO for INIT, COLL and TUNING, with the schedules it runs).
std::string runWith(const Env& env) {
  const std::string log = "/tmp/chorus_tuner_plugin_" + std::to_string(getpid()) + ".log";
  auto child = [&](int rank, const ncclUniqueId& id) {
    for (auto& [k, v] : env) setenv(k, v, 1);
    setenv("CHORUS_HOST_NCHANNELS", "2", 1);
    if (rank == 0) {
      logInfoTo(log, "INIT,COLL,TUNING");
      setenv("CHORUS_PRINT_SCHEDULE", "1", 1);
    }
    ncclResetDebugInit();  // the parent's earlier tests may have read the parameters before this child set them
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    const size_t count = 1 << 18;
    std::vector<float> buf(count, 1.0f + rank);
    if (ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return 11;
    for (float x : buf)
      if (x != 3.0f) return 12;
    ncclCommDestroy(comm);
    return 0;
  };
  return forkRanksForLog(2, child, log, 60);
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(TunerPlugin, V5PicksTheTree) {
  std::string log = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5}, {"CHORUS_TEST_TUNER_ALGO", "tree"}});
  EXPECT_TRUE(has(log, "tuner plugin: loaded")) << log;
  EXPECT_TRUE(has(log, "(chorus-test, v5)")) << log;
  EXPECT_TRUE(has(log, "test tuner: init 2 ranks 1 nodes")) << log;
  // AllReduce is NCCL's function 4, nBytes the buffer; the model's times fill the ring's and the tree's entries.
  EXPECT_TRUE(has(log, "test tuner: coll 4 bytes 1048576 ring ")) << log;
  EXPECT_FALSE(has(log, "ring -1.0")) << log;
  EXPECT_FALSE(has(log, "tree -1.0")) << log;
  EXPECT_TRUE(has(log, "AllReduce Tree nranks=2")) << log;
  EXPECT_FALSE(has(log, "AllReduce Ring nranks=2")) << log;
}

TEST(TunerPlugin, ATableLeftAloneKeepsChorussChoice) {
  std::string log = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5}});
  EXPECT_TRUE(has(log, "test tuner: coll 4")) << log;
  EXPECT_TRUE(has(log, "AllReduce Ring nranks=2")) << log;
  EXPECT_FALSE(has(log, "AllReduce Tree")) << log;
}

TEST(TunerPlugin, FewerChannels) {
  // Two channels are configured; the plugin asks for one.
  std::string two = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5}});
  EXPECT_TRUE(has(two, "AllReduce Ring nranks=2 rank=0 channel=1")) << two;
  std::string one = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5}, {"CHORUS_TEST_TUNER_CHANNELS", "1"}});
  EXPECT_TRUE(has(one, "AllReduce Ring nranks=2 rank=0 channel=0")) << one;
  EXPECT_FALSE(has(one, "AllReduce Ring nranks=2 rank=0 channel=1")) << one;
}

TEST(TunerPlugin, V2IsAdapted) {
  std::string log = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V2}, {"CHORUS_TEST_TUNER_ALGO", "tree"}});
  EXPECT_TRUE(has(log, "(chorus-test-v2, v2)")) << log;
  EXPECT_TRUE(has(log, "test tuner v2: coll 4 bytes 1048576")) << log;
  EXPECT_TRUE(has(log, "AllReduce Tree nranks=2")) << log;
}

TEST(TunerPlugin, NcclAlgoStillForces) {
  std::string log =
      runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5}, {"CHORUS_TEST_TUNER_ALGO", "tree"}, {"NCCL_ALGO", "Ring"}});
  EXPECT_TRUE(has(log, "AllReduce Ring nranks=2")) << log;
  EXPECT_FALSE(has(log, "test tuner: coll")) << "a forced choice does not ask the plugin\n" << log;
}

TEST(TunerPlugin, FailuresAndAbsenceFallBack) {
  std::string init = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5},
                              {"CHORUS_TEST_TUNER_ALGO", "tree"},
                              {"CHORUS_TEST_TUNER_FAIL", "init"}});
  EXPECT_TRUE(has(init, "init failed")) << init;
  EXPECT_TRUE(has(init, "AllReduce Ring nranks=2")) << init;
  std::string coll = runWith({{"NCCL_TUNER_PLUGIN", CHORUS_TEST_TUNER_V5},
                              {"CHORUS_TEST_TUNER_ALGO", "tree"},
                              {"CHORUS_TEST_TUNER_FAIL", "coll"}});
  EXPECT_TRUE(has(coll, "getCollInfo failed")) << coll;
  EXPECT_TRUE(has(coll, "AllReduce Ring nranks=2")) << coll;
  std::string missing = runWith({{"NCCL_TUNER_PLUGIN", "/nonexistent/libnccl-tuner-x.so"}});
  EXPECT_TRUE(has(missing, "not loaded")) << missing;
  EXPECT_TRUE(has(missing, "AllReduce Ring nranks=2")) << missing;
  // A plain name is looked up as libnccl-tuner-NAME.so too, and both tries are named.
  std::string name = runWith({{"NCCL_TUNER_PLUGIN", "nosuchtuner"}});
  EXPECT_TRUE(has(name, "libnccl-tuner-nosuchtuner.so")) << name;
}

}  // namespace
}  // namespace chorus_test
