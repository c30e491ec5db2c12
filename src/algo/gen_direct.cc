// Direct schedules: every rank talks to every peer itself (alltoall, gather, scatter, allgather), and the one-shot
// and two-shot allreduces built the same way. Sends go to rank+1, rank+2, ...; receives come from rank-1, rank-2, ...
// so that the first message each rank waits for is the first one its sender emits.
#include "algo/gen_util.h"

namespace chorus {
namespace gen {

namespace {

void directAllToAll(int n, int r, Steps& st) {
  // All sends read the input before any receive overwrites the output: also correct if in[i] and out[i] alias.
  for (int k = 1; k < n; ++k) st.send(mod(r + k, n), in(mod(r + k, n)));
  st.copy(in(r), out(r));
  for (int k = 1; k < n; ++k) st.recv(mod(r - k, n), out(mod(r - k, n)));
}

void directAllGather(int n, int r, Steps& st) {
  for (int k = 1; k < n; ++k) st.send(mod(r + k, n), in(0));
  st.copy(in(0), out(r));
  for (int k = 1; k < n; ++k) st.recv(mod(r - k, n), out(mod(r - k, n)));
}

void directGather(int n, int r, int root, Steps& st) {
  if (r != root) {
    st.send(root, in(0));
    return;
  }
  st.copy(in(0), out(root));
  for (int k = 1; k < n; ++k) st.recv(mod(root + k, n), out(mod(root + k, n)));
}

void directScatter(int n, int r, int root, Steps& st) {
  if (r != root) {
    st.recv(root, out(0));
    return;
  }
  // In place out[0] is in[root]: the copy comes after the sends, which read the other blocks.
  for (int k = 1; k < n; ++k) st.send(mod(root + k, n), in(mod(root + k, n)));
  st.copy(in(root), out(0));
}

// Folds block `blk` of every rank into out[dst] as ((c0 op c1) op c2) op ... op c(n-1), each c(k) received from
// rank k except this rank's own in[blk]. Every rank that runs it evaluates the same expression (op is commutative,
// so c1 op c0 is bitwise c0 op c1), hence bitwise identical results. Ranks 0 and 1 start from their own input;
// rank r >= 2 must hold the prefix c0..c(r-1) before adding its own, in out[acc] (which must not alias in[blk]).
void foldInRankOrder(int n, int r, int blk, int dst, int acc, Steps& st) {
  // After the step that receives from k >= 1, out holds c0..ck (and our own): final exactly when k == n-1.
  auto fromPeer = [&](int k, BufRef src, BufRef to) { st.recvReduceCopy(k, src, to, k == n - 1); };
  int k = 2;
  if (r <= 1) {
    st.recvReduceCopy(1 - r, in(blk), out(dst), n == 2);
  } else {
    st.recv(0, out(acc));
    for (k = 1; k < r; ++k) fromPeer(k, out(acc), out(acc));
    st.localReduce(in(blk), out(acc), r == n - 1);
    if (r == n - 1) {
      if (acc != dst) st.copy(out(acc), out(dst));
      return;
    }
    fromPeer(r + 1, out(acc), out(dst));
    k = r + 2;
  }
  for (; k < n; ++k) fromPeer(k, out(dst), out(dst));
}

}  // namespace

void genDirect(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  const int n = req.nranks, r = req.rank;
  switch (req.coll) {
    case Coll::kAllToAll:
      directAllToAll(n, r, st);
      break;
    case Coll::kAllGather:
      directAllGather(n, r, st);
      break;
    case Coll::kGather:
      directGather(n, r, req.root, st);
      break;
    case Coll::kScatter:
      directScatter(n, r, req.root, st);
      break;
    default:
      break;
  }
}

// Everyone sends its whole input to everyone, then folds in rank order. The prefix lives in out[0] itself, which
// is why it is not alias safe for n >= 3 (algoAliasSafe).
void genOneShot(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  const int n = req.nranks, r = req.rank;
  for (int k = 1; k < n; ++k) st.send(mod(r + k, n), in(0));
  foldInRankOrder(n, r, 0, 0, 0, st);
}

// Direct reduce-scatter (rank b owns block b), then direct all-gather of the owned blocks. Only rank b reduces
// block b, so every rank ends with the same bits whatever the order; rank b starts from its own input and folds
// straight into out[b] (in place, in[b] is out[b] and each element is read before it is written). Keeping block b's
// data in block b matters: the last block is shorter than the others, so no other block can stand in for it.
void genTwoShot(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  const int n = req.nranks, r = req.rank;
  for (int k = 1; k < n; ++k) st.send(mod(r + k, n), in(mod(r + k, n)));
  for (int k = 1; k < n; ++k) st.recvReduceCopy(mod(r - k, n), k == 1 ? in(r) : out(r), out(r), k == n - 1);
  for (int k = 1; k < n; ++k) st.send(mod(r + k, n), out(r));
  for (int k = 1; k < n; ++k) st.recv(mod(r - k, n), out(mod(r - k, n)));
}

}  // namespace gen
}  // namespace chorus
