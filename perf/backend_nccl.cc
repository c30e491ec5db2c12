// The chorus backend of the perf tools: the NCCL API of libnccl.so.2, with host buffers (page-aligned host memory)
// or device buffers (ncclMemAlloc, CUDA runtime through cuda_shim) and the calls nccl-tests makes for each tool.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "perf/backend.h"
#include "perf/cuda_shim.h"
#include "perf/data.h"

namespace chorus {
namespace perf {
namespace {

/// nccl-tests release whose flags, defaults and output this driver reproduces.
constexpr const char* kNcclTestsVersion = "2.19.6";

class NcclBackend : public Backend {
 public:
  NcclBackend() {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    host_ = buf;
  }

  std::string name() const override { return "chorus"; }
  std::string versionLine() const override {
    char line[256];
    std::snprintf(line, sizeof(line), "chorus perf %d.%d.%d (nccl-tests %s format) nccl-headers=%d nccl-library=%d",
                  CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH, kNcclTestsVersion, NCCL_VERSION_CODE, ncclVersionCode());
    return line;
  }
  int ncclVersionCode() const override {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  }
  std::string unsupported(const CollSpec&, const Options&) const override { return {}; }
  bool deviceAvailable() const override { return cuda_.deviceCount() > 0; }
  bool selectMemory(bool device) override {
    device_ = device;
    return true;
  }

  void describeDevice(int local, const Topology& topo, int* device, std::string* busId,
                      std::string* info) const override {
    if (!device_) {
      std::string cpus, model;
      describeHostCpu(&cpus, &model);
      *device = -1;
      *busId = cpus;
      *info = model + " (host memory)";
      return;
    }
    *device = gpuOf(local, topo);
    char bus[64] = "?";
    cuda_.deviceGetPCIBusId(bus, sizeof(bus), *device);
    *busId = bus;
    *info = "GPU";
  }

  std::string placementNote(const Topology& topo) const override {
    int n = cuda_.deviceCount();
    int ranks = topo.localSize * topo.localRanks();
    if (!device_ || n <= 0 || ranks <= n) return {};
    return "GPUs: " + std::to_string(ranks) + " ranks on this host, " + std::to_string(n) +
           " GPU(s) visible: ranks share GPUs (local rank r on GPU r % " + std::to_string(n) +
           "); processes sharing a GPU run side by side only under MPS";
  }

