// chorus-doctor's verdicts on made-up measurements: which pairs and hosts the link rules name, as problems or
// notes, and which pairs are measured again. The measurements themselves are checked by doctor_netns_test.sh.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/doctor/doctor.h"

namespace chorus {
namespace doctor {
namespace {

// n hosts of one rank each, every pair measured at `gbps` and `us`.
Report cluster(int n, double gbps = 1.0, double us = 20.0) {
  Report r;
  for (int i = 0; i < n; i++) {
    Facts f;
    f.rank = i;
    f.hostname = "node" + std::to_string(i);
    f.hostHash = 1000 + i;
    f.ifName = "eth0";
    f.ifAddr = "10.0.0." + std::to_string(i + 1);
    r.facts.push_back(f);
  }
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) r.pairs.push_back({a, b, us, gbps});
  return r;
}

void set(Report* r, int a, int b, double gbps, double us) {
  for (PairResult& p : r->pairs)
    if (p.a == a && p.b == b) {
      p.gbps = gbps;
      p.latencyUs = us;
    }
}

std::vector<std::string> texts(const Report& r, bool problem) {
  std::vector<std::string> out;
  for (const Finding& f : r.findings)
    if (f.problem == problem) out.push_back(f.what);
  return out;
}

TEST(DoctorJudge, HealthyClusterNamesNothing) {
  Report r = cluster(4);
  set(&r, 0, 1, 0.5, 40);  // within 3x of the median: noise, not a finding
  judgeLinks(&r);
  EXPECT_TRUE(texts(r, true).empty());
  EXPECT_TRUE(suspectPairs(r).empty());
}

TEST(DoctorJudge, SlowPairIsNamedAsAPair) {
  Report r = cluster(4);
  set(&r, 1, 2, 0.1, 20);
  ASSERT_EQ(suspectPairs(r).size(), 1u);
  judgeLinks(&r);
  auto p = texts(r, true);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("node1 (10.0.0.2) <-> host node2 (10.0.0.3)"), std::string::npos) << p[0];
}

TEST(DoctorJudge, SlowHostIsNamedOnceAsTheHost) {
  Report r = cluster(4);
  for (int a = 0; a < 3; a++) set(&r, a, 3, 0.1, 20);
  EXPECT_EQ(suspectPairs(r).size(), 3u);
  judgeLinks(&r);
  auto p = texts(r, true);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("host node3 (10.0.0.4): slow with every other host"), std::string::npos) << p[0];
}

TEST(DoctorJudge, LaggyPairAndLaggyHost) {
  Report r = cluster(5);
  set(&r, 0, 2, 1.0, 500);
  judgeLinks(&r);
  auto p = texts(r, true);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("latency 500.0 us, median 20.0 us"), std::string::npos) << p[0];

  Report h = cluster(5);
  for (int a = 0; a < 4; a++) set(&h, a, 4, 1.0, 900);
  judgeLinks(&h);
  p = texts(h, true);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("host node4 (10.0.0.5): high latency with every other host: 900.0 us"), std::string::npos)
      << p[0];
}

// 3x the median but only 30 us more: below what a finding needs.
TEST(DoctorJudge, SmallAbsoluteLatencyIsNotNamed) {
  Report r = cluster(4, 1.0, 10);
  set(&r, 0, 3, 1.0, 40);
  judgeLinks(&r);
  EXPECT_TRUE(texts(r, true).empty());
}

// The same lag on a host whose CPU was busy most of the time is a note naming the pressure, not a problem;
// bandwidth findings stay problems.
TEST(DoctorJudge, LatencyOnABusyHostIsANote) {
  Report r = cluster(4);
  set(&r, 0, 2, 1.0, 800);
  set(&r, 1, 3, 0.1, 20);
  r.cpuBusy = {0.1, 0.2, 0.97, 0.3};
  judgeLinks(&r);
  auto p = texts(r, true), n = texts(r, false);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("0.10 GB/s"), std::string::npos) << p[0];
  ASSERT_EQ(n.size(), 1u);
  EXPECT_NE(n[0].find("latency 800.0 us"), std::string::npos) << n[0];
  EXPECT_NE(n[0].find("node2 (10.0.0.3) waited for a CPU core 97%"), std::string::npos) << n[0];

  r.findings.clear();
  r.cpuBusy = {0.1, 0.2, 0.3, 0.3};  // not busy: a problem again
  judgeLinks(&r);
  EXPECT_EQ(texts(r, true).size(), 2u);
}

// A GPU whose nearest NIC is across sockets (from the host's topology) is a note naming the host and the GPUs.
TEST(DoctorJudge, GpusFarFromEveryNicAreANote) {
  Report r = cluster(2);
  r.facts[1].farGpus = "4,5";
  judgeFacts(&r);
  std::vector<std::string> notes = texts(r, false);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("node1"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("GPU(s) 4,5 have no NIC nearer than across sockets"), std::string::npos) << notes[0];
  EXPECT_TRUE(texts(r, true).empty());
}

}  // namespace
}  // namespace doctor
}  // namespace chorus
