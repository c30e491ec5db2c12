// Tree schedules over NCCL's double binary tree (generators.h), written from its published description.
#include <vector>

#include "algo/gen_util.h"

namespace chorus {

namespace {

using gen::in;
using gen::mod;
using gen::out;

// In-order binary tree over labels 0..n-1. Label 0 is the root with one child, the largest power of two below n.
// A label v > 0 with lowest set bit b spans the in-order range [v-b+1, v+b-1]: its children are v-b/2 and v+b/2,
// the right one moving down to v+b/4, v+b/8... while it is past n-1. Its parent is v+b when v is a left half (bit
// 2b of v clear) and v-b when it is a right half; a left half whose parent would be past n-1 is the moved-down right
// child of v-b.
TreeLinks inOrderTree(int n, int v) {
  TreeLinks t;
  if (v == 0) {
    int top = 1;
    while (top * 2 <= n - 1) top *= 2;
    if (n > 1) t.children[0] = top;
    return t;
  }
  const int b = v & -v;
  t.parent = (v ^ b) | (b << 1);
  if (t.parent >= n) t.parent = v ^ b;
  if (b > 1) {
    t.children[0] = v - b / 2;
    int step = b / 2;
    while (step > 0 && v + step >= n) step /= 2;
    if (step > 0) t.children[1] = v + step;
  }
  return t;
}

/// Applies a relabelling to every link of a tree.
template <typename F>
TreeLinks mapLinks(TreeLinks t, F f) {
  if (t.parent >= 0) t.parent = f(t.parent);
  for (int& c : t.children) {
    if (c >= 0) c = f(c);
  }
  return t;
}

// Tree A is the in-order tree itself; tree B shifts it by one (odd n) or mirrors it (even n).
TreeLinks naturalTree(int n, int rank, bool treeB) {
  if (!treeB) return inOrderTree(n, rank);
  if (n % 2 == 1) return mapLinks(inOrderTree(n, mod(rank - 1, n)), [n](int x) { return (x + 1) % n; });
  return mapLinks(inOrderTree(n, n - 1 - rank), [n](int x) { return n - 1 - x; });
}

std::vector<int> childrenOf(const TreeLinks& t) {
  std::vector<int> c;
  for (int x : t.children) {
    if (x >= 0) c.push_back(x);
  }
  return c;
}

// Up phase of a reduction: the subtree's partial goes to the parent. A node with two children must keep the first
// child's partial somewhere while the second arrives: the output block (scratch for reduce off the root).
void reduceUp(const TreeLinks& t, gen::Steps& st) {
  const std::vector<int> c = childrenOf(t);
  if (c.empty()) {
    st.send(t.parent, in(0));
  } else if (c.size() == 1) {
    st.recvReduceSend(c[0], t.parent, in(0));
  } else {
    st.recvReduceCopy(c[0], in(0), out(0));
    st.recvReduceSend(c[1], t.parent, out(0));
  }
}

// Down phase at a non-root: receive the value from the parent and forward it to the children.
void broadcastDown(const TreeLinks& t, gen::Steps& st) {
  const std::vector<int> c = childrenOf(t);
  if (c.empty()) {
    st.recv(t.parent, out(0));
    return;
  }
  st.recvCopySend(t.parent, c[0], out(0));
  for (size_t i = 1; i < c.size(); ++i) st.send(c[i], out(0));
}

// Reduce up to the tree's root, which finalises the one value and sends it back down: all ranks get that value.
void treeAllReduce(const TreeLinks& t, gen::Steps& st) {
  const std::vector<int> c = childrenOf(t);
  if (t.parent >= 0) {
    reduceUp(t, st);
    broadcastDown(t, st);
    return;
  }
  // Root (n >= 2, so at least one child): the last child's receive produces the final value and starts the down
  // phase towards that child; the other child gets it after.
  if (c.size() == 1) {
    st.recvReduceCopySend(c[0], c[0], in(0), out(0), /*final=*/true);
  } else {
    st.recvReduceCopy(c[0], in(0), out(0));
    st.recvReduceCopySend(c[1], c[1], out(0), out(0), /*final=*/true);
    st.send(c[0], out(0));
  }
}

void treeBroadcast(const TreeLinks& t, gen::Steps& st) {
  if (t.parent >= 0) {
    broadcastDown(t, st);
    return;
  }
  for (int c : childrenOf(t)) st.send(c, in(0));
  st.copy(in(0), out(0));
}

void treeReduce(const TreeLinks& t, gen::Steps& st) {
  if (t.parent >= 0) {
    reduceUp(t, st);
    return;
  }
  const std::vector<int> c = childrenOf(t);
  if (c.size() == 1) {
    st.recvReduceCopy(c[0], in(0), out(0), /*final=*/true);
  } else {
    st.recvReduceCopy(c[0], in(0), out(0));
    st.recvReduceCopy(c[1], out(0), out(0), /*final=*/true);
  }
}

}  // namespace

int treeRoot(int nranks, int channel) {
  if (channel % 2 == 0 || nranks <= 1) return 0;
  return nranks % 2 == 1 ? 1 : nranks - 1;
}

TreeLinks treeLinks(int nranks, int rank, int channel, int root) {
  const int n = nranks;
  if (n <= 1) return TreeLinks();
  const int natRoot = treeRoot(n, channel);
  // Rotate labels so that the natural root lands on `root`; rotation keeps the tree's shape.
  const TreeLinks t = naturalTree(n, mod(rank - root + natRoot, n), channel % 2 == 1);
  return mapLinks(t, [=](int x) { return mod(x - natRoot + root, n); });
}

namespace gen {

void genTree(const ScheduleRequest& req, Schedule* s) {
  Steps st(s);
  // Allreduce has no root of its own: it runs each tree from its natural root, as NCCL does.
  const int root = req.coll == Coll::kAllReduce ? treeRoot(req.nranks, req.channel) : req.root;
  const TreeLinks t = treeLinks(req.nranks, req.rank, req.channel, root);
  switch (req.coll) {
    case Coll::kAllReduce:
      treeAllReduce(t, st);
      break;
    case Coll::kBroadcast:
      treeBroadcast(t, st);
      break;
    case Coll::kReduce:
      treeReduce(t, st);
      break;
    default:
      break;
  }
}

}  // namespace gen
}  // namespace chorus
