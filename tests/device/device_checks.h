// Checks shared by the device-path tests that run collectives on emulated device buffers and must also say which
// path a call took (the thread ranks' direct launches, the processes' inboxes): every element against the
// reference, guard words past the buffers, and the path, read from a launch counter of the emulated runtime.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "coll/coll_util.h"
#include "core/params.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {

/// A test's start on the emulated runtime: one thread a block, blocks one after the other, no injected delays, `emu`
/// in use.
inline void installEmu(EmuRuntime& emu) {
  emu.threadsPerBlock = 1;
  emu.delayPercent = 0;
  emu.concurrentBlocks = false;
  chorus::setGpuRuntimeForTesting(&emu);
}

/// A test's end: no GPU runtime, emu's knobs back as installEmu set them, `vars` unset and the settings reloaded.
inline void removeEmu(EmuRuntime& emu, std::initializer_list<const char*> vars) {
  chorus::setGpuRuntimeForTesting(nullptr);
  emu.threadsPerBlock = 1;
  emu.delayPercent = 0;
  emu.concurrentBlocks = false;
  for (const char* v : vars) unsetenv(v);
  chorus::paramsReload();
}

/// Each rank launches on its own stream.
inline cudaStream_t rankStream(const RankCtx& c) { return reinterpret_cast<cudaStream_t>(uintptr_t(c.rank + 1)); }

inline ncclResult_t commAsyncError(ncclComm_t comm) {
  ncclResult_t e = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &e), ncclSuccess);
  return e;
}

/// Launches of the path under test so far (a counter of the emulated runtime).
using LaunchCount = std::function<int()>;

/// Device memory a check runs its collective in: the caller's (carved from a registered window, say), or, where
/// null, buffers the check allocates itself.
struct CheckMem {
  char* in = nullptr;
  char* out = nullptr;
};

/// mem's pointer, or a buffer of `bytes` owned by *own.
inline char* checkBuffer(EmuRuntime& emu, char* given, size_t bytes, std::unique_ptr<DevBuf>* own) {
  if (given != nullptr) return given;
  *own = std::make_unique<DevBuf>(emu, bytes);
  return (*own)->as<char>();
}

/// Every rank's FNV-1a hash of its output, gathered (through FIFOs): all must be equal.
inline void expectSameOnEveryRank(EmuRuntime& emu, RankCtx& c, const char* out, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; i++) h = (h ^ static_cast<uint8_t>(out[i])) * 1099511628211ull;
  DevBuf all(emu, sizeof(uint64_t) * c.nranks);
  all.as<uint64_t>()[c.rank] = h;
  ASSERT_EQ(ncclAllGather(all.as<uint64_t>() + c.rank, all.as<uint64_t>(), 1, ncclUint64, c.comm, rankStream(c)),
            ncclSuccess);
  ASSERT_EQ(emu.streamSynchronize(rankStream(c)), ncclSuccess);
  for (int q = 1; q < c.nranks; q++)
    EXPECT_EQ(all.as<uint64_t>()[q], all.as<uint64_t>()[0]) << "rank " << q << " differs";
}

