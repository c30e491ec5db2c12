// NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE behave as in NCCL.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "harness/ranks.h"
#include "nccl.h"

namespace {

class Logging : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/chorus-log-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    setenv("NCCL_DEBUG_FILE", (path_ + ".%p").c_str(), 1);
    file_ = path_ + "." + std::to_string(getpid());
  }
  void TearDown() override {
    unsetenv("NCCL_DEBUG");
    unsetenv("NCCL_DEBUG_SUBSYS");
    unsetenv("NCCL_DEBUG_FILE");
    ncclResetDebugInit();
    unlink(file_.c_str());
  }
  void makeAndDestroyComms() {
    ncclComm_t comms[2];
    ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
    float x = 1;
    EXPECT_EQ(ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(99), ncclSum, comms[0], nullptr),
              ncclInvalidArgument);
    for (auto c : comms) ncclCommDestroy(c);
  }
  std::string path_, file_;
};

TEST_F(Logging, InfoShowsInitWithNcclStylePrefix) {
  setenv("NCCL_DEBUG", "INFO", 1);
  ncclResetDebugInit();
  makeAndDestroyComms();
  std::string log = chorus_test::readFile(file_);
  EXPECT_NE(log.find(" chorus INFO "), std::string::npos) << log;
  EXPECT_NE(log.find("Init COMPLETE"), std::string::npos) << log;
  EXPECT_NE(log.find(" chorus WARN "), std::string::npos) << "a bad argument is warned about at INFO too";
  // host:pid:tid [dev] prefix
  std::string prefix = ":" + std::to_string(getpid()) + ":";
  EXPECT_NE(log.find(prefix), std::string::npos) << log;
}

TEST_F(Logging, SubsysMaskFiltersInfo) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "^INIT", 1);
  ncclResetDebugInit();
  makeAndDestroyComms();
  std::string log = chorus_test::readFile(file_);
  EXPECT_EQ(log.find("Init COMPLETE"), std::string::npos) << log;
  EXPECT_NE(log.find("invalid datatype"), std::string::npos) << "WARN is not filtered by subsystem";
}

TEST_F(Logging, WarnLevelHidesInfo) {
  setenv("NCCL_DEBUG", "WARN", 1);
  ncclResetDebugInit();
  makeAndDestroyComms();
  std::string log = chorus_test::readFile(file_);
  EXPECT_EQ(log.find(" chorus INFO "), std::string::npos) << log;
  EXPECT_NE(log.find("invalid datatype 99"), std::string::npos) << log;
}

TEST_F(Logging, VersionLevelPrintsTheVersionOnly) {
  setenv("NCCL_DEBUG", "VERSION", 1);
  ncclResetDebugInit();
  makeAndDestroyComms();
  std::string log = chorus_test::readFile(file_);
  EXPECT_EQ(log.find(" chorus INFO "), std::string::npos) << log;
  EXPECT_EQ(log.find(" chorus WARN "), std::string::npos) << log;
  // Printed once per process; an earlier test in this process may already have printed it.
  EXPECT_LE(std::count(log.begin(), log.end(), '\n'), 1) << log;
  if (!log.empty()) {
    EXPECT_NE(log.find("(NCCL 2.28.9 API"), std::string::npos) << log;
  }
}

TEST_F(Logging, UnsetPrintsNothing) {
  ncclResetDebugInit();
  makeAndDestroyComms();
  EXPECT_EQ(chorus_test::readFile(file_), "");
}

}  // namespace
