// Schedules: algorithms as plain data (DESIGN.md "Algorithms are data").
//
// A schedule says, for one rank and one channel, which steps to run over which
// blocks of the user's buffers. The executor (kernels/executor.h) runs it; the
// verifier (verify.h) proves it symbolically; `chorus-sched` prints it.
//
// Buffers are viewed as `blocks`: the input is inBlocks blocks and the output is
// outBlocks blocks (block size = ceil(total / blocks), the last ones ragged or empty).
// The executor tiles every block identically (tile t of every block, in lockstep), so a
// schedule describes one tile; the same steps run once per tile. A step moves the
// tile-t slice of the blocks it names. For send/recv, a block is one operation of the
// group (input block i = i-th send, output block i = i-th recv).
//
// A send or receive may move several consecutive blocks as one message (Step::span): the tile-t slices of blocks
// b, b+1, ..., b+span-1, one after another. Where a tile is a whole block those are one range of memory; otherwise the
// executor gathers and scatters them. Recursive-doubling allgather sends a round's blocks this way, so that a round is
// one message whatever its number of blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

/// Collectives (and the point-to-point group) a schedule can implement.
enum class Coll : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv,
  kNumColls
};

/// Algorithm families.
enum class Algo : uint8_t { kRing, kTree, kDirect, kOneShot, kTwoShot, kHier, kRail, kDoubling, kNumAlgos };

/// Which user buffer a step reads or writes.
enum class Buf : uint8_t { kNone, kInput, kOutput };

/// What one step does. `recv` is data arriving from recvPeer; `send` goes to sendPeer.
enum class StepOp : uint8_t {
  kSend,                // send(src)
  kRecv,                // dst = recv
  kRecvReduceSend,      // send(recv op src)
  kRecvReduceCopy,      // dst = recv op src
  kRecvReduceCopySend,  // dst = recv op src; send(dst)
  kRecvCopySend,        // dst = recv; send(recv)
  kCopy,                // dst = src                (local)
  kLocalReduce,         // dst = dst op src         (local)
  kNumStepOps
};

/// One block of one buffer.
struct BufRef {
  Buf buf = Buf::kNone;
  int32_t block = 0;
};

/// One step of a schedule.
struct Step {
  StepOp op = StepOp::kSend;
  int32_t sendPeer = -1;  ///< rank we send to, or -1
  int32_t recvPeer = -1;  ///< rank we receive from, or -1
  BufRef src;             ///< local operand (kNone if the op has none)
  BufRef dst;             ///< local destination (kNone if the op has none)
  /// The value this step produces holds every rank's contribution: the executor applies
  /// the post-op (integer average's division) here, before it is written or sent.
  bool final = false;
  /// Blocks the step moves as one message: src.block (or dst.block) and the span - 1 blocks after it. Only sends and
  /// receives (kSend, kRecv) take more than one; the sender's and the receiver's spans must be equal.
  uint16_t span = 1;
};

/// The steps of one rank on one channel, and the block layout they assume.
struct Schedule {
  Coll coll = Coll::kAllReduce;
  Algo algo = Algo::kRing;
  int nranks = 1;
  int rank = 0;
  int channel = 0;
  int root = 0;       ///< for rooted collectives
  int inBlocks = 1;   ///< input viewed as this many blocks
  int outBlocks = 1;  ///< output viewed as this many blocks
  /// Pipelining across tiles: steps [lagFrom, end) of tile t run after steps [0, lagFrom) of tile t + lag (TileOrder).
  /// A tree allreduce lags its down phase by the rank's depth, so that a rank never waits for the round trip to
  /// the root: the value of tile t comes down while tiles up to t + depth go up. -1: every tile runs whole, in order.
  int lagFrom = -1;
  int lag = 0;
  std::vector<Step> steps;
};

/// The order in which a rank runs its steps over the tiles, shared by the executor's callers (host and device) and
/// the verifier. Round k runs part 0, steps [0, split) of tile k, then part 1, steps [split, nSteps) of tile k - lag,
/// each only where that tile exists; without a lag that is every tile whole, one round a tile. constexpr, so that
/// device code calls it too (nvcc's --expt-relaxed-constexpr; clang makes constexpr functions host and device).
struct TileOrder {
  uint64_t nTiles = 0;
  uint32_t nSteps = 0, split = 0, lag = 0;

  constexpr TileOrder(uint64_t tiles, uint32_t steps, int lagFrom, int lagTiles) : nTiles(tiles), nSteps(steps) {
    const bool lagged = lagFrom >= 0 && static_cast<uint32_t>(lagFrom) <= steps && lagTiles > 0;
    split = lagged ? static_cast<uint32_t>(lagFrom) : steps;
    lag = lagged ? static_cast<uint32_t>(lagTiles) : 0;
  }
  /// Rounds to run: every tile's first part, and its second `lag` rounds later.
  constexpr uint64_t rounds() const { return nTiles == 0 ? 0 : nTiles + lag; }
  /// Part `which` (0 or 1) of round k: its tile and steps [*first, *end); false when the part is empty.
  constexpr bool part(uint64_t k, int which, uint64_t* tile, uint32_t* first, uint32_t* end) const {
    if (which == 0) {
      if (k >= nTiles || split == 0) return false;
      *tile = k;
      *first = 0;
      *end = split;
      return true;
    }
    if (k < lag || k - lag >= nTiles || split == nSteps) return false;
    *tile = k - lag;
    *first = split;
    *end = nSteps;
    return true;
  }
};

/// Human-readable names, for logs, errors and printing.
const char* collName(Coll c);
const char* algoName(Algo a);
const char* stepOpName(StepOp op);

/// Whether a step op receives / sends / reduces.
bool stepRecvs(StepOp op);
bool stepSends(StepOp op);
bool stepReduces(StepOp op);

/// Prints a schedule, one step a line (e.g. "3: recvReduceSend from 2 to 4 src=in[1]").
std::string formatSchedule(const Schedule& s);

/// One step without its index (e.g. "recvReduceCopy from 2 src=in[1] dst=out[1] final").
std::string formatStep(const Step& step);

/// Whether a collective combines values: only then do `final` (post-op) and the pre-multiplier on kInput apply.
bool collReduces(Coll c);

/// Whether a collective has a root (broadcast, reduce, gather, scatter).
bool collRooted(Coll c);

/// Parses collName()/algoName() spellings, case-insensitively ("allreduce", "AllReduce"); false when unknown.
bool parseColl(const std::string& name, Coll* out);
/// Parses an algorithm name the same way ("ring", "OneShot", "twoshot").
bool parseAlgo(const std::string& name, Algo* out);

/// Whether any step reads or writes buffer `b`. Where the user may pass no buffer (reduce's or gather's output
/// off the root), a schedule that still uses it needs scratch of the buffer's size from the engine.
bool scheduleUses(const Schedule& s, Buf b);

}  // namespace chorus
