// Choosing the net between hosts (transports/remote.cc, docs/net.md): NCCL_NET, NCCL_NET_PLUGIN and the default
// order, a net named but not runnable, and ranks that chose differently. Every rank is a forked process on its own
// NCCL_HOSTID "host", so the transport between hosts is used without NCCL_SHM_DISABLE.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "topo/affinity.h"
#include "transport/thread_names.h"
#include "transport/transport_env.h"
#include "transports/net/net.h"
#include "transports/remote.h"

namespace chorus_test {
namespace {

constexpr int kTimeoutS = 10;

// Exit codes of a rank.
enum : int { kOk = 0, kInitSucceeded = 10, kWrongCode = 11, kWrongText = 12, kInitFailed = 13, kWrongProxy = 14 };

// Runs n ranks, each on its own host, with env(rank) applied before init (and config.netName `netName`, when not
// null); returns each rank's exit status.
std::vector<int> runHosts(int n, const std::function<void(int)>& env, const std::function<int(int, ncclComm_t)>& use,
                          const std::function<int(int, ncclResult_t, const std::string&)>& onFail,
                          const char* netName = nullptr) {
  return forkRanks(
      n,
      [&](int rank, const ncclUniqueId& id) {
        setenv("NCCL_HOSTID", ("net-host-" + std::to_string(rank)).c_str(), 1);
        env(rank);
        chorus::paramsReload();
        ncclComm_t comm = nullptr;
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.netName = netName;
        ncclResult_t res = ncclCommInitRankConfig(&comm, n, id, rank, &config);
        if (res != ncclSuccess) return onFail(rank, res, ncclGetLastError(nullptr));
        int code = use(rank, comm);
        ncclCommDestroy(comm);
        return code;
      },
      3.0 * kTimeoutS);
}

// One allreduce, checked, then which proxy thread runs.
int allreduceVia(const char* proxyThread, int n, ncclComm_t comm) {
  std::vector<float> in(70001, 1.0f), out(70001, 0.0f);
  if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) {
    fprintf(stderr, "allreduce failed: %s\n", ncclGetLastError(comm));
    return kInitFailed;
  }
  for (float v : out)
    if (v != static_cast<float>(n)) return kWrongText;
  return countThreadsNamed(proxyThread) >= 1 ? kOk : kWrongProxy;
}

/// The paths of the files in `dir`.
std::vector<std::string> listDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
  closedir(d);
  return out;
}

int unexpectedFailure(int rank, ncclResult_t res, const std::string& text) {
  fprintf(stderr, "rank %d: init failed with %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
  return kInitFailed;
}

void expectAllOk(const std::vector<int>& status) {
  for (size_t r = 0; r < status.size(); r++)
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == kOk)
        << "rank " << r << " " << describeStatus(status[r]);
}

// Runs 2 hosts, each with env(rank) applied, whose init must fail with ncclInvalidUsage and a text that `named`
// accepts.
void expectInitRefused(const std::function<void(int)>& env, const std::function<bool(int, const std::string&)>& named) {
  expectAllOk(runHosts(
      2, env, [](int, ncclComm_t) { return static_cast<int>(kInitSucceeded); },
      [&](int rank, ncclResult_t res, const std::string& text) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
        if (res != ncclInvalidUsage) return static_cast<int>(kWrongCode);
        return named(rank, text) ? static_cast<int>(kOk) : static_cast<int>(kWrongText);
      }));
}

class NetSelect : public testing::Test {
 protected:
  void SetUp() override {
    env_.set("CHORUS_TIMEOUT_S", std::to_string(kTimeoutS).c_str());
    env_.set("NCCL_NET", "");
    env_.set("NCCL_NET_PLUGIN", "none");
  }
  ScopedEnv env_;
};

TEST_F(NetSelect, PluginWithDevicesIsTheDefault) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  expectAllOk(runHosts(
      2, [](int) {}, [](int, ncclComm_t c) { return allreduceVia("chorus-net-Chor", 2, c); }, unexpectedFailure));
}

TEST_F(NetSelect, MissingPluginFallsBackToSockets) {
  env_.set("NCCL_NET_PLUGIN", "/nonexistent/libnccl-net-nothing.so");
  env_.set("NCCL_IB_DISABLE", "1");
  expectAllOk(runHosts(
      2, [](int) {}, [](int, ncclComm_t c) { return allreduceVia("chorus-net-Sock", 2, c); }, unexpectedFailure));
}

