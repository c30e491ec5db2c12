// GPU tests (label gpu; CUDA builds; run where a GPU is): the device path on real device memory, several ranks
// sharing one GPU (thread ranks with their own streams, and forked processes through CUDA IPC), network staging
// between processes that name different hosts, graph capture,
// and an in-kernel timeout reported through ncclCommGetAsyncError. Every check compares with closed-form values
// copied back to the host.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << cudaGetErrorString(call)

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// haveGpu() asked in a child process: ranks forked later must not inherit an initialised CUDA context.
bool haveGpuInChild() {
  pid_t pid = fork();
  if (pid == 0) _exit(haveGpu() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Runs ranks without initialising CUDA in this process: thread ranks run in a forked child, so that the process
// variants forked later (by this test or the next one, when test_gpu runs every test in one process) start clean.
void runGpuRanks(int n, Driver driver, const std::function<void(RankCtx&)>& body) {
  if (driver == Driver::kProcesses) {
    runRanks(n, driver, body);
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    printStackOnCrash();
    runRanks(n, Driver::kThreads, body);
    fflush(stdout);
    fflush(stderr);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "thread ranks " << describeStatus(status) << " (their failures are printed above)";
}

// Copies host memory into device memory on `stream` and waits for it, so a call issued on that stream afterwards sees
// the data.
void uploadOn(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
  EXPECT_EQ(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

// One rank's device buffers and stream.
struct Dev {
  float* send = nullptr;
  float* recv = nullptr;
  cudaStream_t stream = nullptr;
  size_t count = 0;
  explicit Dev(size_t n) : count(n) {
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&send, n * sizeof(float) + 16), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&recv, n * sizeof(float) + 16), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~Dev() {
    cudaStreamSynchronize(stream);
    cudaFree(send);
    cudaFree(recv);
    cudaStreamDestroy(stream);
  }
  // On the rank's stream and waited for: a cudaMemcpy from pageable memory may return before its DMA lands, and it
  // runs on the legacy stream, which does not order against this non-blocking one.
  void upload(const std::vector<float>& h) { uploadOn(stream, send, h.data(), h.size() * 4); }
  std::vector<float> download(const float* p, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

void allReduceOnGpu(RankCtx& c, size_t count) {
  Dev d(count);
  std::vector<float> h(count);
  for (size_t i = 0; i < count; i++) h[i] = float((c.rank + 1) * ((i % 13) + 1));
  d.upload(h);
  ASSERT_EQ(ncclAllReduce(d.send, d.recv, count, ncclFloat32, ncclSum, c.comm, d.stream), ncclSuccess);
  std::vector<float> out = d.download(d.recv, count);
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(c.comm, &async), ncclSuccess);
  ASSERT_EQ(async, ncclSuccess) << ncclGetLastError(c.comm);
  float ranks = float(c.nranks * (c.nranks + 1) / 2);
  for (size_t i = 0; i < count; i++) ASSERT_EQ(out[i], ranks * float((i % 13) + 1)) << "i=" << i;
}

class Gpu : public ::testing::TestWithParam<Driver> {
 protected:
  void SetUp() override {
    if (!haveGpuInChild()) GTEST_SKIP() << "no GPU visible";
  }
};

TEST_P(Gpu, AllReduceSeveralRanksOneGpu) {
  for (int n : {2, 4}) {
    runGpuRanks(n, GetParam(), [](RankCtx& c) {
      for (size_t count : {size_t(1), size_t(1031), size_t(1) << 22}) allReduceOnGpu(c, count);
    });
  }
}

TEST_P(Gpu, EveryCollectiveInt32) {
  runGpuRanks(4, GetParam(), [](RankCtx& c) {
    const int n = c.nranks, r = c.rank;
    const size_t N = 100000;
    int32_t *in = nullptr, *out = nullptr;
    cudaStream_t s;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaMalloc(&in, N * n * 4));
    CUDA_OK(cudaMalloc(&out, N * n * 4));
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<int32_t> h(N * n), o(N * n);
    auto v = [](int rank, size_t i) { return int32_t(rank * 1000000 + int32_t(i)); };
    for (size_t i = 0; i < N * n; i++) h[i] = v(r, i);
    uploadOn(s, in, h.data(), N * n * 4);
    ASSERT_EQ(ncclAllGather(in, out, N, ncclInt32, c.comm, s), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(o.data(), out, N * n * 4, cudaMemcpyDeviceToHost));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(o[q * N + i], v(q, i));
    ASSERT_EQ(ncclReduceScatter(in, out, N, ncclInt32, ncclSum, c.comm, s), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(o.data(), out, N * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += v(q, r * N + i);
      ASSERT_EQ(o[i], want);
    }
    ASSERT_EQ(ncclAlltoAll(in, out, N, ncclInt32, c.comm, s), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(o.data(), out, N * n * 4, cudaMemcpyDeviceToHost));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < N; i++) ASSERT_EQ(o[q * N + i], v(q, r * N + i));
    ASSERT_EQ(ncclBroadcast(in, out, N, ncclInt32, 2, c.comm, s), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(o.data(), out, N * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++) ASSERT_EQ(o[i], v(2, i));
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(s);
  });
}

TEST_P(Gpu, SendRecvRing) {
  runGpuRanks(3, GetParam(), [](RankCtx& c) {
    const size_t N = 3 << 20;
    Dev d(N);
    std::vector<float> h(N);
    for (size_t i = 0; i < N; i++) h[i] = float(c.rank * 7 + int(i % 1000));
    d.upload(h);
    int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(d.send, N, ncclFloat32, next, c.comm, d.stream), ncclSuccess);
    ASSERT_EQ(ncclRecv(d.recv, N, ncclFloat32, prev, c.comm, d.stream), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    std::vector<float> out = d.download(d.recv, N);
    for (size_t i = 0; i < N; i++) ASSERT_EQ(out[i], float(prev * 7 + int(i % 1000)));
  });
}

// ncclScalarDevice: the factor lives in GPU memory and the kernel reads it when it runs, so a value written on the
// stream after the enqueue of the first call but before the second is what the second uses.
TEST_P(Gpu, PreMulSumWithDeviceScalar) {
  runGpuRanks(2, GetParam(), [](RankCtx& c) {
    const size_t N = 1 << 20;
    Dev d(N);
    d.upload(std::vector<float>(N, float(c.rank + 1)));
    float* factor = nullptr;
    CUDA_OK(cudaMalloc(&factor, sizeof(float)));
    float quarter = 0.25f, two = 2.0f;
    uploadOn(d.stream, factor, &quarter, sizeof(float));
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, factor, ncclFloat32, ncclScalarDevice, c.comm), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(d.send, d.recv, N, ncclFloat32, op, c.comm, d.stream), ncclSuccess);
    CUDA_OK(cudaMemcpyAsync(factor, &two, sizeof(float), cudaMemcpyHostToDevice, d.stream));
    ASSERT_EQ(ncclAllReduce(d.recv, d.recv, N, ncclFloat32, op, c.comm, d.stream), ncclSuccess);
    std::vector<float> out = d.download(d.recv, N);
    ASSERT_EQ(ncclRedOpDestroy(op, c.comm), ncclSuccess);
    cudaFree(factor);
    // First: 0.25 * (1 + 2) = 0.75 on both ranks; second: 2 * 0.75 * 2 ranks = 3.
    for (size_t i = 0; i < N; i += 997) ASSERT_EQ(out[i], 3.0f) << i;
  });
}

// ncclMemAlloc gives device memory of the current GPU (nccl-tests >= 2.19 allocates every buffer with it and
// cudaMemsets it), and ncclMemFree frees it.
TEST_P(Gpu, MemAllocIsDeviceMemory) {
  runGpuRanks(1, GetParam(), [](RankCtx&) {
    void* p = nullptr;
    ASSERT_EQ(ncclMemAlloc(&p, 1 << 20), ncclSuccess) << ncclGetLastError(nullptr);
    cudaPointerAttributes a{};
    CUDA_OK(cudaPointerGetAttributes(&a, p));
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    CUDA_OK(cudaMemset(p, 0, 1 << 20));
    EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  });
}

// One communicator on two streams (FSDP2): all-gathers on one, reduce-scatters on the other, rank 0's first stream
// held up by host work. The operations must run in call order on every rank.
TEST_P(Gpu, CallOrderAcrossTwoStreams) {
  runGpuRanks(2, GetParam(), [](RankCtx& c) {
    const size_t N = 1 << 18;
    Dev ag(N * c.nranks), rs(N * c.nranks);
    cudaStream_t b;
    CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    std::vector<float> h(N * c.nranks);
    for (size_t i = 0; i < h.size(); i++) h[i] = float(c.rank + 1);
    ag.upload(h);
    rs.upload(h);
    for (int k = 0; k < 4; k++) {
      if (c.rank == 0) {
        CUDA_OK(cudaLaunchHostFunc(
            ag.stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, nullptr));
      }
      ASSERT_EQ(ncclAllGather(ag.send, ag.recv, N, ncclFloat32, c.comm, ag.stream), ncclSuccess);
      ASSERT_EQ(ncclReduceScatter(rs.send, rs.recv, N, ncclFloat32, ncclSum, c.comm, b), ncclSuccess);
    }
    CUDA_OK(cudaStreamSynchronize(b));
    std::vector<float> agOut = ag.download(ag.recv, N * c.nranks);
    std::vector<float> rsOut(N);
    CUDA_OK(cudaMemcpy(rsOut.data(), rs.recv, N * 4, cudaMemcpyDeviceToHost));
    ncclResult_t async = ncclSuccess;
    ASSERT_EQ(ncclCommGetAsyncError(c.comm, &async), ncclSuccess);
    ASSERT_EQ(async, ncclSuccess) << ncclGetLastError(c.comm);
    for (int q = 0; q < c.nranks; q++) ASSERT_EQ(agOut[q * N + 17], float(q + 1));
    for (size_t i = 0; i < N; i += 1001) ASSERT_EQ(rsOut[i], float(c.nranks * (c.nranks + 1) / 2)) << i;
    cudaStreamDestroy(b);
  });
}

// One rank: the collective is a device-to-device copy (and nothing in place).
TEST_P(Gpu, OneRankIsACopy) {
  runGpuRanks(1, GetParam(), [](RankCtx& c) {
    const size_t N = 1 << 20;
    Dev d(N);
    std::vector<float> h(N);
    for (size_t i = 0; i < N; i++) h[i] = float(i % 4093);
    d.upload(h);
    ASSERT_EQ(ncclAllReduce(d.send, d.recv, N, ncclFloat32, ncclSum, c.comm, d.stream), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(d.recv, d.recv, N, ncclFloat32, ncclSum, c.comm, d.stream), ncclSuccess);
    std::vector<float> out = d.download(d.recv, N);
    for (size_t i = 0; i < N; i += 7) ASSERT_EQ(out[i], float(i % 4093)) << i;
  });
}

// Captured once, replayed three times: an in-place sum of ones over n ranks gives n^3. In thread-local and in
// global mode (PyTorch's), the communicator's first call included.
TEST_P(Gpu, GraphCaptureReplays) {
  for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal}) {
    runGpuRanks(2, GetParam(), [mode](RankCtx& c) {
      // Thread ranks share a process, where a global-mode capture forbids the other threads' cudaMalloc and
      // cudaMemcpy (they would invalidate it): every rank sets up before any capture begins, and every capture ends
      // before any rank copies its result back. A host-buffer allreduce is the barrier.
      auto barrier = [&c] {
        int x = 1;
        ASSERT_EQ(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, c.comm, nullptr), ncclSuccess);
      };
      const size_t N = 1 << 16;
      Dev d(N);
      d.upload(std::vector<float>(N, 1.0f));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      barrier();
      CUDA_OK(cudaStreamBeginCapture(d.stream, mode));
      ASSERT_EQ(ncclAllReduce(d.send, d.send, N, ncclFloat32, ncclSum, c.comm, d.stream), ncclSuccess);
      CUDA_OK(cudaStreamEndCapture(d.stream, &graph));
      barrier();
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < 3; k++) CUDA_OK(cudaGraphLaunch(exec, d.stream));
      std::vector<float> out = d.download(d.send, N);
      float want = float(c.nranks * c.nranks * c.nranks);
      for (size_t i = 0; i < N; i++) ASSERT_EQ(out[i], want) << "i=" << i;
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Drivers, Gpu, ::testing::Values(Driver::kThreads, Driver::kProcesses),
                         [](const auto& info) { return std::string(driverName(info.param)); });

// Two processes that name different hosts (NCCL_HOSTID): their device buffers go through network staging, the
// net transport's FIFOs pinned for the GPU (cudaHostRegister), instead of IPC.
TEST(GpuStaging, ProcessesOnTwoHostIdsAllReduce) {
  if (!haveGpuInChild()) GTEST_SKIP() << "no GPU visible";
  auto status = forkRanks(2, [](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", rank == 0 ? "gpu-host-a" : "gpu-host-b", 1);
    ncclComm_t comm = nullptr;
    if (cudaSetDevice(0) != cudaSuccess || ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    RankCtx c{rank, 2, comm};
    for (size_t count : {size_t(1), size_t(1031), size_t(1) << 20}) allReduceOnGpu(c, count);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  for (int r = 0; r < 2; r++) EXPECT_EQ(status[r], 0) << "rank " << r << " " << describeStatus(status[r]);
}

// A rank that stops calling: the other's kernel gives up after CHORUS_TIMEOUT_S and says why.
TEST(GpuFaults, KernelTimeoutIsReported) {
  if (!haveGpuInChild()) GTEST_SKIP() << "no GPU visible";
  setenv("CHORUS_TIMEOUT_S", "3", 1);
  auto* done = static_cast<std::atomic<bool>*>(
      mmap(nullptr, sizeof(std::atomic<bool>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (done) std::atomic<bool>(false);
  // Processes: thread ranks on one GPU would not launch a kernel that waits for a call that never comes.
  runGpuRanks(2, Driver::kProcesses, [&](RankCtx& c) {
    Dev d(1024);
    ASSERT_EQ(ncclAllReduce(d.send, d.recv, 1024, ncclFloat32, ncclSum, c.comm, d.stream), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
    if (c.rank == 1) {
      while (!done->load()) usleep(1000);
      return;
    }
    ASSERT_EQ(ncclAllReduce(d.send, d.recv, 1024, ncclFloat32, ncclSum, c.comm, d.stream), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);  // the kernel returns: no hang
    ncclResult_t async = ncclSuccess;
    ASSERT_EQ(ncclCommGetAsyncError(c.comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclRemoteError);
    EXPECT_NE(std::string(ncclGetLastError(c.comm)).find("rank 1"), std::string::npos) << ncclGetLastError(c.comm);
    done->store(true);
  });
  munmap(done, sizeof(std::atomic<bool>));
  unsetenv("CHORUS_TIMEOUT_S");
}

}  // namespace
}  // namespace chorus_test