  bool setup(Control& ctl, const Topology& topo, const Options& opts) override {
    topo_ = topo;
    opts_ = opts;
    // The group's first process makes the id; everyone takes it from the allgather.
    ncclUniqueId mine;
    std::memset(&mine, 0, sizeof(mine));
    if (topo.proc == topo.leaderProc && !check(ncclGetUniqueId(&mine), "ncclGetUniqueId", topo.rankOf(0))) return false;
    std::vector<ncclUniqueId> all(static_cast<size_t>(topo.totalProcs));
    if (!ctl.allgather(&mine, sizeof(mine), all.data())) return false;
    id_ = all[topo.leaderProc];
    int L = topo.localRanks();
    comms_.assign(L, nullptr);
    streams_.assign(L, nullptr);
    regs_.assign(L, {});
    graphs_.assign(L, Graph{});
    if (device_) {
      for (int i = 0; i < L; i++) {
        if (!cudaOk(cuda_.setDevice(gpuOf(i, topo)), "cudaSetDevice", i)) return false;
        // -y 1 (stream_null) uses the default stream, as nccl-tests does.
        if (!opts.streamNull &&
            !cudaOk(cuda_.streamCreateWithFlags(reinterpret_cast<void**>(&streams_[i]), kCudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags", i))
          return false;
      }
    }
    return true;
  }

  bool initComms(int first, int n) override {
    // One process holding every rank on host memory: ncclCommInitAll (devlist NULL = host ranks).
    if (!device_ && topo_.ncclProcs == 1 && first == 0 && n == topo_.localRanks() && opts_.ctaPolicy < 0)
      return check(ncclCommInitAll(comms_.data(), n, nullptr), "ncclCommInitAll", 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (opts_.ctaPolicy >= 0) config.CTAPolicy = opts_.ctaPolicy;
    if (n > 1 && !check(ncclGroupStart(), "ncclGroupStart", topo_.rankOf(first))) return false;
    for (int i = first; i < first + n; i++) {
      if (device_ && !cudaOk(cuda_.setDevice(gpuOf(i, topo_)), "cudaSetDevice", i)) return false;
      if (!check(ncclCommInitRankConfig(&comms_[i], topo_.nranks(), id_, topo_.rankOf(i), &config),
                 "ncclCommInitRankConfig", topo_.rankOf(i)))
        return false;
    }
    return n > 1 ? check(ncclGroupEnd(), "ncclGroupEnd (communicator init)", topo_.rankOf(first)) : true;
  }

  bool destroyComms() override {
    bool ok = true;
    for (size_t i = 0; i < comms_.size(); i++) {
      if (comms_[i] != nullptr) ok &= check(ncclCommDestroy(comms_[i]), "ncclCommDestroy", topo_.rankOf(i));
      comms_[i] = nullptr;
      if (streams_[i] != nullptr) cuda_.streamDestroy(streams_[i]);
      streams_[i] = nullptr;
    }
    return ok;
  }

  void* alloc(int local, size_t bytes) override {
    void* p = nullptr;
    if (!device_) {
      // Host buffers: ncclMemAlloc gives device memory wherever chorus has a GPU, so not through it.
      if (posix_memalign(&p, 4096, bytes) != 0) {
        std::fprintf(stderr, "%s: cannot allocate %zu bytes of host memory\n", host_.c_str(), bytes);
        return nullptr;
      }
      std::memset(p, 0, bytes);  // touch the pages before the timing
      return p;
    }
    if (!cudaOk(cuda_.setDevice(gpuOf(local, topo_)), "cudaSetDevice", local)) return nullptr;
    if (!check(ncclMemAlloc(&p, bytes), "ncclMemAlloc", topo_.rankOf(local))) return nullptr;
    if (!cuda_.isDevicePointer(p)) {  // the header says "device": it must be true
      std::fprintf(stderr,
                   "%s: rank %d: ncclMemAlloc returned host memory %p although a GPU is in use (is "
                   "libnccl.so.2 a build without a GPU backend?)\n",
                   host_.c_str(), topo_.rankOf(local), p);
      ncclMemFree(p);
      return nullptr;
    }
    return p;
  }
  void release(void* ptr) override {
    if (ptr == nullptr) return;
    if (device_) {
      ncclMemFree(ptr);
    } else {
      free(ptr);
    }
  }
  // Device memory is copied on the rank's stream, then waited for. A plain cudaMemcpy would not do: it runs on the
  // legacy stream, which does not order against the tools' non-blocking streams, and from pageable host memory it
  // returns once the data is staged, while the DMA into the buffer may still be in flight. A call issued after such
  // an upload could then have its output overwritten by the tail of the upload.
  bool upload(int local, void* dst, const void* src, size_t bytes) override {
    return copyOnStream(streams_[local], local, dst, src, bytes, /*wait=*/true);
  }
  bool download(int local, void* dst, const void* src, size_t bytes) override {
    return upload(local, dst, src, bytes);
  }

  bool registerBuffers(int local, void* send, void* recv, size_t bytes, int mode) override {
    ncclComm_t c = comms_[local];
    int rank = topo_.rankOf(local);
    for (void* buf : {send, recv}) {
      void* handle = nullptr;
      if (mode == 2) {
        ncclWindow_t win = nullptr;
        if (!check(ncclCommWindowRegister(c, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister",
                   rank))
          return false;
        handle = win;
      } else if (!check(ncclCommRegister(c, buf, bytes, &handle), "ncclCommRegister", rank)) {
        return false;
      }
      regs_[local].push_back(handle);
    }
    return true;
  }
  bool unregisterAll() override {
    bool ok = true;
    for (size_t i = 0; i < regs_.size(); i++) {
      for (void* h : regs_[i]) {
        ok &= opts_.localRegister == 2 ? check(ncclCommWindowDeregister(comms_[i], static_cast<ncclWindow_t>(h)),
                                               "ncclCommWindowDeregister", topo_.rankOf(i))
                                       : check(ncclCommDeregister(comms_[i], h), "ncclCommDeregister", topo_.rankOf(i));
      }
      regs_[i].clear();
    }
    return ok;
  }

  bool groupStart() override { return check(ncclGroupStart(), "ncclGroupStart", -1); }
  bool groupEnd() override { return check(ncclGroupEnd(), "ncclGroupEnd", -1); }

  bool run(int local, const CallArgs& c) override {
    ncclComm_t comm = comms_[local];
    cudaStream_t s = streams_[local];
    ncclRedOp_t op = static_cast<ncclRedOp_t>(c.op);
    bool premul = c.op == kOpMulSum;
    if (premul) {
      uint64_t scalar = 0;
      encodeScalar(premulScalar(c.rank), c.type, &scalar);
      if (!check(ncclRedOpCreatePreMulSum(&op, &scalar, c.type, ncclScalarHostImmediate, comm),
                 "ncclRedOpCreatePreMulSum", c.rank))
        return false;
    }
    bool ok = issue(comm, s, op, c);
    if (premul) ok &= check(ncclRedOpDestroy(op, comm), "ncclRedOpDestroy", c.rank);
    return ok;
  }

  bool sync(int local) override {
    // Host calls are complete when they return; a stream needs waiting for.
    if (!device_) return true;
    return cudaOk(cuda_.streamSynchronize(streams_[local]), "cudaStreamSynchronize", local);
  }

  bool graphsAvailable() const override { return device_ && cuda_.hasGraphs(); }
  bool beginCapture(int local) override {
    return cudaOk(cuda_.streamBeginCapture(streams_[local], kCudaStreamCaptureModeThreadLocal),
                  "cudaStreamBeginCapture", local);
  }
  bool endCapture(int local) override {
    return cudaOk(cuda_.streamEndCapture(streams_[local], &graphs_[local].graph), "cudaStreamEndCapture", local);
  }
  bool instantiateGraph(int local) override {
    Graph& g = graphs_[local];
    return cudaOk(cuda_.graphInstantiateWithFlags(&g.exec, g.graph, 0), "cudaGraphInstantiateWithFlags", local);
  }
  bool launchGraph(int local) override {
    return cudaOk(cuda_.graphLaunch(graphs_[local].exec, streams_[local]), "cudaGraphLaunch", local);
  }
  void dropGraph(int local) override {
    Graph& g = graphs_[local];
    if (g.exec != nullptr) cuda_.graphExecDestroy(g.exec);
    if (g.graph != nullptr) cuda_.graphDestroy(g.graph);
    g = Graph{};
  }

  std::string lastError() const override {
    const char* e = ncclGetLastError(nullptr);
    return e ? e : "";
  }

 private:
  // As nccl-tests: this process's ranks take consecutive GPUs from NCCL_TESTS_DEVICE (else from its place among the
  // host's processes). Where ranks outnumber the visible GPUs they wrap around and share them (placementNote).
  int gpuOf(int local, const Topology& topo) const {
    const char* first = perfEnv("NCCL_TESTS_DEVICE");
    int n = std::max(1, cuda_.deviceCount());
    return ((first ? std::atoi(first) : topo.localRank * topo.localRanks()) + local) % n;
  }

  bool check(ncclResult_t r, const char* what, int rank) const {
    if (r == ncclSuccess) return true;
    const char* last = ncclGetLastError(nullptr);
    std::fprintf(stderr, "%s: Test NCCL failure: rank %d: %s: '%s / %s'\n", host_.c_str(), rank, what,
                 ncclGetErrorString(r), last ? last : "");
    return false;
  }
  // A copy in stream order on `s` (`who` names the rank in messages): a plain memmove for host memory. With `wait`,
  // it has landed when this returns.
  bool copyOnStream(cudaStream_t s, int who, void* dst, const void* src, size_t bytes, bool wait) {
    if (!device_) {
      std::memmove(dst, src, bytes);
      return true;
    }
    return cudaOk(cuda_.memcpyAsync(dst, src, bytes, kCudaMemcpyDefault, s), "cudaMemcpyAsync", who) &&
           (!wait || cudaOk(cuda_.streamSynchronize(s), "cudaStreamSynchronize (copy)", who));
  }

  bool cudaOk(int err, const char* what, int local) const {
    if (err == 0) return true;
    std::fprintf(stderr, "%s: Test CUDA failure: local rank %d: %s: '%s'\n", host_.c_str(), local, what,
                 cuda_.errorText(err).c_str());
    return false;
  }

  // The NCCL calls of one tool, as nccl-tests' <collective>.cu makes them.
  bool issue(ncclComm_t comm, cudaStream_t s, ncclRedOp_t op, const CallArgs& c) {
    const void* sb = c.send;
    void* rb = c.recv;
    size_t n = c.count;
    switch (c.coll) {
      case PerfColl::kAllReduce:
        return check(ncclAllReduce(sb, rb, n, c.type, op, comm, s), "ncclAllReduce", c.rank);
      case PerfColl::kAllGather:
        return check(ncclAllGather(sb, rb, n, c.type, comm, s), "ncclAllGather", c.rank);
      case PerfColl::kReduceScatter:
        return check(ncclReduceScatter(sb, rb, n, c.type, op, comm, s), "ncclReduceScatter", c.rank);
      case PerfColl::kBroadcast:
        return check(ncclBroadcast(sb, rb, n, c.type, c.root, comm, s), "ncclBroadcast", c.rank);
      case PerfColl::kReduce:
        return check(ncclReduce(sb, rb, n, c.type, op, c.root, comm, s), "ncclReduce", c.rank);
      case PerfColl::kAllToAll:
        return check(ncclAlltoAll(sb, rb, n, c.type, comm, s), "ncclAlltoAll", c.rank);
      case PerfColl::kGather:
        return n == 0 || check(ncclGather(sb, rb, n, c.type, c.root, comm, s), "ncclGather", c.rank);
      case PerfColl::kScatter:
        return n == 0 || check(ncclScatter(sb, rb, n, c.type, c.root, comm, s), "ncclScatter", c.rank);
      case PerfColl::kSendRecv: {
        int to = (c.rank + 1) % c.nranks, from = (c.rank - 1 + c.nranks) % c.nranks;
        return check(ncclGroupStart(), "ncclGroupStart", c.rank) &&
               check(ncclSend(sb, n, c.type, to, comm, s), "ncclSend", c.rank) &&
               check(ncclRecv(rb, n, c.type, from, comm, s), "ncclRecv", c.rank) &&
               check(ncclGroupEnd(), "ncclGroupEnd (sendrecv)", c.rank);
      }
      case PerfColl::kHyperCube: {
        // All-gather by recursive doubling: at step `mask`, swap everything gathered so far with rank ^ mask.
        char* r = static_cast<char*>(rb);
        size_t block = n * wordSize(c.type);
        // The own block goes in on the call's stream: ordered before the sends that read it, and capturable.
        char* own = r + c.rank * block;
        if (own != sb && !copyOnStream(s, c.rank, own, sb, block, /*wait=*/false)) return false;
        for (int mask = 1; mask < c.nranks; mask <<= 1) {
          int peer = c.rank ^ mask;
          int have = c.rank & ~(mask - 1), get = have ^ mask;
          if (!check(ncclGroupStart(), "ncclGroupStart", c.rank) ||
              !check(ncclSend(r + have * block, n * mask, c.type, peer, comm, s), "ncclSend", c.rank) ||
              !check(ncclRecv(r + get * block, n * mask, c.type, peer, comm, s), "ncclRecv", c.rank) ||
              !check(ncclGroupEnd(), "ncclGroupEnd (hypercube)", c.rank))
            return false;
        }
        return true;
      }
    }
    return false;
  }

  mutable CudaRuntime cuda_;
  std::string host_;
  bool device_ = false;
  Topology topo_;
  Options opts_;
  ncclUniqueId id_{};
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::vector<void*>> regs_;
  // -G: a local rank's captured graph (cudaGraph_t) and its instance (cudaGraphExec_t).
  struct Graph {
    void* graph = nullptr;
    void* exec = nullptr;
  };
  std::vector<Graph> graphs_;
};

}  // namespace

int perfMain(int argc, char** argv, PerfColl coll) {
  NcclBackend backend;
  return runDriver(argc, argv, collSpec(coll), backend);
}

}  // namespace perf
}  // namespace chorus
