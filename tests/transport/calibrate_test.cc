// CHORUS_CALIBRATE on a real communicator: four processes on two NCCL_HOSTID hosts (shared memory within a host, the
// socket net across). The first init measures both link classes and rank 0 caches them; every rank's
// ncclGroupSimulateEnd then gives the same estimate (the figures reached every rank). A second init reads the cache
// instead of measuring, CHORUS_CALIBRATE=2 measures again, and a CHORUS_COST_INTER setting wins over its class.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

std::string tmpPath(const char* what) { return "/tmp/chorus-calib-" + std::to_string(getpid()) + "-" + what; }

// One rank: init, one simulated allreduce of 1 MB, its estimate written to `est` + rank.
int simulateRank(int rank, int nranks, const ncclUniqueId& id, const char* mode, const std::string& cache,
                 const std::string& log, const std::string& est, const char* costInter) {
  setenv("NCCL_HOSTID", ("calib-host-" + std::to_string(rank / 2)).c_str(), 1);
  setenv("CHORUS_CALIBRATE", mode, 1);
  setenv("CHORUS_CALIBRATE_FILE", cache.c_str(), 1);
  if (costInter != nullptr) setenv("CHORUS_COST_INTER", costInter, 1);
  if (rank == 0) logInfoTo(log, "INIT");
  chorus::paramsReload();
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(nullptr));
    return 10;
  }
  std::vector<float> buf(1 << 18, 1.0f);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ncclGroupStart();
  ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  if (ncclGroupSimulateEnd(&sim) != ncclSuccess) return 11;
  FILE* f = fopen((est + std::to_string(rank)).c_str(), "w");
  if (f == nullptr) return 12;
  fprintf(f, "%a", sim.estimatedTime);
  fclose(f);
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 13;
}

class Calibrate : public ::testing::Test {
 protected:
  void TearDown() override {
    unlink(cache_.c_str());
    for (int r = 0; r < 4; r++) unlink((est_ + std::to_string(r)).c_str());
  }
  // Runs the four ranks; returns rank 0's log, and checks that every rank's estimate is the same.
  std::string run(const char* mode, const char* costInter = nullptr) {
    std::string text = forkRanksForLog(
        4,
        [&](int rank, const ncclUniqueId& id) {
          return simulateRank(rank, 4, id, mode, cache_, log_, est_, costInter);
        },
        log_);
    const std::string first = readFile(est_ + "0");
    EXPECT_FALSE(first.empty());
    for (int r = 1; r < 4; r++) EXPECT_EQ(readFile(est_ + std::to_string(r)), first) << "rank " << r;
    return text;
  }
  int cacheLines() {
    std::string text = readFile(cache_);
    int lines = 0;
    for (char c : text) lines += c == '\n';
    return lines;
  }
  std::string cache_ = tmpPath("links"), log_ = tmpPath("log"), est_ = tmpPath("est");
};

TEST_F(Calibrate, MeasuresOnceThenReadsTheCache) {
  unlink(cache_.c_str());
  std::string text = run("1");
  EXPECT_NE(text.find("cost model links: within a host"), std::string::npos) << text;
  EXPECT_NE(text.find("(calibrated); between hosts"), std::string::npos) << text;
  EXPECT_NE(text.find("GB/s (calibrated)\n"), std::string::npos) << text;
  ASSERT_EQ(cacheLines(), 1) << readFile(cache_);
  EXPECT_EQ(readFile(cache_).rfind("chorus-links 1 ", 0), 0u) << readFile(cache_);

  // The same cluster again: both classes from rank 0's file, nothing measured or written.
  text = run("1");
  EXPECT_NE(text.find("(calibrated, cached in " + cache_ + "); between hosts"), std::string::npos) << text;
  EXPECT_NE(text.find("GB/s (calibrated, cached in " + cache_ + ")\n"), std::string::npos) << text;
  EXPECT_EQ(cacheLines(), 1) << readFile(cache_);

  // 2: measured again, and cached again for the same cluster (the later line is the one read).
  text = run("2");
  EXPECT_NE(text.find("GB/s (calibrated)\n"), std::string::npos) << text;
  ASSERT_EQ(cacheLines(), 2) << readFile(cache_);
  const std::string lines = readFile(cache_);
  EXPECT_EQ(lines.substr(0, 32), lines.substr(lines.find('\n') + 1, 32)) << lines;
}

// Ranks that disagree on CHORUS_CALIBRATE would not all take part in the measurement: every init fails instead,
// naming the setting.
TEST_F(Calibrate, RanksMustAgree) {
  std::vector<int> status = forkRanks(4, [&](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", ("calib-host-" + std::to_string(rank / 2)).c_str(), 1);
    setenv("CHORUS_CALIBRATE", rank == 3 ? "0" : "1", 1);
    setenv("CHORUS_CALIBRATE_FILE", cache_.c_str(), 1);
    chorus::paramsReload();
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 4, id, rank) == ncclSuccess) return 1;
    const char* why = ncclGetLastError(nullptr);
    if (strstr(why, "CHORUS_CALIBRATE=") == nullptr || strstr(why, "every rank must use the same value") == nullptr) {
      fprintf(stderr, "rank %d: %s\n", rank, why);
      return 2;
    }
    return 0;
  });
  for (int r = 0; r < 4; r++) EXPECT_EQ(status[r], 0) << "rank " << r << ": " << describeStatus(status[r]);
  EXPECT_EQ(cacheLines(), 0);
}

TEST_F(Calibrate, ASettingWinsOverItsClass) {
  unlink(cache_.c_str());
  std::string text = run("1", "7,0.5");
  EXPECT_NE(text.find("(calibrated); between hosts 7 us, 0.5 GB/s (CHORUS_COST_INTER)"), std::string::npos) << text;
  // Only the class within a host was measured and cached.
  const std::string line = readFile(cache_);
  ASSERT_EQ(cacheLines(), 1) << line;
  EXPECT_NE(line.find(" - "), std::string::npos) << line;
}

}  // namespace
}  // namespace chorus_test