/// One allreduce over the socket net; kOk when every proxy and helper thread runs on `want` (Cpus_allowed_list form,
/// as chorus::formatCpuList writes it) and the rank's own thread still on `mine`.
int proxyThreadsOn(ncclComm_t comm, const std::string& want, const std::string& mine) {
  if (int code = allreduceVia("chorus-net-Sock", 2, comm); code != kOk) return code;
  std::vector<std::string> proxies = cpusOfThreadsNamed("chorus-net-Sock"),
                           helpers = cpusOfThreadsNamed("chorus-socknet");
  int code = proxies.size() == 1 && helpers.size() >= 2 ? kOk : kWrongProxy;
  for (const auto* list : {&proxies, &helpers})
    for (const std::string& cpus : *list)
      if (cpus != want) code = kWrongProxy;
  cpu_set_t now;
  if (sched_getaffinity(0, sizeof(now), &now) != 0 || chorus::formatCpuList(now) != mine) code = kWrongProxy;
  if (code != kOk) {
    fprintf(stderr, "want CPUs %s: proxies on", want.c_str());
    for (const std::string& c : proxies) fprintf(stderr, " [%s]", c.c_str());
    fprintf(stderr, ", helpers on");
    for (const std::string& c : helpers) fprintf(stderr, " [%s]", c.c_str());
    fprintf(stderr, "; the rank's thread on %s (was %s)\n", chorus::formatCpuList(now).c_str(), mine.c_str());
  }
  return code;
}

// NCCL_PROXY_CPUSET: each rank's socket net proxy and the helper threads it starts (two a connection here) run on
// exactly the CPUs it names, a list as NCCL writes it; the rank's own thread stays where it was. A list that does not
// parse is ignored: the proxy then stays on the CPUs of the thread that created the communicator (the loopback
// interface has no CPUs near it for CHORUS_PROXY_BIND to move to).
TEST_F(NetSelect, ProxyCpusetPinsTheProxyAndItsHelpers) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "needs two CPUs to tell a pinned proxy from one left alone";
  int last = CPU_SETSIZE - 1;
  while (!CPU_ISSET(last, &all)) last--;
  static std::string mine, one;
  mine = chorus::formatCpuList(all);
  one = std::to_string(last);
  env_.set("NCCL_NET", "Socket");
  env_.set("NCCL_SOCKET_IFNAME", "=lo");
  env_.set("NCCL_SOCKET_NTHREADS", "2");
  env_.set("NCCL_NSOCKS_PERTHREAD", "1");
  for (const char* setting : {"one", "garbage"}) {
    SCOPED_TRACE(setting);
    const bool pinned = setting[0] == 'o';
    env_.set("NCCL_PROXY_CPUSET", pinned ? one.c_str() : "not-a-cpu");
    static bool sPinned;
    sPinned = pinned;
    expectAllOk(runHosts(
        2, [](int) {}, [](int, ncclComm_t c) { return proxyThreadsOn(c, sPinned ? one : mine, mine); },
        unexpectedFailure));
  }
}

// Runs 2 ranks over net `net` with NCCL_DEBUG=INFO for NET, each calling `use`; returns every line both logged.
std::vector<std::string> netInfoLines(ScopedEnv& env, const char* net,
                                      const std::function<int(int, ncclComm_t)>& use) {
  char dir[] = "/tmp/chorus-netlog-XXXXXX";
  if (mkdtemp(dir) == nullptr) return {};
  env.set("NCCL_NET", net);
  env.set("NCCL_SOCKET_IFNAME", "=lo");
  env.set("NCCL_DEBUG", "INFO");
  env.set("NCCL_DEBUG_SUBSYS", "NET");
  env.set("NCCL_DEBUG_FILE", (std::string(dir) + "/log.%p").c_str());
  expectAllOk(runHosts(2, [](int) {}, use, unexpectedFailure));
  std::vector<std::string> lines;
  for (const std::string& path : listDir(dir)) {
    FILE* f = fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char line[1024];
    while (fgets(line, sizeof(line), f) != nullptr) lines.push_back(line);
    fclose(f);
    unlink(path.c_str());
  }
  rmdir(dir);
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l;
  return text;
}

