// The correctness matrix: collective x dtype x op x count x in-place x ranks x driver x
// forced algorithm/protocol, sampled (deterministically) so that the suite stays small,
// with closed-form expected values and guard bytes around every buffer.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "coll/coll_util.h"
#include "harness/ranks.h"

namespace chorus_test {
namespace {

enum class C { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kGather, kScatter };
const char* cName(C c) {
  static const char* k[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AllToAll", "Gather",
                            "Scatter"};
  return k[static_cast<int>(c)];
}
bool hasOp(C c) { return c == C::kAllReduce || c == C::kReduceScatter || c == C::kReduce; }

struct Case {
  C coll;
  ncclDataType_t dt;
  int op;
  size_t count;
  bool inPlace;
  int nranks;
  Driver driver;
  const char* algo;   // NCCL_ALGO ("" = default)
  const char* proto;  // NCCL_PROTO
  int root;
};

std::string caseName(const Case& c) {
  std::ostringstream s;
  s << cName(c.coll) << "_" << dtName(c.dt) << "_op" << c.op << "_n" << c.count << (c.inPlace ? "_inplace" : "_oop")
    << "_r" << c.nranks << "_" << driverName(c.driver) << "_" << (c.algo[0] ? c.algo : "auto") << "_"
    << (c.proto[0] ? c.proto : "auto") << "_root" << c.root;
  return s.str();
}

constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;

struct Buffers {
  std::vector<char> send, recv;  // with kGuard bytes after the data
  const void* sendPtr = nullptr;
  void* recvPtr = nullptr;
  char* outBase = nullptr;  // where the output elements are read from
};

void runCase(const Case& c, RankCtx& ctx) {
  const int n = ctx.nranks, r = ctx.rank;
  const size_t N = c.count, es = dtSize(c.dt);
  const size_t nN = N * n;
  size_t inElems = N, outElems = N;
  switch (c.coll) {
    case C::kAllGather: outElems = nN; break;
    case C::kReduceScatter: inElems = nN; break;
    case C::kAllToAll: inElems = outElems = nN; break;
    case C::kGather: outElems = nN; break;
    case C::kScatter: inElems = nN; break;
    default: break;
  }
  Buffers b;
  b.send.assign(inElems * es + kGuard, static_cast<char>(kGuardByte));
  b.recv.assign(outElems * es + kGuard, static_cast<char>(kGuardByte));
  // In place: one buffer, the smaller one at its NCCL-defined offset inside the larger one.
  bool inPlace = c.inPlace && c.coll != C::kAllToAll;
  char* send = b.send.data();
  char* recv = b.recv.data();
  if (inPlace) {
    switch (c.coll) {
      case C::kAllGather: send = recv + static_cast<size_t>(r) * N * es; break;
      case C::kReduceScatter: recv = send + static_cast<size_t>(r) * N * es; break;
      case C::kGather: if (r == c.root) send = recv + static_cast<size_t>(c.root) * N * es; break;
      case C::kScatter: if (r == c.root) recv = send + static_cast<size_t>(c.root) * N * es; break;
      default: recv = send; break;
    }
  }
  for (size_t j = 0; j < inElems; j++) putElem(send, c.dt, j, inputValue(c.op, r, j));
  std::vector<char> sendCopy(send, send + inElems * es);

  ncclRedOp_t op = static_cast<ncclRedOp_t>(c.op == kPreMul2 ? ncclSum : c.op);
  if (c.op == kPreMul2) {
    char scalar[8];
    putElem(scalar, c.dt, 0, 2.0);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, scalar, c.dt, ncclScalarHostImmediate, ctx.comm), ncclSuccess);
  }
  ncclResult_t res = ncclInternalError;
  switch (c.coll) {
    case C::kAllReduce: res = ncclAllReduce(send, recv, N, c.dt, op, ctx.comm, nullptr); break;
    case C::kAllGather: res = ncclAllGather(send, recv, N, c.dt, ctx.comm, nullptr); break;
    case C::kReduceScatter: res = ncclReduceScatter(send, recv, N, c.dt, op, ctx.comm, nullptr); break;
    case C::kBroadcast: res = ncclBroadcast(send, recv, N, c.dt, c.root, ctx.comm, nullptr); break;
    case C::kReduce: res = ncclReduce(send, recv, N, c.dt, op, c.root, ctx.comm, nullptr); break;
    case C::kAllToAll: res = ncclAlltoAll(send, recv, N, c.dt, ctx.comm, nullptr); break;
    case C::kGather: res = ncclGather(send, recv, N, c.dt, c.root, ctx.comm, nullptr); break;
    case C::kScatter: res = ncclScatter(send, recv, N, c.dt, c.root, ctx.comm, nullptr); break;
  }
  ASSERT_EQ(res, ncclSuccess) << caseName(c) << " rank " << r << ": " << ncclGetLastError(ctx.comm);
  if (c.op == kPreMul2) {
    EXPECT_EQ(ncclRedOpDestroy(op, ctx.comm), ncclSuccess);
  }

