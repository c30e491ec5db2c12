// The control channel over MPI_COMM_WORLD, used when the perf tools run under mpirun (and by mpi_perf).
#include <mpi.h>

#include <cstdio>

#include "perf/launch.h"

namespace chorus {
namespace perf {
namespace {

class MpiControl : public Control {
 public:
  MpiControl() {
    MPI_Comm_rank(MPI_COMM_WORLD, &proc_);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs_);
  }
  int proc() const override { return proc_; }
  int nprocs() const override { return nprocs_; }
  std::string describe() const override { return "MPI_COMM_WORLD"; }
  bool allgather(const void* in, size_t len, void* out) override {
    int rc = MPI_Allgather(in, static_cast<int>(len), MPI_BYTE, out, static_cast<int>(len), MPI_BYTE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) std::fprintf(stderr, "process %d: MPI_Allgather failed (%d)\n", proc_, rc);
    return rc == MPI_SUCCESS;
  }

 private:
  int proc_ = 0;
  int nprocs_ = 1;
};

}  // namespace

std::unique_ptr<Control> makeMpiControl() { return std::make_unique<MpiControl>(); }

}  // namespace perf
}  // namespace chorus
