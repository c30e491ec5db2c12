// Bootstrap failure tests: every case expects a named error code and a message naming the
// culprit (rank, version or address) within a bound, on every rank involved. Ranks are
// threads, except one test that forks a rank which then exits.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "core/bootstrap_internal.h"
#include "core/debug.h"
#include "core/params.h"
#include "core/socket.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// One rank to start: its number, nranks, and what it does before and after create().
struct RankSpec {
  RankSpec(int r, int n, const ncclUniqueId* i, uint32_t fake = 0, std::atomic<int>* abortF = nullptr,
           std::function<ncclResult_t(Bootstrap&)> b = {})
      : rank(r), nranks(n), id(i), fakeVersion(fake), abortFlag(abortF), body(std::move(b)) {}
  int rank;
  int nranks;
  const ncclUniqueId* id;
  uint32_t fakeVersion;  ///< version this rank announces (0: the real one)
  std::atomic<int>* abortFlag;
  std::function<ncclResult_t(Bootstrap&)> body;  ///< run after a successful create()
};

/// What one rank observed, and when it finished.
struct Outcome {
  ncclResult_t result = ncclInternalError;
  std::string error;
  double seconds = 0;
};

std::vector<Outcome> run(const std::vector<RankSpec>& specs) {
  std::vector<Outcome> out(specs.size());
  std::vector<std::thread> threads;
  auto t0 = Clock::now();
  for (size_t i = 0; i < specs.size(); i++) {
    threads.emplace_back([&, i] {
      const RankSpec& s = specs[i];
      bootstrapSetVersionForTest(s.fakeVersion);
      std::unique_ptr<Bootstrap> b;
      out[i].result = Bootstrap::create(nullptr, *s.id, s.rank, s.nranks, PeerInfo(), s.abortFlag, &b);
      if (out[i].result == ncclSuccess && s.body) out[i].result = s.body(*b);
      out[i].seconds = since(t0);
      if (out[i].result != ncclSuccess) out[i].error = threadLastError();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Expects code and every substring in the rank's message.
void expectFailure(const Outcome& o, ncclResult_t code, std::initializer_list<std::string> parts, double within,
                   const char* who) {
  EXPECT_EQ(o.result, code) << who << ": " << o.error;
  for (const std::string& p : parts)
    EXPECT_NE(o.error.find(p), std::string::npos) << who << ": \"" << p << "\" not in: " << o.error;
  EXPECT_LT(o.seconds, within) << who;
}

/// `id` with its root moved to a local port that had a listener a moment ago and has none now: refused.
bool withDeadRoot(const ncclUniqueId& id, ncclUniqueId* dead) {
  Socket probe;
  SockAddr lo;
  std::string why;
  UniqueIdLayout l;
  if (parseAddress("127.0.0.1:0", &lo, &why) != ncclSuccess || !Socket::listen(lo, &probe).ok() ||
      !decodeUniqueId(id, &l, &why))
    return false;
  l.root = packAddr(probe.local());
  probe.close();
  encodeUniqueId(l, dead);
  return true;
}

class BootstrapFault : public ::testing::Test {
 protected:
  void SetUp() override { setTimeout(5); }
  void TearDown() override {
    unsetenv("CHORUS_TIMEOUT_S");
    paramsReload();
  }
  static void setTimeout(int s) {
    setenv("CHORUS_TIMEOUT_S", std::to_string(s).c_str(), 1);
    paramsReload();
  }
  static ncclUniqueId newId() {
    ncclUniqueId id;
    EXPECT_EQ(bootstrapGetUniqueId(&id), ncclSuccess) << threadLastError();
    return id;
  }
};

TEST_F(BootstrapFault, CorruptedIdFailsAtOnce) {
  ncclUniqueId good = newId();
  ncclUniqueId badMagic = good, badSum = good, zero;
  badMagic.internal[0] ^= 0x5a;
  badSum.internal[offsetof(UniqueIdLayout, secret)] ^= 1;  // secret changed, checksum not updated
  memset(&zero, 0, sizeof(zero));
  auto out = run({{0, 2, &badMagic}, {1, 2, &badSum}, {0, 1, &zero}});
  expectFailure(out[0], ncclInvalidArgument, {"invalid ncclUniqueId", "bad magic"}, 0.5, "bad magic");
  expectFailure(out[1], ncclInvalidArgument, {"invalid ncclUniqueId", "checksum"}, 0.5, "bad checksum");
  expectFailure(out[2], ncclInvalidArgument, {"invalid ncclUniqueId"}, 0.5, "zero id");
  EXPECT_EQ(run({{0, 1, &good}})[0].result, ncclSuccess);  // the intact id still works
}

TEST_F(BootstrapFault, WrongSecretIsRejectedAndLegitRanksProceed) {
  ncclUniqueId id = newId();
  UniqueIdLayout l;
  std::string why;
  ASSERT_TRUE(decodeUniqueId(id, &l, &why));
  l.secret ^= 0x1234;  // a copy of the id with another secret, e.g. from an earlier job
  ncclUniqueId forged;
  encodeUniqueId(l, &forged);
  auto imposter = run({{1, 2, &forged}});
  expectFailure(imposter[0], ncclRemoteError, {uniqueIdDescribe(id), "stale or wrong unique id"}, 2.0, "imposter");
  auto legit = run({{0, 2, &id}, {1, 2, &id}});
  EXPECT_EQ(legit[0].result, ncclSuccess) << legit[0].error;
  EXPECT_EQ(legit[1].result, ncclSuccess) << legit[1].error;
}

TEST_F(BootstrapFault, StaleIdNamesTheAddress) {
  setTimeout(1);
  ncclUniqueId id = newId();
  ASSERT_EQ(run({{0, 1, &id}})[0].result, ncclSuccess);  // the root served its one rendezvous and left
  auto out = run({{0, 1, &id}});
  EXPECT_TRUE(out[0].result == ncclSystemError || out[0].result == ncclRemoteError) << out[0].error;
  expectFailure(out[0], out[0].result, {uniqueIdDescribe(id)}, 3.0, "stale id");

  // An id whose root port never had a listener: refused until the deadline.
  ncclUniqueId dead;
  ASSERT_TRUE(withDeadRoot(id, &dead));
  out = run({{0, 2, &dead}});
  expectFailure(out[0], ncclSystemError, {uniqueIdDescribe(dead), "cannot reach the bootstrap root", "within 1 s"}, 3.0,
                "no listener");
  EXPECT_GE(out[0].seconds, 0.9);
}

// NCCL_SOCKET_RETRY_CNT and NCCL_SOCKET_RETRY_SLEEP_MSEC, where set, bound how long a rank tries a root that refuses
// it, as NCCL's linear back-off does (SLEEP x (1 + ... + CNT)), shorter or longer than CHORUS_TIMEOUT_S.
TEST_F(BootstrapFault, SocketRetrySettingsBoundTheTriesOfARootNotListening) {
  ncclUniqueId dead;
  ASSERT_TRUE(withDeadRoot(newId(), &dead));
  // Shorter: 300 ms x 1 against CHORUS_TIMEOUT_S=5.
  setenv("NCCL_SOCKET_RETRY_CNT", "1", 1);
  setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "300", 1);
  paramsReload();
  auto out = run({{0, 2, &dead}});
  expectFailure(out[0], ncclSystemError, {"cannot reach the bootstrap root", "within 0.3 s"}, 3.0, "short window");
  // Longer: 200 ms x (1 + 2 + 3 + 4) = 2 s against CHORUS_TIMEOUT_S=1.
  setTimeout(1);
  setenv("NCCL_SOCKET_RETRY_CNT", "4", 1);
  setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "200", 1);
  paramsReload();
  out = run({{0, 2, &dead}});
  expectFailure(out[0], ncclSystemError, {"cannot reach the bootstrap root", "within 2 s"}, 5.0, "long window");
  EXPECT_GE(out[0].seconds, 1.9);
  unsetenv("NCCL_SOCKET_RETRY_CNT");
  unsetenv("NCCL_SOCKET_RETRY_SLEEP_MSEC");
}

// Where the window is longer than CHORUS_TIMEOUT_S, the rendezvous waits that long for a rank that starts late: with
// CHORUS_TIMEOUT_S=1, a second rank 3 s after the first meets it under a window of 8.4 s (400 ms x (1 + ... + 6)),
// and without the settings the root gives up on it.
TEST_F(BootstrapFault, SocketRetryWindowLetsALateRankJoin) {
  for (bool window : {true, false}) {
    setTimeout(1);
    if (window) {
      setenv("NCCL_SOCKET_RETRY_CNT", "6", 1);
      setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "400", 1);
    }
    paramsReload();
    ncclUniqueId id = newId();
    std::vector<Outcome> late;
    std::thread second([&] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      late = run({{1, 2, &id}});
    });
    auto first = run({{0, 2, &id}});
    second.join();
    unsetenv("NCCL_SOCKET_RETRY_CNT");
    unsetenv("NCCL_SOCKET_RETRY_SLEEP_MSEC");
    ASSERT_EQ(late.size(), 1u);
    if (window) {
      EXPECT_EQ(first[0].result, ncclSuccess) << first[0].error;
      EXPECT_EQ(late[0].result, ncclSuccess) << late[0].error;
    } else {
      EXPECT_NE(first[0].result, ncclSuccess);
      EXPECT_NE(first[0].error.find("never joined"), std::string::npos) << first[0].error;
    }
  }
}

