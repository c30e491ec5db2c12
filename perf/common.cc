// The perf driver's process-level part (nccl-tests' main and run()): flags, launch and control channel,
// NCCL_TESTS_SPLIT groups, the header and "# Rank" lines, communicators and buffers, the driving threads, the
// trailer and the JSON document.
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>

#include "perf/backend.h"
#include "perf/bench.h"
#include "perf/data.h"
#include "perf/launch.h"
#include "perf/report.h"

#ifdef CHORUS_PERF_MPI
#include <mpi.h>
#endif

namespace chorus {
namespace perf {

void HostBlockingBackend::describeDevice(int, const Topology&, int* device, std::string* busId,
                                         std::string* info) const {
  std::string model;
  describeHostCpu(busId, &model);
  *device = -1;
  *info = model + " (host memory)";
}

void* HostBlockingBackend::alloc(int, size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes > 0 ? bytes : 1) != 0) {
    std::fprintf(stderr, "%s: cannot allocate %zu bytes\n", tool_, bytes);
    return nullptr;
  }
  std::memset(p, 0, bytes);  // touch the pages now, like ncclMemAlloc's buffers are before the timing
  return p;
}

void HostBlockingBackend::release(void* ptr) { std::free(ptr); }

bool HostBlockingBackend::upload(int /*local*/, void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
  return true;
}
namespace {

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Fixed-size "# Rank" record, so the lines of every process travel in one allgather.
struct DeviceWire {
  int32_t rank, group, pid, device;
  char host[64];
  char busId[48];
  char info[144];
};

void copyField(char* dst, size_t size, const std::string& s) {
  std::strncpy(dst, s.c_str(), size - 1);
  dst[size - 1] = '\0';
}

// NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT ("AND 0x7", "%8", "DIV 2"...): the group of a process.
int splitColor(int proc) {
  if (const char* mask = perfEnv("NCCL_TESTS_SPLIT_MASK"))
    return proc & static_cast<int>(std::strtoul(mask, nullptr, 16));
  const char* s = perfEnv("NCCL_TESTS_SPLIT");
  if (s == nullptr) return 0;
  struct Rule {
    const char* word;
    const char* sym;
    std::function<int(int, int)> f;
  };
  const Rule rules[] = {{"AND", "&", [](int p, int v) { return p & v; }},
                        {"OR", "|", [](int p, int v) { return p | v; }},
                        {"MOD", "%", [](int p, int v) { return v ? p % v : p; }},
                        {"DIV", "/", [](int p, int v) { return v ? p / v : p; }}};
  for (const Rule& r : rules) {
    size_t skip = strncasecmp(s, r.word, std::strlen(r.word)) == 0 ? std::strlen(r.word)
                  : std::strncmp(s, r.sym, 1) == 0                 ? 1
                                                                   : 0;
    if (skip == 0) continue;
    const char* num = s + skip;
    while (*num == ' ') num++;
    int v = strncasecmp(num, "0b", 2) == 0 ? static_cast<int>(std::strtoul(num + 2, nullptr, 2))
                                           : static_cast<int>(std::strtoul(num, nullptr, 0));
    return r.f(proc, v);
  }
  std::fprintf(stderr, "NCCL_TESTS_SPLIT='%s' not understood (AND/OR/MOD/DIV <value>); using one group\n", s);
  return 0;
}

// Resident set size of this process, for -M on host memory.
int64_t residentBytes() {
  std::ifstream f("/proc/self/statm");
  long long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t availableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int runDriver(int argc, char** argv, const CollSpec& spec, Backend& be, const Options* preset) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // every line shows as it is printed, as in nccl-tests
  Options opts;
  if (preset) opts = *preset;
  int rc = parseOptions(argc, argv, spec, &opts);
  if (rc >= 0) return rc;
  std::string why = be.unsupported(spec, opts);
  if (!why.empty()) {
    std::fprintf(stderr, "%s: %s\n", spec.program, why.c_str());
    return kExitUsage;
  }

  // Launch and the control channel: MPI when built with it and started by mpirun, else the TCP store.
  LaunchInfo launch;
  std::string err;
  if (!detectLaunch(&launch, &err)) {
    std::fprintf(stderr, "%s: %s\n", spec.program, err.c_str());
    return kExitUsage;
  }
  std::unique_ptr<Control> ctl;
  bool mpiStarted = false;
#ifdef CHORUS_PERF_MPI
  int mpiUp = 0;
  MPI_Initialized(&mpiUp);
  if (!mpiUp && launch.mpiLaunch) {
    MPI_Init(&argc, &argv);
    mpiStarted = true;
    mpiUp = 1;
  }
  if (mpiUp) ctl = makeMpiControl();
#endif
  if (!ctl && launch.nprocs == 1) ctl = makeSingleControl();
  if (!ctl) {
    int connectS = std::max(opts.timeoutS, 120);
    int opS = opts.timeoutS > 0 ? opts.timeoutS + 60 : 900;
    ctl = makeStoreControl(launch, connectS, opS, &err);
    if (!ctl) {
      std::fprintf(stderr, "%s: %s\n", spec.program, err.c_str());
      return kExitUsage;
    }
  }

  // Layout: local ranks from host names (as nccl-tests does under MPI), groups from NCCL_TESTS_SPLIT.
  Topology topo;
  topo.proc = ctl->proc();
  topo.totalProcs = ctl->nprocs();
  topo.nThreads = opts.nThreads;
  topo.nGpus = opts.nGpus;
  const std::string host = hostName();
  {
    struct Wire {
      uint64_t hostHash;
      int32_t color;
    } mine{std::hash<std::string>()(host), splitColor(topo.proc)};
    std::vector<Wire> all(static_cast<size_t>(topo.totalProcs));
    if (!ctl->allgather(&mine, sizeof(mine), all.data())) return kExitLibrary;
    topo.color = mine.color;
    topo.localRank = topo.localSize = topo.ncclProc = topo.ncclProcs = 0;
    topo.leaderProc = -1;
    for (int p = 0; p < topo.totalProcs; p++) {
      if (all[p].hostHash == mine.hostHash) {
        topo.localSize++;
        if (p < topo.proc) topo.localRank++;
      }
      if (all[p].color == mine.color) {
        if (topo.leaderProc < 0) topo.leaderProc = p;
        topo.ncclProcs++;
        if (p < topo.proc) topo.ncclProc++;
      }
    }
  }
  const int L = topo.localRanks();
  if (spec.hasRoot && opts.root >= topo.nranks()) {
    std::fprintf(stderr, "%s: root %d is out of range: there are %d ranks\n", spec.program, opts.root, topo.nranks());
    return kExitUsage;
  }

  // Memory: device when a GPU is usable (unless --mem host), else host.
  bool device = opts.mem == MemKind::kDevice || (opts.mem == MemKind::kAuto && be.deviceAvailable());
  if (device && !be.deviceAvailable()) {
    std::fprintf(stderr, "%s: --mem device: no usable GPU (or no CUDA runtime) on %s\n", spec.program, host.c_str());
    return kExitUsage;
  }
  if (!be.selectMemory(device)) return kExitLibrary;

  // -G captures the timed calls into a CUDA graph per rank and times its launches, where that can run; elsewhere it
  // is a note. Blocking calls (-z) synchronise inside the loop, which a capture forbids.
  if (opts.cudaGraph > 0 && (!be.graphsAvailable() || opts.blocking != 0)) {
    opts.ignored.push_back(be.graphsAvailable() ? "-G (with -z)" : "-G");
    opts.cudaGraph = 0;
  }
  Reporter report(topo.proc == 0, opts, spec, be.name());
  std::vector<std::string> notes;
  if (device) {
    notes.push_back("Memory: device (GPU buffers from ncclMemAlloc, each checked to be device memory)");
    std::string placement = be.placementNote(topo);
    if (!placement.empty()) notes.push_back(placement);
  } else {
    notes.push_back(std::string("Memory: host buffers") +
                    (opts.mem == MemKind::kHost ? " (--mem host)" : " (no GPU found)") +
                    "; times are host wall-clock times of calls that complete on return");
  }
  notes.push_back("Launch: " + launch.launcher + ", " + std::to_string(topo.totalProcs) + " process(es) x " +
                  std::to_string(opts.nThreads) + " thread(s) x " + std::to_string(opts.nGpus) +
                  " rank(s); control: " + ctl->describe());
  if (!opts.ignored.empty()) notes.push_back("Accepted but ignored here (GPU only): " + joined(opts.ignored));
  if (!opts.outputFile.empty()) notes.push_back("Writing JSON output to " + opts.outputFile);
  if (!opts.jsonFile.empty()) notes.push_back("Writing JSON results to " + opts.jsonFile);
  report.runHeader(be.versionLine(), be.ncclVersionCode(), notes);

  // "# Rank" lines of every process, printed by process 0 in process order.
  {
    std::vector<DeviceWire> mine(static_cast<size_t>(L));
    for (int i = 0; i < L; i++) {
      DeviceWire& w = mine[i];
      std::memset(&w, 0, sizeof(w));
      int dev = -1;
      std::string busId, info;
      be.describeDevice(i, topo, &dev, &busId, &info);
      w.rank = topo.proc * L + i;
      w.group = topo.color;
      w.pid = static_cast<int32_t>(getpid());
      w.device = dev;
      copyField(w.host, sizeof(w.host), host);
      copyField(w.busId, sizeof(w.busId), busId);
      copyField(w.info, sizeof(w.info), info);
    }
    std::vector<DeviceWire> all(static_cast<size_t>(L) * topo.totalProcs);
    if (!ctl->allgather(mine.data(), sizeof(DeviceWire) * L, all.data())) return kExitLibrary;
    std::vector<DeviceInfo> infos;
    for (const DeviceWire& w : all) infos.push_back({w.rank, w.group, w.pid, w.host, w.device, w.busId, w.info});
    report.devices(infos);
  }

  // Keep three buffers per rank (send, recv, expected) inside the memory this host has.
  size_t maxBytes = opts.maxBytes, minBytes = opts.minBytes;
  if (!device) {
    std::vector<double> limit(
        1, static_cast<double>(availableBytes()) * 0.8 / (topo.localSize * L) / (opts.check ? 3 : 2));
    if (!ctl->allreduce(&limit, Reduce::kMin)) return kExitLibrary;
    auto cap = static_cast<size_t>(limit[0]);
    if (maxBytes > cap) {
      maxBytes = cap;
      if (minBytes > maxBytes) minBytes = maxBytes;
      report.print("#\n# Reducing maxBytes to %zu due to memory limitation\n", maxBytes);
    }
  }
  Options runOpts = opts;  // the loop sees the reduced sizes; the header keeps what was asked
  runOpts.minBytes = minBytes;
  runOpts.maxBytes = maxBytes;

  int64_t rss0 = residentBytes();
  if (!be.setup(*ctl, topo, opts)) return kExitLibrary;

  // Buffers hold maxBytes plus the -u misalignment, like nccl-tests' AllocateBuffs.
  std::vector<RankBuffers> bufs(static_cast<size_t>(L));
  size_t bufBytes = maxBytes + 8 * static_cast<size_t>(std::max(0, opts.unalign)) + 16;
  auto allocate = [&](int first, int n) {
    for (int i = first; i < first + n; i++) {
      RankBuffers& b = bufs[i];
      b.bytes = bufBytes;
      b.send = static_cast<char*>(be.alloc(i, bufBytes));
      b.recv = static_cast<char*>(be.alloc(i, bufBytes));
      if (b.send == nullptr || b.recv == nullptr) die(kExitLibrary);
      if (opts.check) b.expected.resize(bufBytes);
      if (device) {
        b.hostSend.resize(bufBytes);
        b.hostRecv.resize(bufBytes);
        b.result.resize(bufBytes);
      }
    }
    // Window registration (-R 2) is collective: the ranks this thread drives register in one group.
    if (opts.localRegister == 0) return;
    if (!be.groupStart()) die(kExitLibrary);
    for (int i = first; i < first + n; i++)
      if (!be.registerBuffers(i, bufs[i].send, bufs[i].recv, maxBytes, opts.localRegister)) die(kExitLibrary);
    if (!be.groupEnd()) die(kExitLibrary);
  };
  int64_t rss1 = rss0, rss2 = rss0;
  if (!opts.parallelInit) {
    if (!be.initComms(0, L)) die(kExitLibrary);
    rss1 = residentBytes();
    allocate(0, L);
    rss2 = residentBytes();
  }

  Team team(opts.nThreads, *ctl);
  Watchdog watchdog;
  watchdog.start(opts.timeoutS, host);
  Bench bench(spec, be, runOpts, topo, team, report, watchdog, bufs, maxBytes, device);
  std::vector<ThreadState> states(static_cast<size_t>(opts.nThreads));
  std::fflush(stdout);
  report.tableHeader();

  // Thread 0 is the calling thread, as in nccl-tests; with -p each thread creates its own communicators.
  auto body = [&](int t) {
    states[t].thread = t;
    if (opts.parallelInit) {
      if (!be.initComms(t * opts.nGpus, opts.nGpus)) die(kExitLibrary);
      allocate(t * opts.nGpus, opts.nGpus);
    }
    bench.runTests(states[t]);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < opts.nThreads; t++) threads.emplace_back(body, t);
  body(0);
  for (auto& th : threads) th.join();
  int64_t rss3 = residentBytes();

  double bwSum = 0;
  int bwCount = 0;
  std::vector<double> errors(1, 0.0);
  for (const ThreadState& s : states) {
    bwSum += s.bwSum;
    bwCount += s.bwCount;
    errors[0] += s.errors;
  }
  std::vector<double> mem{static_cast<double>(rss1 - rss0), static_cast<double>(rss2 - rss1),
                          static_cast<double>(std::max<int64_t>(0, rss3 - rss2))};
  if (!ctl->allreduce(&errors, Reduce::kSum) || !ctl->allreduce(&mem, Reduce::kMax)) return kExitLibrary;

  if (opts.localRegister && !be.unregisterAll()) die(kExitLibrary);
  if (!be.destroyComms()) die(kExitLibrary);
  for (RankBuffers& b : bufs) {
    be.release(b.send);
    be.release(b.recv);
  }

  const char* minBwEnv = perfEnv("NCCL_TESTS_MIN_BW");
  double minBw = minBwEnv ? std::atof(minBwEnv) : -1;
  double avgBw = bwCount ? bwSum / bwCount : 0;
  int nErrors = static_cast<int>(errors[0]);
  report.footer(nErrors, avgBw, minBw);
  if (opts.memoryReport) {
    report.memory(device ? "Process memory usage" : "Host memory usage",
                  {{"Initialization", static_cast<int64_t>(mem[0])},
                   {"User-Allocated", static_cast<int64_t>(mem[1])},
                   {"Collective", static_cast<int64_t>(mem[2])}});
  }
  report.setFact("host", host);
  report.setFact("launcher", launch.launcher);
  report.setFact("control", ctl->describe());
  report.setFact("memory", device ? "device" : "host");
  report.setFact("nranks", topo.nranks());
  report.setFact("nprocs", topo.totalProcs);
  report.setFact("date", nowString());
  std::string lastError = be.lastError();
  report.finish(lastError);
  report.writeJson(opts.outputFile, true);
  report.writeJson(opts.jsonFile, false);
  ctl->barrier();  // nobody leaves (closing the store) while another still reads from it
  ctl.reset();
#ifdef CHORUS_PERF_MPI
  if (mpiStarted) MPI_Finalize();
#else
  (void)mpiStarted;
#endif
  return (nErrors || (minBw > 0 && avgBw < minBw * 0.9)) ? kExitResults : 0;
}

}  // namespace perf
}  // namespace chorus
