// The perf tools' output: nccl-tests' text (header, "# Rank" lines, the size table, the trailer) on stdout of
// process 0, and the same results as JSON (-J and --json). Only the main thread of process 0 prints; every
// other caller's calls do nothing, so the driver can call them from any thread as nccl-tests does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "perf/common.h"

namespace chorus {
namespace perf {

/// One "# Rank" line.
struct DeviceInfo {
  int rank = 0;
  int group = 0;
  int pid = 0;
  std::string host;
  int device = -1;    ///< -1: host memory
  std::string busId;  ///< the bracketed field
  std::string info;   ///< the description after it
};

/// Summary of per-iteration times (-I), in seconds.
struct IterStats {
  double min = 0, max = 0, avg = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0;
  int skipped = 0;
  std::vector<double> times;  ///< every iteration, skipped ones included
};
/// Statistics of times[skip..] (nccl-tests' nearest-rank percentiles).
IterStats computeIterStats(const std::vector<double>& times, int skip);

/// Result of one placement (out-of-place or in-place) of one size.
struct Placement {
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  bool checked = false;  ///< false: #wrong is N/A
  int64_t wrong = 0;
  bool hasIters = false;
  IterStats iters;
};

/// Writes the text report and collects the JSON one.
class Reporter {
 public:
  /// main: whether this caller prints (process 0); program: tool name; library: "chorus", "Open MPI".
  Reporter(bool main, const Options& opts, const CollSpec& spec, std::string library);

  /// Whether this process prints.
  bool main() const { return main_; }
  /// printf on stdout of the printing process only.
  void print(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

  /// The lines before "# Using devices" (version, flags, notes).
  void runHeader(const std::string& versionLine, int ncclVersion, const std::vector<std::string>& notes);
  /// "# Using devices" and one line per rank.
  void devices(const std::vector<DeviceInfo>& all);
  /// The three table header lines.
  void tableHeader();
  /// Starts a row.
  void rowStart(size_t bytes, size_t count, const char* type, const char* redop, int root);
  /// Appends one placement to the row (out-of-place first).
  void rowPlacement(const Placement& p, bool outOfPlace);
  /// Ends the row.
  void rowEnd(int iters);
  /// A line inside the table ("nRanks 3 is not a power of 2, skipping").
  void note(const std::string& line);
  /// The trailer: out-of-bounds count, average busbw (checked against minBw when >= 0).
  void footer(int errors, double avgBusBw, double minBw);
  /// The memory usage line (-M): name and bytes of each part.
  void memory(const char* what, const std::vector<std::pair<const char*, int64_t>>& parts);
  /// The closing lines, with the library's last error if any.
  void finish(const std::string& lastError);
  /// Adds a text fact to the JSON document (host, launcher, memory kind...).
  void setFact(const std::string& key, const std::string& value) { facts_.push_back({key, value, true}); }
  /// Adds a number fact to the JSON document (nranks, nprocs...).
  void setFact(const std::string& key, double value) { facts_.push_back({key, fmtNumber(value), false}); }
  /// Writes the JSON document to path; exclusive: never overwrite (adds .N as nccl-tests' -J does).
  bool writeJson(const std::string& path, bool exclusive) const;

 private:
  struct Fact {
    std::string key, value;
    bool quoted;
  };
  struct Row {
    size_t bytes = 0, count = 0;
    std::string type, redop;
    int root = -1;
    Placement out, in;
    int placements = 0;
    int iters = 0;
  };
  static std::string fmtNumber(double v);

  bool main_;
  const Options& opts_;
  const CollSpec& spec_;
  std::string library_;
  std::string startTime_;
  int ncclVersion_ = 0;
  std::vector<Fact> facts_;
  std::vector<DeviceInfo> devices_;
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
  int errors_ = 0;
  double avgBusBw_ = 0;
  double minBw_ = -1;
  std::string lastError_;
  std::vector<std::pair<std::string, int64_t>> memory_;
};

/// nccl-tests' number format: the widest of %.2f, %.1f, %.0f, %.1e that fits width.
std::string fitNumber(double value, int width);
/// Local time as "%Y-%m-%d %H:%M:%S".
std::string nowString();

}  // namespace perf
}  // namespace chorus