TEST_F(BootstrapFault, VersionMismatchFailsEveryRank) {
  ncclUniqueId id = newId();
  auto out = run({{0, 2, &id}, {1, 2, &id, NCCL_VERSION_CODE + 1}});
  std::string mine = std::to_string(NCCL_VERSION_CODE), theirs = std::to_string(NCCL_VERSION_CODE + 1);
  for (int r = 0; r < 2; r++) {
    expectFailure(out[r], ncclInvalidUsage, {"rank 1", mine, theirs, "same version"}, 2.0,
                  r == 0 ? "rank 0" : "rank 1");
  }
}

TEST_F(BootstrapFault, DuplicateRankFailsEveryRank) {
  ncclUniqueId id = newId();
  auto out = run({{0, 3, &id}, {0, 3, &id}, {1, 3, &id}});
  for (size_t i = 0; i < out.size(); i++) {
    expectFailure(out[i], ncclInvalidUsage, {"rank 0 joined twice"}, 2.0, ("thread " + std::to_string(i)).c_str());
  }
}

TEST_F(BootstrapFault, OutOfRangeRankFailsEveryRank) {
  ncclUniqueId id = newId();
  auto out = run({{0, 2, &id}, {5, 2, &id}});
  for (int i = 0; i < 2; i++)
    expectFailure(out[i], ncclInvalidArgument, {"rank 5", "out of range for nranks=2"}, 2.0, "rank");
}

