// What the perf driver needs from the library under test. chorus (the NCCL API, backend_nccl.cc) and Open MPI
// (mpi_perf.cc) implement it, so both print the same table from the same timing loop.
#pragma once

#include <cstddef>
#include <string>

#include "perf/common.h"
#include "perf/launch.h"

namespace chorus {
namespace perf {

/// Process and rank layout (nccl-tests' proc, nProcs, nThreads, nGpus). A process owns localRanks() ranks,
/// local index thread * nGpus + i, driven by its threads.
struct Topology {
  int proc = 0;        ///< process index in the job
  int totalProcs = 1;  ///< processes in the job
  int ncclProc = 0;    ///< process index inside this process's group (NCCL_TESTS_SPLIT)
  int ncclProcs = 1;   ///< processes in the group
  int color = 0;       ///< the group
  int nThreads = 1;    ///< driving threads per process (-t)
  int nGpus = 1;       ///< ranks per thread (-g)
  int localRank = 0;   ///< index among this host's processes
  int localSize = 1;   ///< processes on this host
  int leaderProc = 0;  ///< the group's first process: it makes the unique id

  /// Ranks this process drives.
  int localRanks() const { return nThreads * nGpus; }
  /// Ranks of the communicator.
  int nranks() const { return ncclProcs * nThreads * nGpus; }
  /// Communicator rank of a local index.
  int rankOf(int local) const { return ncclProc * nThreads * nGpus + local; }
};

/// One call as the driver issues it for one rank.
struct CallArgs {
  PerfColl coll;
  const void* send;  ///< send buffer (inside recv when in place)
  void* recv;        ///< receive buffer
  size_t count;      ///< the count argument (CallShape::paramCount)
  ncclDataType_t type;
  int op;  ///< PerfOp
  int root;
  int rank;
  int nranks;
};

/// A library the driver can measure. Methods taking `local` are called only by the thread owning that rank;
/// every method prints its own failure (host, rank, call, library message) and returns false.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Library name for headers and JSON ("chorus", "Open MPI").
  virtual std::string name() const = 0;
  /// First header line after "# " (version of the tool and of the library).
  virtual std::string versionLine() const = 0;
  /// NCCL_VERSION_CODE the library reports, 0 for a non-NCCL library.
  virtual int ncclVersionCode() const { return 0; }
  /// Why this backend cannot run these options (empty: it can).
  virtual std::string unsupported(const CollSpec& spec, const Options& opts) const = 0;
  /// Whether -d all includes this dtype.
  virtual bool supportsType(ncclDataType_t type) const { return true; }
  /// Whether -o all includes this op (a PerfOp).
  virtual bool supportsOp(int op) const { return true; }
  /// Whether device (GPU) memory can be used.
  virtual bool deviceAvailable() const { return false; }
  /// Selects device or host memory; called once, before setup.
  virtual bool selectMemory(bool device) = 0;
  /// A header note on where ranks run when that needs saying (several ranks per GPU), else "".
  virtual std::string placementNote(const Topology& topo) const { return {}; }
  /// The "# Rank" line's device number, bracketed id and description for a local rank.
  virtual void describeDevice(int local, const Topology& topo, int* device, std::string* busId,
                              std::string* info) const = 0;
  /// Process-wide preparation once the control channel exists (the unique id travels here).
  virtual bool setup(Control& ctl, const Topology& topo, const Options& opts) = 0;
  /// Creates the communicators of locals [first, first + n), from the calling thread.
  virtual bool initComms(int first, int n) = 0;
  /// Destroys every communicator.
  virtual bool destroyComms() = 0;
  /// Buffer memory for a local rank (device memory when selected); nullptr on failure.
  virtual void* alloc(int local, size_t bytes) = 0;
  /// Frees what alloc returned.
  virtual void release(void* ptr) = 0;
  /// Copies host memory into a local rank's buffer (plain memcpy for host memory). Device memory is copied on the
  /// rank's stream and waited for, so the copy has landed before any call issued after it runs.
  virtual bool upload(int local, void* dst, const void* src, size_t bytes) = 0;
  /// Copies a local rank's buffer into host memory, once the rank's issued work is complete.
  virtual bool download(int local, void* dst, const void* src, size_t bytes) = 0;
  /// -R 1/2: registers a local rank's buffers (mode 1 local, 2 symmetric).
  virtual bool registerBuffers(int local, void* send, void* recv, size_t bytes, int mode) = 0;
  /// Undoes every registerBuffers.
  virtual bool unregisterAll() = 0;
  /// Opens a group around the calls of several local ranks (or -m aggregated calls) made by one thread.
  virtual bool groupStart() = 0;
  /// Closes it, launching the calls.
  virtual bool groupEnd() = 0;
  /// Issues one call for one local rank.
  virtual bool run(int local, const CallArgs& call) = 0;
  /// Whether -G can capture this backend's calls into CUDA graphs (device memory selected, graph API present).
  virtual bool graphsAvailable() const { return false; }
  /// -G: starts capturing a local rank's stream (thread-local mode) before its timed calls are issued.
  virtual bool beginCapture(int local) { return false; }
  /// Ends the capture of the calls issued since beginCapture.
  virtual bool endCapture(int local) { return false; }
  /// Instantiates the ended capture's graph. A thread instantiates only once all its captures have ended: in
  /// thread-local mode its own capture still running forbids instantiation.
  virtual bool instantiateGraph(int local) { return false; }
  /// Launches a local rank's instantiated graph on its stream once.
  virtual bool launchGraph(int local) { return false; }
  /// Destroys a local rank's graph (no-op without one).
  virtual void dropGraph(int local) {}
  /// Waits until a local rank's issued work is complete.
  virtual bool sync(int local) = 0;
  /// The library's last error text, for the trailer (may be empty).
  virtual std::string lastError() const = 0;
};

/// The part every baseline on host buffers with blocking calls shares (mpi_perf's Open MPI, gloo_perf's Gloo): host
/// memory only, page-aligned buffers touched before the timing, plain copies, no registration, no groups.
class HostBlockingBackend : public Backend {
 public:
  /// `tool` ("mpi_perf") names the program in messages.
  explicit HostBlockingBackend(const char* tool) : tool_(tool) {}
  bool selectMemory(bool device) override { return !device; }
  void describeDevice(int local, const Topology& topo, int* device, std::string* busId,
                      std::string* info) const override;
  void* alloc(int local, size_t bytes) override;
  void release(void* ptr) override;
  bool upload(int local, void* dst, const void* src, size_t bytes) override;
  bool download(int local, void* dst, const void* src, size_t bytes) override {
    return upload(local, dst, src, bytes);
  }
  bool registerBuffers(int, void*, void*, size_t, int) override { return true; }
  bool unregisterAll() override { return true; }
  bool groupStart() override { return true; }
  bool groupEnd() override { return true; }
  bool sync(int) override { return true; }  // the calls have completed when they return

 protected:
  const char* tool_;
};

/// Runs a tool: flags, launch, the timing loop and the report. Returns the process exit status.
int runDriver(int argc, char** argv, const CollSpec& spec, Backend& backend, const Options* preset = nullptr);

}  // namespace perf
}  // namespace chorus
