// chorus-doctor: what the gathered facts and measurements mean. Every finding names hosts by host name and
// address, and ranks with their host.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/params.h"
#include "core/socket.h"
#include "kernels/fifo.h"
#include "tools/doctor/doctor.h"

namespace chorus {
namespace doctor {
namespace {

// Variables that may differ between ranks on purpose.
bool mayDiffer(const std::string& name) {
  return name.rfind("NCCL_DEBUG", 0) == 0 || name == "NCCL_HOSTID" || name == "NCCL_SOCKET_IFNAME" ||
         name == "CHORUS_STORE_TOKEN" || name == "NCCL_TESTS_DEVICE";
}

// A parameter as rank `f` sees it: its environment, else the registry's default.
int64_t paramOf(const Facts& f, const char* env) {
  auto it = f.env.find(env);
  if (it != f.env.end()) return std::strtoll(it->second.c_str(), nullptr, 10);
  for (const ParamInfo* p : paramRegistry())
    if (std::string(p->env) == env) return std::strtoll(p->def, nullptr, 10);
  return 0;
}

std::string megabytes(int64_t bytes) {
  char b[32];
  snprintf(b, sizeof(b), "%.0f MB", double(bytes) / 1e6);
  return b;
}

std::string gbps(double v) {
  char b[32];
  snprintf(b, sizeof(b), v < 0.1 ? "%.3f GB/s" : "%.2f GB/s", v);
  return b;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

bool judgeFacts(Report* r) {
  const std::vector<Facts>& fs = r->facts;
  bool commPossible = true;
  std::set<uint64_t> hostsSaid;
  // Interfaces: one line per host.
  for (const Facts& f : fs) {
    auto spec = f.env.find("NCCL_SOCKET_IFNAME");
    bool matchesNone = false;
    if (spec != f.env.end()) {
      matchesNone = true;
      for (const std::string& i : f.interfaces) matchesNone &= !ifNameMatches(spec->second, i.substr(0, i.find('=')));
    }
    if (!f.ifName.empty() && !matchesNone) continue;
    commPossible = false;
    if (!hostsSaid.insert(f.hostHash).second) continue;
    std::string all;
    std::set<std::string> seen;
    for (const std::string& i : f.interfaces) {
      std::string name = i.substr(0, i.find('='));
      if (seen.insert(name).second) all += (all.empty() ? "" : ", ") + name;
    }
    if (matchesNone) {
      r->findings.push_back({true, "host " + hostName(f) + ": NCCL_SOCKET_IFNAME=" + spec->second +
                                       " matches none of its interfaces (" + all + "); chorus cannot start there"});
    } else {
      r->findings.push_back({true, "host " + hostName(f) + ": no interface for chorus: " + f.ifWhy});
    }
  }
  // Settings: every NCCL_* and CHORUS_* variable, rank by rank.
  std::set<std::string> names;
  for (const Facts& f : fs)
    for (const auto& [k, v] : f.env) names.insert(k);
  bool hashesDiffer = false;
  for (const Facts& f : fs) hashesDiffer |= f.settingsHash != fs[0].settingsHash;
  for (const std::string& name : names) {
    if (mayDiffer(name)) continue;
    std::map<std::string, std::vector<int>> byValue;
    for (const Facts& f : fs) {
      auto it = f.env.find(name);
      byValue[it == f.env.end() ? "(unset)" : it->second].push_back(f.rank);
    }
    if (byValue.size() < 2) continue;
    // Name the smaller groups against the largest.
    auto largest = std::max_element(byValue.begin(), byValue.end(),
                                    [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    std::string text = name + " differs between ranks:";
    for (const auto& [value, ranks] : byValue) {
      if (&value == &largest->first) continue;
      text += " " + value + " on";
      for (size_t i = 0; i < ranks.size() && i < 4; i++)
        text += (i ? "," : "") + std::string(" ") + rankName(fs[ranks[i]]);
      if (ranks.size() > 4) text += " and " + std::to_string(ranks.size() - 4) + " more";
      text += ";";
    }
    text += " " + largest->first + " on the " + std::to_string(largest->second.size()) + " other rank(s)";
    r->findings.push_back({true, text});
  }
  if (hashesDiffer) {
    commPossible = false;
    r->findings.push_back({true,
                           "ranks run with settings the bootstrap refuses to mix (algorithms, protocols, "
                           "transports, FIFO or device-path settings): a communicator cannot be made"});
  }
  for (const Facts& f : fs) {
    if (f.version == fs[0].version) continue;
    commPossible = false;
    r->findings.push_back(
        {true, rankName(f) + " runs " + f.version + " but " + rankName(fs[0]) + " runs " + fs[0].version});
  }
  // Shared memory and locked memory, per host.
  std::map<uint64_t, std::vector<const Facts*>> hosts;
  for (const Facts& f : fs) hosts[f.hostHash].push_back(&f);
  for (const auto& [hash, ranks] : hosts) {
    const Facts& f = *ranks[0];
    int64_t n = static_cast<int64_t>(ranks.size());
    FifoGeometry geo;
    geo.nSlots = static_cast<uint32_t>(paramOf(f, "CHORUS_FIFO_SLOTS"));
    geo.slotBytes = static_cast<uint32_t>(paramOf(f, "CHORUS_FIFO_SLOT_BYTES"));
    geo.llLines = static_cast<uint32_t>(paramOf(f, "CHORUS_LL_LINES"));
    int64_t need = n * (n - 1) * std::max<int64_t>(1, paramOf(f, "CHORUS_HOST_NCHANNELS")) *
                   static_cast<int64_t>(geo.totalBytes());
    if (f.shmFree >= 0 && need > f.shmFree)
      r->findings.push_back({true, "host " + hostName(f) + ": /dev/shm has " + megabytes(f.shmFree) + " free but the " +
                                       std::to_string(n) + " ranks there need " + megabytes(need) +
                                       " of shared-memory FIFOs (enlarge /dev/shm, e.g. docker --shm-size)"});
    if (f.memlockNeed > 0 && f.memlock >= 0 && f.memlock < f.memlockNeed)
      r->findings.push_back({true, "host " + hostName(f) + ": the locked-memory limit is " + megabytes(f.memlock) +
                                       ", below the " + megabytes(f.memlockNeed) +
                                       " pinned memory GPU ranks use (ulimit -l unlimited)"});
    if (!f.farGpus.empty())
      r->findings.push_back({false, "host " + hostName(f) + ": GPU(s) " + f.farGpus +
                                        " have no NIC nearer than across sockets (SYS): their traffic to other hosts "
                                        "crosses the CPU interconnect (chorus-topo shows the matrix)"});
    if (f.gpus > 0 && n > f.gpus)
      r->findings.push_back({false, "host " + hostName(f) + ": " + std::to_string(n) + " ranks share " +
                                        std::to_string(f.gpus) + " GPU(s)"});
  }
  return commPossible;
}

/// CPU pressure from which a host's latencies are its load's rather than its links' (tasks waited for a core more
/// than half the time). chorus-doctor's own ranks make about 30% on two cores.
constexpr double kBusyCpu = 0.5;

LinkVerdict classifyLinks(const Report& r) {
  LinkVerdict v;
  const std::vector<Facts>& fs = r.facts;
  for (bool sameHost : {true, false}) {
    std::vector<size_t> cls;
    for (size_t i = 0; i < r.pairs.size(); i++)
      if ((fs[r.pairs[i].a].hostHash == fs[r.pairs[i].b].hostHash) == sameHost) cls.push_back(i);
    if (cls.size() < 3) continue;  // no median to speak of
    std::vector<double> bw, lat;
    for (size_t i : cls) {
      bw.push_back(r.pairs[i].gbps);
      lat.push_back(r.pairs[i].latencyUs);
    }
    double mbw = median(bw), mlat = median(lat);
    (sameHost ? v.medianGbpsSame : v.medianGbpsOther) = mbw;
    (sameHost ? v.medianUsSame : v.medianUsOther) = mlat;
    // A host slow with every other host is named once, as the host: the median of its pairs against the median
    // of the pairs without it (the overall median would be dragged down by its own pairs).
    if (!sameHost) {
      std::set<uint64_t> hostSet;
      for (size_t i : cls) hostSet.insert({fs[r.pairs[i].a].hostHash, fs[r.pairs[i].b].hostHash});
      for (uint64_t h : hostSet) {
        std::vector<double> with, without, latWith, latWithout;
        for (size_t i : cls) {
          bool mine = fs[r.pairs[i].a].hostHash == h || fs[r.pairs[i].b].hostHash == h;
          (mine ? with : without).push_back(r.pairs[i].gbps);
          (mine ? latWith : latWithout).push_back(r.pairs[i].latencyUs);
        }
        if (with.size() < 2 || without.empty()) continue;
        if (median(with) < median(without) / 2.5) v.slowHosts[h] = {median(with), median(without)};
        double lw = median(latWith), lo = median(latWithout);
        if (lw > 3 * lo && lw > lo + 50) v.laggyHosts[h] = {lw, lo};
      }
    }
    for (size_t i : cls) {
      const PairResult& p = r.pairs[i];
      if (p.gbps < mbw / 3) v.slowPairs.insert(i);
      if (p.latencyUs > 3 * mlat && p.latencyUs > mlat + 50) v.laggyPairs.insert(i);
    }
  }
  return v;
}

std::vector<size_t> suspectPairs(const Report& r) {
  LinkVerdict v = classifyLinks(r);
  std::set<size_t> out(v.slowPairs.begin(), v.slowPairs.end());
  out.insert(v.laggyPairs.begin(), v.laggyPairs.end());
  for (size_t i = 0; i < r.pairs.size(); i++)
    for (int k : {r.pairs[i].a, r.pairs[i].b})
      if (v.slowHosts.count(r.facts[k].hostHash) || v.laggyHosts.count(r.facts[k].hostHash)) out.insert(i);
  return std::vector<size_t>(out.begin(), out.end());
}

namespace {

// A latency finding: a problem, or a note where one of `ranks` ran on a host whose CPU was busy most of the time
// (a rank's wakeup then waits for a core: the latency is the host's load, not the link's).
Finding latencyFinding(const Report& r, const std::vector<int>& ranks, const std::string& what) {
  int busy = -1;
  for (int k : ranks)
    if (static_cast<size_t>(k) < r.cpuBusy.size() && r.cpuBusy[k] >= kBusyCpu &&
        (busy < 0 || r.cpuBusy[k] > r.cpuBusy[busy]))
      busy = k;
  if (busy < 0) return {true, what};
  char c[200];
  snprintf(c, sizeof(c),
           "; not counted as a problem: tasks on %s waited for a CPU core %.0f%% of the time (CPU "
           "pressure), which delays every wakeup; measure again on idle hosts",
           hostName(r.facts[busy]).c_str(), 100 * r.cpuBusy[busy]);
  return {false, what + c};
}

std::string us(double v) {
  char b[32];
  snprintf(b, sizeof(b), "%.1f us", v);
  return b;
}

}  // namespace

void judgeLinks(Report* r) {
  const std::vector<Facts>& fs = r->facts;
  for (const std::string& w : r->wrongResults) r->findings.push_back({true, w});
  if (r->pairs.empty()) return;
  LinkVerdict v = classifyLinks(*r);
  // Hosts first, once each, in the order of their first rank.
  std::set<uint64_t> named;
  for (const Facts& f : fs) {
    if (!named.insert(f.hostHash).second) continue;
    auto slow = v.slowHosts.find(f.hostHash);
    if (slow != v.slowHosts.end())
      r->findings.push_back({true, "host " + hostName(f) + ": slow with every other host: " + gbps(slow->second.first) +
                                       " against a median of " + gbps(slow->second.second) +
                                       " between the other hosts (its link?)"});
    auto lag = v.laggyHosts.find(f.hostHash);
    if (lag != v.laggyHosts.end()) {
      std::vector<int> ranks;
      for (const Facts& x : fs)
        if (x.hostHash == f.hostHash) ranks.push_back(x.rank);
      r->findings.push_back(
          latencyFinding(*r, ranks,
                         "host " + hostName(f) + ": high latency with every other host: " + us(lag->second.first) +
                             " against a median of " + us(lag->second.second) + " between the other hosts"));
    }
  }
  for (size_t i = 0; i < r->pairs.size(); i++) {
    const PairResult& p = r->pairs[i];
    bool sameHost = fs[p.a].hostHash == fs[p.b].hostHash;
    auto hostNamed = [&](const auto& hosts) { return hosts.count(fs[p.a].hostHash) || hosts.count(fs[p.b].hostHash); };
    const char* what = sameHost ? " within a host" : " between hosts";
    std::string who = sameHost ? rankName(fs[p.a]) + " <-> rank " + std::to_string(p.b)
                               : "host " + hostName(fs[p.a]) + " <-> host " + hostName(fs[p.b]);
    if (v.slowPairs.count(i) && !hostNamed(v.slowHosts))
      r->findings.push_back({true, who + ": " + gbps(p.gbps) + ", median " +
                                       gbps(sameHost ? v.medianGbpsSame : v.medianGbpsOther) + what});
    if (v.laggyPairs.count(i) && !hostNamed(v.laggyHosts))
      r->findings.push_back(latencyFinding(
          *r, {p.a, p.b},
          who + ": latency " + us(p.latencyUs) + ", median " + us(sameHost ? v.medianUsSame : v.medianUsOther) + what));
  }
  if (r->predictedBusbw > 0 && r->allreduceBusbw > 0) {
    char b[200];
    snprintf(b, sizeof(b), "allreduce reaches %.0f%% of the %s busbw its slowest ring link allows (%s)",
             100.0 * r->allreduceBusbw / r->predictedBusbw, gbps(r->predictedBusbw).c_str(), r->slowestLink.c_str());
    r->findings.push_back({false, b});
  }
}

}  // namespace doctor
}  // namespace chorus
