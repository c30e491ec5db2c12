// chorus-doctor: the checks that involve other ranks. Connectivity uses chorus's own sockets on the interface
// chorus would choose; links and collectives use a chorus communicator (host buffers: the transports chorus uses
// between these ranks, shared memory within a host and the net across).
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/socket.h"
#include "nccl.h"
#include "tools/doctor/doctor.h"

namespace chorus {
namespace doctor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// Fixed-size strings through Control::allgather.
constexpr size_t kText = 4096;
std::vector<std::string> gatherText(perf::Control& ctl, const std::string& mine) {
  std::vector<char> in(kText, 0), out(kText * static_cast<size_t>(ctl.nprocs()));
  std::memcpy(in.data(), mine.data(), std::min(mine.size(), kText - 1));
  std::vector<std::string> all;
  if (!ctl.allgather(in.data(), kText, out.data())) return all;
  for (int p = 0; p < ctl.nprocs(); p++) all.emplace_back(out.data() + p * kText, strnlen(out.data() + p * kText, kText));
  return all;
}

std::vector<std::string> gatherLines(perf::Control& ctl, const std::vector<std::string>& mine) {
  std::string joined;
  for (const std::string& m : mine) joined += m + "\n";
  std::vector<std::string> lines;
  for (const std::string& s : gatherText(ctl, joined)) {
    for (size_t a = 0, b; a < s.size(); a = b + 1) {
      b = s.find('\n', a);
      if (b == std::string::npos) b = s.size();
      if (b > a) lines.push_back(s.substr(a, b - a));
    }
  }
  return lines;
}

std::vector<std::string> checkConnectivity(perf::Control& ctl, const std::vector<Facts>& facts, int timeoutS) {
  int me = ctl.proc();
  std::vector<std::string> failures;
  Socket listen;
  SockAddr addr;
  std::string ifName, why;
  std::string mine;
  if (!facts[me].ifName.empty() && findInterface(&addr, &ifName, &why) == ncclSuccess) {
    IoResult r = Socket::listen(addr, &listen);
    if (r.ok()) {
      mine = listen.local().str();
    } else {
      failures.push_back(rankName(facts[me]) + " cannot listen on " + addr.str() + ": " + r.what);
    }
  }
  std::vector<std::string> addrs = gatherText(ctl, mine);
  if (addrs.size() != facts.size()) return failures;
  // Accept (and drop) whatever arrives until everyone has tried.
  std::atomic<bool> stop{false};
  std::thread acceptor([&]() {
    while (!stop.load() && listen.valid()) {
      pollfd pf{listen.fd(), POLLIN, 0};
      if (poll(&pf, 1, 20) <= 0) continue;
      Socket s;
      listen.tryAccept(&s);
    }
  });
  // One rank of every other host, the first with a listener.
  std::map<uint64_t, int> target;
  for (const Facts& f : facts)
    if (f.hostHash != facts[me].hostHash && !addrs[f.rank].empty() && !target.count(f.hostHash))
      target[f.hostHash] = f.rank;
  if (!mine.empty()) {
    for (const auto& [host, peer] : target) {
      SockAddr to;
      std::string err;
      if (parseAddress(addrs[peer], &to, &err) != ncclSuccess) {
        failures.push_back(rankName(facts[me]) + ": bad address " + addrs[peer] + " of rank " + std::to_string(peer));
        continue;
      }
      Socket s;
      IoResult r = Socket::connect(to, Deadline::after(timeoutS), nullptr, &s, [](int e) { return e == ECONNREFUSED; });
      if (!r.ok())
        failures.push_back(rankName(facts[me]) + " cannot reach " + rankName(facts[peer]) + " at " + addrs[peer] +
                           ": " + r.what);
    }
  }
  ctl.barrier();
  stop.store(true);
  acceptor.join();
  return failures;
}

namespace {

// Latency (one way, us) and bandwidth (GB/s each way) between this rank and `partner`, the lower rank timing.
// Returns false when a call failed.
bool measureOne(ncclComm_t comm, int rank, int partner, const LinkOptions& o, char* sendb, char* recvb, double* lat,
                double* bw) {
  bool ok = true;
  const bool first = rank < partner;
  // Latency: ping-pong of 8 bytes.
  auto pingPong = [&](int iters) {
    for (int i = 0; i < iters && ok; i++) {
      if (first) {
        ok = ncclSend(sendb, 8, ncclChar, partner, comm, nullptr) == ncclSuccess &&
             ncclRecv(recvb, 8, ncclChar, partner, comm, nullptr) == ncclSuccess;
      } else {
        ok = ncclRecv(recvb, 8, ncclChar, partner, comm, nullptr) == ncclSuccess &&
             ncclSend(sendb, 8, ncclChar, partner, comm, nullptr) == ncclSuccess;
      }
    }
  };
  // Bandwidth: both ways at once.
  auto exchange = [&](int iters) {
    for (int i = 0; i < iters && ok; i++) {
      ok = ncclGroupStart() == ncclSuccess &&
           ncclSend(sendb, o.bwBytes, ncclChar, partner, comm, nullptr) == ncclSuccess &&
           ncclRecv(recvb, o.bwBytes, ncclChar, partner, comm, nullptr) == ncclSuccess && ncclGroupEnd() == ncclSuccess;
    }
  };
  // Best of several windows and the fastest round trip, timed in two halves a moment apart (before and after the
  // bandwidth windows): a link that is slow is slow every time, while a busy CPU (other processes, a rank
  // descheduled) slows some windows and some round trips only.
  *lat = 1e300;
  auto latency = [&](int iters) {
    for (int i = 0; i < iters && ok; i++) {
      auto t0 = Clock::now();
      pingPong(1);
      *lat = std::min(*lat, seconds(t0) / 2 * 1e6);
    }
  };
  pingPong(3);
  latency(o.latIters / 2);
  exchange(2);
  *bw = 0;
  for (int w = 0; w < 3; w++) {
    auto t0 = Clock::now();
    exchange(o.bwIters);
    *bw = std::max(*bw, double(o.bwBytes) * o.bwIters / seconds(t0) / 1e9);
  }
  latency(o.latIters - o.latIters / 2);
  return ok;
}

}  // namespace

bool measurePairs(perf::Control& ctl, void* commp, int rank, int n, const LinkOptions& o, std::vector<PairResult>* out,
                  const std::function<void(const std::string&)>& progress) {
  auto comm = static_cast<ncclComm_t>(commp);
  // Circle method: m - 1 rounds in which every rank meets one other (rank >= n: no partner that round).
  const int m = n % 2 ? n + 1 : n;
  std::vector<int> circle(m);
  for (int i = 0; i < m; i++) circle[i] = i;
  std::vector<char> buf(2 * o.bwBytes + 64);
  std::vector<double> mine(4 * (m - 1), -1.0);  // per round: a, b, latency, bandwidth (when this rank is a)
  bool ok = true;
  for (int round = 0; round < m - 1; round++) {
    if (progress) progress("pairs: round " + std::to_string(round + 1) + " of " + std::to_string(m - 1));
    int partner = -1;
    for (int i = 0; i < m / 2; i++) {
      int a = circle[i], b = circle[m - 1 - i];
      if (a == rank) partner = b;
      if (b == rank) partner = a;
    }
    if (!ctl.barrier()) return false;
    if (ok && partner >= 0 && partner < n) {
      double lat = 0, bw = 0;
      ok = measureOne(comm, rank, partner, o, buf.data(), buf.data() + o.bwBytes, &lat, &bw);
      if (ok && rank < partner) {
        mine[4 * round] = rank;
        mine[4 * round + 1] = partner;
        mine[4 * round + 2] = lat;
        mine[4 * round + 3] = bw;
      }
    }
    // Rotate every position but the first.
    int last = circle[m - 1];
    for (int i = m - 1; i > 1; i--) circle[i] = circle[i - 1];
    circle[1] = last;
  }
  std::vector<double> all(mine.size() * static_cast<size_t>(ctl.nprocs()));
  if (!ctl.allgather(mine.data(), mine.size() * sizeof(double), all.data())) return false;
  for (size_t i = 0; i + 3 < all.size(); i += 4) {
    if (all[i] < 0) continue;
    out->push_back({static_cast<int>(all[i]), static_cast<int>(all[i + 1]), all[i + 2], all[i + 3]});
  }
  std::vector<double> okAll = {ok ? 0.0 : 1.0};
  return ctl.allreduce(&okAll, perf::Reduce::kMax) && okAll[0] == 0.0;
}

bool remeasurePairs(perf::Control& ctl, void* commp, int rank, const LinkOptions& o, const std::vector<size_t>& which,
                    std::vector<PairResult>* pairs) {
  auto comm = static_cast<ncclComm_t>(commp);
  std::vector<char> buf(2 * o.bwBytes + 64);
  // Per pair: latency and bandwidth as its lower rank measured them (others: no value), reduced with max.
  std::vector<double> got(2 * which.size(), -1.0);
  bool ok = true;
  for (size_t k = 0; k < which.size(); k++) {
    const PairResult& p = (*pairs)[which[k]];
    if (!ctl.barrier()) return false;
    if (!ok || (rank != p.a && rank != p.b)) continue;
    double lat = 0, bw = 0;
    ok = measureOne(comm, rank, rank == p.a ? p.b : p.a, o, buf.data(), buf.data() + o.bwBytes, &lat, &bw);
    if (ok && rank == std::min(p.a, p.b)) {
      got[2 * k] = lat;
      got[2 * k + 1] = bw;
    }
  }
  std::vector<double> okAll = {ok ? 0.0 : 1.0};
  if (!ctl.allreduce(&got, perf::Reduce::kMax) || !ctl.allreduce(&okAll, perf::Reduce::kMax) || okAll[0] != 0.0)
    return false;
  for (size_t k = 0; k < which.size(); k++) {
    PairResult& p = (*pairs)[which[k]];
    if (got[2 * k] >= 0) p.latencyUs = std::min(p.latencyUs, got[2 * k]);
    p.gbps = std::max(p.gbps, got[2 * k + 1]);
  }
  return true;
}

std::vector<std::string> checkCollectives(void* commp, int r, int n) {
  auto comm = static_cast<ncclComm_t>(commp);
  std::vector<std::string> bad;
  const size_t N = 1031;
  std::vector<int32_t> in(N * n), out(N * n);
  auto v = [](int rank, size_t i) { return int32_t(rank * 1000 + int(i % 997)); };
  auto check = [&](const char* what, size_t count, auto want) {
    for (size_t i = 0; i < count; i++) {
      if (out[i] == want(i)) continue;
      bad.push_back(std::string(what) + " on rank " + std::to_string(r) + ": element " + std::to_string(i) + " is " +
                    std::to_string(out[i]) + ", expected " + std::to_string(want(i)));
      return;
    }
  };
  auto call = [&](const char* what, ncclResult_t res) {
    if (res != ncclSuccess)
      bad.push_back(std::string(what) + " failed on rank " + std::to_string(r) + ": " + ncclGetLastError(comm));
    return res == ncclSuccess;
  };
  for (size_t i = 0; i < N * n; i++) in[i] = v(r, i);
  if (call("ncclAllReduce", ncclAllReduce(in.data(), out.data(), N, ncclInt32, ncclSum, comm, nullptr)))
    check("ncclAllReduce (sum)", N, [&](size_t i) {
      int32_t s = 0;
      for (int q = 0; q < n; q++) s += v(q, i);
      return s;
    });
  if (call("ncclAllGather", ncclAllGather(in.data(), out.data(), N, ncclInt32, comm, nullptr)))
    check("ncclAllGather", N * n, [&](size_t i) { return v(int(i / N), i % N); });
  if (call("ncclReduceScatter", ncclReduceScatter(in.data(), out.data(), N, ncclInt32, ncclMax, comm, nullptr)))
    check("ncclReduceScatter (max)", N, [&](size_t i) { return v(n - 1, r * N + i); });
  if (call("ncclBroadcast", ncclBroadcast(in.data(), out.data(), N, ncclInt32, n - 1, comm, nullptr)))
    check("ncclBroadcast", N, [&](size_t i) { return v(n - 1, i); });
  std::fill(out.begin(), out.end(), -1);
  if (call("ncclReduce", ncclReduce(in.data(), out.data(), N, ncclInt32, ncclSum, 0, comm, nullptr)) && r == 0)
    check("ncclReduce (sum)", N, [&](size_t i) {
      int32_t s = 0;
      for (int q = 0; q < n; q++) s += v(q, i);
      return s;
    });
  if (call("ncclAlltoAll", ncclAlltoAll(in.data(), out.data(), N, ncclInt32, comm, nullptr)))
    check("ncclAlltoAll", N * n, [&](size_t i) { return v(int(i / N), r * N + i % N); });
  if (call("ncclGather", ncclGather(in.data(), out.data(), N, ncclInt32, 0, comm, nullptr)) && r == 0)
    check("ncclGather", N * n, [&](size_t i) { return v(int(i / N), i % N); });
  if (call("ncclScatter", ncclScatter(in.data(), out.data(), N, ncclInt32, n - 1, comm, nullptr)))
    check("ncclScatter", N, [&](size_t i) { return v(n - 1, r * N + i); });
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  bool sent = ncclGroupStart() == ncclSuccess &&
              ncclSend(in.data(), N, ncclInt32, next, comm, nullptr) == ncclSuccess &&
              ncclRecv(out.data(), N, ncclInt32, prev, comm, nullptr) == ncclSuccess;
  if (call("ncclSend/ncclRecv", sent ? ncclGroupEnd() : ncclInternalError))
    check("ncclSend/ncclRecv", N, [&](size_t i) { return v(prev, i); });
  return bad;
}

bool timeCollectives(perf::Control& ctl, void* commp, int n, const LinkOptions& o, double* allreduce,
                     double* allgather) {
  auto comm = static_cast<ncclComm_t>(commp);
  size_t count = o.collBytes / 4;
  std::vector<float> in(count, 1.0f), out(count);
  auto timed = [&](bool gather) {
    size_t per = count / n;
    auto one = [&]() {
      return gather ? ncclAllGather(in.data(), out.data(), per, ncclFloat32, comm, nullptr)
                    : ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    };
    if (one() != ncclSuccess || !ctl.barrier()) return -1.0;
    auto t0 = Clock::now();
    for (int i = 0; i < o.collIters; i++)
      if (one() != ncclSuccess) return -1.0;
    std::vector<double> t = {seconds(t0) / o.collIters};
    if (!ctl.allreduce(&t, perf::Reduce::kMax)) return -1.0;
    double bytes = gather ? double(per) * n * 4 : double(count) * 4;
    return bytes / t[0] / 1e9 * (gather ? double(n - 1) / n : 2.0 * (n - 1) / n);
  };
  *allreduce = timed(false);
  *allgather = timed(true);
  return *allreduce >= 0 && *allgather >= 0;
}

}  // namespace doctor
}  // namespace chorus