TEST_F(BootstrapFault, NranksMismatchFailsEveryRank) {
  ncclUniqueId id = newId();
  auto out = run({{0, 2, &id}, {1, 3, &id}});
  for (int i = 0; i < 2; i++) {
    expectFailure(out[i], ncclInvalidUsage, {"nranks=2", "nranks=3"}, 2.0, i == 0 ? "rank 0" : "rank 1");
  }
}

TEST_F(BootstrapFault, MissingRankIsNamedOnEveryRank) {
  setTimeout(1);
  ncclUniqueId id = newId();
  auto out = run({{0, 3, &id}, {1, 3, &id}});
  for (int i = 0; i < 2; i++) {
    expectFailure(out[i], ncclRemoteError, {"rank(s) 2 never joined within 1 s", uniqueIdDescribe(id)}, 3.0,
                  i == 0 ? "rank 0" : "rank 1");
    EXPECT_GE(out[i].seconds, 0.9);
  }
}

TEST_F(BootstrapFault, GarbageOnTheRootPortIsIgnored) {
  ncclUniqueId id = newId();
  UniqueIdLayout l;
  std::string why;
  ASSERT_TRUE(decodeUniqueId(id, &l, &why));
  SockAddr root;
  ASSERT_TRUE(unpackAddr(l.root, &root));
  Socket junk, staller, quitter;
  ASSERT_TRUE(Socket::connect(root, Deadline::after(5), nullptr, &junk).ok());
  ASSERT_TRUE(Socket::connect(root, Deadline::after(5), nullptr, &staller).ok());
  ASSERT_TRUE(Socket::connect(root, Deadline::after(5), nullptr, &quitter).ok());
  const char http[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(junk.sendAll(http, sizeof(http), Deadline::after(5), nullptr).ok());
  ASSERT_TRUE(staller.sendAll("abc", 3, Deadline::after(5), nullptr).ok());  // a partial hello, then silence
  HelloMsg half{};
  half.magic = kHelloMagic;
  ASSERT_TRUE(quitter.sendAll(&half, 8, Deadline::after(5), nullptr).ok());  // right magic, then gone
  quitter.close();
  // The root drops the garbage sender at once.
  char c;
  IoResult r = junk.recvAll(&c, 1, Deadline::after(2), nullptr);
  EXPECT_TRUE(r.status == IoStatus::kEof || r.status == IoStatus::kReset) << r.what;
  auto out = run({{0, 2, &id}, {1, 2, &id}});
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(out[i].result, ncclSuccess) << out[i].error;
    EXPECT_LT(out[i].seconds, 2.0);
  }
}

TEST_F(BootstrapFault, AbortWhileWaitingReturnsPromptly) {
  setTimeout(10);
  ncclUniqueId id = newId();
  std::atomic<int> abortFlag{0};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abortFlag.store(1);
  });
  auto out = run({{0, 2, &id, 0, &abortFlag}});
  aborter.join();
  expectFailure(out[0], ncclInternalError, {"abort", uniqueIdDescribe(id)}, 1.0, "aborted rank");
  EXPECT_GE(out[0].seconds, 0.15);
}