// NCCL_DEBUG=INFO names the net, each device (its interface, speed and PCI path) and why the net was chosen.
TEST_F(NetSelect, InfoNamesTheNetItsDeviceAndWhy) {
  std::vector<std::string> lines =
      netInfoLines(env_, "Socket", [](int, ncclComm_t c) { return allreduceVia("chorus-net-Sock", 2, c); });
  int found = 0;
  for (const std::string& line : lines)
    if (line.find("net Socket between hosts, 1 device(s): lo ") != std::string::npos &&
        line.find("Mbit/s") != std::string::npos && line.find("(NCCL_NET=Socket)") != std::string::npos)
      found++;
  EXPECT_EQ(found, 2) << "each rank logs its net, device and reason once; the logs:\n" << joined(lines);
}

// CHORUS_NET_RANK_PROGRESS: with 1 (the default) a rank's thread hands what it publishes to the socket or UCX net
// itself, and each rank's proxy says at shutdown how often that moved data; with 0 it never does. A plugin net is
// driven by its proxy alone whatever the setting. Every run computes right.
int smallAllreduces(int, ncclComm_t comm) {
  std::vector<float> in(8), out(8);
  for (int i = 0; i < 200; i++) {
    for (size_t k = 0; k < in.size(); k++) in[k] = static_cast<float>(i + k);
    if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      return kInitFailed;
    for (size_t k = 0; k < out.size(); k++)
      if (out[k] != 2.0f * static_cast<float>(i + k)) return kWrongText;
  }
  return kOk;
}

/// The number after `said` in each log line that holds it and `tag` (the proxies' shutdown lines: one a rank).
std::vector<unsigned long long> numbersAfter(const std::vector<std::string>& lines, const std::string& said,
                                             const std::string& tag = "") {
  std::vector<unsigned long long> numbers;
  for (const std::string& line : lines) {
    size_t at = line.find(said);
    if (at != std::string::npos && line.find(tag) != std::string::npos)
      numbers.push_back(std::stoull(line.substr(at + said.size())));
  }
  return numbers;
}

/// The two ranks' counts from the proxies' shutdown lines naming `setting` (CHORUS_NET_RANK_PROGRESS as applied).
std::vector<unsigned long long> rankMoves(const std::vector<std::string>& lines, int setting) {
  return numbersAfter(lines, "moved data itself ", "(CHORUS_NET_RANK_PROGRESS=" + std::to_string(setting) + ")");
}

TEST_F(NetSelect, RankThreadsHandTheirSlotsToTheSocketAndUcxNets) {
  std::vector<const char*> nets = {"Socket"};
  if (chorus::ucxNet() != nullptr) nets.push_back("UCX");
  env_.set("UCX_TLS", "tcp");
  for (const char* net : nets) {
    for (int setting : {1, 0}) {
      env_.set("CHORUS_NET_RANK_PROGRESS", std::to_string(setting).c_str());
      std::vector<std::string> lines = netInfoLines(env_, net, smallAllreduces);
      std::vector<unsigned long long> moves = rankMoves(lines, setting);
      ASSERT_EQ(moves.size(), 2u) << net << ": each rank's proxy logs once at shutdown; the logs:\n" << joined(lines);
      if (setting == 1) {
        // 200 calls publish hundreds of slots each way. A publish finds the proxy thread in a pass (then it is the
        // proxy's) more often on the rank that answers than on the one that starts a call, so only the sum is sure.
        EXPECT_GT(moves[0] + moves[1], 0u) << net << ":\n" << joined(lines);
      } else {
        EXPECT_EQ(moves[0] + moves[1], 0u) << net << ":\n" << joined(lines);
      }
    }
  }
}

// CHORUS_NET_RANK_DRIVE_MAX_BYTES: a call no larger than it (64 KB by default) has the rank's thread drive the socket
// or UCX net's connections from its waits while the proxy thread sleeps; larger calls are the proxy's, and so is every
// call with 0. Each rank's proxy says at shutdown through how many calls the rank's thread drove it: here the 200 small
// ones, and not the 3 of 280 KB among them. Every call computes right.
int smallAndLargeAllreduces(int rank, ncclComm_t comm) {
  std::vector<float> in(70001), out(70001);
  for (int i = 0; i < 3; i++) {
    if (int code = smallAllreduces(rank, comm); code != kOk) return code;
    for (size_t k = 0; k < in.size(); k++) in[k] = static_cast<float>(k % 1000 + i);
    if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      return kInitFailed;
    for (size_t k = 0; k < out.size(); k++)
      if (out[k] != 2.0f * static_cast<float>(k % 1000 + i)) return kWrongText;
  }
  return kOk;
}

