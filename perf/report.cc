// Text and JSON reports (see report.h). The text follows nccl-tests' util.cu column for column so that scripts
// written for nccl-tests parse ours.
#include "perf/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <ctime>

#include "perf/data.h"

namespace chorus {
namespace perf {
namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Minimal streaming JSON writer: tracks whether a comma is due at each nesting level.
class Json {
 public:
  void open(char c) {
    sep();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    out_ += c;
    first_.pop_back();
  }
  void key(const char* k) {
    sep();
    out_ += jsonString(k) + ":";
    afterKey_ = true;
  }
  void raw(const std::string& v) {
    sep();
    out_ += v;
  }
  void str(const std::string& v) { raw(jsonString(v)); }
  void num(double v) { raw(std::isfinite(v) ? fmt(v) : "null"); }
  void integer(long long v) { raw(std::to_string(v)); }
  void boolean(bool v) { raw(v ? "true" : "false"); }
  const std::string& text() const { return out_; }

  static std::string fmt(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return buf;
  }

 private:
  void sep() {
    if (afterKey_) {
      afterKey_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ",";
      first_.back() = false;
    }
  }
  std::string out_;
  std::vector<bool> first_;
  bool afterKey_ = false;
};

void placementJson(Json& j, const char* key, const Placement& p, bool cpuTime) {
  j.key(key);
  j.open('{');
  j.key(cpuTime ? "cpu_time" : "time");
  j.num(p.timeUs);
  j.key("alg_bw");
  j.num(p.algBw);
  j.key("bus_bw");
  j.num(p.busBw);
  j.key("nwrong");
  if (p.checked) {
    j.integer(p.wrong);
  } else {
    j.raw("null");
  }
  j.close('}');
  if (p.hasIters) {
    const IterStats& s = p.iters;
    j.key((std::string(key) + "_per_iter").c_str());
    j.open('{');
    j.key("skipped_iterations");
    j.integer(s.skipped);
    const std::pair<const char*, double> stats[] = {{"min_us", s.min},    {"max_us", s.max}, {"avg_us", s.avg},
                                                    {"p50_us", s.p50},    {"p95_us", s.p95}, {"p99_us", s.p99},
                                                    {"stdev_us", s.stdev}};
    for (const auto& [k, v] : stats) {
      j.key(k);
      j.num(v * 1e6);
    }
    j.key("cv_pct");
    j.num(s.avg > 0 ? s.stdev / s.avg * 100.0 : 0.0);
    j.key("times_us");
    j.open('[');
    for (double t : s.times) j.num(t * 1e6);
    j.close(']');
    j.close('}');
  }
}

}  // namespace

std::string fitNumber(double value, int width) {
  char buf[64];
  for (const char* f : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (std::snprintf(buf, sizeof(buf), f, width, value) <= width) return buf;
  }
  std::snprintf(buf, sizeof(buf), width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return buf;
}

std::string nowString() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

IterStats computeIterStats(const std::vector<double>& times, int skip) {
  IterStats s;
  s.times = times;
  s.skipped = skip;
  std::vector<double> v(times.begin() + std::min<size_t>(skip, times.size()), times.end());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  int n = static_cast<int>(v.size());
  auto pct = [&](int p) { return v[std::min(n - 1, std::max(0, (n * p + 99) / 100 - 1))]; };
  s.min = v.front();
  s.max = v.back();
  s.p50 = v[n / 2];
  s.p95 = pct(95);
  s.p99 = pct(99);
  double sum = 0;
  for (double x : v) sum += x;
  s.avg = sum / n;
  double var = 0;
  for (double x : v) var += (x - s.avg) * (x - s.avg);
  s.stdev = std::sqrt(var / n);
  return s;
}

Reporter::Reporter(bool main, const Options& opts, const CollSpec& spec, std::string library)
    : main_(main), opts_(opts), spec_(spec), library_(std::move(library)), startTime_(nowString()) {}

void Reporter::print(const char* fmt, ...) const {
  if (!main_) return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
}

std::string Reporter::fmtNumber(double v) { return Json::fmt(v); }

void Reporter::runHeader(const std::string& versionLine, int ncclVersion, const std::vector<std::string>& notes) {
  ncclVersion_ = ncclVersion;
  notes_ = notes;
  const Options& o = opts_;
  print("# %s\n", versionLine.c_str());
  print("# Collective test starting: %s\n", spec_.program);
  print(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
      "validation: %d graph: %d unalign: %d\n",
      o.nThreads, o.nGpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check, o.cudaGraph, o.unalign);
  if (o.blocking == 1) print("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o.blocking == 2) print("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o.blocking == 3) {
    print("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  }
  if (o.perIterTiming) {
    print("# Per-Iteration Report: host clock timing; i_* uses max over processes and threads");
    if (o.perIterSkip) print("; summary skips first %d iterations", o.perIterSkip);
    print(" \n");
  }
  if (o.parallelInit) print("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  for (const std::string& n : notes) print("# %s\n", n.c_str());
  print("#\n");
}

void Reporter::devices(const std::vector<DeviceInfo>& all) {
  devices_ = all;
  print("# Using devices\n");
  for (const DeviceInfo& d : all) {
    std::string dev = d.device < 0 ? "host" : std::to_string(d.device);
    print("#  Rank %2d Group %2d Pid %6d on %10s device %2s [%s] %s\n", d.rank, d.group, d.pid, d.host.c_str(),
          dev.c_str(), d.busId.c_str(), d.info.c_str());
  }
}

void Reporter::tableHeader() {
  const char* ts = opts_.reportTimestamps ? "timestamp" : "";
  const char* tsFmt = opts_.reportTimestamps ? "%Y-%m-%d %H:%M:%S" : "";
  int tsPad = opts_.reportTimestamps ? 19 : 0;
  const char* t = opts_.reportCpuTime ? "cputime" : "time";
  print("#\n");
  if (opts_.perIterTiming) {
    print(
        "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                "
        "in-place (+ per-iteration)\n",
        "", "", "", "", "");
    print(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  "
        "%7s %*s\n",
        "size", "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", t,
        "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", tsPad, ts);
    print(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  "
        "%7s %*s\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", "(us)",
        "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", tsPad, tsFmt);
    return;
  }
  print("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "",
        "");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type", "redop",
        "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong", tsPad, ts);
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "", "", "",
        "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", tsPad, tsFmt);
}

void Reporter::rowStart(size_t bytes, size_t count, const char* type, const char* redop, int root) {
  print("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, redop, root);
  Row r;
  r.bytes = bytes;
  r.count = count;
  r.type = type;
  r.redop = redop;
  r.root = root;
  rows_.push_back(r);
}

void Reporter::rowPlacement(const Placement& p, bool outOfPlace) {
  std::string t = fitNumber(p.timeUs, 7), a = fitNumber(p.algBw, 6), b = fitNumber(p.busBw, 6);
  if (p.checked) {
    print("  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(), static_cast<double>(p.wrong));
  } else {
    print("  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  }
  if (p.hasIters) {
    const IterStats& s = p.iters;
    double cv = s.avg > 0 ? s.stdev / s.avg * 100.0 : 0.0;
    print("  %7s  %7s  %7s  %7s", fitNumber(s.min * 1e6, 7).c_str(), fitNumber(s.max * 1e6, 7).c_str(),
          fitNumber(s.p99 * 1e6, 7).c_str(), fitNumber(cv, 7).c_str());
  }
  if (!outOfPlace && opts_.reportTimestamps) print("%21s", nowString().c_str());
  if (rows_.empty()) return;
  (outOfPlace ? rows_.back().out : rows_.back().in) = p;
  rows_.back().placements++;
}

void Reporter::rowEnd(int iters) {
  print("\n");
  if (!rows_.empty()) rows_.back().iters = iters;
}

void Reporter::note(const std::string& line) {
  print("%s\n", line.c_str());
  notes_.push_back(line);
}

void Reporter::footer(int errors, double avgBusBw, double minBw) {
  errors_ = errors;
  avgBusBw_ = avgBusBw;
  minBw_ = minBw;
  print("# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  print("# %-20s : %g %s\n", "Avg bus bandwidth", avgBusBw,
        minBw < 0 ? "" : (avgBusBw < minBw * 0.9 ? "FAILED" : "OK"));
  print("#\n");
  print("# Collective test concluded: %s\n", spec_.program);
}

void Reporter::memory(const char* what, const std::vector<std::pair<const char*, int64_t>>& parts) {
  auto human = [](int64_t bytes) {
    double a = static_cast<double>(bytes);
    const char* unit = " B";
    if (std::fabs(a) >= 1024.0 * 1024 * 1024) {
      a /= 1024.0 * 1024 * 1024;
      unit = " GB";
    } else if (std::fabs(a) >= 1024.0 * 1024) {
      a /= 1024.0 * 1024;
      unit = " MB";
    } else if (std::fabs(a) >= 1024.0) {
      a /= 1024.0;
      unit = " KB";
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f%s", std::fabs(a) < 10 ? 2 : std::fabs(a) < 100 ? 1 : 0, a, unit);
    return std::string(buf);
  };
  std::string line;
  int64_t total = 0;
  for (const auto& [name, bytes] : parts) {
    line += std::string(name) + " " + human(bytes) + " | ";
    total += bytes;
    memory_.push_back({name, bytes});
  }
  line += "Total  " + human(total);
  print("# %-20s : %s\n", what, line.c_str());
}

void Reporter::finish(const std::string& lastError) {
  lastError_ = lastError;
  print("#\n");
  if (!lastError.empty()) {
    print("# error: %s\n", lastError.c_str());
  } else {
    print("\n");
  }
}

bool Reporter::writeJson(const std::string& path, bool exclusive) const {
  if (!main_ || path.empty()) return true;
  const Options& o = opts_;
  Json j;
  j.open('{');
  j.key("version");
  j.integer(3);
  j.key("format");
  j.str("chorus-perf");
  j.key("tool");
  j.str(spec_.program);
  j.key("collective");
  j.str(spec_.name);
  j.key("library");
  j.str(library_);
  j.key("nccl_version");
  j.integer(ncclVersion_);
  j.key("start_time");
  j.str(startTime_);
  j.key("end_time");
  j.str(nowString());
  std::string cmd;
  for (const std::string& a : o.args) cmd += (cmd.empty() ? "" : " ") + a;
  j.key("command_line");
  j.str(cmd);
  j.key("args");
  j.open('[');
  for (const std::string& a : o.args) j.str(a);
  j.close(']');
  for (const Fact& f : facts_) {
    j.key(f.key.c_str());
    if (f.quoted) {
      j.str(f.value);
    } else {
      j.raw(f.value);
    }
  }
  j.key("config");
  j.open('{');
  const std::pair<const char*, long long> config[] = {
      {"nthreads", o.nThreads},
      {"ngpus", o.nGpus},
      {"minimum_bytes", static_cast<long long>(o.minBytes)},
      {"maximum_bytes", static_cast<long long>(o.maxBytes)},
      {o.stepFactor > 1 ? "step_factor" : "step_bytes",
       static_cast<long long>(o.stepFactor > 1 ? o.stepFactor : o.stepBytes)},
      {"warmup_iters", o.warmupIters},
      {"iterations", o.iters},
      {"aggregated_iterations", o.aggIters},
      {"validation", o.check},
      {"graph", o.cudaGraph},
      {"blocking", o.blocking},
      {"average", o.average},
      {"per_iter_timing", o.perIterTiming},
      {"per_iter_skip", o.perIterSkip},
      {"parallel_init", o.parallelInit},
      {"local_register", o.localRegister},
      {"unalign", o.unalign}};
  for (const auto& [k, v] : config) {
    j.key(k);
    j.integer(v);
  }
  j.key("ignored_flags");
  j.open('[');
  for (const std::string& f : o.ignored) j.str(f);
  j.close(']');
  j.close('}');
  j.key("devices");
  j.open('[');
  for (const DeviceInfo& d : devices_) {
    j.open('{');
    j.key("rank");
    j.integer(d.rank);
    j.key("group");
    j.integer(d.group);
    j.key("pid");
    j.integer(d.pid);
    j.key("hostname");
    j.str(d.host);
    j.key("device");
    j.integer(d.device);
    j.key("device_hex");
    j.str(d.busId);
    j.key("device_info");
    j.str(d.info);
    j.close('}');
  }
  j.close(']');
  j.key("results");
  j.open('[');
  for (const Row& r : rows_) {
    j.open('{');
    j.key("size");
    j.integer(static_cast<long long>(r.bytes));
    j.key("count");
    j.integer(static_cast<long long>(r.count));
    j.key("type");
    j.str(r.type);
    j.key("redop");
    j.str(r.redop);
    j.key("root");
    j.integer(r.root);
    if (r.placements > 0) placementJson(j, "out_of_place", r.out, o.reportCpuTime);
    if (r.placements > 1) placementJson(j, "in_place", r.in, o.reportCpuTime);
    j.key("actual_iterations");
    j.integer(r.iters);
    j.close('}');
  }
  j.close(']');
  j.key("notes");
  j.open('[');
  for (const std::string& n : notes_) j.str(n);
  j.close(']');
  j.key("out_of_bounds");
  j.open('{');
  j.key("count");
  j.integer(errors_);
  j.key("okay");
  j.boolean(errors_ == 0);
  j.close('}');
  j.key("average_bus_bandwidth");
  j.open('{');
  j.key("bandwidth");
  j.num(avgBusBw_);
  j.key("okay");
  if (minBw_ < 0) {
    j.str("unchecked");
  } else {
    j.boolean(avgBusBw_ >= minBw_ * 0.9);
  }
  j.close('}');
  if (!memory_.empty()) {
    j.key("memory_usage");
    j.open('{');
    for (const auto& [name, bytes] : memory_) {
      j.key(name.c_str());
      j.integer(bytes);
    }
    j.close('}');
  }
  j.key("errors");
  j.open('[');
  if (!lastError_.empty()) j.str(lastError_);
  j.close(']');
  j.close('}');
  std::string text = j.text() + "\n";

  // -J never overwrites: it tries path, path.0, path.1... like nccl-tests.
  std::string target = path;
  int fd = -1;
  for (int attempt = 0; fd < 0; attempt++) {
    fd = open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0644);
    if (fd >= 0) break;
    if (!exclusive || errno != EEXIST || attempt > 1000) {
      std::printf("# skipping json output; %s not accessible (%s)\n", target.c_str(), std::strerror(errno));
      return false;
    }
    target = path + "." + std::to_string(attempt);
  }
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    left -= static_cast<size_t>(w);
  }
  close(fd);
  if (left > 0) {
    std::printf("# json output to %s is incomplete (%s)\n", target.c_str(), std::strerror(errno));
    return false;
  }
  if (target != path) std::printf("# JSON output went to %s (%s exists)\n", target.c_str(), path.c_str());
  return true;
}

}  // namespace perf
}  // namespace chorus
