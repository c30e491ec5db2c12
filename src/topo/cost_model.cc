#include "topo/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <unordered_map>
#include <vector>

#include "algo/generators.h"

namespace chorus {
namespace {

/// Input and output bytes of one rank for nccl-tests' `size` of a collective on n ranks.
void bufferBytes(Coll coll, double size, int n, double* in, double* out) {
  *in = *out = size;
  switch (coll) {
    case Coll::kAllGather:
    case Coll::kGather:
      *in = size / n;
      break;
    case Coll::kReduceScatter:
    case Coll::kScatter:
      *out = size / n;
      break;
    default:
      break;
  }
}

/// The ranks whose schedules are built: all of them up to 64 ranks, and for trees (a few steps a rank), else every
/// rank of a few hosts.
std::vector<int> sampledRanks(const ClusterShape& shape, Algo algo) {
  const int n = shape.nranks(), P = shape.ranksPerHost, H = shape.hosts;
  std::vector<int> ranks;
  if (n <= 64 || algo == Algo::kTree) {
    for (int r = 0; r < n; r++) ranks.push_back(r);
    return ranks;
  }
  std::vector<int> hosts;
  for (int h : {0, 1, H / 2, H - 1})
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  std::sort(hosts.begin(), hosts.end());
  for (int h : hosts)
    for (int l = 0; l < P; l++) ranks.push_back(h * P + l);
  return ranks;
}

// The latest finish of any step when every rank runs its steps in order and a receive waits for the matching send
// (the k-th send from p to r meets r's k-th receive from p), each step taking cost(rank, step). -1 if the steps do
// not all run (a schedule that cannot complete, which the verifier rules out for chorus's own).
double criticalPath(const std::vector<Schedule>& all, const std::function<double(int, const Step&)>& cost) {
  const int n = static_cast<int>(all.size());
  std::vector<size_t> pos(n, 0);
  std::vector<double> t(n, 0);
  std::unordered_map<uint64_t, std::vector<double>> sent;  // (from, to) -> finish times of its sends, in order
  std::unordered_map<uint64_t, size_t> received;           // (from, to) -> receives done
  auto key = [n](int from, int to) { return static_cast<uint64_t>(from) * n + to; };
  std::vector<int> ready(n);
  for (int r = 0; r < n; r++) ready[r] = r;
  std::vector<char> queued(n, 1);
  while (!ready.empty()) {
    const int r = ready.back();
    ready.pop_back();
    queued[r] = 0;
    const std::vector<Step>& steps = all[r].steps;
    while (pos[r] < steps.size()) {
      const Step& st = steps[pos[r]];
      double start = t[r];
      if (stepRecvs(st.op)) {
        const uint64_t k = key(st.recvPeer, r);
        auto it = sent.find(k);
        const size_t idx = received[k];
        if (it == sent.end() || it->second.size() <= idx) break;  // its data is not sent yet
        start = std::max(start, it->second[idx]);
        received[k] = idx + 1;
      }
      t[r] = start + cost(r, st);
      if (stepSends(st.op)) {
        sent[key(r, st.sendPeer)].push_back(t[r]);
        if (!queued[st.sendPeer]) queued[st.sendPeer] = 1, ready.push_back(st.sendPeer);
      }
      pos[r]++;
    }
  }
  double end = 0;
  for (int r = 0; r < n; r++) {
    if (pos[r] < all[r].steps.size()) return -1;
    end = std::max(end, t[r]);
  }
  return end;
}

}  // namespace

double busBwFactor(Coll coll, int nranks) {
  const double n = nranks;
  switch (coll) {
    case Coll::kAllReduce:
      return nranks > 1 ? 2 * (n - 1) / n : 1;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter:
      return nranks > 1 ? (n - 1) / n : 1;
    default:
      return 1;
  }
}

size_t fullBufferBytes(Coll coll, size_t countBytes, int nranks) {
  const bool perRank = coll != Coll::kAllReduce && coll != Coll::kBroadcast && coll != Coll::kReduce;
  return perRank ? countBytes * nranks : countBytes;
}

bool parseLinkCost(const std::string& text, LinkCost* out) {
  double lat = 0, gbps = 0;
  if (std::sscanf(text.c_str(), "%lf,%lf", &lat, &gbps) != 2 || lat < 0 || gbps <= 0) return false;
  out->latencyUs = lat;
  out->bytesPerUs = gbps * 1000;  // GB/s = 1000 bytes a microsecond
  return true;
}

CostEstimate scaleEstimate(const CostEstimate& ref, size_t refSize, size_t size) {
  CostEstimate e = ref;
  const double f = refSize > 0 ? static_cast<double>(size) / static_cast<double>(refSize) : 0;
  e.bandwidthUs *= f;
  e.nicBytes *= f;
  e.intraBytes *= f;
  e.timeUs = e.latencyUs + e.bandwidthUs;
  e.bottleneck = e.latencyUs > e.bandwidthUs ? "latency" : e.bandwidthBound;
  return e;
}

bool estimateCollective(Coll coll, Algo algo, size_t size, int nChannels, const ClusterShape& shape, CostEstimate* out,
                        std::string* err) {
  const int n = shape.nranks(), P = shape.ranksPerHost;
  if (shape.hosts < 1 || P < 1 || shape.nicsPerHost < 1 || shape.intra.bytesPerUs <= 0 ||
      (shape.hosts > 1 && shape.inter.bytesPerUs <= 0)) {
    if (err) *err = "the cluster needs hosts, ranks a host and NICs >= 1 and positive bandwidths";
    return false;
  }
  if (!algoSupported(coll, algo, n) || coll == Coll::kSendRecv) {
    if (err) *err = std::string(algoName(algo)) + " does not implement " + collName(coll);
    return false;
  }
  const int nch = std::max(nChannels, algo == Algo::kTree ? 2 : 1);
  double inBytes, outBytes;
  bufferBytes(coll, static_cast<double>(size) / nch, n, &inBytes, &outBytes);

  const std::vector<int> ranks = sampledRanks(shape, algo);
  const bool allRanks = static_cast<int>(ranks.size()) == n;
  std::vector<std::vector<Schedule>> built(allRanks ? nch : 0, std::vector<Schedule>(allRanks ? n : 0));
  const int nics = shape.nicPerChannel ? shape.nicsPerHost : std::min(shape.nicsPerHost, P);
  // Per sampled host (by index in `ranks` / P): each NIC's bytes out and in.
  std::vector<double> nicOut(ranks.size() / P * nics, 0), nicIn(nicOut.size(), 0);
  CostEstimate e;
  for (size_t i = 0; i < ranks.size(); i++) {
    const int rank = ranks[i], host = rank / P;
    double latency = 0, intraOut = 0, intraIn = 0;
    int steps = 0;
    for (int ch = 0; ch < nch; ch++) {
      const size_t nic = i / P * nics + (shape.nicPerChannel ? ch : rank % P) % nics;
      ScheduleRequest req{coll, algo, n, rank, ch, nch, 0, nullptr, shape.hosts > 1 ? P : 0};
      Schedule s;
      std::string why;
      if (!buildSchedule(req, &s, &why)) {
        if (err) *err = why;
        return false;
      }
      if (allRanks) built[ch][rank] = s;
      const double inBlock = inBytes / s.inBlocks, outBlock = outBytes / s.outBlocks;
      auto blockBytes = [&](const BufRef& b) { return b.buf == Buf::kInput ? inBlock : outBlock; };
      double chLatency = 0;
      for (const Step& st : s.steps) {
        const bool sends = stepSends(st.op), recvs = stepRecvs(st.op);
        if (!sends && !recvs) continue;  // local copies: memory bandwidth, not modelled
        // What a send carries: the step's source block, or what it received (the size of its destination); a step
        // of several blocks (Step::span) carries them all in one message, at one step's latency.
        const double bytes = (st.src.buf != Buf::kNone ? blockBytes(st.src) : blockBytes(st.dst)) * st.span;
        const bool sendAcross = sends && st.sendPeer / P != host, recvAcross = recvs && st.recvPeer / P != host;
        chLatency += sendAcross || recvAcross ? shape.inter.latencyUs : shape.intra.latencyUs;
        steps++;
        if (sends) (sendAcross ? nicOut[nic] : intraOut) += bytes;
        if (recvs) (recvAcross ? nicIn[nic] : intraIn) += bytes;
      }
      latency = std::max(latency, chLatency);  // channels run side by side
    }
    if (latency > e.latencyUs) e.latencyUs = latency, e.steps = steps;
    e.intraBytes = std::max({e.intraBytes, intraOut, intraIn});
  }
  // With every rank's steps at hand, latency is the critical path through them (a tree's depth up and down, not one
  // rank's few steps); otherwise the symmetric schedules' one-rank sum above stands.
  if (allRanks) {
    auto stepCost = [&](int rank, const Step& st) {
      const bool sends = stepSends(st.op), recvs = stepRecvs(st.op);
      if (!sends && !recvs) return 0.0;
      const bool across = (sends && st.sendPeer / P != rank / P) || (recvs && st.recvPeer / P != rank / P);
      return across ? shape.inter.latencyUs : shape.intra.latencyUs;
    };
    double path = 0;
    for (int ch = 0; ch < nch && path >= 0; ch++) {
      const double p = criticalPath(built[ch], stepCost);
      path = p < 0 ? -1 : std::max(path, p);
    }
    if (path >= 0) e.latencyUs = path;
  }
  for (size_t k = 0; k < nicOut.size(); k++) e.nicBytes = std::max({e.nicBytes, nicOut[k], nicIn[k]});
  const double nicUs = shape.hosts > 1 ? e.nicBytes / shape.inter.bytesPerUs : 0;
  const double intraUs = e.intraBytes / shape.intra.bytesPerUs;
  e.bandwidthUs = std::max(nicUs, intraUs);
  e.timeUs = e.latencyUs + e.bandwidthUs;
  e.bandwidthBound = nicUs >= intraUs ? "NIC" : "intra-host";
  e.bottleneck = e.latencyUs > e.bandwidthUs ? "latency" : e.bandwidthBound;
  *out = e;
  return true;
}

Algo cheapestAlgo(const bool* allowed, const std::function<bool(Algo, CostEstimate*)>& estimate, CostEstimate* best) {
  Algo pick = Algo::kNumAlgos;
  for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++) {
    CostEstimate e;
    if (!allowed[a] || !estimate(static_cast<Algo>(a), &e)) continue;
    if (pick == Algo::kNumAlgos || e.timeUs < best->timeUs) pick = static_cast<Algo>(a), *best = e;
  }
  return pick;
}

Algo cheapestAlgo(Coll coll, size_t size, int nChannels, const ClusterShape& shape, const bool* allowed,
                  CostEstimate* best) {
  return cheapestAlgo(
      allowed, [&](Algo a, CostEstimate* e) { return estimateCollective(coll, a, size, nChannels, shape, e, nullptr); },
      best);
}

}  // namespace chorus