std::vector<unsigned long long> drivenCalls(const std::vector<std::string>& lines) {
  return numbersAfter(lines, "drove the net through ");
}

TEST_F(NetSelect, RankThreadsDriveTheNetThroughSmallCalls) {
  std::vector<const char*> nets = {"Socket"};
  if (chorus::ucxNet() != nullptr) nets.push_back("UCX");
  env_.set("UCX_TLS", "tcp");
  for (const char* net : nets) {
    for (const char* setting : {static_cast<const char*>(nullptr), "0"}) {
      if (setting == nullptr) {
        env_.unset("CHORUS_NET_RANK_DRIVE_MAX_BYTES");
      } else {
        env_.set("CHORUS_NET_RANK_DRIVE_MAX_BYTES", setting);
      }
      std::vector<std::string> lines = netInfoLines(env_, net, smallAndLargeAllreduces);
      std::vector<unsigned long long> calls = drivenCalls(lines);
      ASSERT_EQ(calls.size(), 2u) << net << ": each rank's proxy logs once at shutdown; the logs:\n" << joined(lines);
      const unsigned long long expected = setting == nullptr ? 3 * 200 : 0;
      EXPECT_EQ(calls[0], expected) << net << ", CHORUS_NET_RANK_DRIVE_MAX_BYTES=" << (setting ? setting : "unset");
      EXPECT_EQ(calls[1], expected) << net << ", CHORUS_NET_RANK_DRIVE_MAX_BYTES=" << (setting ? setting : "unset");
    }
  }
}

TEST_F(NetSelect, PluginNetsAreDrivenByTheirProxyAlone) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  env_.set("CHORUS_NET_RANK_PROGRESS", "1");
  std::vector<std::string> lines = netInfoLines(env_, "ChorusTestNet", smallAllreduces);
  std::vector<unsigned long long> moves = rankMoves(lines, 0);
  ASSERT_EQ(moves.size(), 2u) << "each rank's proxy logs once, without rank progress; the logs:\n" << joined(lines);
  EXPECT_EQ(moves[0] + moves[1], 0u);
  std::vector<unsigned long long> calls = drivenCalls(lines);
  ASSERT_EQ(calls.size(), 2u) << joined(lines);
  EXPECT_EQ(calls[0] + calls[1], 0u) << "small calls over a plugin net are its proxy's too";
}

// CHORUS_NET_SLOT_TRAILER: over a plugin net a host channel's slot goes as one message, its header after its payload
// (1), or as two, the header first (0, and by default over a plugin). Both compute right with 4 KB slots, most of them
// full (the header then lies wholly in the slot's gap), and each connection's INFO line says which framing it uses.
int fullSlotAllreduces(int rank, ncclComm_t comm) {
  for (size_t count : {size_t(1), size_t(1024), size_t(70001)}) {  // 4 B, one full 4 KB slot, 69 slots
    std::vector<float> in(count), out(count, 0.0f);
    for (size_t k = 0; k < count; k++) in[k] = static_cast<float>((k % 1000) * (rank + 1));
    if (ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      return kInitFailed;
    for (size_t k = 0; k < count; k++)
      if (out[k] != static_cast<float>((k % 1000) * 3)) return kWrongText;
  }
  return kOk;
}

TEST_F(NetSelect, PluginSlotsGoAsOneMessageOrTwo) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  env_.set("CHORUS_FIFO_SLOT_BYTES", "4096");
  for (const char* setting : {"1", "0", "-1"}) {
    env_.set("CHORUS_NET_SLOT_TRAILER", setting);
    std::vector<std::string> lines = netInfoLines(env_, "ChorusTestNet", fullSlotAllreduces);
    int connected = 0, oneMessage = 0;
    for (const std::string& line : lines) {
      if (line.find(": connected") == std::string::npos) continue;
      connected++;
      oneMessage += line.find("(a slot as one message, its header after its payload)") != std::string::npos;
    }
    EXPECT_GE(connected, 4) << "a send and a receive connection on each rank; the logs:\n" << joined(lines);
    EXPECT_EQ(oneMessage, setting[0] == '1' ? connected : 0) << "CHORUS_NET_SLOT_TRAILER=" << setting;
  }
}

