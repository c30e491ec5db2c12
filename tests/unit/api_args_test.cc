// Bad input at every entry point: the named error, the cause in ncclGetLastError, and the
// communicator still working afterwards.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace {

class ApiArgs : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ncclCommInitAll(comms_, 2, nullptr), ncclSuccess) << ncclGetLastError(nullptr); }
  void TearDown() override {
    for (auto c : comms_) {
      if (c) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
    }
  }
  // Both ranks all-reduce; proves the communicators still work.
  void expectWorks() {
    std::vector<float> a(100, 1.0f), b(100, 2.0f);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(a.data(), a.data(), 100, ncclFloat, ncclSum, comms_[0], nullptr), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(b.data(), b.data(), 100, ncclFloat, ncclSum, comms_[1], nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
    EXPECT_EQ(a[99], 3.0f);
    EXPECT_EQ(b[0], 3.0f);
  }
  static void expectError(ncclResult_t got, ncclResult_t want, ncclComm_t comm, const char* substr) {
    EXPECT_EQ(got, want) << ncclGetErrorString(got);
    std::string text = ncclGetLastError(comm);
    EXPECT_NE(text.find(substr), std::string::npos) << "last error: \"" << text << "\" lacks \"" << substr << "\"";
  }
  ncclComm_t comms_[2] = {nullptr, nullptr};
  float buf_[64] = {0};
  float out_[128] = {0};
};

TEST_F(ApiArgs, NullCommIsInvalidArgument) {
  expectError(ncclAllReduce(buf_, buf_, 4, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument, nullptr,
              "comm is NULL");
  int n;
  expectError(ncclCommCount(nullptr, &n), ncclInvalidArgument, nullptr, "comm is NULL");
  expectWorks();
}

// As in NCCL, a call refused inside a group fails the group: ncclGroupEnd returns its error, naming it, and none of
// the group's operations runs (the ranks' calls would no longer pair up); the next group runs as usual.
TEST_F(ApiArgs, ARefusedCallInAGroupFailsTheGroup) {
  std::vector<float> a(100, 1.0f), b(100, 2.0f);
  for (bool simulate : {false, true}) {
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(a.data(), a.data(), 100, ncclFloat, ncclSum, comms_[0], nullptr), ncclSuccess);
    expectError(ncclAllReduce(b.data(), b.data(), 100, static_cast<ncclDataType_t>(99), ncclSum, comms_[1], nullptr),
                ncclInvalidArgument, comms_[1], "invalid datatype 99");
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    expectError(simulate ? ncclGroupSimulateEnd(&sim) : ncclGroupEnd(), ncclInvalidArgument, nullptr,
                "a call in the group was refused, so none of its operations ran (1 dropped): ncclAllReduce: rank 1: "
                "invalid datatype 99");
    EXPECT_NE(std::string(ncclGetLastError(comms_[0])).find("none of its operations ran"), std::string::npos)
        << ncclGetLastError(comms_[0]);
    EXPECT_EQ(a[0], 1.0f) << "an operation of the failed group ran";
  }
  expectWorks();
}

