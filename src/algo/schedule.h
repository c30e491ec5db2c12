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
enum class Algo : uint8_t { kRing, kTree, kDirect, kOneShot, kTwoShot, kHier, kRail, kNumAlgos };

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
  std::vector<Step> steps;
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
