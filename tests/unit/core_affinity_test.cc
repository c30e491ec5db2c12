// CHORUS_PROXY_BIND's parts (src/topo/affinity.h): CPU lists, the CPUs near the NICs a net names on the shipped DGX
// H100-like node, and binding a thread within its affinity.
#include <gtest/gtest.h>
#include <pthread.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "harness/source_dir.h"
#include "topo/affinity.h"

namespace chorus {
namespace {

using chorus_test::sourceDir;

TEST(Affinity, CpuListsRoundTrip) {
  cpu_set_t s;
  ASSERT_TRUE(parseCpuList("0-3,8,10-11", &s));
  EXPECT_EQ(CPU_COUNT(&s), 7);
  EXPECT_EQ(formatCpuList(s), "0-3,8,10-11");
  ASSERT_TRUE(parseCpuList("5", &s));
  EXPECT_EQ(formatCpuList(s), "5");
  for (const char* bad : {"", "a", "3-1", "1,", "1-", "-1", "0-99999", "1;2"})
    EXPECT_FALSE(parseCpuList(bad, &s)) << bad;
}

TEST(Affinity, CpusNearTheNicsANetNames) {
  if (!topologyHasHwloc()) GTEST_SKIP() << "built without hwloc";
  HostTopology t;
  std::string err;
  ASSERT_TRUE(loadHostTopology(sourceDir() + "/topo/dgx-h100.xml", &t, &err)) << err;
  EXPECT_EQ(cpusNearNics(t, {{"mlx5_0", ""}}), "0-55,112-167");      // by RDMA device
  EXPECT_EQ(cpusNearNics(t, {{"ibp152s0", ""}}), "56-111,168-223");  // by interface: mlx5_4, on the other socket
  // By PCI path, as a net's properties give it (the name then need not match anything).
  EXPECT_EQ(cpusNearNics(t, {{"", "/sys/devices/pci0000:00/0000:00:01.0/0000:98:00.0"}}), "56-111,168-223");
  EXPECT_EQ(cpusNearNics(t, {{"", "/sys/devices/pci0000:00/0000:00:01.0/10000:98:00.0"}}), "");  // not a whole id
  EXPECT_EQ(cpusNearNics(t, {{"mlx5_0", ""}, {"mlx5_4", ""}}), "0-223");  // a proxy driving both sockets' NICs
  EXPECT_EQ(cpusNearNics(t, {{"eth9", ""}}), "");
  EXPECT_EQ(cpusNearNics(HostTopology{}, {{"mlx5_0", ""}}), "");
}

// Binding narrows the calling thread only, within what it may use.
TEST(Affinity, BindsTheCallingThreadWithinItsAffinity) {
  cpu_set_t mine;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
    if (CPU_ISSET(c, &mine)) first = c;
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "needs two CPUs to narrow to one";
  std::string result, outside, whole;
  bool bound = false, boundOutside = true, boundWhole = true;
  cpu_set_t after;
  std::thread([&]() {
    boundOutside = bindThreadNear(std::to_string(CPU_SETSIZE - 1), &outside);
    boundWhole = bindThreadNear(formatCpuList(mine), &whole);
    bound = bindThreadNear(std::to_string(first) + "," + std::to_string(CPU_SETSIZE - 1), &result);
    pthread_getaffinity_np(pthread_self(), sizeof(after), &after);
  }).join();
  EXPECT_FALSE(boundOutside);
  EXPECT_NE(outside.find("outside this thread's affinity"), std::string::npos) << outside;
  EXPECT_FALSE(boundWhole);
  EXPECT_NE(whole.find("already on CPUs"), std::string::npos) << whole;
  ASSERT_TRUE(bound) << result;
  EXPECT_EQ(result, std::to_string(first));  // the CPU outside the affinity is dropped
  EXPECT_EQ(CPU_COUNT(&after), 1);
  EXPECT_TRUE(CPU_ISSET(first, &after));
  cpu_set_t still;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(still), &still), 0);
  EXPECT_TRUE(CPU_EQUAL(&still, &mine));  // the test's own thread is untouched
}

}  // namespace
}  // namespace chorus
