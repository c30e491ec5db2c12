// nccl-tests-compatible benchmark driver. Every *_perf tool is one table entry (CollSpec) and a main that calls
// perfMain; mpi_perf runs the same driver over Open MPI. The driver reproduces nccl-tests' behaviour: flags and
// defaults, warmup, timing, the #wrong check, the table and its trailer. Sources: common.cc (driver), options.cc
// (flags), colls.cc (table), data.cc (verifiable values), report.cc (table and JSON), launch.cc (ranks and id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus {
namespace perf {

/// The operations the tools measure.
enum class PerfColl {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv,
  kHyperCube
};

/// How the buffers of one call derive from the requested size (nccl-tests' getCollByteCount).
enum class Layout {
  kSame,      ///< send = recv = count (allreduce, broadcast, reduce, sendrecv)
  kGather,    ///< send = base, recv = base * n, in place at recv + rank * base (allgather, gather, hypercube)
  kScatter,   ///< send = base * n, recv = base, in place at send + rank * base (reduce-scatter, scatter)
  kAllToAll,  ///< send = recv = base * n, in place with send == recv
};

/// Which multiple of count * eltSize the algorithm bandwidth divides by the time.
enum class AlgScale { kOne, kRanks, kRanksMinusOne };
/// nccl-tests' busbw factor: 1, 2(n-1)/n (allreduce) or (n-1)/n.
enum class BusFactor { kOne, kAllReduce, kRing };

/// One table entry: everything that differs between the tools.
struct CollSpec {
  PerfColl coll;
  const char* name;     ///< nccl-tests' name ("AllReduce")
  const char* program;  ///< tool name ("all_reduce_perf")
  Layout layout;
  AlgScale algScale;
  BusFactor busFactor;
  bool loopsOps;         ///< runs every -o value (the reductions, and sendrecv as nccl-tests does)
  bool hasRoot;          ///< runs every -r value; root column shows it (else -1)
  bool checksInPlace;    ///< false: the in-place #wrong column is N/A (alltoall, sendrecv)
  bool powerOfTwoRanks;  ///< skipped unless the rank count is a power of two (hypercube)
  const char* opLabel;   ///< redop column when loopsOps is false ("none")
};

/// The table entry of a collective.
const CollSpec& collSpec(PerfColl coll);
/// The entry whose name or program matches (case-insensitive; "allreduce", "all_reduce_perf"...), or nullptr.
const CollSpec* findCollSpec(const std::string& name);
/// The baselines' (mpi_perf, gloo_perf) "-op NAME" / "--coll NAME": takes it out of argv (where -o is the
/// reduction op) into *coll, left unchanged when absent; returns the other arguments.
std::vector<char*> takeCollArg(int argc, char** argv, std::string* coll);

/// Element counts of one call for a requested size (nccl-tests' getCollByteCount).
struct CallShape {
  size_t sendCount = 0;          ///< elements in the send buffer
  size_t recvCount = 0;          ///< elements in the receive buffer (and the expected result)
  size_t paramCount = 0;         ///< the count argument of the call
  size_t sendInplaceOffset = 0;  ///< in place: send = recv + rank * this (elements)
  size_t recvInplaceOffset = 0;  ///< in place: recv = recv + rank * this (elements)
};
/// The shape of a call moving `count` elements of eltSize bytes among nranks.
CallShape callShape(const CollSpec& spec, size_t count, size_t eltSize, int nranks);
/// nccl-tests' algbw and busbw (GB/s) of a call with paramCount elements that took sec seconds.
void bandwidth(const CollSpec& spec, size_t paramCount, size_t eltSize, double sec, int nranks, double* algBw,
               double* busBw);

/// Host-visible images of one rank's buffers that initData fills (the device copies follow them when needed).
struct RankImages {
  char* send;      ///< send buffer (maxBytes)
  char* recv;      ///< receive buffer (maxBytes); in-place inputs are written here
  char* expected;  ///< what the checked part of recv must hold afterwards (recvCount elements)
};
/// nccl-tests' initData: zeroes recv, writes rank's input (in place or not) and the expected result.
void initData(const CollSpec& spec, const CallShape& shape, ncclDataType_t type, int op, int root, int rank, int nranks,
              uint64_t rep, bool inPlace, const RankImages& img);

/// Memory the buffers live in.
enum class MemKind { kAuto, kHost, kDevice };

/// Every nccl-tests flag plus ours; defaults are nccl-tests' (2.19).
struct Options {
  int nThreads = 1;                  ///< -t
  int nGpus = 1;                     ///< -g: ranks per thread
  size_t minBytes = 32u << 20;       ///< -b
  size_t maxBytes = 32u << 20;       ///< -e
  size_t stepBytes = 1u << 20;       ///< -i
  size_t stepFactor = 1;             ///< -f (> 1 wins over -i)
  int iters = 20;                    ///< -n
  int aggIters = 1;                  ///< -m
  int warmupIters = 1;               ///< -w
  int runCycles = 1;                 ///< -N (0: forever)
  int parallelInit = 0;              ///< -p
  int check = 1;                     ///< -c: check iterations
  int op = 0;                        ///< -o: PerfOp, -1 for all
  int type = ncclFloat32;            ///< -d: dtype, -1 for all
  int root = 0;                      ///< -r: -1 for all
  int blocking = 0;                  ///< -z 0..3
  int streamNull = 0;                ///< -y (GPU only)
  int timeoutS = 0;                  ///< -T (0: none)
  int cudaGraph = 0;                 ///< -G (GPU only)
  int reportCpuTime = 0;             ///< -C
  int reportTimestamps = 0;          ///< -S
  int average = 1;                   ///< -a 0=rank0 1=avg 2=min 3=max
  int localRegister = 0;             ///< -R 0/1/2
  int ctaPolicy = -1;                ///< -x (GPU only)
  int deviceImpl = 0;                ///< -D (GPU only)
  int deviceCtaCount = 16;           ///< -V (GPU only)
  int memoryReport = 0;              ///< -M
  int unalign = 0;                   ///< -u
  int perIterTiming = 0;             ///< -I
  int perIterSkip = 0;               ///< -K
  std::string outputFile;            ///< -J: nccl-tests' JSON output (never overwrites: adds .N)
  std::string jsonFile;              ///< --json: our JSON output (overwrites)
  MemKind mem = MemKind::kAuto;      ///< --mem host|device
  std::vector<std::string> ignored;  ///< flags given that mean nothing here, for the header note
  std::vector<std::string> args;     ///< argv, for the JSON
};

/// Parses argv into opts. Returns -1 to go on, else the exit status (0 after -h, 1 after a bad flag).
int parseOptions(int argc, char** argv, const CollSpec& spec, Options* opts);
/// Parses "32", "8K", "64M", "1.5G" (binary units); returns -1 on garbage.
double parseSize(const char* text);

/// Runs one tool with the chorus (NCCL API) backend; returns the process exit status.
int perfMain(int argc, char** argv, PerfColl coll);

}  // namespace perf
}  // namespace chorus
