// mpi_perf: the perf driver over MPI collectives on host buffers, printing the same table as all_reduce_perf
// and its siblings (same sizes, warmup, timing, checks and busbw factors), so the figures compare directly.
//
//   mpirun -np 2 mpi_perf -op allreduce -b 8 -e 64M -f 2
//
// -op picks the collective: allreduce, allgather, reducescatter, alltoall, bcast, reduce, gather, scatter,
// sendrecv. Every other flag is all_reduce_perf's. One rank per process (no -t/-g); MPI has no avg or premulsum
// and no 16- or 8-bit floating types, so those are refused.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/backend.h"
#include "perf/data.h"

namespace chorus {
namespace perf {
namespace {

MPI_Datatype mpiType(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiOp(int op) {
  switch (op) {
    case kOpSum:
      return MPI_SUM;
    case kOpProd:
      return MPI_PROD;
    case kOpMax:
      return MPI_MAX;
    case kOpMin:
      return MPI_MIN;
    default:
      return MPI_OP_NULL;
  }
}

class MpiBackend : public HostBlockingBackend {
 public:
  MpiBackend() : HostBlockingBackend("mpi_perf") {}
  std::string name() const override { return "Open MPI"; }
  std::string versionLine() const override {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string first(lib);
    first = first.substr(0, first.find_first_of(",\n"));
    return "mpi_perf (chorus perf, nccl-tests 2.19.6 format) library: " + first;
  }
  std::string unsupported(const CollSpec& spec, const Options& o) const override {
    if (o.nThreads != 1 || o.nGpus != 1) return "mpi_perf runs one rank per process: use mpirun -np N, not -t/-g";
    if (o.mem == MemKind::kDevice) return "mpi_perf measures host buffers only (--mem device is not supported)";
    if (o.localRegister) return "-R (buffer registration) has no MPI equivalent";
    if (spec.coll == PerfColl::kHyperCube) return "hypercube is not offered by mpi_perf";
    if (o.type >= 0 && !supportsType(static_cast<ncclDataType_t>(o.type)))
      return std::string("MPI has no reduction type for ") + typeName(static_cast<ncclDataType_t>(o.type));
    if (spec.loopsOps && o.op >= 0 && !supportsOp(o.op)) return std::string("MPI has no op ") + opName(o.op);
    return {};
  }
  bool supportsType(ncclDataType_t t) const override { return mpiType(t) != MPI_DATATYPE_NULL; }
  bool supportsOp(int op) const override { return mpiOp(op) != MPI_OP_NULL; }
  bool setup(Control&, const Topology& topo, const Options&) override {
    topo_ = topo;
    comm_ = MPI_COMM_WORLD;
    if (topo.ncclProcs != topo.totalProcs) MPI_Comm_split(MPI_COMM_WORLD, topo.color, topo.proc, &comm_);
    return true;
  }
  bool initComms(int, int) override { return true; }
  bool destroyComms() override {
    if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    return true;
  }
  std::string lastError() const override { return {}; }

  bool run(int, const CallArgs& c) override {
    if (c.count > static_cast<size_t>(INT_MAX)) {
      std::fprintf(stderr, "mpi_perf: count %zu exceeds MPI's int counts\n", c.count);
      return false;
    }
    int n = static_cast<int>(c.count);
    MPI_Datatype t = mpiType(c.type);
    MPI_Op op = mpiOp(c.op);
    size_t block = c.count * wordSize(c.type);
    const void* sb = c.send;
    void* rb = c.recv;
    const char* sc = static_cast<const char*>(c.send);
    char* rc = static_cast<char*>(c.recv);
    int err = MPI_SUCCESS;
    // nccl-tests' in-place layouts map onto MPI_IN_PLACE; reduce-scatter also needs its block moved into place.
    switch (c.coll) {
      case PerfColl::kAllReduce:
        err = MPI_Allreduce(sb == rb ? MPI_IN_PLACE : sb, rb, n, t, op, comm_);
        break;
      case PerfColl::kAllGather:
        err = MPI_Allgather(sc == rc + c.rank * block ? MPI_IN_PLACE : sb, n, t, rb, n, t, comm_);
        break;
      case PerfColl::kReduceScatter:
        if (rc == sc + c.rank * block) {
          err = MPI_Reduce_scatter_block(MPI_IN_PLACE, const_cast<void*>(sb), n, t, op, comm_);
          if (c.rank != 0) std::memmove(rc, sc, block);
        } else {
          err = MPI_Reduce_scatter_block(sb, rb, n, t, op, comm_);
        }
        break;
      case PerfColl::kBroadcast:
        if (c.rank == c.root && sb != rb) std::memcpy(rb, sb, block);
        err = MPI_Bcast(rb, n, t, c.root, comm_);
        break;
      case PerfColl::kReduce:
        err = MPI_Reduce(c.rank == c.root && sb == rb ? MPI_IN_PLACE : sb, rb, n, t, op, c.root, comm_);
        break;
      case PerfColl::kAllToAll:
        err = MPI_Alltoall(sb == rb ? MPI_IN_PLACE : sb, n, t, rb, n, t, comm_);
        break;
      case PerfColl::kGather:
        if (n == 0) break;
        err = MPI_Gather(c.rank == c.root && sc == rc + c.root * block ? MPI_IN_PLACE : sb, n, t, rb, n, t, c.root,
                         comm_);
        break;
      case PerfColl::kScatter:
        if (n == 0) break;
        err = MPI_Scatter(sb, n, t, c.rank == c.root && rc == sc + c.root * block ? MPI_IN_PLACE : rb, n, t, c.root,
                          comm_);
        break;
      case PerfColl::kSendRecv: {
        int to = (c.rank + 1) % c.nranks, from = (c.rank - 1 + c.nranks) % c.nranks;
        err = sb == rb ? MPI_Sendrecv_replace(rb, n, t, to, 0, from, 0, comm_, MPI_STATUS_IGNORE)
                       : MPI_Sendrecv(sb, n, t, to, 0, rb, n, t, from, 0, comm_, MPI_STATUS_IGNORE);
        break;
      }
      case PerfColl::kHyperCube:
        return false;
    }
    if (err != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING] = {0};
      int len = 0;
      MPI_Error_string(err, text, &len);
      std::fprintf(stderr, "mpi_perf: rank %d: MPI call for %s failed: %s\n", c.rank, collSpec(c.coll).name, text);
      return false;
    }
    return true;
  }

 private:
  Topology topo_;
  MPI_Comm comm_ = MPI_COMM_WORLD;
};

}  // namespace
}  // namespace perf
}  // namespace chorus

int main(int argc, char** argv) {
  using namespace chorus::perf;
  // Take "-op NAME" (or --coll NAME) out before the shared flags are parsed: -o is the reduction op there.
  std::string coll = "allreduce";
  std::vector<char*> args = takeCollArg(argc, argv, &coll);
  if (coll == "bcast") coll = "broadcast";
  const CollSpec* found = findCollSpec(coll);
  if (found == nullptr || found->coll == PerfColl::kHyperCube) {
    std::fprintf(stderr,
                 "mpi_perf: unknown -op '%s' (allreduce, allgather, reducescatter, alltoall, bcast, reduce, gather, "
                 "scatter, sendrecv)\n",
                 coll.c_str());
    return 1;
  }
  CollSpec spec = *found;
  spec.program = "mpi_perf";
  MPI_Init(&argc, &argv);
  MpiBackend backend;
  int status = runDriver(static_cast<int>(args.size()), args.data(), spec, backend);
  MPI_Finalize();
  return status;
}
