// Tree schedules over NCCL's double binary tree (generators.h), written from its published description.
//
// Node-aware trees (ScheduleRequest::localRanks = P >= 2, H = nranks / P >= 2 hosts of consecutive positions hP ..
// hP+P-1): the double binary tree runs over the H hosts, one entry rank a host, and inside each host a chain links
// the host's P ranks from the entry. The entry has up to three children (the chain's next rank and two remote
// hosts' entries, NCCL's NCCL_MAX_TREE_ARITY); every other rank has the chain's neighbours only. Each tree enters and
// leaves a host once, so it crosses hosts H-1 times where the flat tree over ring positions crosses more often (8
// hosts x 8: 22 of the two trees' 126 edges against 14).
//
// Entry and chain per tree: tree A (even channels) enters each host at local rank 0 and chains upwards (0 -> 1 ->
// ... -> P-1); tree B (odd channels) enters at local rank P-1 and chains downwards (P-1 -> ... -> 0). The host tree
// already makes a host interior in one tree a leaf in the other (every host for even H); the two entries also put
// each tree's cross-host traffic on a different rank of every host (a different NIC when ranks pick NICs by local
// index), and the two chains run each intra-host link in opposite directions, so that on each direction of a link
// one tree's up phase meets the other's down phase rather than both up phases. Rooted collectives make the root's host
// the host tree's root and the root its entry: that host's chain starts at the root and goes round in the tree's
// direction (tree A from local rank l: l, l+1, ..., P-1, 0, ..., l-1). Allreduce uses each host tree's natural root and
// that host's usual entry.
//
// Channels past the first two see a host's ranks rotated in the ring order (buildSchedule, generators.cc), so "local
// rank 0" and "P-1" here are positions in that order: each channel's trees enter a host at other ranks.
//
// Child order: the up phase takes the chain child first (its partial is P-1 fast hops away) and the remote children
// after; the down phase feeds the remote children first (their subtrees are deeper and slower) and the chain last.
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

/// One rank's neighbours in a tree of arity up to 3. `up` and `down` hold the same children: `up` in the order the
/// up phase receives from them, `down` in the order the down phase sends to them.
struct Node {
  int parent = -1;
  std::vector<int> up;
  std::vector<int> down;
};

// The flat double binary tree: both phases take the children in TreeLinks order.
Node flatNode(const TreeLinks& t) {
  Node node;
  node.parent = t.parent;
  for (int c : t.children) {
    if (c >= 0) node.up.push_back(c);
  }
  node.down = node.up;
  return node;
}

// The node-aware tree (header comment) at position `pos` of n = H x P; rootPos < 0 for allreduce (the host tree's
// natural root), else the root's position.
Node hostChainNode(int n, int P, int pos, int channel, int rootPos) {
  const int H = n / P, h = pos / P;
  const bool treeB = channel % 2 == 1;
  const int dir = treeB ? -1 : 1;
  const int rootHost = rootPos >= 0 ? rootPos / P : treeRoot(H, channel);
  auto entry = [&](int host) { return rootPos >= 0 && host == rootHost ? rootPos % P : (treeB ? P - 1 : 0); };
  // The i-th position of host's chain, and where pos sits on its own host's chain.
  auto chain = [&](int host, int i) { return host * P + mod(entry(host) + dir * i, P); };
  const int i = mod((pos % P - entry(h)) * dir, P);

  Node node;
  if (i + 1 < P) node.up.push_back(chain(h, i + 1));
  if (i > 0) {
    node.parent = chain(h, i - 1);
    node.down = node.up;
    return node;
  }
  const TreeLinks t = treeLinks(H, h, channel, rootHost);
  if (t.parent >= 0) node.parent = chain(t.parent, 0);
  for (int c : t.children) {
    if (c < 0) continue;
    node.up.push_back(chain(c, 0));
    node.down.push_back(chain(c, 0));
  }
  if (i + 1 < P) node.down.push_back(chain(h, i + 1));
  return node;
}

