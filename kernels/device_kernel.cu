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

__global__ void __launch_bounds__(kDevThreads) collKernel(CHORUS_GRID_CONSTANT const DevWork work) {
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
