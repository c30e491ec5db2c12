// Ring schedules: the ring is rank order, rank r receives from r-1 and sends to r+1 (mod n).
#include "algo/gen_util.h"

namespace chorus {
namespace gen {

namespace {

// Reduce-scatter then all-gather over n blocks. Block b starts at rank b+1 (in[b] sent raw), gathers one
// contribution per hop and becomes final at rank b, which starts the all-gather; all ranks thus receive the one final
// value of each block. Rank r reads in[r-1], in[r-2], ..., in[r+1], in[r] before its first write (out[r]), so
// in-place aliasing (in[i] == out[i]) is safe.
void ringAllReduce(int n, int r, Steps& st) {
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  st.send(next, in(mod(r - 1, n)));
  for (int j = 2; j < n; ++j) st.recvReduceSend(prev, next, in(mod(r - j, n)));
  st.recvReduceCopySend(prev, next, in(r), out(r), /*final=*/true);
  for (int j = 1; j < n - 1; ++j) st.recvCopySend(prev, next, out(mod(r - j, n)));
  st.recv(prev, out(mod(r + 1, n)));
}

// Rank r's block travels r+1, r+2, ..., r-1; in place in[0] is out[r], rewritten with itself by the copy.
void ringAllGather(int n, int r, Steps& st) {
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  st.send(next, in(0));
  st.copy(in(0), out(r));
  for (int j = 1; j < n - 1; ++j) st.recvCopySend(prev, next, out(mod(r - j, n)));
  st.recv(prev, out(mod(r + 1, n)));
}

// The reduce-scatter half of ringAllReduce; in place out[0] is in[r], read by the same (last) step that writes it.
void ringReduceScatter(int n, int r, Steps& st) {
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  st.send(next, in(mod(r - 1, n)));
  for (int j = 2; j < n; ++j) st.recvReduceSend(prev, next, in(mod(r - j, n)));
  st.recvReduceCopy(prev, in(r), out(0), /*final=*/true);
}

// Pipelined chain root, root+1, ..., root-1. Only the root reads its input (others may have none).
void ringBroadcast(int n, int r, int root, Steps& st) {
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int pos = mod(r - root, n);
  if (pos == 0) {
    st.send(next, in(0));
    st.copy(in(0), out(0));
  } else if (pos < n - 1) {
    st.recvCopySend(prev, next, out(0));
  } else {
    st.recv(prev, out(0));
  }
}

// Pipelined chain root+1, root+2, ..., root. Only the root writes its output (others may have none).
void ringReduce(int n, int r, int root, Steps& st) {
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int pos = mod(r - root - 1, n);
  if (pos == 0) {
    st.send(next, in(0));
  } else if (pos < n - 1) {
    st.recvReduceSend(prev, next, in(0));
  } else {
    st.recvReduceCopy(prev, in(0), out(0), /*final=*/true);
  }
}

}  // namespace

void genRing(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  switch (req.coll) {
    case Coll::kAllReduce:
      ringAllReduce(req.nranks, req.rank, st);
      break;
    case Coll::kAllGather:
      ringAllGather(req.nranks, req.rank, st);
      break;
    case Coll::kReduceScatter:
      ringReduceScatter(req.nranks, req.rank, st);
      break;
    case Coll::kBroadcast:
      ringBroadcast(req.nranks, req.rank, req.root, st);
      break;
    case Coll::kReduce:
      ringReduce(req.nranks, req.rank, req.root, st);
      break;
    default:
      break;
  }
}

}  // namespace gen
}  // namespace chorus