// Ranks that frame slots differently could not read each other's: over a plugin net both fail at init naming the
// setting. (Over the socket and UCX nets, which frame slots themselves, it does not matter and is not checked.)
TEST_F(NetSelect, RanksThatFrameSlotsDifferentlyFailNamingTheSetting) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  env_.set("NCCL_NET", "ChorusTestNet");
  expectInitRefused([](int rank) { setenv("CHORUS_NET_SLOT_TRAILER", rank == 0 ? "0" : "1", 1); },
                    [](int rank, const std::string& text) {
                      const std::string other = "but rank " + std::to_string(1 - rank) + " with " +
                                                std::to_string(1 - rank);
                      return text.find("CHORUS_NET_SLOT_TRAILER=" + std::to_string(rank)) != std::string::npos &&
                             text.find(other) != std::string::npos;
                    });
  // The socket net does not care.
  env_.set("NCCL_NET", "Socket");
  env_.set("NCCL_NET_PLUGIN", "none");
  expectAllOk(runHosts(
      2, [](int rank) { setenv("CHORUS_NET_SLOT_TRAILER", rank == 0 ? "0" : "1", 1); },
      [](int, ncclComm_t c) { return allreduceVia("chorus-net-Sock", 2, c); }, unexpectedFailure));
}

// A net call that fails (as an error completion does) ends both hosts' calls with ncclRemoteError, and the error of the
// rank whose call failed carries what the plugin said of it (its WARN: a plugin tells why only through its log, and
// NCCL keeps the last WARN as the last error).
TEST_F(NetSelect, AFailedPluginCallIsReportedInThePluginsWords) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  env_.set("NCCL_NET", "ChorusTestNet");
  expectAllOk(runHosts(
      2, [](int rank) { setenv("CHORUS_TEST_NET_FAIL", rank == 0 ? "test:40" : "", 1); },
      [](int rank, ncclComm_t comm) {
        std::vector<float> in(70001, 1.0f), out(70001);
        for (int i = 0; i < 100; i++) {
          ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr);
          if (res == ncclSuccess) continue;
          const std::string text = ncclGetLastError(comm);
          fprintf(stderr, "rank %d: allreduce %d: %s: %s\n", rank, i, ncclGetErrorString(res), text.c_str());
          if (res != ncclRemoteError) return static_cast<int>(kWrongCode);
          if (rank == 1) return static_cast<int>(kOk);  // its own net may or may not have seen the connection end
          const bool said = text.find("this rank's net said: rank 0: net ChorusTestNet dev 0 channel 0") !=
                                std::string::npos &&
                            text.find("ChorusTestNet: test: call 40 failed the connection (CHORUS_TEST_NET_FAIL="
                                      "test:40)") != std::string::npos;
          return said ? static_cast<int>(kOk) : static_cast<int>(kWrongText);
        }
        return static_cast<int>(kInitSucceeded);  // never failed
      },
      unexpectedFailure));
}

TEST_F(NetSelect, UnknownNetIsRefusedNamingTheNets) {
  env_.set("NCCL_NET", "Carrier-Pigeon");
  std::vector<int> status = runHosts(
      2, [](int) {}, [](int, ncclComm_t) { return static_cast<int>(kInitSucceeded); },
      [](int rank, ncclResult_t res, const std::string& text) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
        if (res != ncclInvalidUsage) return static_cast<int>(kWrongCode);
        bool named = text.find("NCCL_NET=Carrier-Pigeon") != std::string::npos &&
                     text.find("Socket, IB and UCX") != std::string::npos;
        return named ? static_cast<int>(kOk) : static_cast<int>(kWrongText);
      });
  expectAllOk(status);
}

// A communicator's config.netName chooses its net as NCCL_NET does (over the plugin the default would take), a name
// of no net is refused naming the setting, and NCCL_NET, when set, wins over it, as in NCCL.
TEST_F(NetSelect, ConfigNetNameChoosesTheNetUnlessNcclNetIsSet) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  expectAllOk(runHosts(
      2, [](int) {}, [](int, ncclComm_t c) { return allreduceVia("chorus-net-Sock", 2, c); }, unexpectedFailure,
      "Socket"));
  expectAllOk(runHosts(
      2, [](int) {}, [](int, ncclComm_t) { return static_cast<int>(kInitSucceeded); },
      [](int rank, ncclResult_t res, const std::string& text) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
        if (res != ncclInvalidUsage) return static_cast<int>(kWrongCode);
        return text.find("config.netName=Carrier-Pigeon names no net") != std::string::npos
                   ? static_cast<int>(kOk)
                   : static_cast<int>(kWrongText);
      },
      "Carrier-Pigeon"));
  env_.set("NCCL_NET", "Socket");
  expectAllOk(runHosts(
      2, [](int) {}, [](int, ncclComm_t c) { return allreduceVia("chorus-net-Sock", 2, c); }, unexpectedFailure,
      "ChorusTestNet"));
}

