// Launcher environments and the process-level control channel's common parts (see launch.h).
#include "perf/launch.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

namespace chorus {
namespace perf {
namespace {

const char* env(const char* name) { return perfEnv(name); }

bool envInt(const char* name, int* out) {
  const char* v = env(name);
  if (v == nullptr) return false;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v) return false;
  *out = static_cast<int>(x);
  return true;
}

// First host of a SLURM node list: "node[03-05,9],gpu7" -> "node03".
std::string firstSlurmHost(const std::string& list) {
  size_t bracket = list.find('[');
  size_t comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) return list.substr(0, comma);
  size_t end = list.find_first_of(",-]", bracket + 1);
  return list.substr(0, bracket) + list.substr(bracket + 1, end - bracket - 1);
}

// A port every process of one job derives alike, away from the ephemeral range most kernels use.
int derivedPort(const std::string& jobKey) {
  return 20000 + static_cast<int>(std::hash<std::string>()(jobKey) % 10000);
}

bool parseHostPort(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);  // [v6]:port
  *host = h;
  *port = std::atoi(text.c_str() + colon + 1);
  return !h.empty() && *port > 0 && *port < 65536;
}

}  // namespace

const char* perfEnv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

void describeHostCpu(std::string* cpus, std::string* model) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string list;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; c++) {
      if (!CPU_ISSET(c, &set)) continue;
      int end = c;
      while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set)) end++;
      list += (list.empty() ? "" : ",") + std::to_string(c) + (end > c ? "-" + std::to_string(end) : "");
      c = end;
    }
  }
  *cpus = "cpus " + (list.empty() ? std::string("?") : list);
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  *model = "CPU";
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      *model = line.substr(line.find(':') + 2);
      break;
    }
  }
}

