// The per-thread benchmark loop (see bench.h), step for step nccl-tests' common.cu: warmup over every size,
// timed iterations between barriers, time averaged over ranks (-a), then -c check iterations on fresh data.
#include "perf/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "perf/data.h"

namespace chorus {
namespace perf {

using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

void die(int status) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

void Team::reduce(int thread, std::vector<double>* v, Reduce op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (arrived_ == 0) {
    acc_ = *v;
  } else if (op == Reduce::kFirst) {
    if (thread == 0) acc_ = *v;
  } else {
    for (size_t i = 0; i < acc_.size() && i < v->size(); i++) {
      double x = (*v)[i];
      acc_[i] = op == Reduce::kSum ? acc_[i] + x : op == Reduce::kMin ? std::min(acc_[i], x) : std::max(acc_[i], x);
    }
  }
  if (++arrived_ == n_) {
    // The last thread speaks for the process; the others wait for the round to complete.
    if (!ctl_.allreduce(&acc_, op)) die(kExitLibrary);
    result_ = acc_;
    arrived_ = 0;
    generation_++;
    cv_.notify_all();
  } else {
    uint64_t g = generation_;
    cv_.wait(lock, [&] { return generation_ != g; });
  }
  // result_ stays valid: the next round cannot complete before this thread joins it.
  *v = result_;
}

void Team::barrier(int thread) {
  std::vector<double> v(1, 0.0);
  reduce(thread, &v, Reduce::kSum);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::start(int timeoutS, std::string host) {
  if (timeoutS <= 0) return;
  timeoutS_ = timeoutS;
  host_ = std::move(host);
  poke();
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(std::min(1000, timeoutS_ * 250)));
    Clock::duration since = Clock::now().time_since_epoch() - Clock::duration(last_.load());
    if (!stop_ && since > std::chrono::seconds(timeoutS_)) {
      std::printf("%s: Test timeout (%ds): no collective completed in %d s, ending the run\n", host_.c_str(), timeoutS_,
                  timeoutS_);
      std::fprintf(stderr, "%s: Test timeout (%ds) pid %d\n", host_.c_str(), timeoutS_, static_cast<int>(getpid()));
      die(kExitTimeout);
    }
  }
}

Bench::Bench(const CollSpec& spec, Backend& backend, const Options& opts, const Topology& topo, Team& team,
             Reporter& report, Watchdog& watchdog, std::vector<RankBuffers>& buffers, size_t maxBytes, bool device)
    : spec_(spec),
      be_(backend),
      opts_(opts),
      topo_(topo),
      team_(team),
      report_(report),
      watchdog_(watchdog),
      bufs_(buffers),
      maxBytes_(maxBytes),
      device_(device) {}

void Bench::setupArgs(Shape& sh, size_t size, ncclDataType_t type) const {
  size_t w = wordSize(type);
  sh.elems = callShape(spec_, size / w, w, topo_.nranks());
  sh.nbytes = sh.elems.paramCount * w;
  sh.sendBytes = sh.elems.sendCount * w;
  sh.expectedBytes = sh.elems.recvCount * w;
  sh.sendInplaceOffset = sh.elems.sendInplaceOffset * w;
  sh.recvInplaceOffset = sh.elems.recvInplaceOffset * w;
}

template <typename F>
void Bench::forLocal(ThreadState& st, F&& f) {
  for (int i = 0; i < topo_.nGpus; i++)
    if (!f(st.thread * topo_.nGpus + i)) die(kExitLibrary);
}

void Bench::syncAll(ThreadState& st) {
  forLocal(st, [&](int local) { return be_.sync(local); });
}

void Bench::startColl(ThreadState& st, const Shape& sh, ncclDataType_t type, int op, int root, bool inPlace, int iter) {
  // Successive iterations use successive slices of the buffers, as nccl-tests does, to avoid cache effects.
  size_t total = std::max(sh.sendBytes, sh.expectedBytes);
  size_t steps = total ? maxBytes_ / total : 1;
  size_t shift = steps ? total * (static_cast<size_t>(iter) % steps) : 0;
  if (topo_.nGpus > 1 && !be_.groupStart()) die(kExitLibrary);
  for (int i = 0; i < topo_.nGpus; i++) {
    int local = st.thread * topo_.nGpus + i;
    int rank = topo_.rankOf(local);
    char* recvBuff = bufs_[local].recv + sh.unalignBytes + shift;
    char* sendBuff = bufs_[local].send + sh.unalignBytes + shift;
    CallArgs call{spec_.coll,
                  inPlace ? recvBuff + sh.sendInplaceOffset * rank : sendBuff,
                  recvBuff + (inPlace ? sh.recvInplaceOffset * rank : 0),
                  sh.nbytes / wordSize(type),
                  type,
                  op,
                  root,
                  rank,
                  topo_.nranks()};
    if (!be_.run(local, call)) die(kExitLibrary);
  }
  if (topo_.nGpus > 1 && !be_.groupEnd()) die(kExitLibrary);
  watchdog_.poke();
  if (opts_.blocking) syncAll(st);
  if (opts_.blocking == 1) team_.barrier(st.thread);
}

void Bench::completeColl(ThreadState& st) {
  if (opts_.blocking && opts_.aggIters <= 1) return;
  syncAll(st);
  watchdog_.poke();
}

void Bench::initData(ThreadState& st, const Shape& sh, ncclDataType_t type, int op, int root, uint64_t rep,
                     bool inPlace) {
  for (int i = 0; i < topo_.nGpus; i++) {
    int local = st.thread * topo_.nGpus + i;
    RankBuffers& b = bufs_[local];
    RankImages img;
    img.send = (device_ ? b.hostSend.data() : b.send) + sh.unalignBytes;
    img.recv = (device_ ? b.hostRecv.data() : b.recv) + sh.unalignBytes;
    img.expected = b.expected.data();
    perf::initData(spec_, sh.elems, type, op, root, topo_.rankOf(local), topo_.nranks(), rep, inPlace, img);
    if (device_) {
      // In place, the input may extend past the result (reduce-scatter, scatter): copy the larger extent.
      size_t recvExtent = std::max(sh.expectedBytes, sh.sendBytes);
      if (!be_.upload(local, b.send + sh.unalignBytes, img.send, sh.sendBytes) ||
          !be_.upload(local, b.recv + sh.unalignBytes, img.recv, recvExtent))
        die(kExitLibrary);
    }
  }
}

std::string Bench::describeWrongBlocks(const char* got, const char* want, size_t count, ncclDataType_t type,
                                       int op) const {
  // Which of the output's n equal blocks (rank r's block r of an allgather, and so on) hold the wrong elements, and
  // whether a wrong block holds zeros: what initData writes into the output before the call, so a block the call
  // never wrote, or one overwritten afterwards by that initialization.
  const int n = topo_.nranks();
  if (n < 2 || count % n != 0) return "";
  const size_t per = count / n, w = wordSize(type);
  std::vector<char> zeros(per * w, 0);
  std::string out;
  for (int blk = 0; blk < n; blk++) {
    const char* g = got + blk * per * w;
    int64_t bad = countWrong(g, want + blk * per * w, per, type, op, n);
    if (bad == 0) continue;
    bool zero = countWrong(g, zeros.data(), per, type, op, n) == 0;
    out += (out.empty() ? ": block " : ", block ") + std::to_string(blk) + " (" + std::to_string(bad) + " wrong" +
           (zero ? ", all zero)" : ")");
  }
  return out;
}

int64_t Bench::checkData(ThreadState& st, const Shape& sh, ncclDataType_t type, int op, bool inPlace) {
  int64_t wrong = 0;
  for (int i = 0; i < topo_.nGpus; i++) {
    int local = st.thread * topo_.nGpus + i;
    int rank = topo_.rankOf(local);
    RankBuffers& b = bufs_[local];
    const char* data = b.recv + sh.unalignBytes + (inPlace ? sh.recvInplaceOffset * rank : 0);
    if (device_) {
      if (!be_.download(local, b.result.data(), data, sh.expectedBytes)) die(kExitLibrary);
      data = b.result.data();
    }
    int64_t w = countWrong(data, b.expected.data(), sh.elems.recvCount, type, op, topo_.nranks());
    if (w > 0 && perfEnv("CHORUS_PERF_VERBOSE")) {
      std::fprintf(stderr, "rank %d: %lld wrong elements of %zu (%s, %s place)%s\n", rank, static_cast<long long>(w),
                   sh.elems.recvCount, spec_.name, inPlace ? "in" : "out of",
                   describeWrongBlocks(data, b.expected.data(), sh.elems.recvCount, type, op).c_str());
    }
    wrong += w;
  }
  return wrong;
}

void Bench::benchTime(ThreadState& st, Shape& sh, ncclDataType_t type, int op, int root, bool inPlace) {
  const int iters = opts_.iters, agg = opts_.aggIters;
  if (opts_.check) initData(st, sh, type, op, root, 99, inPlace);

  // One untimed call, then everyone starts the clock together.
  startColl(st, sh, type, op, root, inPlace, 0);
  completeColl(st);
  team_.barrier(st.thread);

  // -G: the timed calls are captured into one graph per rank, and the clock times that graph's launches instead.
  const int graphLaunches = opts_.cudaGraph;
  if (graphLaunches > 0) forLocal(st, [&](int local) { return be_.beginCapture(local); });

  std::vector<double> iterTimes(opts_.perIterTiming ? iters : 0);
  double collOnly = 0;
  auto t0 = Clock::now();
  for (int iter = 0; iter < iters; iter++) {
    auto i0 = Clock::now();
    if (agg > 1 && !be_.groupStart()) die(kExitLibrary);
    for (int a = 0; a < agg; a++) startColl(st, sh, type, op, root, inPlace, iter * agg + a);
    if (agg > 1 && !be_.groupEnd()) die(kExitLibrary);
    if (opts_.blocking == 3) {
      syncAll(st);
      double dt = secondsSince(i0);
      collOnly += dt;
      if (opts_.perIterTiming) iterTimes[iter] = dt / agg;
      team_.barrier(st.thread);  // excluded from the time, as -z 3 promises
    } else if (opts_.perIterTiming) {
      // Per-iteration times come from the host clock, so each iteration must be complete when it is read.
      syncAll(st);
      iterTimes[iter] = secondsSince(i0) / agg;
    }
  }
  if (graphLaunches > 0) {
    forLocal(st, [&](int local) { return be_.endCapture(local); });
    forLocal(st, [&](int local) { return be_.instantiateGraph(local); });
    team_.barrier(st.thread);
    t0 = Clock::now();
    for (int l = 0; l < graphLaunches; l++) forLocal(st, [&](int local) { return be_.launchGraph(local); });
  }
  const int calls = iters * agg * std::max(1, graphLaunches);
  double cpuSec = (opts_.blocking == 3 ? collOnly : secondsSince(t0)) / calls;
  completeColl(st);
  std::vector<double> delta(1, (opts_.blocking == 3 ? collOnly : secondsSince(t0)) / calls);
  if (graphLaunches > 0) {
    forLocal(st, [&](int local) {
      be_.dropGraph(local);
      return true;
    });
  }

  // -a: 0 rank 0's time, 1 the average, 2 the minimum, 3 the maximum over threads and processes.
  Reduce how = opts_.average == 0   ? Reduce::kFirst
               : opts_.average == 2 ? Reduce::kMin
               : opts_.average == 3 ? Reduce::kMax
                                    : Reduce::kSum;
  team_.reduce(st.thread, &delta, how);
  if (opts_.average == 1) delta[0] /= topo_.totalProcs * topo_.nThreads;

  Placement p;
  bandwidth(spec_, sh.nbytes / wordSize(type), wordSize(type), delta[0], topo_.nranks(), &p.algBw, &p.busBw);
  team_.barrier(st.thread);

  st.rep++;
  p.checked = opts_.check > 0 && (!inPlace || spec_.checksInPlace);
  for (int c = 0; p.checked && c < opts_.check; c++) {
    initData(st, sh, type, op, root, st.rep, inPlace);
    startColl(st, sh, type, op, root, inPlace, 0);
    completeColl(st);
    int64_t local = checkData(st, sh, type, op, inPlace);
    if (local) st.errors++;
    std::vector<double> wrong(1, static_cast<double>(local));
    team_.reduce(st.thread, &wrong, Reduce::kSum);
    p.wrong = static_cast<int64_t>(wrong[0]);
    if (p.wrong) break;
  }
  p.timeUs = (opts_.reportCpuTime ? cpuSec : delta[0]) * 1.0e6;
  if (opts_.perIterTiming) {
    team_.reduce(st.thread, &iterTimes, Reduce::kMax);  // an iteration lasts as long as its slowest rank
    p.hasIters = true;
    p.iters = computeIterStats(iterTimes, opts_.perIterSkip);
  }
  if (printer(st)) report_.rowPlacement(p, !inPlace);
  st.bwSum += p.busBw;
  st.bwCount++;
}

void Bench::timeTest(ThreadState& st, ncclDataType_t type, int op, const char* opLabel, int root) {
  team_.barrier(st.thread);
  Shape sh;
  sh.unalignBytes = static_cast<size_t>(opts_.unalign) * wordSize(type);

  // Warm up at every size (doubling), out of place.
  for (size_t size = opts_.minBytes; size <= maxBytes_; size = size ? size * 2 : 1) {
    setupArgs(sh, size, type);
    for (int w = 0; w < opts_.warmupIters; w++) startColl(st, sh, type, op, root, false, w);
    completeColl(st);
  }

  long repeat = opts_.runCycles;  // 0: until interrupted
  do {
    for (size_t size = opts_.minBytes; size <= maxBytes_;
         size = opts_.stepFactor > 1 ? (size ? size * opts_.stepFactor : 1) : size + opts_.stepBytes) {
      setupArgs(sh, size, type);
      if (printer(st)) {
        report_.rowStart(std::max(sh.sendBytes, sh.expectedBytes), sh.nbytes / wordSize(type), typeName(type), opLabel,
                         root);
      }
      benchTime(st, sh, type, op, root, false);
      benchTime(st, sh, type, op, root, true);
      if (printer(st)) report_.rowEnd(opts_.iters);
    }
  } while (--repeat != 0);
}

void Bench::runTests(ThreadState& st) {
  if (spec_.powerOfTwoRanks) {
    int n = topo_.nranks();
    if (n & (n - 1)) {
      if (printer(st)) report_.note("nRanks " + std::to_string(n) + " is not a power of 2, skipping");
      return;
    }
  }
  std::vector<ncclDataType_t> types;
  for (int t = 0; t < ncclNumTypes; t++) {
    auto type = static_cast<ncclDataType_t>(t);
    if (opts_.type == t || (opts_.type == -1 && be_.supportsType(type))) types.push_back(type);
  }
  std::vector<int> ops;
  if (spec_.loopsOps) {
    for (int o = 0; o < kNumPerfOps; o++)
      if (opts_.op == o || (opts_.op == -1 && be_.supportsOp(o))) ops.push_back(o);
  } else {
    ops.push_back(kOpSum);  // copy collectives: the data and the check ignore the op
  }
  std::vector<int> roots;
  if (!spec_.hasRoot) {
    roots.push_back(-1);
  } else if (opts_.root == -1) {
    for (int r = 0; r < topo_.nranks(); r++) roots.push_back(r);
  } else {
    roots.push_back(opts_.root);
  }
  for (ncclDataType_t type : types)
    for (int op : ops)
      for (int root : roots) timeTest(st, type, op, spec_.loopsOps ? opName(op) : spec_.opLabel, root);
}

}  // namespace perf
}  // namespace chorus