// Ranks that choose different nets (here rank 0 names Socket in its config while rank 1 takes the plugin the default
// prefers) cannot connect: init fails on both, each naming the other's choice and the settings to align.
TEST_F(NetSelect, RanksThatChooseDifferentNetsAreToldSo) {
  if (kTestNetPlugin[0] == '\0') GTEST_SKIP() << "the test net plugin was not built";
  env_.set("NCCL_NET_PLUGIN", kTestNetPlugin);
  std::vector<int> status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", ("net-host-" + std::to_string(rank)).c_str(), 1);
    chorus::paramsReload();
    ncclComm_t comm = nullptr;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.netName = rank == 0 ? "Socket" : nullptr;
    ncclResult_t res = ncclCommInitRankConfig(&comm, 2, id, rank, &config);
    if (res == ncclSuccess) return static_cast<int>(kInitSucceeded);
    const std::string text = ncclGetLastError(nullptr);
    fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
    if (res != ncclInvalidUsage) return static_cast<int>(kWrongCode);
    const std::string want = rank == 0 ? "chose the net Socket between hosts but rank 1 chose ChorusTestNet"
                                       : "chose the net ChorusTestNet between hosts but rank 0 chose Socket";
    return text.find(want) != std::string::npos && text.find("config.netName the same way") != std::string::npos
               ? static_cast<int>(kOk)
               : static_cast<int>(kWrongText);
  });
  expectAllOk(status);
}

// On a host without an InfiniBand port, NCCL_NET=IB fails at init, at once, saying why.
TEST_F(NetSelect, IbWithoutDeviceFailsFast) {
  if (chorus::ibNet() != nullptr) {
    int ndev = 0;
    void* ctx = nullptr;
    if (chorus::ibNet()->init(&ctx, 0, nullptr, nullptr, nullptr) == ncclSuccess &&
        chorus::ibNet()->devices(&ndev) == ncclSuccess && ndev > 0)
      GTEST_SKIP() << "this host has an active InfiniBand/RoCE port";
  }
  env_.set("NCCL_NET", "IB");
  std::vector<int> status = runHosts(
      2, [](int) {}, [](int, ncclComm_t) { return static_cast<int>(kInitSucceeded); },
      [](int rank, ncclResult_t res, const std::string& text) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
        if (res != ncclSystemError && res != ncclInvalidUsage) return static_cast<int>(kWrongCode);
        // The reason is the net's own (no device, no RDMA kernel modules, no libibverbs), not a bare error name.
        bool said = text.find("NCCL_NET=IB") != std::string::npos && text.find("NET/IB") != std::string::npos;
        return said ? static_cast<int>(kOk) : static_cast<int>(kWrongText);
      });
  expectAllOk(status);
}

// Rank 0 asks for UCX and rank 1 for sockets: both fail at init naming the other's choice, instead of hanging.
TEST_F(NetSelect, RanksThatChoseDifferentNetsFailNamingBoth) {
  if (chorus::ucxNet() == nullptr) GTEST_SKIP() << "chorus was built without UCX";
  expectInitRefused([](int rank) { setenv("NCCL_NET", rank == 0 ? "UCX" : "Socket", 1); },
                    [](int, const std::string& text) {
                      return text.find("UCX") != std::string::npos && text.find("Socket") != std::string::npos &&
                             text.find("NCCL_NET") != std::string::npos;
                    });
}

