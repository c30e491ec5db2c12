// Hierarchical allreduce over hosts of P ranks each: reduce-scatter within each host, allreduce across hosts among
// the ranks with the same local index, allgather within each host. Each host's link carries 2(H-1)/H of the buffer
// each way, the least any allreduce can (a ring over all H x P ranks carries 2(HP-1)/(HP)); the rest stays inside
// the hosts. The steps are written in ring positions (host h's ranks are positions hP .. hP+P-1, local index l);
// buildSchedule renames positions to ranks.
//
// Blocks: n = H x P; block l*H + g is sub-block g of local slice l. Phase 1 leaves the host's sum of slice l in
// local rank l's output, phase 2 the global sum, phase 3 copies every slice to every local rank. Only inputs are
// read in phase 1 (the pre-multiplier applies there), and the last reduction of each block, in phase 2, is final.
// One host (P = n) is a reduce-scatter and an allgather ring; one rank a host (P = 1) is a ring allreduce.
#include "algo/gen_util.h"

namespace chorus {
namespace gen {

void genHier(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  const int n = req.nranks, P = req.localRanks > 0 ? req.localRanks : n, H = n / P;
  const int pos = req.rank, h = pos / P, l = pos % P;
  auto position = [P](int host, int local) { return host * P + local; };
  auto blk = [H](int slice, int sub) { return slice * H + sub; };
  const bool hostsToo = H > 1;
  if (P > 1) {
    // Phase 1: ring reduce-scatter of the P slices among the host's ranks.
    const int next = position(h, mod(l + 1, P)), prev = position(h, mod(l - 1, P));
    // One sub-block at a time: each is a ring pass of one send ahead, so a FIFO holds at most one of its messages.
    for (int g = 0; g < H; ++g) {
      st.send(next, in(blk(mod(l - 1, P), g)));
      for (int j = 2; j < P; ++j) st.recvReduceSend(prev, next, in(blk(mod(l - j, P), g)));
      st.recvReduceCopy(prev, in(blk(l, g)), out(blk(l, g)), /*final=*/!hostsToo);
    }
  }
  if (hostsToo) {
    // Phase 2: ring allreduce of slice l's H sub-blocks among the hosts' local rank l (after phase 1 they hold the
    // hosts' partial sums in their outputs; with one rank a host, the inputs themselves).
    const int next = position(mod(h + 1, H), l), prev = position(mod(h - 1, H), l);
    auto src = [&](int g) { return P > 1 ? out(blk(l, g)) : in(blk(l, g)); };
    st.send(next, src(mod(h - 1, H)));
    for (int j = 2; j < H; ++j) st.recvReduceSend(prev, next, src(mod(h - j, H)));
    st.recvReduceCopySend(prev, next, src(h), out(blk(l, h)), /*final=*/true);
    for (int j = 1; j < H - 1; ++j) st.recvCopySend(prev, next, out(blk(l, mod(h - j, H))));
    st.recv(prev, out(blk(l, mod(h + 1, H))));
  }
  if (P > 1) {
    // Phase 3: ring allgather of the slices among the host's ranks.
    const int next = position(h, mod(l + 1, P)), prev = position(h, mod(l - 1, P));
    for (int g = 0; g < H; ++g) {
      st.send(next, out(blk(l, g)));
      for (int j = 1; j < P - 1; ++j) st.recvCopySend(prev, next, out(blk(mod(l - j, P), g)));
      st.recv(prev, out(blk(mod(l + 1, P), g)));
    }
  }
}

}  // namespace gen
}  // namespace chorus
