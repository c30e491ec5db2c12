// NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE and the timestamps (NCCL_DEBUG_TIMESTAMP_*) behave as in NCCL.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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
    unsetenv("NCCL_DEBUG_TIMESTAMP_LEVELS");
    unsetenv("NCCL_DEBUG_TIMESTAMP_FORMAT");
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

/// The log's lines that hold `what`.
std::vector<std::string> linesWith(const std::string& log, const std::string& what) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos) out.push_back(line);
  return out;
}

// As in NCCL: by default WARN lines start with "[YYYY-MM-DD HH:MM:SS] " and INFO lines with the host; the levels and
// the strftime format (with %Nf for a fraction of the second, and _ for a space) can be set; an empty format, or
// ^ALL, stamps nothing.
TEST_F(Logging, TimestampsStartWarnLinesAsInNccl) {
  const std::string host = ":" + std::to_string(getpid()) + ":";
  const std::regex dateTime("^\\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\] [^ ]+" + host + ".*");
  struct Case {
    const char* levels;
    const char* format;
    std::string warnStarts, infoStarts;  // regexes for a WARN line and an INFO line
  };
  const std::string plain = "^[^ \\[]+" + host + ".*";
  const std::vector<Case> cases = {
      {nullptr, nullptr, "date", plain},
      {"INFO,WARN", nullptr, "date", "date"},
      {"^WARN", nullptr, plain, "date"},
      {"ALL", "%H:%M:%3f_", "^[0-9]{2}:[0-9]{2}:[0-9]{3} [^ ]+" + host + ".*", "^[0-9]{2}:[0-9]{2}:[0-9]{3} .*"},
      {"ALL", "%%3f|%s.%6f ", "^%3f\\|[0-9]+\\.[0-9]{6} .*", "^%3f\\|[0-9]+\\.[0-9]{6} .*"},
      {"^ALL", nullptr, plain, plain},
      {"ALL", "", plain, plain},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("levels ") + (c.levels ? c.levels : "(unset)") + ", format " +
                 (c.format ? "\"" + std::string(c.format) + "\"" : "(unset)"));
    setenv("NCCL_DEBUG", "INFO", 1);
    if (c.levels)
      setenv("NCCL_DEBUG_TIMESTAMP_LEVELS", c.levels, 1);
    else
      unsetenv("NCCL_DEBUG_TIMESTAMP_LEVELS");
    if (c.format)
      setenv("NCCL_DEBUG_TIMESTAMP_FORMAT", c.format, 1);
    else
      unsetenv("NCCL_DEBUG_TIMESTAMP_FORMAT");
    ncclResetDebugInit();
    makeAndDestroyComms();
    const std::string log = chorus_test::readFile(file_);
    const std::vector<std::string> warns = linesWith(log, " chorus WARN "), infos = linesWith(log, " chorus INFO ");
    ASSERT_FALSE(warns.empty()) << log;
    ASSERT_FALSE(infos.empty()) << log;
    const std::regex warnRe = c.warnStarts == "date" ? dateTime : std::regex(c.warnStarts);
    const std::regex infoRe = c.infoStarts == "date" ? dateTime : std::regex(c.infoStarts);
    for (const std::string& l : warns) EXPECT_TRUE(std::regex_match(l, warnRe)) << l;
    for (const std::string& l : infos) EXPECT_TRUE(std::regex_match(l, infoRe)) << l;
    unlink(file_.c_str());
  }
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

// NCCL_DEBUG_SUBSYS=TUNING: each communicator names the algorithm it runs for a size once, with what decided it.
TEST_F(Logging, TuningNamesEachSizesAlgorithmOnce) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
  ncclComm_t comms[2];
  auto allReduce = [&comms](size_t count) {
    std::vector<float> a(count, 1.0f), b(count, 1.0f);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(a.data(), a.data(), count, ncclFloat32, ncclSum, comms[0], nullptr), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(b.data(), b.data(), count, ncclFloat32, ncclSum, comms[1], nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  };
  auto count = [](const std::string& log, const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) n++;
    return n;
  };
  setenv("NCCL_ALGO", "Ring", 1);
  ncclResetDebugInit();
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  allReduce(1000);
  allReduce(1000);
  allReduce(10);
  for (auto c : comms) ncclCommDestroy(c);
  std::string log = chorus_test::readFile(file_);
  EXPECT_EQ(count(log, "tuner: AllReduce of 4000 bytes a rank on 2 ranks: Ring, "), 2u) << log;
  EXPECT_EQ(count(log, "tuner: AllReduce of 40 bytes a rank on 2 ranks: Ring, "), 2u) << log;
  EXPECT_EQ(count(log, "(NCCL_ALGO/NCCL_PROTO, in place)"), 4u) << log;
  EXPECT_EQ(log.find("Init COMPLETE"), std::string::npos) << "another subsystem's INFO";
  // Unforced, the thresholds decide.
  unsetenv("NCCL_ALGO");
  ncclResetDebugInit();
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  allReduce(1000);
  for (auto c : comms) ncclCommDestroy(c);
  log = chorus_test::readFile(file_);
  EXPECT_EQ(count(log, "(thresholds, in place)"), 2u) << log;
}

TEST_F(Logging, UnsetPrintsNothing) {
  ncclResetDebugInit();
  makeAndDestroyComms();
  EXPECT_EQ(chorus_test::readFile(file_), "");
}

}  // namespace