// Which receives into GPU memory are flushed, as NCCL 2.28's ncclTopoNeedFlush: all where the net device asks
// (forceFlush) or NCCL_NET_FORCE_FLUSH=1; else below compute capability 9.0 (or unknown), and from 9.0 only where
// the host is not x86 (chorus cannot tell Grace's C2C from other Arm hosts).
TEST(NetGpuDirect, FlushesAsNcclDecides) {
  unsetenv("NCCL_NET_FORCE_FLUSH");
  chorus::paramsReload();
  auto needs = [](bool forceFlush, int cc, const char* arch, std::string* why) {
    chorus::RemoteDeviceInfo info{NCCL_PTR_CUDA, 0, "mlx5_0"};
    info.forceFlush = forceFlush;
    chorus::GdrRuntimeInfo rt;
    rt.computeCap = cc;
    rt.cpuArch = arch;
    return chorus::netNeedsFlush(info, rt, why);
  };
  std::string why;
  EXPECT_FALSE(needs(false, 90, "x86_64", &why));
  EXPECT_EQ(why, "compute capability 9.0 or more on an x86 host");
  EXPECT_FALSE(needs(false, 100, "x86_64", &why));
  EXPECT_TRUE(needs(false, 80, "x86_64", &why));
  EXPECT_EQ(why, "compute capability below 9.0");
  EXPECT_TRUE(needs(false, 0, "x86_64", &why));
  EXPECT_EQ(why, "compute capability unknown");
  EXPECT_TRUE(needs(false, 90, "aarch64", &why));
  EXPECT_EQ(why, "compute capability 9.0 or more, but the host is aarch64, which may reach its GPU over C2C");
  EXPECT_TRUE(needs(true, 90, "x86_64", &why));
  EXPECT_EQ(why, "the net device asks for it");
  setenv("NCCL_NET_FORCE_FLUSH", "1", 1);
  chorus::paramsReload();
  EXPECT_TRUE(needs(false, 90, "x86_64", &why));
  EXPECT_EQ(why, "NCCL_NET_FORCE_FLUSH=1");
  unsetenv("NCCL_NET_FORCE_FLUSH");
  chorus::paramsReload();
}

// NCCL_NET_GDR_LEVEL's names and numbers, and each condition of GPUDirect RDMA for the device path's connections.
TEST(NetGpuDirect, LevelsAndConditionsAsNccl) {
  int level = 0;
  for (auto [text, want] : std::vector<std::pair<const char*, int>>{
           {"LOC", -1}, {"pix", 0}, {"PXB", 1}, {"PHB", 2}, {"SYS", 3}, {"0", -1}, {"1", 0}, {"2", 1}, {"3", 2},
           {"4", 3}, {"5", 3}, {"NVL", -1}, {"PXN", 1}}) {
    EXPECT_TRUE(chorus::parseGdrLevel(text, &level)) << text;
    EXPECT_EQ(level, want) << text;
  }
  for (const char* bad : {"", "6", "-1", "near", "2x"}) EXPECT_FALSE(chorus::parseGdrLevel(bad, &level)) << bad;

  chorus::RemoteDeviceInfo pix{NCCL_PTR_HOST | NCCL_PTR_CUDA, 0, "mlx5_0"};
  std::string why;
  auto use = [&](const chorus::RemoteDeviceInfo& info, bool isSend, bool runtime = true, int cc = 90,
                 const char* arch = "") {
    chorus::paramsReload();
    chorus::GdrRuntimeInfo rt;
    rt.ok = rt.paths.peerMemory = runtime;
    rt.why = "no driver";
    rt.computeCap = cc;
    rt.cpuArch = arch;
    return chorus::useNetGdr(info, isSend, rt, &why) == chorus::NetGdr::kPeerMemory;
  };
  unsetenv("NCCL_NET_GDR_LEVEL");
  unsetenv("NCCL_NET_GDR_READ");
  EXPECT_TRUE(use(pix, false));
  EXPECT_EQ(why, "net device mlx5_0, PIX from the GPU");
  EXPECT_TRUE(use(pix, true));
  EXPECT_FALSE(use(pix, true, true, 70));  // reads: from compute capability 8.0, as NCCL
  EXPECT_NE(why.find("compute capability"), std::string::npos) << why;
  EXPECT_TRUE(use(pix, false, true, 70));
  EXPECT_FALSE(use(pix, false, false));
  EXPECT_EQ(why, "the GPU runtime: no driver");
  // A net that cannot flush takes receives into GPU memory only where they need no flush (netNeedsFlush).
  EXPECT_FALSE(use({NCCL_PTR_CUDA, 0, "mlx5_0", false}, false));
  EXPECT_EQ(why,
            "the net does not flush receives into GPU memory, and they need one (compute capability 9.0 or more, but "
            "the CPU architecture is unknown, which may reach its GPU over C2C)");
  EXPECT_TRUE(use({NCCL_PTR_CUDA, 0, "mlx5_0", false}, false, true, 90, "x86_64"));
  EXPECT_FALSE(use({NCCL_PTR_CUDA, 0, "mlx5_0", false}, false, true, 80, "x86_64"));
  EXPECT_NE(why.find("(compute capability below 9.0)"), std::string::npos) << why;
  EXPECT_TRUE(use({NCCL_PTR_CUDA, 0, "mlx5_0", false}, true));  // a send needs no flush
  EXPECT_FALSE(use({NCCL_PTR_HOST, 0, "eth0"}, false));
  EXPECT_EQ(why, "net device eth0 does not register GPU memory");
  EXPECT_FALSE(use({NCCL_PTR_CUDA, -1, "eth0"}, false));
  EXPECT_NE(why.find("does not place"), std::string::npos) << why;
  chorus::RemoteDeviceInfo phb{NCCL_PTR_CUDA, 2, "mlx5_4"};
  EXPECT_FALSE(use(phb, false));  // the default level is PXB
  EXPECT_EQ(why, "net device mlx5_4 is PHB from the GPU, past NCCL_NET_GDR_LEVEL PXB");
  setenv("NCCL_NET_GDR_LEVEL", "PHB", 1);
  EXPECT_TRUE(use(phb, false));
  setenv("NCCL_NET_GDR_LEVEL", "LOC", 1);
  EXPECT_FALSE(use(pix, false));
  EXPECT_EQ(why, "NCCL_NET_GDR_LEVEL=LOC");
  unsetenv("NCCL_NET_GDR_LEVEL");
  setenv("NCCL_NET_GDR_READ", "0", 1);
  EXPECT_FALSE(use(pix, true));
  EXPECT_EQ(why, "NCCL_NET_GDR_READ=0");
  EXPECT_TRUE(use(pix, false));
  setenv("NCCL_NET_GDR_READ", "1", 1);
  EXPECT_TRUE(use(pix, true, true, 70));
  unsetenv("NCCL_NET_GDR_READ");
  chorus::paramsReload();
}

