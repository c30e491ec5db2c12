// The collective kernel: one block per channel, every thread of the block running the executor over the device
// platform. Compiled by nvcc as CUDA and by hipcc as HIP from this one file (CMake sets the language); the body is
// in kernels/device_kernel.h, which g++ also compiles for the host emulation used by the CPU tests.
#include "kernels/device_kernel.h"

namespace chorus {

// __grid_constant__ lets every thread read the argument in place (CUDA 11.7+, sm_70+); without it each thread
// would copy the 3 KiB argument to its own stack.
#if CHORUS_CUDA
#define CHORUS_GRID_CONSTANT __grid_constant__
#else
#define CHORUS_GRID_CONSTANT
#endif

// Two blocks of the collective kernel fit one SM (registers capped at 128 a thread on CUDA; ptxas gives it 128
// without spills for sm_90): ranks that share a GPU need all their blocks resident at once (residentBlockCap), and
// one block an SM halves what they may launch. On an H200, a variant of the kernel that took 255 registers ran a
// 4-process allreduce at 162 GB/s busbw against 216 (docs/perf/h100.md, 2026-11-27). HIP's second bound means
// waves per execution unit; it keeps the one.
#if CHORUS_CUDA
#define CHORUS_COLL_BOUNDS __launch_bounds__(kDevThreads, 2)
#else
#define CHORUS_COLL_BOUNDS __launch_bounds__(kDevThreads)
#endif

__global__ void CHORUS_COLL_BOUNDS collKernel(CHORUS_GRID_CONSTANT const DevWork work) {
  // Raw storage: DevShared's members have initialisers, which __shared__ variables may not run.
  alignas(DevShared) __shared__ unsigned char sharedRaw[sizeof(DevShared)];
  DevShared& shared = *reinterpret_cast<DevShared*>(sharedRaw);
  runDevBlock(work, static_cast<int>(blockIdx.x), shared, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

// A stream-ordered device copy for small and mid sizes: its launch costs less host time than cudaMemcpyAsync's.
__global__ void __launch_bounds__(kDevThreads) copyKernel(char* dst, const char* src, size_t bytes) {
  blockCopyBytes(dst, src, bytes, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x),
                 static_cast<int>(gridDim.x * blockDim.x));
}

int launchCopyKernel(void* dst, const void* src, size_t bytes, int blocks, int threads, void* stream) {
#if CHORUS_HIP
  hipLaunchKernelGGL(copyKernel, dim3(blocks), dim3(threads), 0, static_cast<hipStream_t>(stream),
                     static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  return static_cast<int>(hipGetLastError());
#else
  // clang-format off
  copyKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<char*>(dst),
                                                                       static_cast<const char*>(src), bytes);
  // clang-format on
  return static_cast<int>(cudaGetLastError());
#endif
}

int collKernelBlocksPerSM(int threads) {
  int n = 0;
#if CHORUS_HIP
  if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, collKernel, threads, 0) != hipSuccess) {
    (void)hipGetLastError();
    return 0;
  }
#else
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, collKernel, threads, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
#endif
  return n;
}

int launchCollKernel(const DevWork& work, int threads, void* stream) {
#if CHORUS_HIP
  hipLaunchKernelGGL(collKernel, dim3(work.nChannels), dim3(threads), 0, static_cast<hipStream_t>(stream), work);
  return static_cast<int>(hipGetLastError());
#else
  // clang-format off
  collKernel<<<work.nChannels, threads, 0, static_cast<cudaStream_t>(stream)>>>(work);
  // clang-format on
  return static_cast<int>(cudaGetLastError());
#endif
}

}  // namespace chorus