// Up phase of a reduction: the subtree's partial goes to the parent. A node with several children keeps the partial
// of those before the last in the output block while the next arrives (scratch for reduce off the root).
void reduceUp(const Node& t, gen::Steps& st) {
  const std::vector<int>& c = t.up;
  if (c.empty()) {
    st.send(t.parent, in(0));
    return;
  }
  if (c.size() == 1) {
    st.recvReduceSend(c[0], t.parent, in(0));
    return;
  }
  st.recvReduceCopy(c[0], in(0), out(0));
  for (size_t k = 1; k + 1 < c.size(); ++k) st.recvReduceCopy(c[k], out(0), out(0));
  st.recvReduceSend(c.back(), t.parent, out(0));
}

// Down phase at a non-root: receive the value from the parent and forward it to the children.
void broadcastDown(const Node& t, gen::Steps& st) {
  const std::vector<int>& c = t.down;
  if (c.empty()) {
    st.recv(t.parent, out(0));
    return;
  }
  st.recvCopySend(t.parent, c[0], out(0));
  for (size_t k = 1; k < c.size(); ++k) st.send(c[k], out(0));
}

// Reduce up to the tree's root, which finalises the one value and sends it back down: all ranks get that value.
// Below the root the down phase runs `depth` tiles behind the up phase (Schedule::lag): the root sends tile t down as
// soon as it has it, and a rank at depth d receives it in the round its parent, at depth d - 1, has sent it in one
// round before, so no rank waits for a round trip to the root (NCCL overlaps a tree's two phases the same way). The
// down FIFO then holds up to two tiles in flight, which is what a FIFO holds (a tile is half of it).
void treeAllReduce(const Node& t, int depth, gen::Steps& st, Schedule* s) {
  if (t.parent >= 0) {
    reduceUp(t, st);
    s->lagFrom = static_cast<int>(s->steps.size());
    s->lag = depth;
    broadcastDown(t, st);
    return;
  }
  // Root (n >= 2, so at least one child): the last child's receive produces the final value and starts the down
  // phase towards that child; the others get it after, in down order.
  const std::vector<int>& c = t.up;
  if (c.size() == 1) {
    st.recvReduceCopySend(c[0], c[0], in(0), out(0), /*final=*/true);
    return;
  }
  st.recvReduceCopy(c[0], in(0), out(0));
  for (size_t k = 1; k + 1 < c.size(); ++k) st.recvReduceCopy(c[k], out(0), out(0));
  st.recvReduceCopySend(c.back(), c.back(), out(0), out(0), /*final=*/true);
  for (int d : t.down) {
    if (d != c.back()) st.send(d, out(0));
  }
}

void treeBroadcast(const Node& t, gen::Steps& st) {
  if (t.parent >= 0) {
    broadcastDown(t, st);
    return;
  }
  for (int c : t.down) st.send(c, in(0));
  st.copy(in(0), out(0));
}

void treeReduce(const Node& t, gen::Steps& st) {
  if (t.parent >= 0) {
    reduceUp(t, st);
    return;
  }
  const std::vector<int>& c = t.up;
  st.recvReduceCopy(c[0], in(0), out(0), /*final=*/c.size() == 1);
  for (size_t k = 1; k < c.size(); ++k) st.recvReduceCopy(c[k], out(0), out(0), /*final=*/k + 1 == c.size());
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
  const int n = req.nranks, P = req.localRanks;
  const bool allReduce = req.coll == Coll::kAllReduce;
  // Allreduce has no root of its own: it runs each tree from its natural root, as NCCL does. One host, one rank a
  // host, or hosts that do not divide the ranks: the flat tree over all positions.
  const bool hostChains = equalHosts(n, P);
  auto nodeAt = [&](int pos) {
    return hostChains ? hostChainNode(n, P, pos, req.channel, allReduce ? -1 : req.root)
                      : flatNode(treeLinks(n, pos, req.channel, allReduce ? treeRoot(n, req.channel) : req.root));
  };
  const Node t = nodeAt(req.rank);
  switch (req.coll) {
    case Coll::kAllReduce: {
      int depth = 0;
      for (int p = t.parent; p >= 0 && depth < n; p = nodeAt(p).parent) depth++;
      treeAllReduce(t, depth, st, s);
      break;
    }
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