TEST_F(BootstrapFault, RankLeavingBeforeEveryoneJoinedFailsTheOthers) {
  ncclUniqueId id = newId();
  std::atomic<int> abortFlag{0};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    abortFlag.store(1);
  });
  // Ranks 0 and 1 wait for rank 2, which never comes; rank 1 gives up (abort) first.
  auto out = run({{0, 3, &id}, {1, 3, &id, 0, &abortFlag}});
  aborter.join();
  expectFailure(out[1], ncclInternalError, {"abort"}, 1.0, "rank 1");
  expectFailure(out[0], ncclRemoteError, {"rank 1", "left the bootstrap rendezvous"}, 1.5, "rank 0");
}

TEST_F(BootstrapFault, PeerThatExitsIsNamedByTheNextCalls) {
  ncclUniqueId id = newId();
  std::atomic<int> gone{0};
  std::string p2pError, agError[2];
  ncclResult_t p2pResult = ncclSuccess, agResult[2] = {ncclSuccess, ncclSuccess};
  auto waitGone = [&] {
    while (gone.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  std::function<ncclResult_t(Bootstrap&)> body = [&](Bootstrap& b) -> ncclResult_t {
    ncclResult_t res = b.barrier();
    if (res != ncclSuccess) return res;
    int v = 42;
    if (b.rank() == 2) return b.send(0, 5, &v, sizeof(v));  // then its Bootstrap is destroyed: sockets close
    if (b.rank() == 0) {
      if ((res = b.recv(2, 5, &v, sizeof(v))) != ncclSuccess || v != 42) return ncclInternalError;
    }
    waitGone();
    std::vector<int> all(3);
    res = agResult[b.rank()] = b.allGather(all.data(), sizeof(int));
    agError[b.rank()] = threadLastError();
    if (b.rank() == 0) {
      p2pResult = b.recv(2, 6, &v, sizeof(v));
      p2pError = threadLastError();
    }
    return res;
  };
  std::vector<RankSpec> specs = {{0, 3, &id, 0, nullptr, body}, {1, 3, &id, 0, nullptr, body}};
  std::vector<Outcome> out;
  std::thread leaver([&] {
    auto r = run({{2, 3, &id, 0, nullptr, body}});
    EXPECT_EQ(r[0].result, ncclSuccess) << r[0].error;
    gone.store(1);
  });
  out = run(specs);
  leaver.join();
  for (int i = 0; i < 2; i++) {
    EXPECT_LT(out[i].seconds, 3.0);
    EXPECT_EQ(agResult[i], ncclRemoteError) << agError[i];
    EXPECT_NE(agError[i].find("rank 2 (host"), std::string::npos) << "rank " << i << ": " << agError[i];
    EXPECT_NE(agError[i].find("closed its bootstrap connection"), std::string::npos) << agError[i];
  }
  EXPECT_EQ(p2pResult, ncclRemoteError) << p2pError;
  EXPECT_NE(p2pError.find("rank 2"), std::string::npos) << p2pError;
}

// Rank 1 is a forked process that joins, takes part in one allGather and exits; rank 0's
// next allGather must fail with ncclRemoteError naming rank 1.
TEST_F(BootstrapFault, ForkedPeerExitIsDetected) {
  int pipeFd[2];
  ASSERT_EQ(pipe(pipeFd), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // never outlive a broken parent
    ::close(pipeFd[1]);
    ncclUniqueId id;
    if (read(pipeFd[0], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) _exit(2);
    std::unique_ptr<Bootstrap> b;
    if (Bootstrap::create(nullptr, id, 1, 2, PeerInfo(), nullptr, &b) != ncclSuccess) _exit(3);
    int all[2] = {0, 11};
    if (b->allGather(all, sizeof(int)) != ncclSuccess || all[0] != 10) _exit(4);
    _exit(0);  // no cleanup: the kernel closes the sockets, as when a process crashes
  }
  ::close(pipeFd[0]);
  ncclUniqueId id = newId();
  ASSERT_EQ(write(pipeFd[1], &id, sizeof(id)), static_cast<ssize_t>(sizeof(id)));
  ::close(pipeFd[1]);
  std::unique_ptr<Bootstrap> b;
  ASSERT_EQ(Bootstrap::create(nullptr, id, 0, 2, PeerInfo(), nullptr, &b), ncclSuccess) << threadLastError();
  int all[2] = {10, 0};
  ASSERT_EQ(b->allGather(all, sizeof(int)), ncclSuccess) << threadLastError();
  EXPECT_EQ(all[1], 11);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  auto t0 = Clock::now();
  ncclResult_t res = b->allGather(all, sizeof(int));
  std::string err = threadLastError();
  EXPECT_EQ(res, ncclRemoteError) << err;
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_LT(since(t0), 2.0);
  EXPECT_EQ(b->barrier(), ncclRemoteError) << "the ring stays broken";
}

}  // namespace
}  // namespace chorus
