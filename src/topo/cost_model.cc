#include "topo/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

#include "algo/generators.h"

namespace chorus {
namespace {

// The pipeline term is played for clusters of up to kPipelineMaxRanks ranks (all of whose schedules are built), and
// up to this many slots in all; beyond, the estimate is the alpha-beta sum alone.
constexpr size_t kPipelineSlots = size_t(1) << 16;

size_t roundUp16(size_t x) { return (x + 15) / 16 * 16; }

// One operation's blocks as the planner lays them out (Planner::plan, src/engine/plan.cc), in elements: the input's
// and output's totals; a block, an allreduce's buffer split evenly over its blocks and rounded up to 16 elements, the
// other collectives' one rank's count; and a channel's part of each block, rounded up to 16. A step moves its blocks'
// parts of its channel; the executor skips a step whose part is empty (kernels/executor.h), as a small allreduce's
// trailing blocks and a small tree's second channel are.
struct Layout {
  size_t inTotal = 0, outTotal = 0, blockElems = 0, chanElems = 0, elemBytes = 4;

  // nccl-tests' `size` of `coll` on n ranks over nch channels, whose schedules view buffers as `blocks` blocks.
  Layout(Coll coll, size_t size, int n, int nch, int blocks, size_t es) : elemBytes(std::max<size_t>(1, es)) {
    const bool whole = coll == Coll::kAllReduce || coll == Coll::kBroadcast || coll == Coll::kReduce;
    const size_t N = size / elemBytes / (whole ? 1 : static_cast<size_t>(n)), all = N * static_cast<size_t>(n);
    inTotal = outTotal = N;
    if (coll == Coll::kAllGather || coll == Coll::kGather) outTotal = all;
    if (coll == Coll::kReduceScatter || coll == Coll::kScatter) inTotal = all;
    if (coll == Coll::kAllToAll) inTotal = outTotal = all;
    const size_t b = coll == Coll::kAllReduce ? static_cast<size_t>(std::max(1, blocks)) : 1;
    blockElems = b > 1 ? roundUp16((N + b - 1) / b) : N;
    chanElems = roundUp16((blockElems + nch - 1) / static_cast<size_t>(nch));
  }
  // Bytes of channel ch's part of block `block` of `buf`.
  double part(Buf buf, int block, int ch) const {
    if (buf == Buf::kNone) return 0;
    const size_t total = buf == Buf::kInput ? inTotal : outTotal;
    const size_t start = static_cast<size_t>(block) * blockElems, end = std::min(start + blockElems, total);
    const size_t from = start + static_cast<size_t>(ch) * chanElems, to = std::min(from + chanElems, end);
    return from < to ? static_cast<double>((to - from) * elemBytes) : 0;
  }
  // What a step moves on channel ch: its blocks' parts (Step::span of them in one message), measured on the buffer the
  // executor measures it by (what it writes where it receives or copies, else what it reads).
  double step(const Step& st, int ch) const {
    const bool writes = stepRecvs(st.op) || st.op == StepOp::kCopy || st.op == StepOp::kLocalReduce;
    BufRef ref = writes ? st.dst : st.src;
    if (ref.buf == Buf::kNone) ref = st.src.buf != Buf::kNone ? st.src : st.dst;
    double bytes = 0;
    for (int j = 0; j < st.span; j++) bytes += part(ref.buf, ref.block + j, ch);
    return bytes;
  }
};

// The steps the executor runs of a schedule under a layout: those that move something. The lagged part (lagFrom)
// keeps its place among them.
void dropEmptySteps(const Layout& lay, Schedule* s) {
  std::vector<Step> kept;
  int lagFrom = s->lagFrom;
  for (size_t i = 0; i < s->steps.size(); i++) {
    if (lay.step(s->steps[i], s->channel) > 0) {
      kept.push_back(s->steps[i]);
    } else if (s->lagFrom > static_cast<int>(i)) {
      lagFrom--;
    }
  }
  s->steps = std::move(kept);
  s->lagFrom = lagFrom;
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

// One connection of the pipeline simulation: the slots sent on it, in order, with the time each arrived, and the
// time the receiver took each.
struct SimConn {
  std::vector<double> arrived;
  std::vector<double> taken;
  int waitingReceiver = -1;  // actor blocked on the next arrival
  int waitingSender = -1;    // actor blocked on FIFO room
};

// One link of the pipeline simulation: when it carries slots, as intervals ordered by start that do not overlap.
struct SimLink {
  std::vector<std::pair<double, double>> busy;
  size_t first = 0;  // intervals before this one ended before anything still to be placed may start
  // The first interval still kept that overlaps [t, t + d), or busy.size().
  size_t overlap(double t, double d) const {
    for (size_t i = first; i < busy.size() && busy[i].first < t + d; i++)
      if (busy[i].second > t) return i;
    return busy.size();
  }
  void take(double t, double d) {
    auto at = std::lower_bound(busy.begin() + first, busy.end(), std::make_pair(t, t));
    // Joined to the intervals it touches, so that a link busy without a break stays one interval.
    const bool joinsPrev = at != busy.begin() + first && (at - 1)->second >= t;
    const bool joinsNext = at != busy.end() && at->first <= t + d;
    if (joinsPrev && joinsNext) {
      (at - 1)->second = at->second;
      busy.erase(at);
    } else if (joinsPrev) {
      (at - 1)->second = t + d;
    } else if (joinsNext) {
      at->first = t;
    } else {
      busy.insert(at, {t, t + d});
    }
  }
  void forget(double now) {
    while (first < busy.size() && busy[first].second <= now) first++;
  }
};

// The earliest time from `t` on at which both links are free for d; takes that time on both. A slot streams out of
// one into the other, so it needs both at once; a later slot may fill a gap an earlier one left.
double takeBoth(SimLink& a, SimLink& b, double t, double d) {
  for (;;) {
    const size_t i = a.overlap(t, d);
    if (i < a.busy.size()) {
      t = a.busy[i].second;
      continue;
    }
    const size_t j = b.overlap(t, d);
    if (j < b.busy.size()) {
      t = b.busy[j].second;
      continue;
    }
    break;
  }
  a.take(t, d);
  b.take(t, d);
  return t + d;
}

// One step of one tile in the simulation: a step that moves data, and its tile's bytes as slots of equal size.
struct SimWork {
  const Step* step = nullptr;
  int slots = 1;
  double slotBytes = 0;
};

// One rank's one channel in the simulation: its steps over the tiles (TileOrder), a slot at a time.
struct SimActor {
  int rank = 0, channel = 0;
  std::vector<SimWork> work;  // in order
  size_t next = 0;            // index into work
  int slot = 0;               // slot of work[next]
  double t = 0;               // when it may go on
};

// The time the schedules' data takes through the links slot by slot (no latencies): every (rank, channel) runs its
// steps over nTiles tiles in TileOrder; a step's bytes for a tile leave in slots of at most slotBytes; a slot goes
// when its data has arrived (a receiving step) and the FIFO has room (fifoSlots slots not yet taken by the
// receiver), through two links at once: the sender's NIC out and the receiver's NIC in across hosts, the two ranks'
// own out and in within a host, for the slot's bytes over its class's bandwidth, at the first time both are free.
// Slots are placed in the order they become ready. A rank's own copies and reductions cost nothing. -1 when it would
// take more than `budget` slots or the steps do not all run.
double pipelineSim(const std::vector<std::vector<Schedule>>& built, const ClusterShape& shape, const Layout& lay,
                   uint64_t nTiles, size_t budget) {
  const int nch = static_cast<int>(built.size());
  const int n = shape.nranks(), P = shape.ranksPerHost;
  const int nics = shape.nicPerChannel ? shape.nicsPerHost : std::min(shape.nicsPerHost, P);
  const double slotBytes = static_cast<double>(shape.slotBytes);
  std::vector<SimActor> actors;
  size_t slots = 0;
  for (int ch = 0; ch < nch; ch++)
    for (int r = 0; r < n; r++) {
      const Schedule& s = built[ch][r];
      SimActor a;
      a.rank = r, a.channel = ch;
      const TileOrder order(nTiles, static_cast<uint32_t>(s.steps.size()), s.lagFrom, s.lag);
      for (uint64_t k = 0; k < order.rounds(); k++)
        for (int which = 0; which < 2; which++) {
          uint64_t tile;
          uint32_t first, end;
          if (!order.part(k, which, &tile, &first, &end)) continue;
          for (uint32_t i = first; i < end; i++) {
            const Step& st = s.steps[i];
            if (!stepSends(st.op) && !stepRecvs(st.op)) continue;
            const double bytes = lay.step(st, ch) / static_cast<double>(nTiles);
            const int k = std::max(1, static_cast<int>(std::ceil(bytes / slotBytes)));
            a.work.push_back(SimWork{&st, k, bytes / k});
            slots += static_cast<size_t>(k);
            if (slots > budget) return -1;
          }
        }
      actors.push_back(std::move(a));
    }
  std::unordered_map<uint64_t, SimConn> conns;  // (channel, from, to)
  auto conn = [&](int ch, int from, int to) -> SimConn& {
    return conns[(static_cast<uint64_t>(ch) * n + from) * n + to];
  };
  // Links: each host's NICs out and in, each rank's out and in within its host; when each is next free.
  const size_t nNic = static_cast<size_t>(shape.hosts) * nics;
  std::vector<SimLink> nicOut(nNic), nicIn(nNic), rankOut(n), rankIn(n);
  auto nicOf = [&](int rank, int ch) {
    return static_cast<size_t>(rank / P) * nics + (shape.nicPerChannel ? ch : rank % P) % nics;
  };
  // When actor a's next slot may go; false while it waits for an arrival or for FIFO room (it is then registered).
  auto readyAt = [&](int ai, double* at) {
    SimActor& a = actors[ai];
    const Step& st = *a.work[a.next].step;
    double t = a.t;
    if (stepRecvs(st.op)) {
      SimConn& c = conn(a.channel, st.recvPeer, a.rank);
      if (c.arrived.size() <= c.taken.size()) return c.waitingReceiver = ai, false;
      t = std::max(t, c.arrived[c.taken.size()]);
    }
    if (stepSends(st.op)) {
      SimConn& c = conn(a.channel, a.rank, st.sendPeer);
      const size_t q = c.arrived.size();
      if (q >= static_cast<size_t>(shape.fifoSlots)) {
        if (c.taken.size() <= q - shape.fifoSlots) return c.waitingSender = ai, false;
        t = std::max(t, c.taken[q - shape.fifoSlots]);
      }
    }
    *at = t;
    return true;
  };
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto schedule = [&](int ai) {
    double at;
    if (actors[ai].next < actors[ai].work.size() && readyAt(ai, &at)) queue.emplace(at, ai);
  };
  for (int ai = 0; ai < static_cast<int>(actors.size()); ai++) schedule(ai);
  double end = 0;
  while (!queue.empty()) {
    const auto [at, ai] = queue.top();
    queue.pop();
    SimActor& a = actors[ai];
    const SimWork& w = a.work[a.next];
    const Step& st = *w.step;
    if (stepRecvs(st.op)) {
      SimConn& c = conn(a.channel, st.recvPeer, a.rank);
      c.taken.push_back(at);
      const int waiting = c.waitingSender;
      c.waitingSender = -1;
      if (waiting >= 0) schedule(waiting);
    }
    if (stepSends(st.op)) {
      const int to = st.sendPeer;
      const bool across = to / P != a.rank / P;
      SimLink& out = across ? nicOut[nicOf(a.rank, a.channel)] : rankOut[a.rank];
      SimLink& in = across ? nicIn[nicOf(to, a.channel)] : rankIn[to];
      out.forget(at), in.forget(at);
      const LinkCost& link = across ? shape.inter : shape.intra;
      const double d = w.slotBytes / link.bytesPerUs;
      // A shaper's burst passes at once when the link's turn comes, and is paid for after (LinkCost::burstBytes).
      const double done = takeBoth(out, in, at, d) - std::min(d, link.burstBytes / link.bytesPerUs);
      end = std::max(end, done);
      SimConn& c = conn(a.channel, a.rank, to);
      c.arrived.push_back(done);
      const int waiting = c.waitingReceiver;
      c.waitingReceiver = -1;
      if (waiting >= 0) schedule(waiting);
    }
    end = std::max(end, at);
    a.t = at;
    if (++a.slot >= w.slots) a.slot = 0, a.next++;
    schedule(ai);
  }
  for (const SimActor& a : actors)
    if (a.next < a.work.size()) return -1;
  return end;
}

// The time from its terms, and which term is the largest.
void sumUp(CostEstimate* e) {
  e->timeUs = e->latencyUs + e->cpuUs + e->bandwidthUs + e->pipelineUs;
  const double most = std::max({e->latencyUs, e->cpuUs, e->bandwidthUs});
  e->bottleneck = most == e->bandwidthUs ? e->bandwidthBound : most == e->latencyUs ? "latency" : "host CPU";
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
  double lat = 0, gbps = 0, burst = 0;
  int used = 0;
  const int got = std::sscanf(text.c_str(), "%lf,%lf%n,%lf%n", &lat, &gbps, &used, &burst, &used);
  if (got < 2 || static_cast<size_t>(used) != text.size() || lat < 0 || gbps <= 0 || burst < 0) return false;
  out->latencyUs = lat;
  out->bytesPerUs = gbps * 1000;  // GB/s = 1000 bytes a microsecond
  out->burstBytes = got == 3 ? burst : 0;
  return true;
}

CostEstimate scaleEstimate(const CostEstimate& ref, size_t refSize, size_t size) {
  CostEstimate e = ref;
  const double f = refSize > 0 ? static_cast<double>(size) / static_cast<double>(refSize) : 0;
  e.bandwidthUs *= f;
  e.pipelineUs *= f;
  e.nicBytes *= f;
  e.intraBytes *= f;
  sumUp(&e);
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
  const int nch = std::max(nChannels, algo == Algo::kTree && size >= shape.treeDualMinBytes ? 2 : 1);

  const std::vector<int> ranks = sampledRanks(shape, algo);
  const bool allRanks = static_cast<int>(ranks.size()) == n;
  std::vector<std::vector<Schedule>> built(allRanks ? nch : 0, std::vector<Schedule>(allRanks ? n : 0));
  const int nics = shape.nicPerChannel ? shape.nicsPerHost : std::min(shape.nicsPerHost, P);
  // Per sampled host (by index in `ranks` / P): each NIC's bytes out and in, and its ranks' CPU time for messages.
  std::vector<double> nicOut(ranks.size() / P * nics, 0), nicIn(nicOut.size(), 0), hostCpu(ranks.size() / P, 0);
  std::optional<Layout> layout;  // as the planner lays the buffers out, from the first schedule built
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
      if (!layout) layout.emplace(coll, size, n, nch, std::max(s.inBlocks, s.outBlocks), shape.elemBytes);
      double chLatency = 0;
      for (const Step& st : s.steps) {
        const bool sends = stepSends(st.op), recvs = stepRecvs(st.op);
        if (!sends && !recvs) continue;  // local copies: memory bandwidth, not modelled
        // A step of several blocks carries them all in one message, at one step's latency. One rank's sum stands for
        // the path where only some ranks are built: it counts the steps that move nothing too, as a ring's first
        // block passes every rank twice whatever the others carry.
        const double bytes = layout->step(st, ch);
        const bool sendAcross = sends && st.sendPeer / P != host, recvAcross = recvs && st.recvPeer / P != host;
        chLatency += sendAcross || recvAcross ? shape.inter.latencyUs : shape.intra.latencyUs;
        steps++;
        if (bytes == 0) continue;
        if (sends) (sendAcross ? nicOut[nic] : intraOut) += bytes;
        if (recvs) (recvAcross ? nicIn[nic] : intraIn) += bytes;
        if (sends) hostCpu[i / P] += sendAcross ? shape.cpuInterUs : shape.cpuIntraUs;
        if (recvs) hostCpu[i / P] += recvAcross ? shape.cpuInterUs : shape.cpuIntraUs;
      }
      if (allRanks) {
        dropEmptySteps(*layout, &s);
        built[ch][rank] = std::move(s);
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
  if (shape.coresShared && shape.cores > 0 && !hostCpu.empty()) {
    double sampled = 0;  // the hosts built stand for all of them (sampledRanks)
    for (double c : hostCpu) sampled += c;
    e.cpuUs = sampled / static_cast<double>(hostCpu.size()) * shape.hosts / shape.cores;
  } else {
    for (double c : hostCpu) e.cpuUs = std::max(e.cpuUs, shape.cores > 0 ? c / shape.cores : 0);
  }
  const double nicUs = shape.hosts > 1 ? e.nicBytes / shape.inter.bytesPerUs : 0;
  const double intraUs = e.intraBytes / shape.intra.bytesPerUs;
  e.bandwidthUs = std::max(nicUs, intraUs);
  if (allRanks && n <= kPipelineMaxRanks && shape.fifoSlots >= 2 && shape.slotBytes > 0 && layout->chanElems > 0) {
    // Tiles as the planner cuts them: half a FIFO a block, shorter where a message carries several blocks.
    const Layout& lay = *layout;
    const size_t tileElems = std::max<size_t>(
        1, shape.slotBytes * static_cast<size_t>(shape.fifoSlots) / 2 / lay.elemBytes / spanBound(coll, algo, n));
    const uint64_t nTiles = (lay.chanElems + tileElems - 1) / tileElems;
    const double piped = pipelineSim(built, shape, lay, nTiles, kPipelineSlots);
    if (piped > e.bandwidthUs) e.pipelineUs = piped - e.bandwidthUs;
  }
  e.bandwidthBound = nicUs >= intraUs ? "NIC" : "intra-host";
  sumUp(&e);
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
