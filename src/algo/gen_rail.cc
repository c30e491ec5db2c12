// Rail allgather and reduce-scatter over H hosts of P ranks each (positions hP .. hP+P-1 are host h's ranks, l =
// position mod P the local index, as in gen_hier.cc; buildSchedule renames positions to ranks). Rail l is the ranks
// (g, l) of every host g: blocks cross hosts only along rails, directly, and spread within a host directly.
//
// Allgather, rank (h, l): first it sends its block to (h-1, l), (h-2, l), ..., every other host's rank on its rail,
// so the network works while the host copies; then, for hosts g = h, h+1, ..., h-1 in turn, it obtains block (g, l)
// (its own; else received from (g, l)), sends it to its local peers l+1, l+2, ..., and receives block (g, l') from
// each local peer l' = l-1, l-2, .... A block is at most two hops from its owner (across, then within the host)
// where the hierarchical ring takes up to n-1; each host still sends (H-1) x P blocks across, the least an
// allgather can, and each rank sends n-1 blocks.
//
// Why it cannot deadlock (FIFO depth >= 1 a pair; the verifier checks depth 2 and 3): number each rank's progress
// (tile, host iteration). Each ordered pair carries at most one message an iteration, sent before the iteration's
// receives, and a rank in iteration i has received everything of earlier iterations. The furthest-behind rank thus
// finds its FIFOs drained (its sends go through) and its peers past their sends of its iteration (its receives go
// through): the up-front rail sends of a tile are the ones its peers wait for first, in the order they wait.
//
// Reduce-scatter mirrors it: for hosts g = h+1, ..., h-1 and last h, rank (h, l) sends its input block (g, l') to
// each local peer l', folds the P-1 contributions to block (g, l) it receives with its own, and sends that host
// partial across to (g, l) (g = h: keeps it); it ends folding the H-1 partials of its own block, from (h-1, l),
// (h-2, l), ..., the order they are sent in. With P >= 3 and H >= 2 another host's partial is built in out[0]; in
// place that is the rank's own input block, overwritten before the last iteration reads it, so it is not alias safe
// (algoAliasSafe). The user's buffers are all the room there is: the own block's fold must hold out[0] from its first
// step (which reads in place in[own]) to its last, so the other partials cannot come after it either.
//
// With one host (P = n) the allgather is the direct one; with one rank a host it is the rail exchange alone.
#include "algo/gen_util.h"

namespace chorus {
namespace gen {

namespace {

struct Rail {
  int H, P, h, l;
  int position(int host, int local) const { return mod(host, H) * P + mod(local, P); }
};

void allGather(const Rail& t, Steps& st) {
  // Nearest-needed first: host h-i takes our block in its iteration i.
  for (int i = 1; i < t.H; ++i) st.send(t.position(t.h - i, t.l), in(0));
  for (int i = 0; i < t.H; ++i) {
    const int g = t.h + i;
    const BufRef block = out(t.position(g, t.l));
    int k = 1;  // next local peer to send to (l + k)
    if (i == 0) {
      for (; k < t.P; ++k) st.send(t.position(t.h, t.l + k), in(0));
      st.copy(in(0), block);  // in place out[own] is in[0]: rewritten with itself
    } else if (t.P == 1) {
      st.recv(t.position(g, t.l), block);
    } else {
      st.recvCopySend(t.position(g, t.l), t.position(t.h, t.l + k++), block);
    }
    for (; k < t.P; ++k) st.send(t.position(t.h, t.l + k), block);
    for (k = 1; k < t.P; ++k) st.recv(t.position(t.h, t.l - k), out(t.position(g, t.l - k)));
  }
}

void reduceScatter(const Rail& t, Steps& st) {
  const int own = t.position(t.h, t.l);
  for (int i = 1; i <= t.H; ++i) {
    const int g = t.h + i;  // i == H: our own host, last
    for (int k = 1; k < t.P; ++k) st.send(t.position(t.h, t.l + k), in(t.position(g, t.l + k)));
    if (i == t.H) break;
    const BufRef mine = in(t.position(g, t.l));
    const int to = t.position(g, t.l);
    if (t.P == 1) {
      st.send(to, mine);
    } else {
      // The host partial of block (g, l): our input and each local peer's, the last fold sent straight across.
      for (int k = 1; k < t.P - 1; ++k) st.recvReduceCopy(t.position(t.h, t.l - k), k == 1 ? mine : out(0), out(0));
      st.recvReduceSend(t.position(t.h, t.l - (t.P - 1)), to, t.P == 2 ? mine : out(0));
    }
  }
  // Our own block: the local contributions, then the other hosts' partials in the order they were sent.
  std::vector<int> from;
  for (int k = 1; k < t.P; ++k) from.push_back(t.position(t.h, t.l - k));
  for (int i = 1; i < t.H; ++i) from.push_back(t.position(t.h - i, t.l));
  for (size_t k = 0; k < from.size(); ++k)
    st.recvReduceCopy(from[k], k == 0 ? in(own) : out(0), out(0), /*final=*/k + 1 == from.size());
}

}  // namespace

void genRail(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  const int n = req.nranks, P = req.localRanks > 0 ? req.localRanks : n;
  const Rail t{n / P, P, req.rank / P, req.rank % P};
  switch (req.coll) {
    case Coll::kAllGather:
      allGather(t, st);
      break;
    case Coll::kReduceScatter:
      reduceScatter(t, st);
      break;
    default:
      break;
  }
}

}  // namespace gen
}  // namespace chorus
