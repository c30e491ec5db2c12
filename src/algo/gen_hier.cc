// Hierarchical allreduce, allgather and reduce-scatter over H hosts of P ranks each (positions hP .. hP+P-1 are host
// h's ranks, l = position mod P the local index; buildSchedule renames positions to ranks): one ring each, whose hops
// stay inside a host except once every P steps.
//
// Allgather: block (g, t) (position gP + t) travels from its owner through (g, t+1), ..., (g, t-1), then across to
// (g+1, t), on through host g+1 to (g+1, t-1), across to (g+2, t), and so on. At step j every rank handles the block
// j hops from its owner, so like a ring every rank moves one block a step, and after step j hands it on to (h, l+1)
// or, every P-th step, to (h+1, l+1). Each rank sends H-1 blocks across hosts, so each host sends (H-1) x P blocks of
// 1/n of the gathered buffer, (H-1)/H of it, the least an allgather can; a ring over all n ranks, even laid host by
// host, sends n-1 blocks over each host boundary.
//
// Reduce-scatter runs the allgather's chains backwards on the mirrored ring (local index and host counted downwards),
// which puts its hops on the same peers and ends each block's chain at its owner. Allreduce is the reduce-scatter
// then the allgather: each host's link carries 2(H-1)/H of the buffer each way, the least an allreduce can, in as
// many steps as the ring (which carries 2(n-1)/n). Measured against a reduce-scatter / allreduce across hosts /
// allgather in three phases (docs/perf/net.md), this was as fast as the ring at 1 MB where the phases lost 2-5%, and
// 2-4 points closer to the link bound above.
//
// With one host (P = n) or one rank a host (P = 1) each is the plain ring.
#include "algo/gen_util.h"

namespace chorus {
namespace gen {

namespace {

struct Twisted {
  int n, P, h, l;
  int position(int host, int local) const { return mod(host, n / P) * P + mod(local, P); }
  /// The peer the block of step j comes from, and the one it goes to.
  int prev(int j) const { return position(j % P == 0 ? h - 1 : h, l - 1); }
  int next(int j) const { return position(j % P == P - 1 ? h + 1 : h, l + 1); }
  /// Allgather: the output block of step j, j hops from its owner (h - j/P, l - j%P).
  BufRef gathered(int j) const { return out(position(h - j / P, l - j % P)); }
  /// Reduce-scatter: the input block of step j, n-1-j hops (on the mirrored ring) from its owner.
  BufRef scattered(int j) const {
    int k = n - 1 - j;
    return in(position(h + k / P, l + k % P));
  }
};

// Rank r reads every input block before its first write (out[r], at step n-1), so in place is safe as in the ring.
void allReduce(const Twisted& t, Steps& st) {
  const int own = t.position(t.h, t.l);
  st.send(t.next(0), t.scattered(0));
  for (int j = 1; j < t.n - 1; ++j) st.recvReduceSend(t.prev(j), t.next(j), t.scattered(j));
  st.recvReduceCopySend(t.prev(t.n - 1), t.next(0), in(own), out(own), /*final=*/true);
  for (int j = 1; j < t.n - 1; ++j) st.recvCopySend(t.prev(j), t.next(j), t.gathered(j));
  st.recv(t.prev(t.n - 1), t.gathered(t.n - 1));
}

// In place in[0] is out[own], rewritten with itself by the copy.
void allGather(const Twisted& t, Steps& st) {
  st.send(t.next(0), in(0));
  st.copy(in(0), t.gathered(0));
  for (int j = 1; j < t.n - 1; ++j) st.recvCopySend(t.prev(j), t.next(j), t.gathered(j));
  st.recv(t.prev(t.n - 1), t.gathered(t.n - 1));
}

// In place out[0] is in[own], read by the same (last) step that writes it.
void reduceScatter(const Twisted& t, Steps& st) {
  st.send(t.next(0), t.scattered(0));
  for (int j = 1; j < t.n - 1; ++j) st.recvReduceSend(t.prev(j), t.next(j), t.scattered(j));
  st.recvReduceCopy(t.prev(t.n - 1), t.scattered(t.n - 1), out(0), /*final=*/true);
}

}  // namespace

void genHier(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  const int n = req.nranks, P = req.localRanks > 0 ? req.localRanks : n;
  const Twisted t{n, P, req.rank / P, req.rank % P};
  switch (req.coll) {
    case Coll::kAllReduce:
      allReduce(t, st);
      break;
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
