// Schedule generators: one function per algorithm family, all emitting schedule.h's data model.
//
// Ring order is rank order (next = rank+1) unless the request gives another (ScheduleRequest::ringOrder: the ranks in
// ring order, e.g. grouped by host so that each host is entered and left once); trees are built over the same order.
// Over hosts of equal size (localRanks) ring and tree channels rotate each host's ranks (ring channel c by c mod
// localRanks), so that the channels enter and leave hosts on different ranks, and so on different NICs.
// Trees are NCCL's double binary tree:
// even channels use tree A (in-order binary tree, root 0), odd channels its mirror (even nranks) or shift by one (odd
// nranks), so that a rank that is a leaf in one tree is interior in the other. Rooted collectives relabel the chosen
// tree so that it hangs from `root`. With several hosts (localRanks, below) the tree is node-aware, as NCCL's on a
// cluster: the double binary tree over the hosts, one entry rank a host (tree A local rank 0, tree B local rank P-1),
// and a chain through each host's ranks from its entry, so that each tree crosses hosts H-1 times and a rank has up to
// 3 children (gen_tree.cc). A rooted collective's root is its host's entry and that host the host tree's root.
//
// Recursive doubling (gen_doubling.cc) runs allreduce and allgather in ceil(log2 n) rounds over the ring order's
// positions, for small sizes: pairwise exchange for allreduce (ranks above the largest power of two fold in first),
// recursive doubling for allgather over a power of two ranks and Bruck's dissemination otherwise.
//
// Block layouts (inBlocks/outBlocks): allreduce ring/two-shot n/n, tree/one-shot/doubling 1/1; allgather 1/n;
// reducescatter n/1; broadcast and reduce 1/1; alltoall n/n; gather 1/n; scatter n/1; sendrecv = number of sends/recvs.
//
// Every schedule stays correct when the user's buffers alias (in place: verify.h lists the alias of each collective)
// except one-shot allreduce for nranks >= 3 and rail reduce-scatter over hosts of 3 ranks or more: see
// algoAliasSafe(). Off the root, broadcast and scatter never read the input; tree reduce keeps a partial in the
// output of ranks with two or more children, so off the root the engine supplies scratch when the user passes no
// output (scheduleUses() says which schedules need it).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algo/schedule.h"

