// Communicator creation inside groups, from one thread that drives every rank (as ncclCommInitAll users and
// RCCL's split tests do): every creating call (ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitRankScalable,
// ncclCommSplit, ncclCommShrink) is deferred to ncclGroupEnd, blocking or not, also beside collectives on other
// communicators; a failure inside the group is the group's result. And a wait that lasts names what it waits for.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace {

constexpr int kRanks = 4;

ncclConfig_t nonblockingConfig() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

// Polls until comm's asynchronous state is no longer ncclInProgress (bounded) and returns it.
ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (state == ncclInProgress && std::chrono::steady_clock::now() < end) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// Every communicator in `comms` (one per rank, in rank order) has `n` ranks, and an allreduce over all of them,
// driven by this thread in one group, sums to the closed form.
void expectWorks(const std::vector<ncclComm_t>& comms, int n) {
  ASSERT_EQ(static_cast<int>(comms.size()), n);
  std::vector<std::vector<int>> bufs(n, std::vector<int>(37));
  for (int r = 0; r < n; r++) {
    ASSERT_NE(comms[r], nullptr) << "rank " << r << " has no communicator";
    int count = 0, rank = -1;
    ASSERT_EQ(ncclCommCount(comms[r], &count), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(count, n);
    EXPECT_EQ(rank, r);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    for (int& x : bufs[r]) x = r + 1;
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 37, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (auto& b : bufs)
    for (int x : b) ASSERT_EQ(x, n * (n + 1) / 2);
}

void destroyAll(std::vector<ncclComm_t>& comms) {
  for (ncclComm_t& c : comms) {
    if (c != nullptr) {
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    }
    c = nullptr;
  }
}

std::vector<ncclComm_t> initAll() {
  std::vector<ncclComm_t> comms(kRanks, nullptr);
  EXPECT_EQ(ncclCommInitAll(comms.data(), kRanks, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  return comms;
}

// Splits each of `parents` (ranks 0..3) into evens and odds in one group; rank r's child is subs[r].
ncclResult_t groupedSplit(const std::vector<ncclComm_t>& parents, std::vector<ncclComm_t>* subs, ncclConfig_t* cfg) {
  subs->assign(parents.size(), nullptr);
  ncclGroupStart();
  for (size_t i = 0; i < parents.size(); i++) {
    ncclResult_t r = ncclCommSplit(parents[i], static_cast<int>(i % 2), static_cast<int>(i), &(*subs)[i], cfg);
    if (r != ncclSuccess && r != ncclInProgress) ADD_FAILURE() << "ncclCommSplit rank " << i << ": " << r;
  }
  return ncclGroupEnd();
}

TEST(GroupCreate, InitRankConfigBlockingAndNonblocking) {
  for (int blocking : {1, 0}) {
    SCOPED_TRACE(blocking ? "blocking" : "nonblocking");
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<ncclComm_t> comms(kRanks, nullptr);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; r++) {
      ncclResult_t res = ncclCommInitRankConfig(&comms[r], kRanks, id, r, &cfg);
      ASSERT_TRUE(res == ncclSuccess || res == ncclInProgress) << res;
    }
    ASSERT_EQ(ncclGroupEnd(), blocking ? ncclSuccess : ncclInProgress) << ncclGetLastError(nullptr);
    for (ncclComm_t c : comms) ASSERT_EQ(settle(c), ncclSuccess) << ncclGetLastError(c);
    expectWorks(comms, kRanks);
    destroyAll(comms);
  }
}

TEST(GroupCreate, InitRankScalableBlockingAndNonblocking) {
  for (int blocking : {1, 0}) {
    SCOPED_TRACE(blocking ? "blocking" : "nonblocking");
    ncclUniqueId ids[2];
    ASSERT_EQ(ncclGetUniqueId(&ids[0]), ncclSuccess);
    ASSERT_EQ(ncclGetUniqueId(&ids[1]), ncclSuccess);
    std::vector<ncclComm_t> comms(kRanks, nullptr);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; r++) {
      ncclResult_t res = ncclCommInitRankScalable(&comms[r], kRanks, r, 2, ids, &cfg);
      ASSERT_TRUE(res == ncclSuccess || res == ncclInProgress) << res;
    }
    ncclResult_t end = ncclGroupEnd();
    ASSERT_EQ(end, blocking ? ncclSuccess : ncclInProgress) << ncclGetLastError(nullptr);
    for (ncclComm_t c : comms) ASSERT_EQ(settle(c), ncclSuccess) << ncclGetLastError(c);
    expectWorks(comms, kRanks);
    destroyAll(comms);
  }
}

TEST(GroupCreate, SplitFromOneThread) {
  std::vector<ncclComm_t> comms = initAll();
  std::vector<ncclComm_t> subs;
  ASSERT_EQ(groupedSplit(comms, &subs, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  expectWorks({subs[0], subs[2]}, 2);
  expectWorks({subs[1], subs[3]}, 2);
  destroyAll(subs);
  expectWorks(comms, kRanks);  // the parents are unharmed
  destroyAll(comms);
}

TEST(GroupCreate, NonblockingSplitFromOneThread) {
  std::vector<ncclComm_t> comms = initAll();
  ncclConfig_t cfg = nonblockingConfig();
  // Inside a group: ncclGroupEnd says ncclInProgress and each parent says when its split is done.
  std::vector<ncclComm_t> subs;
  ASSERT_EQ(groupedSplit(comms, &subs, &cfg), ncclInProgress) << ncclGetLastError(nullptr);
  for (ncclComm_t c : comms) ASSERT_EQ(settle(c), ncclSuccess) << ncclGetLastError(c);
  expectWorks({subs[0], subs[2]}, 2);
  expectWorks({subs[1], subs[3]}, 2);
  destroyAll(subs);
  // Outside a group: each call returns at once, so one thread can still split all its ranks. Rank 3 opts out.
  subs.assign(kRanks, nullptr);
  for (int r = 0; r < kRanks; r++) {
    int color = r == 3 ? NCCL_SPLIT_NOCOLOR : 0;
    ASSERT_EQ(ncclCommSplit(comms[r], color, kRanks - r, &subs[r], &cfg), ncclInProgress);
  }
  // While a split is in flight the parent refuses other calls, naming why.
  int x = 1;
  ncclResult_t early = ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comms[0], nullptr);
  if (early != ncclSuccess) {  // (the split may already be over)
    EXPECT_EQ(early, ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("still in progress"), std::string::npos);
  }
  for (ncclComm_t c : comms) ASSERT_EQ(settle(c), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(subs[3], nullptr);
  expectWorks({subs[2], subs[1], subs[0]}, 3);  // keys 4-r: rank 2 first
  destroyAll(subs);
  destroyAll(comms);
}

TEST(GroupCreate, ShrinkFromOneThreadBlockingAndNonblocking) {
  for (int blocking : {1, 0}) {
    SCOPED_TRACE(blocking ? "blocking" : "nonblocking");
    std::vector<ncclComm_t> comms = initAll();
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    int exclude[1] = {1};
    std::vector<ncclComm_t> subs(kRanks, nullptr);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; r++) {
      if (r == 1) continue;
      ncclResult_t res = ncclCommShrink(comms[r], exclude, 1, &subs[r], &cfg, NCCL_SHRINK_DEFAULT);
      ASSERT_TRUE(res == ncclSuccess || res == ncclInProgress) << res;
    }
    ASSERT_EQ(ncclGroupEnd(), blocking ? ncclSuccess : ncclInProgress) << ncclGetLastError(nullptr);
    for (int r = 0; r < kRanks; r++) {
      if (r != 1) {
        ASSERT_EQ(settle(comms[r]), ncclSuccess) << ncclGetLastError(comms[r]);
      }
    }
    EXPECT_EQ(subs[1], nullptr);
    expectWorks({subs[0], subs[2], subs[3]}, 3);
    destroyAll(subs);
    destroyAll(comms);
  }
}

// As in NCCL, one group cannot create blocking and nonblocking communicators both: the creation of the other kind
// is refused with ncclInvalidArgument, and the group fails. Its accepted creations still run (the other ranks' inits
// expect them), and the next group on the thread starts afresh.
TEST(GroupCreate, BlockingAndNonblockingCreationsCannotShareAGroup) {
  for (int first : {1, 0}) {
    SCOPED_TRACE(first ? "blocking first" : "nonblocking first");
    ncclUniqueId id, other;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ASSERT_EQ(ncclGetUniqueId(&other), ncclSuccess);
    std::vector<ncclComm_t> comms(kRanks, nullptr);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, otherCfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = first;
    otherCfg.blocking = 1 - first;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; r++) {
      ncclResult_t res = ncclCommInitRankConfig(&comms[r], kRanks, id, r, &cfg);
      ASSERT_EQ(res, first ? ncclSuccess : ncclInProgress);
    }
    ncclComm_t refused = reinterpret_cast<ncclComm_t>(&other);  // must come back NULL
    EXPECT_EQ(ncclCommInitRankConfig(&refused, 1, other, 0, &otherCfg), ncclInvalidArgument);
    EXPECT_EQ(refused, nullptr);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("blocking and nonblocking communicators cannot be created"),
              std::string::npos)
        << ncclGetLastError(nullptr);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("a call in the group was refused"), std::string::npos)
        << ncclGetLastError(nullptr);
    for (ncclComm_t c : comms) ASSERT_EQ(settle(c), ncclSuccess) << ncclGetLastError(c);
    expectWorks(comms, kRanks);  // its ncclGroupEnd must say ncclSuccess: nothing of the failed group is left
    destroyAll(comms);
  }
}