  // Expected output, element by element.
  bool hasOutput = !((c.coll == C::kReduce || c.coll == C::kGather) && r != c.root);
  int bad = 0;
  std::vector<double> contrib(n);
  for (size_t j = 0; hasOutput && j < outElems && bad < 5; j++) {
    double want = 0;
    switch (c.coll) {
      case C::kAllReduce:
      case C::kReduce:
        for (int k = 0; k < n; k++) contrib[k] = inputValue(c.op, k, j);
        want = reduceRef(c.op, c.dt, contrib);
        break;
      case C::kReduceScatter:
        for (int k = 0; k < n; k++) contrib[k] = inputValue(c.op, k, r * N + j);
        want = reduceRef(c.op, c.dt, contrib);
        break;
      case C::kAllGather:
      case C::kGather: want = inputValue(c.op, static_cast<int>(j / N), j % N); break;
      case C::kBroadcast: want = inputValue(c.op, c.root, j); break;
      case C::kAllToAll: want = inputValue(c.op, static_cast<int>(j / N), r * N + j % N); break;
      case C::kScatter: want = inputValue(c.op, c.root, r * N + j); break;
    }
    // Round the expectation into the dtype (inputs are exact; results of avg are compared with a tolerance).
    char tmp[8];
    putElem(tmp, c.dt, 0, want);
    double wantStored = (c.op == ncclAvg && dtIsFloat(c.dt)) ? want : getElem(tmp, c.dt, 0);
    double got = getElem(recv, c.dt, j);
    double tol = tolerance(c.op, c.dt, want, n);
    if (!(std::fabs(got - wantStored) <= tol)) {
      ADD_FAILURE() << caseName(c) << " rank " << r << " element " << j << ": got " << got << " want " << wantStored;
      bad++;
    }
  }
  // Nothing written past the output, and an out-of-place input left untouched.
  char* recvEnd = b.recv.data() + outElems * es;
  char* sendEnd = b.send.data() + inElems * es;
  for (size_t g = 0; g < kGuard; g++) {
    ASSERT_EQ(static_cast<unsigned char>(recvEnd[g]), kGuardByte) << caseName(c) << " wrote past recvbuff";
    ASSERT_EQ(static_cast<unsigned char>(sendEnd[g]), kGuardByte) << caseName(c) << " wrote past sendbuff";
  }
  // (memcmp of 0 bytes still needs valid pointers: a count-0 case may pass a null sendbuff)
  if (!inPlace && !sendCopy.empty()) {
    EXPECT_EQ(std::memcmp(sendCopy.data(), send, sendCopy.size()), 0) << caseName(c) << " modified sendbuff";
  }
}