namespace chorus {

/// What to generate: one rank's steps on one channel.
struct ScheduleRequest {
  Coll coll;
  Algo algo;
  int nranks;
  int rank;
  int channel;    ///< tree: parity picks tree A or B; ring and tree over hosts: the rotation; others ignore it
  int nChannels;  ///< only checked (channel < nChannels when > 0)
  int root;       ///< rooted collectives only
  /// Ring, hierarchical, rail and tree: the ranks in ring order (a permutation of 0..nranks-1); null or empty: rank
  /// order. A rank's ring neighbours are the ranks before and after it here, and trees are built over these positions;
  /// per-rank blocks stay the ranks' own.
  const std::vector<int>* ringOrder = nullptr;
  /// Hierarchical, rail, tree and ring: ranks a host, every host the same; the ring order (else rank order) lists the
  /// hosts' ranks one host after another. 0: one host. Tree builds the node-aware tree when localRanks >= 2 divides
  /// nranks into 2 or more hosts, else the flat tree (0, 1 and nranks give the same schedules); ring and tree then
  /// rotate each host's ranks by channel (channelKinds).
  int localRanks = 0;
  /// Ring channels over such hosts: every second host of the order (the 2nd, 4th...) is walked backwards, entered at
  /// the local rank where the host before it was left, so that each crossing between hosts joins the same local rank
  /// on both sides, and so the same NIC rail where a GPU's nearest NIC is the same on every host (NCCL_CROSS_NIC 0 or
  /// 2). Over an odd number of hosts the crossing from the last host back to the first still joins two rails. false:
  /// every host walked forwards (NCCL_CROSS_NIC=1), each crossing from a host's (c-1)-th rank to the next's c-th.
  bool railAligned = true;
};

/// Whether `algo` implements `coll` for nranks (e.g. tree only for allreduce/broadcast/reduce).
bool algoSupported(Coll coll, Algo algo, int nranks);

/// Whether the schedule stays correct when input and output alias. False for one-shot allreduce with nranks >= 3:
/// every rank folds the contributions in rank order 0..n-1 (bitwise identical results), so rank r >= 2 must hold the
/// prefix c0+c1 while its own input is still needed, and a 1-block layout has nowhere else to keep it. False too for
/// rail reduce-scatter over several hosts of localRanks >= 3 ranks (localRanks as in ScheduleRequest): it builds the
/// other hosts' partials in out[0], in place its own input block, before it folds that block.
/// Callers run it out of place only: stage an in-place call's input in scratch, or pick another algorithm.
bool algoAliasSafe(Coll coll, Algo algo, int nranks, int localRanks = 0);

/// Whether a rank's schedule may rewrite a block after a step sent it (tree reduce and allreduce accumulate in their
/// output; recursive-doubling allreduce sends its value and then combines into it): such sends must copy the data into
/// the FIFO, never pass the block's address (single copy within a host, sending by address over a net).
bool algoRewritesSentBlocks(Coll coll, Algo algo);

/// The largest Step::span any rank's schedule of (coll, algo) over nranks uses: recursive-doubling allgather's largest
/// round, 1 elsewhere. The same on every rank, so that the planner, which divides the tile by it (a message carries
/// span tiles), tiles every rank alike.
int spanBound(Coll coll, Algo algo, int nranks);

/// How many different schedules `algo` builds over the channels: channel c builds what channel c mod this builds.
/// Rings over hosts of equal size (localRanks P as in ScheduleRequest) rotate P; trees alternate two, and over such
/// hosts rotate too: P kinds for even P (the two trees' rotations pair up), 2P for odd P; the other families build one.
int channelKinds(Algo algo, int nranks, int localRanks);

/// The ring order (rank order when null or empty) with each host's ranks rotated by `rot`, as a channel of rotation
/// rot lays them (hosts of P ranks, listed one after another; rot 0 or P <= 0: the order as it is). rot in [P, 2P) is
/// a rail-aligned ring's (ScheduleRequest::railAligned): rotated by rot - P, with every second host's ranks reversed,
/// so that host entered at its (rot - P - 1)-th rank and left at its (rot - P)-th.
std::vector<int> hostRotatedOrder(const std::vector<int>* ringOrder, int n, int P, int rot);

/// How many orders hostRotatedOrder lays over hosts of localRanks ranks (rot from 0 to this - 1): 2P over equal hosts
/// (every rotation, plain and rail-aligned), else 1.
int hostOrderCount(int nranks, int localRanks);

/// How the per-rank blocks of req's schedules (allgather's out[r], reduce-scatter's in[r]...) follow the ring:
/// r >= 0 when the rank at ring position p works on blocks named hostRotatedOrder(req.ringOrder, n, localRanks,
/// r)[q] for positions q, so that numbered by position they would walk consecutive blocks; -1 when no block is named
/// through a ring order (rank order unrotated, ring allreduce's position-numbered slices, layouts without per-rank
/// blocks). Device launches pack such steps by position and look the blocks up (kernels/executor.h, StepRun).
int blockRotation(const ScheduleRequest& req);

/// Builds the steps of one rank on one channel; false + *err when unsupported.
bool buildSchedule(const ScheduleRequest& req, Schedule* out, std::string* err);

/// Calls f with the schedule of every rank 0..nranks-1 in turn (req.rank ignored): what buildSchedule builds for each,
/// with the checks and the channel's ring order (its rotation and inverse) worked out once rather than once a rank,
/// so that all ranks of a channel cost their steps, not nranks each. false + *err when unsupported.
bool forEachRankSchedule(const ScheduleRequest& req, const std::function<void(const Schedule&)>& f, std::string* err);

/// Point-to-point group: this rank sends to sendPeers[i] (input block i) and receives from recvPeers[j] (output
/// block j). Per tile: local copies for self pairs (k-th self send to k-th self recv), then sends to rank+1, rank+2...,
/// then receives from rank-1, rank-2...; several operations with one peer keep their order and match in that order.
/// Sends run before receives, so more than fifoDepth operations per tile with one peer that also sends to us deadlock:
/// the planner splits such groups.
Schedule buildSendRecvSchedule(int nranks, int rank, const std::vector<int>& sendPeers,
                               const std::vector<int>& recvPeers);

/// Neighbours of a rank in one binary tree, the flat double binary tree (ScheduleRequest::localRanks ignored); -1
/// where absent.
struct TreeLinks {
  int parent = -1;
  int children[2] = {-1, -1};
};

/// The double binary tree of `channel` (parity picks tree A or B), relabelled so that `root` is its root (root 0
/// gives tree A unchanged; allreduce uses tree B's own root, rank 1 or nranks-1, via treeRoot()).
TreeLinks treeLinks(int nranks, int rank, int channel, int root);

/// The root of the double binary tree of `channel` before any relabelling: 0 for tree A; 1 (odd nranks) or
/// nranks-1 (even) for tree B.
int treeRoot(int nranks, int channel);

}  // namespace chorus
