// How the perf tools find their peers: the launcher's environment (Open MPI, MPICH/PMI, SLURM, torchrun or
// chorusrun) and a process-level control channel for barriers, result aggregation and the unique id: MPI when
// the tools are built with it and started by mpirun, else a small TCP store served by process 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace chorus {
namespace perf {

/// Where this process sits in the job, as its launcher's environment says.
struct LaunchInfo {
  int proc = 0;                             ///< process index in the job
  int nprocs = 1;                           ///< processes in the job
  int localRank = 0;                        ///< index among this host's processes
  int localSize = 1;                        ///< processes on this host
  std::string launcher = "single process";  ///< "Open MPI", "MPICH/PMI", "SLURM", "torchrun", "chorusrun"
  bool mpiLaunch = false;                   ///< started by mpirun/mpiexec: MPI_Init would see the other processes
  std::string storeHost;                    ///< where process 0 serves the TCP store
  int storePort = 0;                        ///< its port
  std::string storeOrigin;                  ///< which variables chose the address, for messages
  std::string token;                        ///< CHORUS_STORE_TOKEN: a store client must present it (chorusrun sets one)
};

/// The one reader of environment variables in the perf tools (nullptr when unset or empty).
const char* perfEnv(const char* name);

/// The CPUs this process may run on ("cpus 0-1") and the CPU model, for the host "# Rank" lines.
void describeHostCpu(std::string* cpus, std::string* model);

/// Reads the launcher variables. Returns false with *err set when they are inconsistent or when the store
/// address cannot be known (ranks on several hosts and no MASTER_ADDR/MASTER_PORT or CHORUS_STORE_ADDR).
bool detectLaunch(LaunchInfo* info, std::string* err);

/// How Control::allreduce combines values.
enum class Reduce { kSum, kMin, kMax, kFirst };

/// Process-level exchange. Every process must make the same calls in the same order; a failure is printed
/// (naming the process and the peer) where it is detected and then returned as false.
class Control {
 public:
  virtual ~Control() = default;
  /// This process's index.
  virtual int proc() const = 0;
  /// Number of processes.
  virtual int nprocs() const = 0;
  /// Every process gives len bytes; out receives nprocs * len bytes in process order.
  virtual bool allgather(const void* in, size_t len, void* out) = 0;
  /// One line for the header: which channel this is.
  virtual std::string describe() const = 0;
  /// Waits until every process has arrived.
  bool barrier();
  /// Combines v element-wise over processes (kFirst: process 0's values).
  bool allreduce(std::vector<double>* v, Reduce op);
};

/// The channel of a job with one process.
std::unique_ptr<Control> makeSingleControl();
/// The TCP store: process 0 listens at info.storeHost:storePort, the others connect with retry until
/// connectTimeoutS; each later exchange waits at most opTimeoutS. Returns nullptr with *err on failure.
std::unique_ptr<Control> makeStoreControl(const LaunchInfo& info, int connectTimeoutS, int opTimeoutS,
                                          std::string* err);
#ifdef CHORUS_PERF_MPI
/// MPI_COMM_WORLD (MPI_Init must have run).
std::unique_ptr<Control> makeMpiControl();
#endif

}  // namespace perf
}  // namespace chorus