// How GPU memory is registered: through dma-buf where the runtime exports one, the net device takes it
// (NCCL_PTR_DMABUF) and NCCL_DMABUF_ENABLE is not 0, as NCCL prefers it; else through a peer-memory module; with
// neither, not at all, saying which parts are missing.
TEST(NetGpuDirect, DmaBufFirstThenPeerMemory) {
  unsetenv("NCCL_NET_GDR_LEVEL");
  unsetenv("NCCL_NET_GDR_READ");
  unsetenv("NCCL_DMABUF_ENABLE");
  const chorus::RemoteDeviceInfo both{NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0, "mlx5_0"};
  const chorus::RemoteDeviceInfo cudaOnly{NCCL_PTR_HOST | NCCL_PTR_CUDA, 0, "mlx5_0"};
  std::string why;
  auto way = [&](const chorus::RemoteDeviceInfo& info, bool peerMemory, bool dmaBuf) {
    chorus::paramsReload();
    chorus::GdrRuntimeInfo rt;
    rt.ok = peerMemory || dmaBuf;
    rt.paths.peerMemory = peerMemory;
    rt.paths.dmaBuf = dmaBuf;
    rt.why = "neither";
    rt.computeCap = 90;
    return chorus::useNetGdr(info, false, rt, &why);
  };
  using chorus::NetGdr;
  EXPECT_EQ(way(both, true, true), NetGdr::kDmaBuf);
  EXPECT_EQ(why, "net device mlx5_0, PIX from the GPU, dma-buf");
  EXPECT_EQ(way(both, false, true), NetGdr::kDmaBuf);
  EXPECT_EQ(way(both, true, false), NetGdr::kPeerMemory);
  EXPECT_EQ(why, "net device mlx5_0, PIX from the GPU");
  EXPECT_EQ(way(cudaOnly, true, true), NetGdr::kPeerMemory);
  EXPECT_EQ(way(cudaOnly, false, true), NetGdr::kNone);
  EXPECT_EQ(why,
            "no peer-memory module (nvidia_peermem, or amdkfd's on ROCm) is loaded, and net device mlx5_0 does not take "
            "dma-buf registrations");
  EXPECT_EQ(way(both, false, false), NetGdr::kNone);
  EXPECT_EQ(why, "the GPU runtime: neither");
  setenv("NCCL_DMABUF_ENABLE", "0", 1);
  EXPECT_EQ(way(both, true, true), NetGdr::kPeerMemory);
  EXPECT_EQ(way(both, false, true), NetGdr::kNone);
  EXPECT_EQ(why, "no peer-memory module (nvidia_peermem, or amdkfd's on ROCm) is loaded, and NCCL_DMABUF_ENABLE=0");
  unsetenv("NCCL_DMABUF_ENABLE");
  chorus::paramsReload();
}

}  // namespace
}  // namespace chorus_test