// A creating call refused inside a group (here a split with a bad color) fails the group, as any refused call does:
// none of its operations runs.
TEST(GroupCreate, ARefusedCreationFailsTheGroup) {
  std::vector<ncclComm_t> comms = initAll();
  std::vector<std::vector<int>> bufs(kRanks, std::vector<int>(5, 1));
  ncclComm_t child = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; r++)
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 5, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommSplit(comms[0], -7, 0, &child, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  const std::string why = ncclGetLastError(nullptr);
  EXPECT_NE(why.find("color -7"), std::string::npos) << why;
  EXPECT_NE(why.find("4 dropped"), std::string::npos) << why;
  for (auto& b : bufs)
    for (int x : b) EXPECT_EQ(x, 1) << "an operation of the failed group ran";
  EXPECT_EQ(child, nullptr);
  expectWorks(comms, kRanks);
  destroyAll(comms);
}

// ncclGroupSimulateEnd over nonblocking creations says ncclInProgress, as ncclGroupEnd does, and leaves no trace:
// the thread's next group ends with ncclSuccess.
TEST(GroupCreate, SimulatedGroupOfNonblockingCreations) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(kRanks, nullptr);
  ncclConfig_t cfg = nonblockingConfig();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; r++) ASSERT_EQ(ncclCommInitRankConfig(&comms[r], kRanks, id, r, &cfg), ncclInProgress);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInProgress) << ncclGetLastError(nullptr);
  for (ncclComm_t c : comms) ASSERT_EQ(settle(c), ncclSuccess) << ncclGetLastError(c);
  expectWorks(comms, kRanks);
  destroyAll(comms);
}