bool detectLaunch(LaunchInfo* info, std::string* err) {
  LaunchInfo l;
  std::string jobKey;
  int nodes = 0;
  if (env("OMPI_COMM_WORLD_SIZE")) {
    l.launcher = "Open MPI";
    l.mpiLaunch = true;
    envInt("OMPI_COMM_WORLD_RANK", &l.proc);
    envInt("OMPI_COMM_WORLD_SIZE", &l.nprocs);
    envInt("OMPI_COMM_WORLD_LOCAL_RANK", &l.localRank);
    if (!envInt("OMPI_COMM_WORLD_LOCAL_SIZE", &l.localSize)) l.localSize = l.nprocs;
    jobKey = env("OMPI_MCA_ess_base_jobid") ? env("OMPI_MCA_ess_base_jobid") : "";
  } else if (env("PMI_SIZE") && env("PMI_RANK")) {
    l.launcher = "MPICH/PMI";
    l.mpiLaunch = true;
    envInt("PMI_RANK", &l.proc);
    envInt("PMI_SIZE", &l.nprocs);
    envInt("MPI_LOCALRANKID", &l.localRank);
    if (!envInt("MPI_LOCALNRANKS", &l.localSize)) l.localSize = l.nprocs;
    jobKey = env("PMI_KVSNAME") ? env("PMI_KVSNAME") : "";
  } else if ((env("SLURM_STEP_ID") || env("SLURM_STEPID")) && env("SLURM_PROCID") &&
             (env("SLURM_NTASKS") || env("SLURM_NPROCS"))) {
    // Only inside an srun step: a batch script also sees SLURM_PROCID=0 and SLURM_NTASKS, but runs alone.
    l.launcher = "SLURM";
    envInt("SLURM_PROCID", &l.proc);
    if (!envInt("SLURM_NTASKS", &l.nprocs)) envInt("SLURM_NPROCS", &l.nprocs);
    envInt("SLURM_LOCALID", &l.localRank);
    if (!envInt("SLURM_STEP_NUM_NODES", &nodes)) envInt("SLURM_NNODES", &nodes);
    if (nodes == 1) {
      l.localSize = l.nprocs;
    } else if (!envInt("SLURM_STEP_TASKS_PER_NODE", &l.localSize)) {
      l.localSize = 1;
    }
    jobKey = std::string(env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "") + "." +
             (env("SLURM_STEP_ID") ? env("SLURM_STEP_ID") : env("SLURM_STEPID"));
  } else if (env("WORLD_SIZE") && env("RANK")) {
    l.launcher = env("CHORUSRUN") ? "chorusrun" : "torchrun";
    envInt("RANK", &l.proc);
    envInt("WORLD_SIZE", &l.nprocs);
    envInt("LOCAL_RANK", &l.localRank);
    if (!envInt("LOCAL_WORLD_SIZE", &l.localSize)) l.localSize = l.nprocs;
  }
  if (l.nprocs < 1 || l.proc < 0 || l.proc >= l.nprocs || l.localRank < 0 || l.localSize < 1) {
    *err = "inconsistent " + l.launcher + " environment: rank " + std::to_string(l.proc) + " of " +
           std::to_string(l.nprocs) + ", local rank " + std::to_string(l.localRank) + " of " +
           std::to_string(l.localSize);
    return false;
  }
  if (env("CHORUS_STORE_TOKEN")) l.token = env("CHORUS_STORE_TOKEN");

  // The store address: explicit, then torchrun-style, then derived for single-host jobs.
  if (l.nprocs > 1) {
    if (env("CHORUS_STORE_ADDR")) {
      if (!parseHostPort(env("CHORUS_STORE_ADDR"), &l.storeHost, &l.storePort)) {
        *err = std::string("CHORUS_STORE_ADDR='") + env("CHORUS_STORE_ADDR") + "' is not host:port";
        return false;
      }
      l.storeOrigin = "CHORUS_STORE_ADDR";
    } else if (env("MASTER_ADDR") && env("MASTER_PORT")) {
      l.storeHost = env("MASTER_ADDR");
      l.storePort = std::atoi(env("MASTER_PORT"));
      l.storeOrigin = "MASTER_ADDR/MASTER_PORT";
      // torchrun's agent already serves its own store on MASTER_PORT; ours takes the next port.
      if (env("TORCHELASTIC_USE_AGENT_STORE") && std::strcmp(env("TORCHELASTIC_USE_AGENT_STORE"), "True") == 0) {
        l.storePort++;
        l.storeOrigin += "+1 (torchrun's agent store holds MASTER_PORT)";
      }
      if (l.storePort <= 0 || l.storePort >= 65536) {
        *err = std::string("MASTER_PORT='") + env("MASTER_PORT") + "' is not a port";
        return false;
      }
    } else if (l.localSize >= l.nprocs) {
      // One host: every process derives the same port from the job id (or, failing that, the launcher's pid).
      if (jobKey.empty()) jobKey = "ppid-" + std::to_string(getppid());
      l.storeHost = "127.0.0.1";
      l.storePort = derivedPort(jobKey);
      l.storeOrigin = "single host, port derived from the job id";
    } else if (l.launcher == "SLURM" && (env("SLURM_STEP_NODELIST") || env("SLURM_JOB_NODELIST"))) {
      l.storeHost = firstSlurmHost(env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST"));
      l.storePort = derivedPort(jobKey);
      l.storeOrigin = "first host of the SLURM step, port derived from the job id";
    } else {
      *err = "the " + std::to_string(l.nprocs) + " processes of this " + l.launcher +
             " job span several hosts and no store address is set: export MASTER_ADDR=<host of rank 0> and "
             "MASTER_PORT=<free port> (or CHORUS_STORE_ADDR=host:port), or build the perf tools with MPI";
      return false;
    }
  }
  *info = l;
  return true;
}

bool Control::barrier() {
  char in = 1;
  std::vector<char> out(static_cast<size_t>(nprocs()));
  return allgather(&in, 1, out.data());
}

bool Control::allreduce(std::vector<double>* v, Reduce op) {
  size_t n = v->size();
  if (nprocs() == 1) return true;
  std::vector<double> all(n * static_cast<size_t>(nprocs()));
  if (!allgather(v->data(), n * sizeof(double), all.data())) return false;
  for (size_t i = 0; i < n; i++) {
    double acc = all[i];
    for (int p = 1; p < nprocs() && op != Reduce::kFirst; p++) {
      double x = all[static_cast<size_t>(p) * n + i];
      acc = op == Reduce::kSum ? acc + x : op == Reduce::kMin ? std::min(acc, x) : std::max(acc, x);
    }
    (*v)[i] = acc;
  }
  return true;
}

namespace {

class SingleControl : public Control {
 public:
  int proc() const override { return 0; }
  int nprocs() const override { return 1; }
  bool allgather(const void* in, size_t len, void* out) override {
    std::memcpy(out, in, len);
    return true;
  }
  std::string describe() const override { return "none (one process)"; }
};

}  // namespace

std::unique_ptr<Control> makeSingleControl() { return std::make_unique<SingleControl>(); }

}  // namespace perf
}  // namespace chorus
