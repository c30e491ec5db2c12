// chorus-doctor: the terminal report and the JSON document.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "tools/doctor/doctor.h"

namespace chorus {
namespace doctor {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  snprintf(b, sizeof(b), f, v);
  return b;
}

std::string jsonString(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      snprintf(b, sizeof(b), "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

}  // namespace

std::string formatReport(const Report& r) {
  std::ostringstream o;
  o << "chorus-doctor: " << r.facts.size() << " rank(s)\n\n";
  // Hosts in the order of their first rank.
  std::vector<std::pair<uint64_t, std::vector<const Facts*>>> hosts;
  for (const Facts& f : r.facts) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == f.hostHash; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {f.hostHash, {}});
    it->second.push_back(&f);
  }
  o << "Hosts\n";
  for (const auto& [h, ranks] : hosts) {
    const Facts& f = *ranks[0];
    o << "  " << hostName(f) << ": ranks";
    for (const Facts* x : ranks) o << " " << x->rank;
    o << "; " << f.gpus << " GPU(s); interface " << (f.ifName.empty() ? "none" : f.ifName + " " + f.ifAddr) << " ("
      << f.ifChoice << "); " << f.version;
    if (!f.topo.empty()) o << "; topology: " << f.topo;
    double busy = -1;
    for (const Facts* x : ranks)
      if (static_cast<size_t>(x->rank) < r.cpuBusy.size()) busy = std::max(busy, r.cpuBusy[x->rank]);
    if (busy >= 0) o << fmt("; CPU pressure %.0f%%", 100 * busy);
    o << "\n";
  }
  if (!r.unreachable.empty()) {
    o << "\nConnectivity\n";
    for (const std::string& u : r.unreachable) o << "  " << u << "\n";
  }
  if (!r.initError.empty()) o << "\nCommunicator: " << r.initError << "\n";
  if (!r.pairs.empty()) {
    o << "\nPairs (" << r.pairs.size() << ", both ways at once)\n";
    std::vector<PairResult> ps = r.pairs;
    std::sort(ps.begin(), ps.end(), [](const PairResult& a, const PairResult& b) { return a.gbps < b.gbps; });
    for (const PairResult& p : ps)
      o << "  rank " << p.a << " <-> rank " << p.b << ": " << fmt("%8.3f GB/s", p.gbps)
        << fmt("  %8.1f us", p.latencyUs) << (r.facts[p.a].hostHash == r.facts[p.b].hostHash ? "  (same host)" : "")
        << "\n";
  }
  if (r.commPhases) {
    o << "\nCollectives: every collective checked, " << (r.wrongResults.empty() ? "all values right" : "WRONG VALUES")
      << "\n";
    if (r.facts.size() > 1)
      o << "  allreduce " << fmt("%.3f", r.allreduceBusbw) << " GB/s busbw, allgather " << fmt("%.3f", r.allgatherBusbw)
        << " GB/s busbw (" << r.timedBytes << " bytes)\n";
    if (!r.slowestLink.empty()) o << "  slowest ring link: " << r.slowestLink << "\n";
  }
  int problems = 0;
  for (const Finding& f : r.findings) problems += f.problem;
  o << "\nFindings: " << (problems ? std::to_string(problems) + " problem(s)" : "nothing wrong") << "\n";
  for (const Finding& f : r.findings) o << (f.problem ? "  PROBLEM " : "  note    ") << f.what << "\n";
  return o.str();
}

std::string formatJson(const Report& r) {
  std::ostringstream o;
  o << "{\n  \"ranks\": [\n";
  for (size_t i = 0; i < r.facts.size(); i++) {
    const Facts& f = r.facts[i];
    o << "    {\"rank\": " << f.rank << ", \"host\": " << jsonString(f.hostname)
      << ", \"address\": " << jsonString(f.ifAddr) << ", \"interface\": " << jsonString(f.ifName)
      << ", \"pid\": " << f.pid << ", \"gpus\": " << f.gpus << ", \"version\": " << jsonString(f.version)
      << ", \"topology\": " << jsonString(f.topo) << ", \"cpu_pressure\": "
      << (i < r.cpuBusy.size() && r.cpuBusy[i] >= 0 ? fmt("%.3f", r.cpuBusy[i]) : std::string("null")) << "}"
      << (i + 1 < r.facts.size() ? "," : "") << "\n";
  }
  o << "  ],\n  \"unreachable\": [";
  for (size_t i = 0; i < r.unreachable.size(); i++) o << (i ? ", " : "") << jsonString(r.unreachable[i]);
  o << "],\n  \"pairs\": [\n";
  for (size_t i = 0; i < r.pairs.size(); i++) {
    const PairResult& p = r.pairs[i];
    o << "    {\"a\": " << p.a << ", \"b\": " << p.b << ", \"latency_us\": " << fmt("%.2f", p.latencyUs)
      << ", \"gbps\": " << fmt("%.4f", p.gbps) << "}" << (i + 1 < r.pairs.size() ? "," : "") << "\n";
  }
  o << "  ],\n  \"collectives\": {\"checked\": " << (r.commPhases ? "true" : "false")
    << ", \"wrong\": " << r.wrongResults.size() << ", \"bytes\": " << r.timedBytes
    << ", \"allreduce_busbw\": " << fmt("%.4f", r.allreduceBusbw)
    << ", \"allgather_busbw\": " << fmt("%.4f", r.allgatherBusbw)
    << ", \"predicted_busbw\": " << fmt("%.4f", r.predictedBusbw) << ", \"slowest_link\": " << jsonString(r.slowestLink)
    << "},\n  \"findings\": [\n";
  for (size_t i = 0; i < r.findings.size(); i++)
    o << "    {\"problem\": " << (r.findings[i].problem ? "true" : "false")
      << ", \"what\": " << jsonString(r.findings[i].what) << "}" << (i + 1 < r.findings.size() ? "," : "") << "\n";
  o << "  ]\n}\n";
  return o.str();
}

}  // namespace doctor
}  // namespace chorus
