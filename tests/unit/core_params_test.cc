// Parameter values that are lists (src/core/params.h: splitList), and NCCL's configuration files.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/params.h"

namespace chorus {
namespace {

using List = std::vector<std::string>;

TEST(ParamList, SplitsOnCommasTrimsAndDropsEmptyItems) {
  EXPECT_EQ(splitList("a,b,c"), (List{"a", "b", "c"}));
  EXPECT_EQ(splitList(" a ,\tb\t, c d "), (List{"a", "b", "c d"}));
  EXPECT_EQ(splitList("a,,b,"), (List{"a", "b"}));
  EXPECT_EQ(splitList(",  ,\t,"), List{});
  EXPECT_EQ(splitList(""), List{});
  EXPECT_EQ(splitList("mlx5_0:1"), (List{"mlx5_0:1"}));
}

std::string envOr(const char* name, const char* none) {
  const char* v = getenv(name);
  return v != nullptr ? v : none;
}

// As NCCL's: NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf; each VAR=VALUE line not starting with '#' sets
// VAR unless the environment or an earlier file has it; the value is the rest of the line after the first '='.
TEST(ParamConf, FilesSetWhatTheEnvironmentDoesNotHave) {
  const std::string dir = "/tmp/chorus-conf-" + std::to_string(getpid());
  ASSERT_EQ(system(("mkdir -p " + dir + "/home").c_str()), 0);
  const std::string conf = dir + "/user.conf", etc = dir + "/etc.conf";
  std::ofstream(conf) << "# CHORUS_TEST_CONF_C=commented out\nCHORUS_TEST_CONF_A=from conf\nCHORUS_TEST_CONF_B=x=y\n"
                         "not a setting\nCHORUS_TEST_CONF_D=from conf\n";
  std::ofstream(dir + "/home/.nccl.conf") << "CHORUS_TEST_CONF_H=from home\n";
  std::ofstream(etc) << "CHORUS_TEST_CONF_A=from etc\nCHORUS_TEST_CONF_C=from etc";  // no newline at the end
  const char* vars[] = {"CHORUS_TEST_CONF_A", "CHORUS_TEST_CONF_B", "CHORUS_TEST_CONF_C", "CHORUS_TEST_CONF_D",
                        "CHORUS_TEST_CONF_H"};
  for (const char* v : vars) unsetenv(v);
  setenv("CHORUS_TEST_CONF_D", "from env", 1);
  loadNcclConfFiles(conf.c_str(), (dir + "/home").c_str(), etc.c_str());
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_A", "-"), "from conf") << "the first file wins";
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_B", "-"), "x=y");
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_C", "-"), "from etc") << "a commented line sets nothing";
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_D", "-"), "from env") << "the environment wins";
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_H", "-"), "-") << "NCCL_CONF_FILE replaces ~/.nccl.conf";
  // A parameter reads what a file set.
  IntParam fromFile{"CHORUS_TEST_CONF_INT", 5, "a parameter of this test", "test"};
  std::ofstream(conf) << "CHORUS_TEST_CONF_INT=42\n";
  loadNcclConfFiles(conf.c_str(), nullptr, etc.c_str());
  paramsReload();
  EXPECT_EQ(fromFile.get(), 42);
  // Without NCCL_CONF_FILE (unset or empty), the home directory's file.
  for (const char* v : vars) unsetenv(v);
  loadNcclConfFiles("", (dir + "/home").c_str(), etc.c_str());
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_H", "-"), "from home");
  EXPECT_EQ(envOr("CHORUS_TEST_CONF_A", "-"), "from etc");
  // Missing files are no error.
  loadNcclConfFiles((dir + "/none").c_str(), (dir + "/none").c_str(), (dir + "/none").c_str());
  for (const char* v : vars) unsetenv(v);
  unsetenv("CHORUS_TEST_CONF_INT");
  paramsReload();
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

// NCCL_* variables that no parameter reads are listed; those that one reads, and the perf tools' NCCL_TESTS_*, are not.
TEST(ParamConf, UnreadNcclVariablesAreListed) {
  setenv("NCCL_CHORUS_TEST_UNREAD", "1", 1);
  setenv("NCCL_TESTS_CHORUS_TEST", "1", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  const std::vector<std::string> unread = unreadNcclVariables();
  auto listed = [&](const char* name) { return std::find(unread.begin(), unread.end(), name) != unread.end(); };
  EXPECT_TRUE(listed("NCCL_CHORUS_TEST_UNREAD"));
  EXPECT_FALSE(listed("NCCL_TESTS_CHORUS_TEST"));
  EXPECT_FALSE(listed("NCCL_SOCKET_IFNAME"));
  EXPECT_TRUE(std::is_sorted(unread.begin(), unread.end()));
  for (const char* v : {"NCCL_CHORUS_TEST_UNREAD", "NCCL_TESTS_CHORUS_TEST", "NCCL_SOCKET_IFNAME"}) unsetenv(v);
}

#ifdef CHORUS_TEST_ENV_TOOL
// chorus-env lists what the library reads: a value from NCCL_CONF_FILE, one the environment plugin gives, and the
// environment's over a file's.
TEST(ParamConf, ChorusEnvListsWhatTheLibraryReads) {
  const std::string conf = "/tmp/chorus-conf-tool-" + std::to_string(getpid());
  std::ofstream(conf) << "CHORUS_TIMEOUT_S=77\nNCCL_HOSTID=from-file\n";
  const std::string cmd = "env -u CHORUS_TIMEOUT_S NCCL_CONF_FILE=" + conf +
                          " NCCL_HOSTID=from-env NCCL_ENV_PLUGIN=" + CHORUS_TEST_ENV_PLUGIN +
                          " TESTENV_NCCL_SOCKET_IFNAME=from-plugin " + CHORUS_TEST_ENV_TOOL + " 2>/dev/null";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << out;
  }
  auto line = [&](const std::string& name) {
    const size_t at = out.find("\n" + name + " ");
    return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line("CHORUS_TIMEOUT_S").find(" 77 "), std::string::npos) << out;
  EXPECT_NE(line("NCCL_HOSTID").find(" from-env "), std::string::npos) << out;
  EXPECT_NE(line("NCCL_SOCKET_IFNAME").find(" from-plugin "), std::string::npos) << out;
  std::remove(conf.c_str());
}
#endif

#ifdef CHORUS_TEST_ALL_REDUCE_PERF
// The output of a perf tool's run of one small allreduce with NCCL_DEBUG unset, then the settings `env`.
std::string perfToolRun(const std::string& env) {
  const std::string cmd = "env -u NCCL_DEBUG " + env + " " + CHORUS_TEST_ALL_REDUCE_PERF + " -b 8 -e 8 -n 1 -w 0 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << out;
  }
  return out;
}

// The library reads NCCL_CONF_FILE before its first parameter: a perf tool run with NCCL_DEBUG=VERSION in that file
// prints chorus's version line; not with NCCL_DEBUG=NONE in the environment, nor with a file that does not exist.
TEST(ParamConf, TheLibraryReadsNcclConfFile) {
  const std::string conf = "/tmp/chorus-conf-run-" + std::to_string(getpid());
  std::ofstream(conf) << "NCCL_DEBUG=VERSION\n";
  auto run = [&](const std::string& env) { return perfToolRun("NCCL_CONF_FILE=" + conf + " " + env); };
  const std::string withFile = run(""), withEnv = run("NCCL_DEBUG=NONE"),
                    noFile = run("NCCL_CONF_FILE=" + conf + ".none");
  EXPECT_NE(withFile.find("chorus VERSION version"), std::string::npos) << withFile;
  EXPECT_EQ(withEnv.find("chorus VERSION version"), std::string::npos) << withEnv;
  EXPECT_NE(withEnv.find("Avg bus bandwidth"), std::string::npos) << withEnv;
  EXPECT_EQ(noFile.find("chorus VERSION version"), std::string::npos) << noFile;
  std::remove(conf.c_str());
}

// NCCL_ENV_PLUGIN, as NCCL 2.28 loads it: the plugin (tests/plugins/test_env.c, where TESTENV_<NAME> stands for NAME)
// answers every variable, is given NCCL's version at init and finalized at exit; "none", a library that does not
// load and a plugin whose init fails leave the environment itself, and the init's log says which.
TEST(ParamConf, AnEnvPluginAnswersForTheEnvironment) {
  const std::string plugin = std::string("NCCL_ENV_PLUGIN=") + CHORUS_TEST_ENV_PLUGIN;
  const std::string loaded = perfToolRun(plugin + " TESTENV_NCCL_DEBUG=VERSION");
  EXPECT_NE(loaded.find("chorus VERSION version"), std::string::npos) << loaded;
  EXPECT_NE(loaded.find("test env plugin: init 2.28.9"), std::string::npos) << loaded;
  EXPECT_NE(loaded.find("test env plugin: finalize"), std::string::npos) << loaded;

  const std::string none = perfToolRun("NCCL_ENV_PLUGIN=none TESTENV_NCCL_DEBUG=VERSION");
  EXPECT_EQ(none.find("chorus VERSION version"), std::string::npos) << none;

  const std::string info = plugin + " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV";
  const std::string logged = perfToolRun(info);
  EXPECT_NE(logged.find("env plugin: loaded "), std::string::npos) << logged;
  EXPECT_NE(logged.find("(ChorusTestEnv, v1)"), std::string::npos) << logged;

  const std::string missing = perfToolRun("NCCL_ENV_PLUGIN=/nonexistent/libnccl-env.so NCCL_DEBUG=INFO");
  EXPECT_NE(missing.find("env plugin: /nonexistent/libnccl-env.so not loaded ("), std::string::npos) << missing;

  const std::string failed = perfToolRun(info + " TESTENV_FAIL_INIT=1 TESTENV_NCCL_DEBUG=NONE");
  EXPECT_NE(failed.find("init failed (ncclResult_t 3)"), std::string::npos) << failed;
  EXPECT_EQ(failed.find("test env plugin: finalize"), std::string::npos) << failed;
}

// At NCCL_DEBUG=INFO the first init names the NCCL_* variables chorus does not read, from the environment and from
// NCCL's configuration files alike.
TEST(ParamConf, TheFirstInitNamesUnreadNcclVariables) {
  const std::string conf = "/tmp/chorus-conf-unread-" + std::to_string(getpid());
  std::ofstream(conf) << "NCCL_PXN_DISABLE=1\n";
  const std::string out =
      perfToolRun("NCCL_CONF_FILE=" + conf + " NCCL_DEBUG=INFO NCCL_LL128_BUFFSIZE=8388608 NCCL_TESTS_SPLIT=AND1");
  EXPECT_NE(
      out.find("chorus INFO environment: NCCL_LL128_BUFFSIZE, NCCL_PXN_DISABLE set, but chorus does not read them"),
      std::string::npos)
      << out;
  std::remove(conf.c_str());
}
#endif

}  // namespace
}  // namespace chorus
