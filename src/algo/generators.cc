// Dispatch, block layouts, the nranks == 1 case and the point-to-point group (generators.h).
#include "algo/generators.h"

#include <algorithm>

#include "algo/gen_util.h"

namespace chorus {

namespace {

using gen::in;
using gen::out;

/// Block layout (inBlocks, outBlocks) of a supported (coll, algo) pair.
void blockLayout(Coll coll, Algo algo, int n, int* inBlocks, int* outBlocks) {
  *inBlocks = 1;
  *outBlocks = 1;
  switch (coll) {
    case Coll::kAllReduce:
      if (algo == Algo::kRing || algo == Algo::kTwoShot || algo == Algo::kHier) *inBlocks = *outBlocks = n;
      break;
    case Coll::kAllGather:
    case Coll::kGather:
      *outBlocks = n;
      break;
    case Coll::kReduceScatter:
    case Coll::kScatter:
      *inBlocks = n;
      break;
    case Coll::kAllToAll:
      *inBlocks = *outBlocks = n;
      break;
    default:
      break;
  }
}

}  // namespace

bool algoSupported(Coll coll, Algo algo, int nranks) {
  if (nranks < 1) return false;
  switch (algo) {
    case Algo::kRing:
      return coll == Coll::kAllReduce || coll == Coll::kAllGather || coll == Coll::kReduceScatter ||
             coll == Coll::kBroadcast || coll == Coll::kReduce;
    case Algo::kTree:
      return coll == Coll::kAllReduce || coll == Coll::kBroadcast || coll == Coll::kReduce;
    case Algo::kDirect:
      return coll == Coll::kAllToAll || coll == Coll::kGather || coll == Coll::kScatter || coll == Coll::kAllGather;
    case Algo::kOneShot:
    case Algo::kTwoShot:
      return coll == Coll::kAllReduce;
    case Algo::kHier:
      return coll == Coll::kAllReduce || coll == Coll::kAllGather || coll == Coll::kReduceScatter;
    case Algo::kRail:
      return coll == Coll::kAllGather || coll == Coll::kReduceScatter;
    case Algo::kDoubling:
      return coll == Coll::kAllReduce || coll == Coll::kAllGather;
    default:
      return false;
  }
}

bool algoRewritesSentBlocks(Coll coll, Algo algo) {
  return algo == Algo::kTree || (algo == Algo::kDoubling && coll == Coll::kAllReduce);
}

int spanBound(Coll coll, Algo algo, int nranks) {
  return algo == Algo::kDoubling ? gen::doublingSpanBound(coll, nranks) : 1;
}

bool algoAliasSafe(Coll coll, Algo algo, int nranks, int localRanks) {
  if (coll == Coll::kReduceScatter && algo == Algo::kRail) return localRanks < 3 || localRanks >= nranks;
  return !(coll == Coll::kAllReduce && algo == Algo::kOneShot && nranks >= 3);
}

namespace {

/// Whether `algo` lays its schedules of `coll` over the ring order (ScheduleRequest::ringOrder): genInOrder builds
/// them. Recursive-doubling allgather runs in rank order whatever the placement: a round sends a run of consecutive
/// blocks as one message (Step::span), and only in rank order are a round's blocks consecutive, so a round is one
/// message each way. Over the ring order, ranks placed round-robin would split a round into runs, a message each
/// (measured slower: docs/perf/net.md). Which rounds cross hosts then depends on the placement: host by host the last
/// log2(hosts), round-robin the first, which carry the fewest blocks.
bool followsRingOrder(Coll coll, Algo algo) {
  return algo == Algo::kRing || algo == Algo::kTree || algo == Algo::kHier || algo == Algo::kRail ||
         (algo == Algo::kDoubling && coll != Coll::kAllGather);
}

/// Whether genInOrder renames per-rank blocks through the order: all but a ring allreduce, whose n blocks are slices
/// no rank owns (below).
bool renamesBlocks(Coll coll, Algo algo) { return !(algo == Algo::kRing && coll == Coll::kAllReduce); }

/// A channel's ring order (the request's, rotated within hosts where hostRotation says so) and its inverse, the
/// position of each rank; both empty for rank order. The same for every rank of the channel.
struct ChannelOrder {
  std::vector<int> order, pos;
};

// Ring, hierarchical and tree schedules in another order: the rank at ring position p runs rank-order position p's
// steps, with peers and per-rank blocks (the n-block buffers) renamed from positions to the ranks there. A tree over
// positions laid host by host keeps most of its edges within a host: the in-order tree's subtrees are ranges of
// consecutive positions. Every rank
// renames the same way, so blocks still pair up, and a rank's own block (allgather's out[rank], reduce-scatter's
// in[rank]) stays its own.
// A ring allreduce's n blocks are slices of one buffer that no rank owns: they keep their position numbers, so a
// rank's steps still walk consecutive blocks and pack into as few step runs (device launch arguments) in any order.
void genInOrder(const ScheduleRequest& req, const ChannelOrder& co, Schedule* out,
                void (*gen)(const ScheduleRequest&, Schedule*)) {
  if (co.order.empty()) return gen(req, out);
  const bool renameBlocks = renamesBlocks(req.coll, req.algo);
  const std::vector<int>& order = co.order;
  const std::vector<int>& pos = co.pos;
  ScheduleRequest at = req;
  at.rank = pos[req.rank];
  at.root = collRooted(req.coll) ? pos[req.root] : req.root;
  at.ringOrder = nullptr;
  gen(at, out);
  auto rename = [&](BufRef& b, int blocks) {
    if (renameBlocks && b.buf != Buf::kNone && blocks == req.nranks) b.block = order[b.block];
  };
  for (Step& st : out->steps) {
    if (st.sendPeer >= 0) st.sendPeer = order[st.sendPeer];
    if (st.recvPeer >= 0) st.recvPeer = order[st.recvPeer];
    rename(st.src, st.src.buf == Buf::kInput ? out->inBlocks : out->outBlocks);
    rename(st.dst, st.dst.buf == Buf::kInput ? out->inBlocks : out->outBlocks);
  }
}

// Channels over hosts of P ranks (req.localRanks: the ring order lists each host's ranks together) rotate each host's
// ranks, so that their crossings between hosts fall on every rank of a host, and so on every NIC where ranks use the
// NIC nearest them, as NCCL lays each channel to cross on another NIC. Without it every channel would cross at the
// same ranks of each host.
//  - Ring: channel c rotates by c mod P. It enters a host at the host's (c mod P)-th rank and leaves at the one before;
//    P channels cross on every rank once in each direction.
//  - Node-aware tree (gen_tree.cc): tree A (even channels) enters a host at the order's first rank of it and tree B
//    (odd channels) at the last. Even channel c rotates by c mod P, so tree A enters at local rank c mod P; odd
//    channel c rotates by 1 - c mod P, so tree B enters at local rank P - c mod P (channel 1: P - 1, as unrotated).
//    Over P channels (P even) the trees' entries are every local rank once: A at 0, 2, 4..., B at P - 1, P - 3...
//  - A rail-aligned ring (ScheduleRequest::railAligned) walks every second host backwards: entered at the rank before
//    the (c mod P)-th and left at the (c mod P)-th, the local ranks where the host before left and the host after
//    enters. Its rotation is P + c mod P (hostRotatedOrder). Each NIC still carries one channel each way.
// This is channel req.channel's rotation (0: none).
int hostRotation(const ScheduleRequest& req) {
  const int P = req.localRanks, n = req.nranks;
  if ((req.algo != Algo::kRing && req.algo != Algo::kTree) || !gen::equalHosts(n, P)) return 0;
  const int c = req.channel;
  if (req.algo == Algo::kTree) return c % 2 == 1 ? gen::mod(1 - c, P) : c % P;
  return c % P + (req.railAligned ? P : 0);
}

/// The ring order of channel req.channel, rotated; empty when the channel keeps the order as it is.
std::vector<int> rotatedHostOrder(const ScheduleRequest& req) {
  const int rot = hostRotation(req);
  if (rot == 0) return {};
  return hostRotatedOrder(req.ringOrder, req.nranks, req.localRanks, rot);
}

ChannelOrder channelOrder(const ScheduleRequest& req) {
  ChannelOrder co;
  if (req.algo == Algo::kRing || req.algo == Algo::kTree) co.order = rotatedHostOrder(req);
  if (co.order.empty() && followsRingOrder(req.coll, req.algo) && req.ringOrder != nullptr) co.order = *req.ringOrder;
  co.pos.resize(co.order.size());
  for (size_t p = 0; p < co.order.size(); p++) co.pos[co.order[p]] = static_cast<int>(p);
  return co;
}

/// Why `req` cannot be built (empty: it can).
std::string requestProblem(const ScheduleRequest& req) {
  std::string why;
  if (req.coll >= Coll::kNumColls || req.algo >= Algo::kNumAlgos) {
    why = "unknown collective or algorithm";
  } else if (req.coll == Coll::kSendRecv) {
    why = "SendRecv schedules come from buildSendRecvSchedule";
  } else if (req.nranks < 1) {
    why = "nranks " + std::to_string(req.nranks) + " < 1";
  } else if (req.rank < 0 || req.rank >= req.nranks) {
    why = "rank " + std::to_string(req.rank) + " out of range [0, " + std::to_string(req.nranks) + ")";
  } else if (collRooted(req.coll) && (req.root < 0 || req.root >= req.nranks)) {
    why = "root " + std::to_string(req.root) + " out of range [0, " + std::to_string(req.nranks) + ")";
  } else if (req.channel < 0 || (req.nChannels > 0 && req.channel >= req.nChannels)) {
    why = "channel " + std::to_string(req.channel) + " out of range [0, " + std::to_string(req.nChannels) + ")";
  } else if (!algoSupported(req.coll, req.algo, req.nranks)) {
    why = std::string(algoName(req.algo)) + " does not implement " + collName(req.coll);
  } else if ((req.algo == Algo::kHier || req.algo == Algo::kRail) && req.localRanks != 0 &&
             (req.localRanks < 0 || req.nranks % req.localRanks != 0)) {
    why = std::string(req.algo == Algo::kHier ? "hierarchical" : "rail") +
          " needs the same number of ranks on every host (" + std::to_string(req.localRanks) + " does not divide " +
          std::to_string(req.nranks) + ")";
  } else if (followsRingOrder(req.coll, req.algo) && req.ringOrder != nullptr && !req.ringOrder->empty()) {
    std::vector<char> seen(req.nranks, 0);
    bool perm = static_cast<int>(req.ringOrder->size()) == req.nranks;
    for (size_t i = 0; perm && i < req.ringOrder->size(); i++) {
      int r = (*req.ringOrder)[i];
      perm = r >= 0 && r < req.nranks && !seen[r];
      if (perm) seen[r] = 1;
    }
    if (!perm) why = "ring order is not a permutation of the " + std::to_string(req.nranks) + " ranks";
  }
  return why;
}

/// buildSchedule once the request is known to be good and its channel's order worked out.
void buildChecked(const ScheduleRequest& req, const ChannelOrder& co, Schedule* out) {
  // Fresh fields, but the step array keeps its memory: forEachRankSchedule builds thousands of schedules into one.
  std::vector<Step> steps = std::move(out->steps);
  steps.clear();
  *out = Schedule();
  out->steps = std::move(steps);
  out->coll = req.coll;
  out->algo = req.algo;
  out->nranks = req.nranks;
  out->rank = req.rank;
  out->channel = req.channel;
  out->root = collRooted(req.coll) ? req.root : 0;
  blockLayout(req.coll, req.algo, req.nranks, &out->inBlocks, &out->outBlocks);

  if (req.nranks == 1) {
    // Every layout is 1/1 here: the collective is a local copy, which is where the post-op applies.
    gen::Steps(out).copy(in(0), gen::out(0), collReduces(req.coll));
    return;
  }
  switch (req.algo) {
    case Algo::kRing:
      genInOrder(req, co, out, gen::genRing);
      break;
    case Algo::kTree:
      genInOrder(req, co, out, gen::genTree);
      break;
    case Algo::kDirect:
      gen::genDirect(req, out);
      break;
    case Algo::kOneShot:
      gen::genOneShot(req, out);
      break;
    case Algo::kTwoShot:
      gen::genTwoShot(req, out);
      break;
    case Algo::kHier:
      genInOrder(req, co, out, gen::genHier);
      break;
    case Algo::kRail:
      genInOrder(req, co, out, gen::genRail);
      break;
    case Algo::kDoubling:
      genInOrder(req, co, out, gen::genDoubling);
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<int> hostRotatedOrder(const std::vector<int>* ringOrder, int n, int P, int rot) {
  const bool given = ringOrder != nullptr && !ringOrder->empty();
  const bool alternate = P > 0 && rot >= P;
  if (alternate) rot -= P;
  std::vector<int> order(n);
  for (int p = 0; p < n; p++) {
    int at = p;
    if (P > 0 && (rot != 0 || alternate)) {
      const int host = p / P, i = p % P;
      at = host * P + (alternate && host % 2 == 1 ? gen::mod(rot - 1 - i, P) : (i + rot) % P);
    }
    order[p] = given ? (*ringOrder)[at] : at;
  }
  return order;
}

int hostOrderCount(int nranks, int localRanks) { return gen::equalHosts(nranks, localRanks) ? 2 * localRanks : 1; }

int blockRotation(const ScheduleRequest& req) {
  if (req.nranks < 2) return -1;
  if (!followsRingOrder(req.coll, req.algo) || !renamesBlocks(req.coll, req.algo)) return -1;
  int inBlocks, outBlocks;
  blockLayout(req.coll, req.algo, req.nranks, &inBlocks, &outBlocks);
  if (inBlocks != req.nranks && outBlocks != req.nranks) return -1;  // no per-rank blocks
  const int rot = hostRotation(req);
  const bool given = req.ringOrder != nullptr && !req.ringOrder->empty();
  return rot == 0 && !given ? -1 : rot;
}

int channelKinds(Algo algo, int nranks, int localRanks) {
  const int P = localRanks;
  const bool hosts = gen::equalHosts(nranks, P);
  if (algo == Algo::kTree) return hosts && P > 2 ? (P % 2 == 0 ? P : 2 * P) : 2;
  return algo == Algo::kRing && hosts ? P : 1;
}

bool buildSchedule(const ScheduleRequest& req, Schedule* out, std::string* err) {
  std::string why = requestProblem(req);
  if (!why.empty()) {
    if (err) *err = why;
    return false;
  }
  buildChecked(req, channelOrder(req), out);
  return true;
}

bool forEachRankSchedule(const ScheduleRequest& req, const std::function<void(const Schedule&)>& f, std::string* err) {
  ScheduleRequest at = req;
  at.rank = 0;
  std::string why = requestProblem(at);
  if (!why.empty()) {
    if (err) *err = why;
    return false;
  }
  const ChannelOrder co = channelOrder(at);
  Schedule s;
  for (int r = 0; r < req.nranks; r++) {
    at.rank = r;
    buildChecked(at, co, &s);
    f(s);
  }
  return true;
}

Schedule buildSendRecvSchedule(int nranks, int rank, const std::vector<int>& sendPeers,
                               const std::vector<int>& recvPeers) {
  Schedule s;
  s.coll = Coll::kSendRecv;
  s.algo = Algo::kDirect;
  s.nranks = nranks;
  s.rank = rank;
  s.inBlocks = static_cast<int>(sendPeers.size());
  s.outBlocks = static_cast<int>(recvPeers.size());
  gen::Steps steps(&s);
  const int n = std::max(nranks, 1);

  // Self pairs are local copies, matched in order like the operations with any other peer.
  std::vector<int> selfSends, selfRecvs;
  for (int i = 0; i < s.inBlocks; ++i) {
    if (sendPeers[i] == rank) selfSends.push_back(i);
  }
  for (int j = 0; j < s.outBlocks; ++j) {
    if (recvPeers[j] == rank) selfRecvs.push_back(j);
  }
  for (size_t k = 0; k < std::min(selfSends.size(), selfRecvs.size()); ++k) {
    steps.copy(in(selfSends[k]), out(selfRecvs[k]));
  }

  // Stable sorts keep several operations with one peer in call order: the k-th send to p meets p's k-th receive.
  std::vector<int> order;
  for (int i = 0; i < s.inBlocks; ++i) {
    if (sendPeers[i] != rank) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return gen::mod(sendPeers[a] - rank, n) < gen::mod(sendPeers[b] - rank, n); });
  for (int i : order) steps.send(sendPeers[i], in(i));

  order.clear();
  for (int j = 0; j < s.outBlocks; ++j) {
    if (recvPeers[j] != rank) order.push_back(j);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return gen::mod(rank - recvPeers[a], n) < gen::mod(rank - recvPeers[b], n); });
  for (int j : order) steps.recv(recvPeers[j], out(j));
  return s;
}

}  // namespace chorus