/// One allreduce of `count` elements of t with op (kPreMul2: premulsum by 2, the factor on the host or, with
/// deviceScalar, the device), in place or not, in `mem` (count x size + 1 bytes each) or buffers of its own; checks
/// every element, a guard byte past the end, whether the call took the path `launches` counts, and (sameEverywhere)
/// that every rank got the same bytes.
inline void checkAllReduce(EmuRuntime& emu, RankCtx& c, ncclDataType_t t, int op, size_t count, bool inPlace,
                           const LaunchCount& launches, bool expectPath, bool deviceScalar = false, int salt = 0,
                           bool sameEverywhere = false, const CheckMem& mem = {}) {
  const size_t es = dtSize(t);
  std::unique_ptr<DevBuf> own[2];
  DevBuf scalar(emu, 8);
  char* in = checkBuffer(emu, mem.in, count * es + 1, &own[0]);
  char* out = inPlace ? in : checkBuffer(emu, mem.out, count * es + 1, &own[1]);
  for (size_t i = 0; i < count; i++) putElem(in, t, i, inputValue(op, c.rank, i + salt));
  if (!inPlace) std::memset(out, 0x5a, count * es);
  out[count * es] = 0x3c;
  ncclRedOp_t rop = static_cast<ncclRedOp_t>(op == kPreMul2 ? ncclSum : op);
  if (op == kPreMul2) {
    putElem(scalar.as<char>(), t, 0, 2.0);
    char host[8];
    putElem(host, t, 0, 2.0);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&rop, deviceScalar ? scalar.as<void>() : static_cast<void*>(host), t,
                                       deviceScalar ? ncclScalarDevice : ncclScalarHostImmediate, c.comm),
              ncclSuccess);
  }
  int before = launches();
  ASSERT_EQ(ncclAllReduce(in, out, count, t, rop, c.comm, rankStream(c)), ncclSuccess) << ncclGetLastError(c.comm);
  if (op == kPreMul2) {
    ASSERT_EQ(ncclRedOpDestroy(rop, c.comm), ncclSuccess);
  }
  EXPECT_EQ(launches(), before + (expectPath ? 1 : 0)) << "path expected: " << expectPath;
  ASSERT_EQ(emu.streamSynchronize(rankStream(c)), ncclSuccess) << emu.lastError();
  ASSERT_EQ(commAsyncError(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
  // Every element is checked, and a failure says how many were wrong and where they lie (first, last, the first
  // few values), so that a rare wrong result tells a whole tile from one element.
  std::vector<double> v(c.nranks);
  size_t wrong = 0, last = 0;
  std::string firstFew;
  for (size_t i = 0; i < count; i++) {
    for (int q = 0; q < c.nranks; q++) v[q] = inputValue(op, q, i + salt);
    double want = reduceRef(op, t, v), got = getElem(out, t, i);
    if (std::fabs(got - want) <= tolerance(op, t, want, c.nranks)) continue;
    if (wrong++ < 4)
      firstFew += " i " + std::to_string(i) + " got " + std::to_string(got) + " want " + std::to_string(want) + ";";
    last = i;
  }
  ASSERT_EQ(wrong, 0u) << "rank " << c.rank << ": " << dtName(t) << " op " << op << " count " << count
                       << (inPlace ? " in place" : " out of place") << ": " << wrong << " wrong, the last at i " << last
                       << ":" << firstFew;
  EXPECT_EQ(out[count * es], 0x3c) << "written past the end";
  if (sameEverywhere) expectSameOnEveryRank(emu, c, out, count * es);
}

/// Whether a call of collective `coll` (its ncclXxx name without the prefix), in place or not, takes the path.
using ExpectPath = std::function<bool(const std::string& coll, bool inPlace)>;

/// Allgather, reduce-scatter, broadcast, reduce (max), gather, scatter and alltoall of N int32 per block, out of
/// place and at each collective's in-place offset, the root at N mod ranks, in `mem` ((N x ranks + 1) x 4 bytes
/// each) or buffers of its own: every element, a guard word past every buffer, and the path each call took.
inline void checkOtherCollectives(EmuRuntime& emu, RankCtx& c, size_t N, const LaunchCount& launches,
                                  const ExpectPath& expect, const CheckMem& mem = {}) {
  const int n = c.nranks, r = c.rank;
  const int32_t kGuard = 0x7eadbeef;
  auto v = [](int rank, size_t i) { return int32_t(rank * 1000003 + int32_t(i % 100000) * 7 + 1); };
  std::unique_ptr<DevBuf> own[2];
  int32_t* in = reinterpret_cast<int32_t*>(checkBuffer(emu, mem.in, (N * n + 1) * 4, &own[0]));
  int32_t* out = reinterpret_cast<int32_t*>(checkBuffer(emu, mem.out, (N * n + 1) * 4, &own[1]));
  cudaStream_t s = rankStream(c);
  for (bool inPlace : {false, true}) {
    const int root = int(N % n);
    SCOPED_TRACE(std::string(inPlace ? "in place" : "out of place") + " N=" + std::to_string(N));
    int before = 0;
    auto run = [&](const char* coll, ncclResult_t res) {
      ASSERT_EQ(res, ncclSuccess) << ncclGetLastError(c.comm);
      ASSERT_EQ(emu.streamSynchronize(s), ncclSuccess);
      ASSERT_EQ(commAsyncError(c.comm), ncclSuccess) << ncclGetLastError(c.comm);
      bool want = expect(coll, inPlace);
      EXPECT_EQ(launches(), before + (want ? 1 : 0)) << coll << " on the path: " << want;
      EXPECT_EQ(in[N * n], kGuard);
      EXPECT_EQ(out[N * n], kGuard);
    };
    in[N * n] = out[N * n] = kGuard;

    // allgather: in place, rank r's input is block r of its output.
    int32_t* agIn = inPlace ? out + r * N : in;
    for (size_t i = 0; i < N; i++) agIn[i] = v(r, i);
    before = launches();
    run("AllGather", ncclAllGather(agIn, out, N, ncclInt32, c.comm, s));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(out[q * N + i], v(q, i)) << "allgather q " << q << " i " << i;

    // reduce-scatter: in place, the output is block r of the input.
    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* rsOut = inPlace ? in + r * N : out;
    before = launches();
    run("ReduceScatter", ncclReduceScatter(in, rsOut, N, ncclInt32, ncclSum, c.comm, s));
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += v(q, r * N + i);
      ASSERT_EQ(rsOut[i], want) << "reduce-scatter i " << i;
    }

    // broadcast and reduce from `root`.
    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* bcOut = inPlace ? in : out;
    before = launches();
    run("Broadcast", ncclBroadcast(in, bcOut, N, ncclInt32, root, c.comm, s));
    for (size_t i = 0; i < N; i++) ASSERT_EQ(bcOut[i], v(root, i)) << "broadcast i " << i;
    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* redOut = inPlace ? in : out;
    before = launches();
    run("Reduce", ncclReduce(in, redOut, N, ncclInt32, ncclMax, root, c.comm, s));
    if (r == root) {
      for (size_t i = 0; i < N; i++) ASSERT_EQ(redOut[i], v(n - 1, i)) << "reduce i " << i;
    }

    // gather and scatter at `root`: in place, the root's own block is its input / output.
    for (size_t i = 0; i < N; i++) in[i] = v(r, i);
    int32_t* gIn = inPlace && r == root ? out + root * N : in;
    if (gIn != in)
      for (size_t i = 0; i < N; i++) gIn[i] = v(r, i);
    before = launches();
    run("Gather", ncclGather(gIn, out, N, ncclInt32, root, c.comm, s));
    if (r == root) {
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < N; i++) ASSERT_EQ(out[q * N + i], v(q, i)) << "gather q " << q << " i " << i;
    }
    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* scOut = inPlace && r == root ? in + root * N : out;
    before = launches();
    run("Scatter", ncclScatter(in, scOut, N, ncclInt32, root, c.comm, s));
    for (size_t i = 0; i < N; i++) ASSERT_EQ(scOut[i], v(root, r * N + i)) << "scatter i " << i;

    // alltoall: block q of rank r's input goes to block r of rank q's output.
    for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
    int32_t* aaOut = inPlace ? in : out;
    before = launches();
    run("AlltoAll", ncclAlltoAll(in, aaOut, N, ncclInt32, c.comm, s));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(aaOut[q * N + i], v(q, r * N + i)) << "alltoall q " << q << " i " << i;
  }
}

/// Rank 1 of a 2-rank communicator has exited: an allreduce of b on the surviving rank must fail (from the call, when
/// that already knows, or from the kernel) as a remote error whose text has `mustContain` and "died", well before
/// the ranks' CHORUS_TIMEOUT_S of 60 s.
inline void expectPeerDeathNamed(EmuRuntime& emu, ncclComm_t comm, float* b, size_t count, cudaStream_t s,
                                 const std::string& mustContain) {
  auto start = std::chrono::steady_clock::now();
  ncclResult_t e = ncclAllReduce(b, b, count, ncclFloat32, ncclSum, comm, s);
  if (e == ncclSuccess) {
    emu.streamSynchronize(s);
    e = commAsyncError(comm);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string text = ncclGetLastError(comm);
  EXPECT_EQ(e, ncclRemoteError) << text;
  EXPECT_NE(text.find("died"), std::string::npos) << text;
  EXPECT_NE(text.find(mustContain), std::string::npos) << text;
  EXPECT_EQ(text.find("CHORUS_TIMEOUT_S"), std::string::npos) << "the death must be seen, not timed out: " << text;
  EXPECT_LT(secs, 30.0) << text;
}

}  // namespace chorus_test
