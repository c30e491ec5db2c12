// gloo_perf: the perf driver over Gloo's collectives (Debian's libgloo-dev, TCP transport), printing the same table
// as all_reduce_perf and all_gather_perf (same sizes, warmup, timing, checks and busbw factors), so that chorus's
// nets compare with Gloo on the same links (docs/perf/net.md).
//
//   RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... gloo_perf -op allreduce -b 1M -e 64M -f 4
//
// The driver's launch (RANK/WORLD_SIZE, mpirun, srun) places the ranks; Gloo's own rendezvous goes through a file
// store in GLOO_STORE_DIR (default /tmp/gloo-store-MASTER_PORT: every rank must see the same directory), over the
// interface GLOO_SOCKET_IFNAME (default: the one the hostname resolves to). One rank per process; host memory;
// float32/float64/int32 sum (and max, min, prod) for allreduce, any type for allgather.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "perf/backend.h"
#include "perf/data.h"

namespace chorus {
namespace perf {
namespace {

template <class T>
gloo::AllreduceOptions::Func reduceFn(int op) {
  switch (op) {
    case ncclSum:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
    case ncclProd:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::product<T>(c, a, b, n); };
    case ncclMax:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
    case ncclMin:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
    default:
      return nullptr;
  }
}

// Gloo's ring splits buffers on element boundaries, so each type gets its own instantiation.
template <class T>
void allreduceAs(const std::shared_ptr<gloo::Context>& ctx, void* out, size_t count, int op) {
  gloo::AllreduceOptions opts(ctx);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(static_cast<T*>(out), count);
  opts.setReduceFunction(reduceFn<T>(op));
  gloo::allreduce(opts);
}

class GlooBackend : public HostBlockingBackend {
 public:
  GlooBackend() : HostBlockingBackend("gloo_perf") {}
  std::string name() const override { return "Gloo"; }
  std::string versionLine() const override {
    return "gloo_perf (chorus perf, nccl-tests 2.19.6 format) library: Gloo (Debian libgloo-dev), TCP transport";
  }
  std::string unsupported(const CollSpec& spec, const Options& o) const override {
    if (o.nThreads != 1 || o.nGpus != 1) return "gloo_perf runs one rank per process (no -t/-g)";
    if (o.mem == MemKind::kDevice) return "gloo_perf measures host buffers only";
    if (o.localRegister) return "-R (buffer registration) has no Gloo equivalent";
    if (spec.coll != PerfColl::kAllReduce && spec.coll != PerfColl::kAllGather)
      return "gloo_perf offers allreduce and allgather";
    if (spec.coll == PerfColl::kAllReduce && o.type >= 0 && !supportsType(static_cast<ncclDataType_t>(o.type)))
      return std::string("gloo_perf has no reduction for ") + typeName(static_cast<ncclDataType_t>(o.type));
    if (spec.loopsOps && o.op >= 0 && !supportsOp(o.op)) return std::string("gloo_perf has no op ") + opName(o.op);
    return {};
  }
  bool supportsType(ncclDataType_t t) const override { return t == ncclFloat32 || t == ncclFloat64 || t == ncclInt32; }
  bool supportsOp(int op) const override { return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin; }
  bool setup(Control&, const Topology& topo, const Options&) override {
    topo_ = topo;
    return true;
  }
  bool initComms(int, int) override {
    const char* port = std::getenv("MASTER_PORT");
    const char* dirEnv = std::getenv("GLOO_STORE_DIR");
    std::string dir = dirEnv ? dirEnv : std::string("/tmp/gloo-store-") + (port ? port : "0");
    mkdir(dir.c_str(), 0700);
    try {
      gloo::transport::tcp::attr attr;
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname != nullptr) attr.iface = ifname;
      auto dev = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::FileStore store(dir);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(topo_.proc, topo_.totalProcs);
      ctx->connectFullMesh(store, dev);
      ctx_ = ctx;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gloo_perf: rank %d: Gloo rendezvous in %s failed: %s\n", topo_.proc, dir.c_str(), e.what());
      return false;
    }
    return true;
  }
  bool destroyComms() override {
    ctx_.reset();
    return true;
  }
  std::string lastError() const override { return error_; }

  bool run(int, const CallArgs& c) override {
    const size_t word = wordSize(c.type);
    try {
      if (c.coll == PerfColl::kAllReduce) {
        if (c.count == 0) return true;
        // Gloo reduces in place into its output: copy the input over first when out of place.
        if (c.send != c.recv) std::memcpy(c.recv, c.send, c.count * word);
        if (c.type == ncclFloat32) allreduceAs<float>(ctx_, c.recv, c.count, c.op);
        if (c.type == ncclFloat64) allreduceAs<double>(ctx_, c.recv, c.count, c.op);
        if (c.type == ncclInt32) allreduceAs<int32_t>(ctx_, c.recv, c.count, c.op);
      } else {
        if (c.count == 0) return true;
        char* out = static_cast<char*>(c.recv);
        const char* in = static_cast<const char*>(c.send);
        gloo::AllgatherOptions opts(ctx_);
        // Gloo's allgather needs its own input buffer (in place: this rank's block, copied out first).
        std::vector<char> copy;
        if (in == out + c.rank * c.count * word) {
          copy.assign(in, in + c.count * word);
          in = copy.data();
        }
        opts.setInput(const_cast<char*>(in), c.count * word);
        opts.setOutput(out, c.count * word * c.nranks);
        gloo::allgather(opts);
      }
    } catch (const std::exception& e) {
      error_ = e.what();
      std::fprintf(stderr, "gloo_perf: rank %d: %s\n", c.rank, e.what());
      return false;
    }
    return true;
  }

 private:
  Topology topo_;
  std::shared_ptr<gloo::Context> ctx_;
  std::string error_;
};

}  // namespace
}  // namespace perf
}  // namespace chorus

int main(int argc, char** argv) {
  using namespace chorus::perf;
  std::string coll = "allreduce";
  std::vector<char*> args = takeCollArg(argc, argv, &coll);
  const CollSpec* found = findCollSpec(coll);
  if (found == nullptr || (found->coll != PerfColl::kAllReduce && found->coll != PerfColl::kAllGather)) {
    std::fprintf(stderr, "gloo_perf: unknown -op '%s' (allreduce, allgather)\n", coll.c_str());
    return 1;
  }
  CollSpec spec = *found;
  spec.program = "gloo_perf";
  GlooBackend backend;
  return runDriver(static_cast<int>(args.size()), args.data(), spec, backend);
}
