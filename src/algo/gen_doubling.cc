// Recursive-doubling schedules: ceil(log2 n) rounds whose distance doubles each round, for the sizes where a
// collective's time is its steps' latency rather than its bytes (a ring takes n-1 steps, a tree 2 log2 n one after
// another). Allreduce runs over the ring order's positions: laid host by host with a power-of-two number of ranks a
// host, the first rounds stay within a host and only the last log2(hosts) cross. Allgather runs in rank order, so
// that a round's blocks are consecutive and go as one message (below). Every rank sends the whole value each round,
// so from some tens of KB the tree, ring or hierarchical schedules are faster (the tuner's thresholds,
// src/engine/tuner.cc).
#include <algorithm>
#include <utility>
#include <vector>

#include "algo/gen_util.h"

namespace chorus {
namespace gen {

namespace {

/// The most blocks a step moves (Step::span is 16 bits): over 131072 ranks a round's run is cut into messages of this.
constexpr int kMaxSpan = 65535;

/// The largest power of two <= n (n >= 1).
int floorPow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Allreduce by pairwise exchange over the largest power of two p <= n. The e = n - p ranks above p first fold their
// input into rank r - p and get the result back from it at the end. In round d = 1, 2, 4, ... < p rank r sends what it
// holds to r xor d and combines what it receives with it: both hold the same two operands, and op is commutative, so
// the pair's results are bitwise identical, and after the last round every rank's value is the same expression.
// A rank sends a block and then rewrites it (algoRewritesSentBlocks): sends must copy, never pass the address.
// In place in[0] is out[0]: every step that writes out[0] reads only out[0] or the same in[0].
void doublingAllReduce(int n, int r, Steps& st) {
  const int p = floorPow2(n), e = n - p;
  if (r >= p) {
    st.send(r - p, in(0));
    st.recv(r - p, out(0));
    return;
  }
  BufRef held = in(0);
  if (r < e) {
    st.recvReduceCopy(r + p, held, out(0), /*final=*/p == 1);
    held = out(0);
  }
  for (int d = 1; d < p; d *= 2) {
    st.send(r ^ d, held);
    st.recvReduceCopy(r ^ d, held, out(0), /*final=*/2 * d == p);
    held = out(0);
  }
  if (r < e) st.send(r + p, out(0));
}

// One round of the allgather: the blocks of `sends` go to `to` and those of `recvs` come from `from`, both lists in
// the order the sender and the receiver agree on (below). A message carries a run of consecutive blocks (Step::span):
// a power-of-two round is one message a direction, a Bruck round one or two. Two messages go before
// the first receive and each receive lets one more go, so that no FIFO holds more than two of a round's messages: the
// depth the verifier proves deadlock freedom with, and what a FIFO holds of messages of span tiles when the planner
// divides a tile by spanBound().
void gatherRound(int to, int from, const std::vector<int>& sends, const std::vector<int>& recvs, Steps& st) {
  auto runs = [](const std::vector<int>& blocks) {
    std::vector<std::pair<int, int>> out;  // (first block, span), a span at most kMaxSpan
    for (int b : blocks) {
      if (!out.empty() && out.back().first + out.back().second == b && out.back().second < kMaxSpan) {
        out.back().second++;
      } else {
        out.emplace_back(b, 1);
      }
    }
    return out;
  };
  const std::vector<std::pair<int, int>> s = runs(sends), r = runs(recvs);
  size_t sent = 0;
  for (; sent < s.size() && sent < 2; ++sent) st.send(to, out(s[sent].first), false, s[sent].second);
  for (size_t j = 0; j < r.size(); ++j) {
    st.recv(from, out(r[j].first), r[j].second);
    if (sent < s.size()) st.send(to, out(s[sent].first), false, s[sent].second), ++sent;
  }
  for (; sent < s.size(); ++sent) st.send(to, out(s[sent].first), false, s[sent].second);
}

// Allgather, in rank order (generators.cc, followsRingOrder). With n a power of two, recursive doubling: in round d
// rank r holds the d blocks of its aligned group (r & ~(d-1) and on) and swaps them with r xor d, whose group is the
// next (or previous) d blocks: one message each way a round. Otherwise Bruck's dissemination: in round d rank r holds
// blocks r, r+1, ..., r+d-1 (mod n), sends them to r-d and receives blocks r+d, ... from r+d, min(d, n-d) of them,
// so that ceil(log2 n) rounds gather all n; a round whose blocks wrap past n-1 is two runs, two messages. Blocks keep
// their ranks' names, so no rotation is needed at the end. In place in[0] is out[r]: copied onto itself.
void doublingAllGather(int n, int r, Steps& st) {
  st.copy(in(0), out(r));
  std::vector<int> sends, recvs;
  const bool pow2 = (n & (n - 1)) == 0;
  for (int d = 1; d < n; d *= 2) {
    sends.clear();
    recvs.clear();
    if (pow2) {
      const int mine = r & ~(d - 1), theirs = (r ^ d) & ~(d - 1);
      for (int j = 0; j < d; ++j) sends.push_back(mine + j), recvs.push_back(theirs + j);
      gatherRound(r ^ d, r ^ d, sends, recvs, st);
    } else {
      const int cnt = d < n - d ? d : n - d;
      for (int j = 0; j < cnt; ++j) sends.push_back(mod(r + j, n)), recvs.push_back(mod(r + d + j, n));
      // Sorted, the blocks that wrap come first: the same runs on the sender and the receiver, which list the same.
      std::sort(sends.begin(), sends.end());
      std::sort(recvs.begin(), recvs.end());
      gatherRound(mod(r - d, n), mod(r + d, n), sends, recvs, st);
    }
  }
}

}  // namespace

int doublingSpanBound(Coll coll, int n) {
  if (coll != Coll::kAllGather) return 1;
  int most = 1;
  for (int d = 1; d < n; d *= 2) most = std::max(most, std::min(d, n - d));
  return std::min(most, kMaxSpan);
}

void genDoubling(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  switch (req.coll) {
    case Coll::kAllReduce:
      doublingAllReduce(req.nranks, req.rank, st);
      break;
    case Coll::kAllGather:
      doublingAllGather(req.nranks, req.rank, st);
      break;
    default:
      break;
  }
}

}  // namespace gen
}  // namespace chorus