// A group that splits some communicators and runs collectives on others: the splits happen first, the
// collectives run as usual.
TEST(GroupCreate, SplitBesideCollectivesOnOtherCommunicators) {
  std::vector<ncclComm_t> a = initAll(), b = initAll();
  std::vector<ncclComm_t> subs(kRanks, nullptr);
  std::vector<std::vector<float>> bufs(kRanks, std::vector<float>(1000));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; r++) {
    ASSERT_EQ(ncclCommSplit(a[r], r / 2, r, &subs[r], nullptr), ncclSuccess);
    for (float& v : bufs[r]) v = static_cast<float>(r);
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 1000, ncclFloat32, ncclMax, b[r], nullptr), ncclSuccess);
  }
  for (int r = 0; r < kRanks; r++) EXPECT_EQ(subs[r], nullptr) << "a split's result exists only after ncclGroupEnd";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (auto& buf : bufs)
    for (float v : buf) ASSERT_EQ(v, kRanks - 1.0f);
  expectWorks({subs[0], subs[1]}, 2);
  expectWorks({subs[2], subs[3]}, 2);
  destroyAll(subs);
  destroyAll(a);
  destroyAll(b);
}

// Three of four ranks split in a group; the fourth never does. The group fails with the bootstrap's error (not
// ncclSuccess with NULL communicators), naming the missing rank, and nothing is left half made.
TEST(GroupCreate, FailedSplitIsTheGroupsResult) {
  setenv("CHORUS_TIMEOUT_S", "2", 1);
  ncclResetDebugInit();
  std::vector<ncclComm_t> comms = initAll();
  std::vector<ncclComm_t> subs(kRanks, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks - 1; r++) ASSERT_EQ(ncclCommSplit(comms[r], 0, r, &subs[r], nullptr), ncclSuccess);
  ncclResult_t res = ncclGroupEnd();
  std::string why = ncclGetLastError(nullptr);
  setenv("CHORUS_TIMEOUT_S", "20", 1);
  ncclResetDebugInit();
  EXPECT_NE(res, ncclSuccess);
  EXPECT_NE(why.find("rank 3"), std::string::npos) << why;
  for (ncclComm_t s : subs) EXPECT_EQ(s, nullptr);
  for (ncclComm_t& c : comms) {
    EXPECT_EQ(ncclCommAbort(c), ncclSuccess);
    c = nullptr;
  }
}

