#include "topo/cost_model.h"

#include <algorithm>
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

/// The ranks whose schedules are built: all of them up to 64, else every rank of a few hosts.
std::vector<int> sampledRanks(const ClusterShape& shape) {
  const int n = shape.nranks(), P = shape.ranksPerHost, H = shape.hosts;
  std::vector<int> ranks;
  if (n <= 64) {
    for (int r = 0; r < n; r++) ranks.push_back(r);
    return ranks;
  }
  std::vector<int> hosts = {0, 1, H / 2, H - 1};
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  for (int h : hosts)
    for (int l = 0; l < P; l++) ranks.push_back(h * P + l);
  return ranks;
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

  const std::vector<int> ranks = sampledRanks(shape);
  const int nics = std::min(shape.nicsPerHost, P);
  // Per sampled host (by index in `ranks` / P): each NIC's bytes out and in.
  std::vector<double> nicOut(ranks.size() / P * nics, 0), nicIn(nicOut.size(), 0);
  CostEstimate e;
  for (size_t i = 0; i < ranks.size(); i++) {
    const int rank = ranks[i], host = rank / P;
    const size_t nic = i / P * nics + rank % P % nics;
    double latency = 0, intraOut = 0, intraIn = 0;
    int steps = 0;
    for (int ch = 0; ch < nch; ch++) {
      ScheduleRequest req{coll, algo, n, rank, ch, nch, 0, nullptr, shape.hosts > 1 ? P : 0};
      Schedule s;
      std::string why;
      if (!buildSchedule(req, &s, &why)) {
        if (err) *err = why;
        return false;
      }
      const double inBlock = inBytes / s.inBlocks, outBlock = outBytes / s.outBlocks;
      auto blockBytes = [&](const BufRef& b) { return b.buf == Buf::kInput ? inBlock : outBlock; };
      double chLatency = 0;
      for (const Step& st : s.steps) {
        const bool sends = stepSends(st.op), recvs = stepRecvs(st.op);
        if (!sends && !recvs) continue;  // local copies: memory bandwidth, not modelled
        // What a send carries: the step's source block, or what it received (the size of its destination).
        const double bytes = st.src.buf != Buf::kNone ? blockBytes(st.src) : blockBytes(st.dst);
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
  for (size_t k = 0; k < nicOut.size(); k++) e.nicBytes = std::max({e.nicBytes, nicOut[k], nicIn[k]});
  const double nicUs = shape.hosts > 1 ? e.nicBytes / shape.inter.bytesPerUs : 0;
  const double intraUs = e.intraBytes / shape.intra.bytesPerUs;
  e.bandwidthUs = std::max(nicUs, intraUs);
  e.timeUs = e.latencyUs + e.bandwidthUs;
  e.bottleneck = e.latencyUs > e.bandwidthUs ? "latency" : nicUs >= intraUs ? "NIC" : "intra-host";
  *out = e;
  return true;
}

Algo cheapestAlgo(Coll coll, size_t size, int nChannels, const ClusterShape& shape, const bool* allowed,
                  CostEstimate* best) {
  Algo pick = Algo::kNumAlgos;
  for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++) {
    CostEstimate e;
    if (!allowed[a] || !estimateCollective(coll, static_cast<Algo>(a), size, nChannels, shape, &e, nullptr)) continue;
    if (pick == Algo::kNumAlgos || e.timeUs < best->timeUs) pick = static_cast<Algo>(a), *best = e;
  }
  return pick;
}

}  // namespace chorus
