// Symbolic verifier for schedules: runs every rank of one channel on symbolic values and checks the result.
//
// A value is (logical element, tile, set of contributing ranks, expression hash, final applied). Input block b of
// rank r holds the leaf (b, {r}) in reducing collectives and (rank r's in[b], {r}) otherwise. Each ordered pair of
// ranks has one FIFO of fifoDepth messages (a message is one step's payload); a step that sends needs a free slot, a
// step that receives needs a message, and a step runs atomically. Each rank runs its steps over `tiles` tiles in its
// tile order (algo/schedule.h, TileOrder: tile after tile, or a lagged schedule's parts of two tiles a round) with
// independent data per tile and shared FIFOs, to cover the overlap of consecutive tiles.
//
// In place (inPlace), these blocks are the same memory:
//   allreduce, broadcast, reduce, alltoall: in[i] is out[i] (alltoall: chorus' own rule, NCCL has no in-place form);
//   allgather: in[0] is out[rank]; reducescatter: out[0] is in[rank];
//   gather: at the root in[0] is out[root]; scatter: at the root out[0] is in[root]; sendrecv: nothing.
// Off the root, broadcast and scatter have no input (reading it is an error); reduce and gather may use their output
// as scratch (scheduleUses tells the engine), and only the root's output is checked.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "algo/schedule.h"

namespace chorus {

/// How to run the verifier.
struct VerifyOptions {
  /// Messages each ordered pair's FIFO holds. Use >= 2: steps are atomic here (the executor streams them slot by
  /// slot), so with 1 a cycle of receive-and-send steps, any ring, never finds a free slot.
  int fifoDepth = 2;
  int tiles = 2;         ///< tiles each rank runs (at least lag + 2 where a schedule has a lag)
  bool inPlace = false;  ///< alias input and output as the collective's in-place form does
  /// kSendRecv only: the group's operations (src rank, dst rank) in call order; rank src's k-th pair is its input
  /// block k and rank dst's k-th pair is its output block k, as buildSendRecvSchedule numbers them.
  std::vector<std::pair<int, int>> sendRecvPairs;
};

/// schedules[r] is rank r's schedule for one channel. Returns "" when correct, else the first problem, naming rank,
/// step and peer.
std::string verifySchedules(const std::vector<Schedule>& schedules, const VerifyOptions& opt);

}  // namespace chorus