// A wait that lasts longer than CHORUS_WAIT_WARN_S logs one WARN naming the communicator, the step and the ranks
// it waits for, long before CHORUS_TIMEOUT_S ends it: here a bootstrap allgather (a split rank 3 never joins) and
// the bootstrap root (an init rank 3 never joins).
TEST(GroupCreate, LongWaitsSayWhatTheyWaitFor) {
  std::string file = "/tmp/chorus-slowwait-" + std::to_string(getpid());
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", file.c_str(), 1);
  setenv("CHORUS_WAIT_WARN_S", "1", 1);
  setenv("CHORUS_TIMEOUT_S", "3", 1);
  ncclResetDebugInit();
  std::vector<ncclComm_t> comms = initAll();
  std::vector<ncclComm_t> subs(kRanks, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks - 1; r++) ASSERT_EQ(ncclCommSplit(comms[r], 0, r, &subs[r], nullptr), ncclSuccess);
  EXPECT_NE(ncclGroupEnd(), ncclSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> partial(kRanks - 1, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks - 1; r++) ASSERT_EQ(ncclCommInitRank(&partial[r], kRanks, id, r), ncclSuccess);
  EXPECT_NE(ncclGroupEnd(), ncclSuccess);
  for (ncclComm_t c : partial)
    if (c != nullptr) ncclCommAbort(c);
  for (ncclComm_t c : comms) ncclCommAbort(c);
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("CHORUS_WAIT_WARN_S");
  setenv("CHORUS_TIMEOUT_S", "20", 1);
  ncclResetDebugInit();
  std::string log = chorus_test::readFile(file);
  unlink(file.c_str());
  // The allgather of the split, on each of ranks 0-2 of the parent (before the timeout's own error lines).
  size_t at = log.find("bootstrap allGather on comm ");
  ASSERT_NE(at, std::string::npos) << log;
  std::string line = log.substr(at, log.find('\n', at) - at);
  EXPECT_NE(line.find("rank(s) "), std::string::npos) << line;
  EXPECT_NE(line.find("has waited "), std::string::npos) << line;
  EXPECT_NE(line.find("3"), std::string::npos) << "the missing rank is named: " << line;
  EXPECT_LT(at, log.find("timed out after")) << "the warning must come before the timeout:\n" << log;
  // The root of the second rendezvous names the rank that has not joined.
  EXPECT_NE(log.find("3 of 4 ranks have joined in "), std::string::npos) << log;
  EXPECT_NE(log.find("rank(s) 3 not yet"), std::string::npos) << log;
}

}  // namespace