std::vector<Case> buildMatrix() {
  const C colls[] = {C::kAllReduce, C::kAllGather, C::kReduceScatter, C::kBroadcast,
                     C::kReduce,    C::kAllToAll,  C::kGather,        C::kScatter};
  const int ranks[] = {1, 2, 3, 4, 5, 8};
  const size_t counts[] = {0, 1, 7, 1031, (1u << 20) + 3};
  const int ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, kPreMul2};
  const char* algos[] = {"", "Ring", "Tree", "Direct", "OneShot", "TwoShot"};  // RecDoubling: below
  const char* protos[] = {"", "Simple", "LL"};
  std::mt19937 rng(20261122);
  std::vector<Case> out;
  auto pick = [&](auto& arr) { return arr[rng() % (sizeof(arr) / sizeof(arr[0]))]; };
  // Every (collective, dtype) and every (collective, op) at least once, then a random sample.
  for (C c : colls) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      Case k{c, static_cast<ncclDataType_t>(dt), hasOp(c) ? pick(ops) : ncclSum, counts[1 + rng() % 3],
             rng() % 2 == 0, pick(ranks), rng() % 4 == 0 ? Driver::kProcesses : Driver::kThreads, pick(algos),
             pick(protos), 0};
      out.push_back(k);
    }
    if (hasOp(c))
      for (int op : ops)
        out.push_back(Case{c, ncclFloat32, op, 1031, false, 3, Driver::kThreads, "", "", 0});
  }
  for (int i = 0; i < 120; i++) {
    Case k{pick(colls), static_cast<ncclDataType_t>(rng() % ncclNumTypes), ncclSum, pick(counts), rng() % 2 == 0,
           pick(ranks), rng() % 4 == 0 ? Driver::kProcesses : Driver::kThreads, pick(algos), pick(protos), 0};
    if (hasOp(k.coll)) k.op = pick(ops);
    out.push_back(k);
  }
  // Recursive doubling, appended so that the sample above stays as it was: both collectives over a power of two
  // ranks and others (folded ranks, Bruck's rounds), every op, in and out of place, both protocols, tiles of several.
  const C doublingColls[] = {C::kAllReduce, C::kAllGather};
  const int doublingRanks[] = {2, 3, 5, 8};
  int variant = 0;
  for (C c : doublingColls)
    for (int n : doublingRanks)
      for (size_t count : {size_t{7}, size_t{1031}, size_t{(1u << 18) + 5}}) {
        const int op = c == C::kAllReduce ? ops[variant % 6] : ncclSum;
        const ncclDataType_t dt = variant % 3 == 0 ? ncclFloat32 : variant % 3 == 1 ? ncclInt32 : ncclFloat16;
        const Driver driver = variant % 4 == 3 ? Driver::kProcesses : Driver::kThreads;
        const char* proto = variant % 5 == 2 ? "LL" : "";
        out.push_back(Case{c, dt, op, count, variant % 2 == 0, n, driver, "RecDoubling", proto, 0});
        variant++;
      }
  for (Case& k : out) {
    // Keep the big counts affordable on 2 cores: n-fold buffers get count/n, and few ranks.
    if (k.count > 100000) {
      if (k.nranks > 4) k.nranks = 4;
      if (k.coll != C::kAllReduce && k.coll != C::kBroadcast && k.coll != C::kReduce) k.count /= k.nranks;
      if (dtSize(k.dt) > 4) k.dt = ncclFloat32;
    }
    k.root = k.nranks > 1 ? static_cast<int>(rng() % k.nranks) : 0;
  }
  return out;
}

class CollMatrix : public ::testing::TestWithParam<Case> {};

// Runs case c under its NCCL_ALGO / NCCL_PROTO, and unsets them after.
void runForced(const Case& c) {
  setenv("NCCL_ALGO", c.algo, 1);
  setenv("NCCL_PROTO", c.proto, 1);
  ncclResetDebugInit();
  runRanks(c.nranks, c.driver, [&](RankCtx& ctx) { runCase(c, ctx); });
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  ncclResetDebugInit();
}

TEST_P(CollMatrix, MatchesClosedForm) { runForced(GetParam()); }

// Recursive-doubling allgather sends a round's blocks as one message. Over two host-path channels a block's part of
// a tile is half the block, so the blocks of a message do not lie end to end and the executor gathers and scatters
// them piece by piece; the cases above have one channel, where they do. Simple and LL, threads and processes, over a
// power of two ranks and Bruck's 5 (a round whose blocks wrap past the last rank is two runs).
TEST(CollMatrixSpans, AllGatherOverTwoChannels) {
  setenv("CHORUS_HOST_NCHANNELS", "2", 1);
  for (const Case& c :
       {Case{C::kAllGather, ncclFloat32, ncclSum, 1031, false, 8, Driver::kThreads, "RecDoubling", "", 0},
        Case{C::kAllGather, ncclInt32, ncclSum, 5003, true, 4, Driver::kProcesses, "RecDoubling", "", 0},
        Case{C::kAllGather, ncclFloat16, ncclSum, 777, false, 5, Driver::kThreads, "RecDoubling", "LL", 0}})
    runForced(c);
  unsetenv("CHORUS_HOST_NCHANNELS");
  ncclResetDebugInit();
}

INSTANTIATE_TEST_SUITE_P(Sampled, CollMatrix, ::testing::ValuesIn(buildMatrix()),
                         [](const auto& info) { return std::to_string(info.index) + "_" + caseName(info.param); });

}  // namespace
}  // namespace chorus_test