TEST_F(ApiArgs, NullBuffersWithCount) {
  expectError(ncclAllReduce(nullptr, buf_, 4, ncclFloat, ncclSum, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "sendbuff is NULL");
  expectError(ncclAllGather(buf_, nullptr, 4, ncclFloat, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "recvbuff is NULL");
  expectError(ncclSend(nullptr, 4, ncclFloat, 1, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "sendbuff is NULL");
  expectError(ncclRecv(nullptr, 4, ncclFloat, 1, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "recvbuff is NULL");
  // Count 0 with NULL buffers is legal (and does nothing), as in NCCL.
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comms_[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comms_[1], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  expectWorks();
}

TEST_F(ApiArgs, BadDatatypeOpRootPeer) {
  expectError(ncclAllReduce(buf_, buf_, 4, static_cast<ncclDataType_t>(12), ncclSum, comms_[0], nullptr),
              ncclInvalidArgument, comms_[0], "invalid datatype 12");
  expectError(ncclAllReduce(buf_, buf_, 4, static_cast<ncclDataType_t>(-1), ncclSum, comms_[0], nullptr),
              ncclInvalidArgument, comms_[0], "invalid datatype");
  expectError(ncclAllReduce(buf_, buf_, 4, ncclFloat, static_cast<ncclRedOp_t>(77), comms_[0], nullptr),
              ncclInvalidArgument, comms_[0], "reduction op 77");
  expectError(ncclBroadcast(buf_, buf_, 4, ncclFloat, 2, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "root 2 is out of range");
  expectError(ncclReduce(buf_, buf_, 4, ncclFloat, ncclSum, -1, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "root -1");
  expectError(ncclSend(buf_, 4, ncclFloat, 5, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "peer 5 is out of range");
  expectWorks();
}

TEST_F(ApiArgs, CountOverflow) {
  expectError(ncclAllGather(buf_, out_, SIZE_MAX / 4, ncclFloat, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "overflows");
  expectWorks();
}

TEST_F(ApiArgs, OverlappingBuffersThatAreNotInPlace) {
  // Allgather in place means sendbuff == recvbuff + rank*count; rank 0 passing recvbuff+1 overlaps wrongly.
  expectError(ncclAllGather(out_ + 1, out_, 8, ncclFloat, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "overlap");
  expectError(ncclAllReduce(buf_ + 2, buf_, 8, ncclFloat, ncclSum, comms_[0], nullptr), ncclInvalidArgument,
              comms_[0], "overlap");
  expectWorks();
}

// NCCL_CHECK_POINTERS=1: a host buffer that is not this process's memory for the length the call uses, or that the
// call would write and cannot, is refused with ncclInvalidArgument naming it instead of faulting; buffers that are
// fine still run, one of them across two mappings. Unset, nothing is checked (such a call would fault, so it is not
// made here).
TEST_F(ApiArgs, CheckPointersRefusesHostBuffersTheCallCannotUse) {
  setenv("NCCL_CHECK_POINTERS", "1", 1);
  chorus_test::reloadEnv();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), floats = page / sizeof(float);
  auto map = [page](int pages, int prot) {
    void* p = mmap(nullptr, pages * page, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<char*>(p);
  };
  char* good = map(2, PROT_READ | PROT_WRITE);
  char* guarded = map(2, PROT_READ | PROT_WRITE);  // its second page inaccessible
  ASSERT_EQ(mprotect(guarded + page, page, PROT_NONE), 0);
  char* split = map(2, PROT_READ | PROT_WRITE);  // its second page read-only: two mappings, both readable
  ASSERT_EQ(mprotect(split + page, page, PROT_READ), 0);
  char* readOnly = map(1, PROT_READ);
  // Past the user address space on x86-64 and AArch64, and wrapping around the end of the address space.
  void* wild = reinterpret_cast<void*>(uintptr_t(1) << 62);
  void* wraps = reinterpret_cast<void*>(UINTPTR_MAX - 15);
  ncclComm_t c = comms_[0];
  expectError(ncclAllReduce(guarded, good, 2 * floats, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument, c,
              "sendbuff");
  expectError(ncclAllReduce(guarded, good, 2 * floats, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument, c,
              "unreadable memory at");
  expectError(ncclAllReduce(wild, good, floats, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument, c,
              "nothing is mapped at");
  expectError(ncclAllReduce(good, wraps, floats, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument, c,
              "past the end of the address space");
  expectError(ncclAllReduce(good, readOnly, floats, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument, c,
              "read-only memory at");
  expectError(ncclAllReduce(good, split, 2 * floats, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument, c,
              "recvbuff");
  expectError(ncclBroadcast(good, readOnly, floats, ncclFloat, 0, c, nullptr), ncclInvalidArgument, c, "recvbuff");
  // Allgather's output is ranks x count: one page of input needs two of output.
  expectError(ncclAllGather(good, guarded, floats, ncclFloat, c, nullptr), ncclInvalidArgument, c, "recvbuff");
  expectError(ncclSend(wild, 1, ncclFloat, 1, c, nullptr), ncclInvalidArgument, c, "sendbuff");
  expectError(ncclRecv(readOnly, 1, ncclFloat, 1, c, nullptr), ncclInvalidArgument, c, "read-only");
  // A premulsum scalar by pointer (ncclScalarDevice) in host memory is read when the operation starts: one element.
  for (void* scalar : {static_cast<void*>(guarded + page), wild, static_cast<void*>(guarded + page - 2)}) {
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat, ncclScalarDevice, c), ncclSuccess);
    expectError(ncclAllReduce(good, good, floats, ncclFloat, op, c, nullptr), ncclInvalidArgument, c,
                "the premulsum scalar");
    EXPECT_EQ(ncclRedOpDestroy(op, c), ncclSuccess);
  }
  // Input read across both mappings of `split`; ordinary output.
  reinterpret_cast<float*>(split)[0] = 1.0f;  // its first page is writable; the second reads as zeros
  std::vector<float> out0(2 * floats), out1(2 * floats);
  const float* in = reinterpret_cast<const float*>(split);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(in, out0.data(), 2 * floats, ncclFloat, ncclSum, comms_[0], nullptr), ncclSuccess)
      << ncclGetLastError(comms_[0]);
  ASSERT_EQ(ncclAllReduce(in, out1.data(), 2 * floats, ncclFloat, ncclSum, comms_[1], nullptr), ncclSuccess)
      << ncclGetLastError(comms_[1]);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(out0[0], 2.0f);
  EXPECT_EQ(out1[floats], 0.0f);
  expectWorks();
  unsetenv("NCCL_CHECK_POINTERS");
  chorus_test::reloadEnv();
  for (char* p : {good, guarded, split}) munmap(p, 2 * page);
  munmap(readOnly, page);
}

TEST_F(ApiArgs, GroupMisuse) {
  expectError(ncclGroupEnd(), ncclInvalidUsage, nullptr, "without a matching ncclGroupStart");
  ncclSimInfo_t bad;
  std::memset(&bad, 0, sizeof(bad));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  expectError(ncclGroupSimulateEnd(&bad), ncclInvalidArgument, nullptr, "NCCL_SIM_INFO_INITIALIZER");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclAllReduce(buf_, buf_, 4, ncclFloat, ncclSum, comms_[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_GT(sim.estimatedTime, 0.0f);
  expectWorks();
}

TEST_F(ApiArgs, DestroyedCommIsRecognised) {
  ncclComm_t dead = comms_[1];
  ASSERT_EQ(ncclCommDestroy(comms_[0]), ncclSuccess);
  ASSERT_EQ(ncclCommDestroy(comms_[1]), ncclSuccess);
  ncclComm_t gone = comms_[0];
  comms_[0] = comms_[1] = nullptr;
  expectError(ncclAllReduce(buf_, buf_, 4, ncclFloat, ncclSum, gone, nullptr), ncclInvalidArgument, nullptr,
              "not a valid communicator");
  expectError(ncclCommDestroy(dead), ncclInvalidArgument, nullptr, "not a valid communicator");
}

TEST_F(ApiArgs, FinalizedAndRevokedComms) {
  ASSERT_EQ(ncclCommFinalize(comms_[0]), ncclSuccess);
  expectError(ncclAllReduce(buf_, buf_, 4, ncclFloat, ncclSum, comms_[0], nullptr), ncclInvalidUsage, comms_[0],
              "finalized");
  expectError(ncclCommRevoke(comms_[1], 3), ncclInvalidArgument, comms_[1], "revokeFlags");
  ASSERT_EQ(ncclCommRevoke(comms_[1], NCCL_REVOKE_DEFAULT), ncclSuccess);
  expectError(ncclAllReduce(buf_, buf_, 4, ncclFloat, ncclSum, comms_[1], nullptr), ncclInvalidUsage, comms_[1],
              "revoked");
}

TEST_F(ApiArgs, QueriesAndVersion) {
  int v = 0, n = 0, r = -1, d = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCount(comms_[1], &n), ncclSuccess);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(ncclCommUserRank(comms_[1], &r), ncclSuccess);
  EXPECT_EQ(r, 1);
  EXPECT_EQ(ncclCommCuDevice(comms_[0], &d), ncclSuccess);
  EXPECT_EQ(d, -1);
  expectError(ncclCommCount(comms_[0], nullptr), ncclInvalidArgument, comms_[0], "output pointer is NULL");
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comms_[0], &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_NE(std::string(ncclGetErrorString(ncclRemoteError)).find("remote"), std::string::npos);
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(99)), "unknown result code");
}

// As NCCL's init, a communicator's init refuses an NCCL_ALGO or NCCL_PROTO that names an unknown algorithm, protocol or
// collective, saying which; NCCL 2.28's per-collective lists are taken.
TEST_F(ApiArgs, UnknownAlgorithmOrProtocolFailsTheInit) {
  for (auto [name, value, ok] : {std::tuple{"NCCL_ALGO", "Rnig", false}, std::tuple{"NCCL_PROTO", "LL256", false},
                                 std::tuple{"NCCL_ALGO", "ring;allreduce:tree,NVLS", true}}) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    setenv(name, value, 1);
    chorus_test::reloadEnv();
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclComm_t c = nullptr;
    if (ok) {
      ASSERT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess) << ncclGetLastError(nullptr);
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    } else {
      expectError(ncclCommInitRank(&c, 1, id, 0), ncclInvalidUsage, nullptr,
                  (std::string(name) + "=\"" + value + "\": unknown name").c_str());
    }
    unsetenv(name);
    chorus_test::reloadEnv();
  }
}

TEST_F(ApiArgs, ConfigValidation) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  expectError(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInvalidArgument, nullptr, "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t cfg2 = NCCL_CONFIG_INITIALIZER;
  cfg2.blocking = 7;
  expectError(ncclCommInitRankConfig(&c, 1, id, 0, &cfg2), ncclInvalidArgument, nullptr, "blocking");
  ncclConfig_t cfg3 = NCCL_CONFIG_INITIALIZER;
  cfg3.minCTAs = 0;
  expectError(ncclCommInitRankConfig(&c, 1, id, 0, &cfg3), ncclInvalidArgument, nullptr, "minCTAs must be > 0");
  // A floor above the cap is lowered to it, as NCCL 2.28 does, from the config or from the environment (which
  // overrides the config first); tests/device/device_lanes_test.cc sees the launches keep to the cap.
  cfg3.minCTAs = 8;
  cfg3.maxCTAs = 4;
  ASSERT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &cfg3), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  cfg3.minCTAs = 1;
  setenv("NCCL_MIN_CTAS", "8", 1);
  chorus_test::reloadEnv();
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &cfg3), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  unsetenv("NCCL_MIN_CTAS");
  chorus_test::reloadEnv();
  cfg3.maxCTAs = 0;
  expectError(ncclCommInitRankConfig(&c, 1, id, 0, &cfg3), ncclInvalidArgument, nullptr, "maxCTAs must be > 0");
  expectError(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument, nullptr, "rank 2 is out of range");
  expectError(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, nullptr, "nranks 0");
  expectError(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument, nullptr, "comm pointer is NULL");
  expectError(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument, nullptr, "comms is NULL");
  int dev = 0;
  ncclComm_t cs[1];
  expectError(ncclCommInitAll(cs, 1, &dev), ncclInvalidArgument, nullptr, "no GPU");
}

TEST_F(ApiArgs, RedOpLifecycle) {
  float scalar = 0.5f;
  ncclRedOp_t op;
  expectError(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarHostImmediate, comms_[0]),
              ncclInvalidArgument, comms_[0], "scalar is NULL");
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comms_[0]), ncclSuccess);
  EXPECT_GE(static_cast<int>(op), static_cast<int>(ncclNumOps));
  // The op belongs to comms_[0] and to float.
  expectError(ncclAllReduce(buf_, buf_, 4, ncclDouble, op, comms_[0], nullptr), ncclInvalidArgument, comms_[0],
              "created for datatype");
  expectError(ncclAllReduce(buf_, buf_, 4, ncclFloat, op, comms_[1], nullptr), ncclInvalidArgument, comms_[1],
              "not created on this communicator");
  EXPECT_EQ(ncclRedOpDestroy(op, comms_[0]), ncclSuccess);
  expectError(ncclRedOpDestroy(op, comms_[0]), ncclInvalidArgument, comms_[0], "not created");
  expectError(ncclRedOpDestroy(ncclSum, comms_[0]), ncclInvalidArgument, comms_[0], "built-in");
  expectWorks();
}

// NCCL lets an operator be destroyed as soon as the call using it returns, even before the
// group that holds the call ends (nccl-tests does this). The group must still use its scalar.
TEST_F(ApiArgs, RedOpDestroyedInsideTheGroupStillApplies) {
  float scalar = 3.0f;
  ncclRedOp_t ops[2];
  std::vector<float> a(50, 1.0f), b(50, 2.0f);
  for (int r = 0; r < 2; r++)
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&ops[r], &scalar, ncclFloat, ncclScalarHostImmediate, comms_[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a.data(), a.data(), 50, ncclFloat, ops[0], comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(ncclRedOpDestroy(ops[0], comms_[0]), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(b.data(), b.data(), 50, ncclFloat, ops[1], comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclRedOpDestroy(ops[1], comms_[1]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(a[0], 9.0f);  // 3 * 1 + 3 * 2
  EXPECT_EQ(b[49], 9.0f);
  expectWorks();
}

TEST_F(ApiArgs, MemAllocAndRegistration) {
  void* p = nullptr;
  EXPECT_EQ(ncclMemAlloc(&p, 1 << 20), ncclSuccess);
  EXPECT_NE(p, nullptr);
  expectError(ncclMemAlloc(nullptr, 10), ncclInvalidArgument, nullptr, "ptr is NULL");
  expectError(ncclMemAlloc(&p, 0), ncclInvalidArgument, nullptr, "size is 0");
  void* handle = nullptr;
  EXPECT_EQ(ncclCommRegister(comms_[0], p, 1 << 20, &handle), ncclSuccess);
  expectError(ncclCommDeregister(comms_[1], handle), ncclInvalidUsage, comms_[1], "not a registration");
  EXPECT_EQ(ncclCommDeregister(comms_[0], handle), ncclSuccess);
  ncclWindow_t win = nullptr;
  expectError(ncclCommWindowRegister(comms_[0], static_cast<char*>(p) + 8, 4096, &win, NCCL_WIN_COLL_SYMMETRIC),
              ncclInvalidArgument, comms_[0], "aligned");
  // Registration is collective: this thread drives both ranks, so it registers both in one group.
  void* q = nullptr;
  ASSERT_EQ(ncclMemAlloc(&q, 4096), ncclSuccess);
  ncclWindow_t wins[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclCommWindowRegister(comms_[0], p, 4096, &wins[0], NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_EQ(ncclCommWindowRegister(comms_[1], q, 4096, &wins[1], NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  ASSERT_NE(wins[0], nullptr);
  ASSERT_NE(wins[1], nullptr);
  expectError(ncclCommWindowDeregister(comms_[1], wins[0]), ncclInvalidArgument, comms_[1], "not a window");
  EXPECT_EQ(ncclCommWindowDeregister(comms_[0], wins[0]), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(comms_[1], wins[1]), ncclSuccess);
  // A handle already deregistered is looked up, not read (it was freed), and refused.
  expectError(ncclCommWindowDeregister(comms_[0], wins[0]), ncclInvalidArgument, comms_[0], "deregistered");
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemFree(q), ncclSuccess);
  expectWorks();
}

// As in NCCL: a range within a registration's pages gets that registration once more, each registration needs a
// deregistration, NULL deregisters nothing, and NCCL_LOCAL_REGISTER=0 registers nothing. Handles are looked up, so a
// stale or foreign one is refused without being read.
TEST_F(ApiArgs, RegistrationsAreCountedAndHandlesLookedUp) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  char* p = static_cast<char*>(m);
  ncclComm_t c = comms_[0];
  void* whole = nullptr;
  void* again = nullptr;
  void* inside = nullptr;
  void* other = nullptr;
  ASSERT_EQ(ncclCommRegister(c, p, 2 * page, &whole), ncclSuccess);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(ncclCommRegister(c, p, 2 * page, &again), ncclSuccess);
  EXPECT_EQ(again, whole);
  EXPECT_EQ(ncclCommRegister(c, p + 100, page, &inside), ncclSuccess);
  EXPECT_EQ(inside, whole);
  EXPECT_EQ(ncclCommRegister(c, p + page, 2 * page, &other), ncclSuccess);  // reaches past it: one of its own
  EXPECT_NE(other, whole);
  for (int i = 0; i < 3; i++) EXPECT_EQ(ncclCommDeregister(c, whole), ncclSuccess) << i;
  expectError(ncclCommDeregister(c, whole), ncclInvalidUsage, c, "not a registration of this communicator");
  expectError(ncclCommDeregister(comms_[1], other), ncclInvalidUsage, comms_[1], "not a registration");
  EXPECT_EQ(ncclCommDeregister(c, other), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(c, nullptr), ncclSuccess);
  void* bogus = reinterpret_cast<void*>(uintptr_t(0x10));  // would fault if it were read
  expectError(ncclCommDeregister(c, bogus), ncclInvalidUsage, c, "not a registration");

  setenv("NCCL_LOCAL_REGISTER", "0", 1);
  chorus_test::reloadEnv();
  void* none = &none;
  EXPECT_EQ(ncclCommRegister(c, p, page, &none), ncclSuccess);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(ncclCommDeregister(c, none), ncclSuccess);
  unsetenv("NCCL_LOCAL_REGISTER");
  chorus_test::reloadEnv();

  // NCCL_CHECK_POINTERS: the registered range must be memory of this process.
  ASSERT_EQ(mprotect(p + 3 * page, page, PROT_NONE), 0);
  void* h = nullptr;
  EXPECT_EQ(ncclCommRegister(c, p + 2 * page, 2 * page, &h), ncclSuccess);  // unchecked by default
  EXPECT_NE(h, nullptr);
  EXPECT_EQ(ncclCommDeregister(c, h), ncclSuccess);
  setenv("NCCL_CHECK_POINTERS", "1", 1);
  chorus_test::reloadEnv();
  h = &h;
  expectError(ncclCommRegister(c, p + 2 * page, 2 * page, &h), ncclInvalidArgument, c, "unreadable memory at");
  EXPECT_EQ(h, nullptr);
  expectError(ncclCommRegister(c, reinterpret_cast<void*>(uintptr_t(1) << 62), page, &h), ncclInvalidArgument, c,
              "nothing is mapped at");
  EXPECT_EQ(ncclCommRegister(c, p + 2 * page, page, &h), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclCommDeregister(c, h), ncclSuccess);
  unsetenv("NCCL_CHECK_POINTERS");
  chorus_test::reloadEnv();
  // A registration left at destroy ends with the communicator (TearDown destroys it).
  EXPECT_EQ(ncclCommRegister(c, p, page, &h), ncclSuccess);
  expectWorks();
  munmap(m, 4 * page);
}

// One thread registers two windows on each of its two ranks in one group (as the perf tools' -R 2 does): a rank's
// registrations run in call order at ncclGroupEnd, so each pairs with the other rank's of the same size. Run side by
// side on one communicator, the exchanges could pair a rank's first window with the other's second.
TEST_F(ApiArgs, SeveralWindowsPerRankInOneGroup) {
  for (int round = 0; round < 5; round++) {
    std::vector<char> a(3 << 12), b(3 << 12);
    ncclWindow_t wins[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 2; r++) {
      char* base = r == 0 ? a.data() : b.data();
      EXPECT_EQ(ncclCommWindowRegister(comms_[r], base, 4096, &wins[r][0], NCCL_WIN_DEFAULT), ncclSuccess);
      EXPECT_EQ(ncclCommWindowRegister(comms_[r], base + 4096, 8192, &wins[r][1], NCCL_WIN_DEFAULT), ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
    for (int r = 0; r < 2; r++)
      for (int k = 0; k < 2; k++) EXPECT_EQ(ncclCommWindowDeregister(comms_[r], wins[r][k]), ncclSuccess);
  }
  expectWorks();
}

// A window is one buffer of the same size on every rank: ranks that register different sizes are refused, naming
// both sizes, and the communicators keep working.
TEST_F(ApiArgs, WindowSizesMustAgree) {
  std::vector<char> a(8192), b(8192);
  ncclWindow_t wins[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclCommWindowRegister(comms_[0], a.data(), 4096, &wins[0], NCCL_WIN_DEFAULT), ncclSuccess);
  EXPECT_EQ(ncclCommWindowRegister(comms_[1], b.data(), 8192, &wins[1], NCCL_WIN_DEFAULT), ncclSuccess);
  expectError(ncclGroupEnd(), ncclInvalidUsage, nullptr, "the same size");
  std::string text = ncclGetLastError(nullptr);
  EXPECT_NE(text.find("4096"), std::string::npos) << text;
  EXPECT_NE(text.find("8192"), std::string::npos) << text;
  // The handles were given out in the group; they are released as usual.
  EXPECT_EQ(ncclCommWindowDeregister(comms_[0], wins[0]), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(comms_[1], wins[1]), ncclSuccess);
  expectError(ncclCommWindowDeregister(comms_[1], wins[1]), ncclInvalidArgument, comms_[1], "not a window");
  expectWorks();
}

}  // namespace
