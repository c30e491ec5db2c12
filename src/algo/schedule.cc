// Names and printing for schedules (schedule.h).
#include "algo/schedule.h"

#include <cctype>
#include <string>

namespace chorus {

namespace {

// NCCL's own spellings (ncclFuncStr, NCCL_ALGO) where NCCL has the name.
constexpr const char* kCollNames[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",
                                      "AllToAll",  "Gather",    "Scatter",       "SendRecv"};
constexpr const char* kAlgoNames[] = {"Ring", "Tree", "Direct", "OneShot", "TwoShot", "Hierarchical", "Rail",
                                      "RecDoubling"};
constexpr const char* kStepOpNames[] = {
    "send", "recv", "recvReduceSend", "recvReduceCopy", "recvReduceCopySend", "recvCopySend", "copy", "localReduce"};
static_assert(sizeof(kCollNames) / sizeof(kCollNames[0]) == static_cast<size_t>(Coll::kNumColls));
static_assert(sizeof(kAlgoNames) / sizeof(kAlgoNames[0]) == static_cast<size_t>(Algo::kNumAlgos));
static_assert(sizeof(kStepOpNames) / sizeof(kStepOpNames[0]) == static_cast<size_t>(StepOp::kNumStepOps));

bool equalsIgnoreCase(const std::string& a, const char* b) {
  size_t i = 0;
  for (; i < a.size() && b[i] != '\0'; ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return i == a.size() && b[i] == '\0';
}

std::string formatRef(const char* key, BufRef ref, int span) {
  if (ref.buf == Buf::kNone) return "";
  std::string blocks = std::to_string(ref.block);
  if (span > 1) blocks += ".." + std::to_string(ref.block + span - 1);
  return std::string(" ") + key + (ref.buf == Buf::kInput ? "=in[" : "=out[") + blocks + "]";
}

}  // namespace

const char* collName(Coll c) { return c < Coll::kNumColls ? kCollNames[static_cast<int>(c)] : "?"; }

const char* algoName(Algo a) { return a < Algo::kNumAlgos ? kAlgoNames[static_cast<int>(a)] : "?"; }

const char* stepOpName(StepOp op) { return op < StepOp::kNumStepOps ? kStepOpNames[static_cast<int>(op)] : "?"; }

bool stepRecvs(StepOp op) {
  switch (op) {
    case StepOp::kRecv:
    case StepOp::kRecvReduceSend:
    case StepOp::kRecvReduceCopy:
    case StepOp::kRecvReduceCopySend:
    case StepOp::kRecvCopySend:
      return true;
    default:
      return false;
  }
}

bool stepSends(StepOp op) {
  switch (op) {
    case StepOp::kSend:
    case StepOp::kRecvReduceSend:
    case StepOp::kRecvReduceCopySend:
    case StepOp::kRecvCopySend:
      return true;
    default:
      return false;
  }
}

bool stepReduces(StepOp op) {
  switch (op) {
    case StepOp::kRecvReduceSend:
    case StepOp::kRecvReduceCopy:
    case StepOp::kRecvReduceCopySend:
    case StepOp::kLocalReduce:
      return true;
    default:
      return false;
  }
}

bool collReduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }

bool collRooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

bool parseColl(const std::string& name, Coll* out) {
  for (int i = 0; i < static_cast<int>(Coll::kNumColls); ++i) {
    if (equalsIgnoreCase(name, kCollNames[i])) {
      *out = static_cast<Coll>(i);
      return true;
    }
  }
  return false;
}

bool parseAlgo(const std::string& name, Algo* out) {
  for (int i = 0; i < static_cast<int>(Algo::kNumAlgos); ++i) {
    if (equalsIgnoreCase(name, kAlgoNames[i])) {
      *out = static_cast<Algo>(i);
      return true;
    }
  }
  return false;
}

bool scheduleUses(const Schedule& s, Buf b) {
  for (const Step& step : s.steps) {
    if (step.src.buf == b || step.dst.buf == b) return true;
  }
  return false;
}

std::string formatStep(const Step& step) {
  std::string line = stepOpName(step.op);
  if (step.recvPeer >= 0) line += " from " + std::to_string(step.recvPeer);
  if (step.sendPeer >= 0) line += " to " + std::to_string(step.sendPeer);
  line += formatRef("src", step.src, step.span);
  line += formatRef("dst", step.dst, step.span);
  if (step.final) line += " final";
  return line;
}

std::string formatSchedule(const Schedule& s) {
  std::string text = std::string(collName(s.coll)) + " " + algoName(s.algo) + " nranks=" + std::to_string(s.nranks) +
                     " rank=" + std::to_string(s.rank) + " channel=" + std::to_string(s.channel);
  if (collRooted(s.coll)) text += " root=" + std::to_string(s.root);
  text += " inBlocks=" + std::to_string(s.inBlocks) + " outBlocks=" + std::to_string(s.outBlocks) +
          " steps=" + std::to_string(s.steps.size());
  if (s.lagFrom >= 0 && s.lag > 0)
    text += " lag=" + std::to_string(s.lag) + " from step " + std::to_string(s.lagFrom);
  text += "\n";
  for (size_t i = 0; i < s.steps.size(); ++i) {
    text += std::to_string(i) + ": " + formatStep(s.steps[i]) + "\n";
  }
  return text;
}

}  // namespace chorus
