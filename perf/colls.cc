// The table of collectives: buffer shapes, bandwidth formulas and verifiable data, as nccl-tests defines them
// in src/<collective>.cu (getCollByteCount, getBw, initData). One deviation: hypercube's redop column says
// "none" where nccl-tests leaves it empty, so that every row splits into the same 13 fields.
#include <strings.h>

#include <cstring>

#include "perf/common.h"
#include "perf/data.h"

namespace chorus {
namespace perf {
namespace {

// clang-format off
const CollSpec kTable[] = {
  // coll                     name             program                layout             alg scale                bus factor            ops    root   inplace pow2   op label
  {PerfColl::kAllReduce,     "AllReduce",     "all_reduce_perf",     Layout::kSame,     AlgScale::kOne,          BusFactor::kAllReduce, true,  false, true,   false, nullptr},
  {PerfColl::kAllGather,     "AllGather",     "all_gather_perf",     Layout::kGather,   AlgScale::kRanks,        BusFactor::kRing,      false, false, true,   false, "none"},
  {PerfColl::kReduceScatter, "ReduceScatter", "reduce_scatter_perf", Layout::kScatter,  AlgScale::kRanks,        BusFactor::kRing,      true,  false, true,   false, nullptr},
  {PerfColl::kBroadcast,     "Broadcast",     "broadcast_perf",      Layout::kSame,     AlgScale::kOne,          BusFactor::kOne,       false, true,  true,   false, "none"},
  {PerfColl::kReduce,        "Reduce",        "reduce_perf",         Layout::kSame,     AlgScale::kOne,          BusFactor::kOne,       true,  true,  true,   false, nullptr},
  {PerfColl::kAllToAll,      "AlltoAll",      "alltoall_perf",       Layout::kAllToAll, AlgScale::kRanks,        BusFactor::kRing,      false, false, false,  false, "none"},
  {PerfColl::kGather,        "Gather",        "gather_perf",         Layout::kGather,   AlgScale::kRanks,        BusFactor::kRing,      false, true,  true,   false, "none"},
  {PerfColl::kScatter,       "Scatter",       "scatter_perf",        Layout::kScatter,  AlgScale::kRanks,        BusFactor::kRing,      false, true,  true,   false, "none"},
  {PerfColl::kSendRecv,      "SendRecv",      "sendrecv_perf",       Layout::kSame,     AlgScale::kOne,          BusFactor::kOne,       true,  false, false,  false, nullptr},
  {PerfColl::kHyperCube,     "HyperCube",     "hypercube_perf",      Layout::kGather,   AlgScale::kRanksMinusOne, BusFactor::kOne,      false, false, true,   true,  "none"},
};
// clang-format on

// Inputs of the copy collectives: one pattern per seed, not a reduction (nccl-tests: nranks 1, rank 0, sum).
void fillPattern(char* buf, size_t count, size_t offset, ncclDataType_t type, uint64_t seed) {
  fillInput(buf, count, offset, type, kOpSum, 1, 0, seed);
}

}  // namespace

const CollSpec& collSpec(PerfColl coll) { return kTable[static_cast<int>(coll)]; }

std::vector<char*> takeCollArg(int argc, char** argv, std::string* coll) {
  std::vector<char*> args;
  for (int i = 0; i < argc; i++) {
    if ((std::strcmp(argv[i], "-op") == 0 || std::strcmp(argv[i], "--coll") == 0) && i + 1 < argc) {
      *coll = argv[++i];
      continue;
    }
    args.push_back(argv[i]);
  }
  return args;
}

const CollSpec* findCollSpec(const std::string& name) {
  for (const CollSpec& s : kTable) {
    std::string squashed;
    for (const char* p = s.program; *p && std::strncmp(p, "_perf", 5) != 0; p++)
      if (*p != '_') squashed += *p;
    if (strcasecmp(name.c_str(), s.name) == 0 || strcasecmp(name.c_str(), s.program) == 0 ||
        strcasecmp(name.c_str(), squashed.c_str()) == 0)
      return &s;
  }
  return nullptr;
}

CallShape callShape(const CollSpec& spec, size_t count, size_t eltSize, int nranks) {
  // Per-rank blocks are rounded down to 16 bytes, as nccl-tests does, so every block stays aligned.
  size_t n = static_cast<size_t>(nranks);
  size_t base = (count / n) & ~(16 / eltSize - 1);
  CallShape s;
  switch (spec.layout) {
    case Layout::kSame:
      s.sendCount = s.recvCount = s.paramCount = count;
      break;
    case Layout::kGather:
      s.sendCount = s.paramCount = base;
      s.recvCount = base * n;
      s.sendInplaceOffset = base;
      break;
    case Layout::kScatter:
      s.recvCount = s.paramCount = base;
      s.sendCount = base * n;
      s.recvInplaceOffset = base;
      break;
    case Layout::kAllToAll:
      s.paramCount = base;
      s.sendCount = s.recvCount = base * n;
      break;
  }
  return s;
}

void bandwidth(const CollSpec& spec, size_t paramCount, size_t eltSize, double sec, int nranks, double* algBw,
               double* busBw) {
  double n = nranks;
  double scale = spec.algScale == AlgScale::kRanks ? n : spec.algScale == AlgScale::kRanksMinusOne ? n - 1 : 1;
  *algBw = static_cast<double>(paramCount) * static_cast<double>(eltSize) * scale / 1.0e9 / sec;
  double factor = spec.busFactor == BusFactor::kAllReduce ? 2 * (n - 1) / n
                  : spec.busFactor == BusFactor::kRing    ? (n - 1) / n
                                                          : 1;
  *busBw = *algBw * factor;
}

void initData(const CollSpec& spec, const CallShape& shape, ncclDataType_t type, int op, int root, int rank, int nranks,
              uint64_t rep, bool inPlace, const RankImages& img) {
  const size_t w = wordSize(type);
  const size_t sendCount = shape.sendCount, recvCount = shape.recvCount;
  const size_t sendBytes = sendCount * w, recvBytes = recvCount * w;
  std::memset(img.recv, 0, recvBytes);
  char* data = inPlace ? img.recv : img.send;
  switch (spec.coll) {
    case PerfColl::kAllReduce:
      fillInput(data, sendCount, 0, type, op, nranks, rank, rep);
      fillExpected(img.expected, recvCount, 0, type, op, nranks, rep);
      break;
    case PerfColl::kAllGather:
    case PerfColl::kHyperCube:
      if (inPlace) data = img.recv + rank * sendBytes;
      fillPattern(data, sendCount, 0, type, 33 * rep + rank);
      for (int j = 0; j < nranks; j++) fillPattern(img.expected + j * sendBytes, sendCount, 0, type, 33 * rep + j);
      break;
    case PerfColl::kReduceScatter:
      fillInput(data, sendCount, 0, type, op, nranks, rank, rep);
      fillExpected(img.expected, recvCount, rank * recvCount, type, op, nranks, rep);
      break;
    case PerfColl::kBroadcast:
      if (rank == root) fillPattern(data, sendCount, 0, type, rep);
      fillPattern(img.expected, recvCount, 0, type, rep);
      break;
    case PerfColl::kReduce:
      fillInput(data, sendCount, 0, type, op, nranks, rank, rep);
      // A non-root's receive buffer must come back untouched: zeros, or its own input when in place.
      std::memcpy(img.expected, img.recv, recvBytes);
      if (rank == root) fillExpected(img.expected, recvCount, 0, type, op, nranks, rep);
      break;
    case PerfColl::kAllToAll: {
      fillPattern(data, sendCount, 0, type, 33 * rep + rank);
      size_t part = sendCount / nranks;
      for (int j = 0; j < nranks; j++) fillPattern(img.expected + j * part * w, part, rank * part, type, 33 * rep + j);
      break;
    }
    case PerfColl::kGather:
      if (inPlace) data = img.recv + rank * sendBytes;
      fillPattern(data, sendCount, rank * sendCount, type, rep);
      std::memcpy(img.expected, img.recv, recvBytes);
      if (rank == root) fillPattern(img.expected, nranks * sendCount, 0, type, rep);
      break;
    case PerfColl::kScatter:
      if (rank == root) fillPattern(data, sendCount, 0, type, rep);
      fillPattern(img.expected, recvCount, rank * recvCount, type, rep);
      break;
    case PerfColl::kSendRecv: {
      fillPattern(data, sendCount, rank * sendCount, type, rep);
      int peer = (rank - 1 + nranks) % nranks;
      fillPattern(img.expected, recvCount, peer * recvCount, type, rep);
      break;
    }
  }
}

}  // namespace perf
}  // namespace chorus
