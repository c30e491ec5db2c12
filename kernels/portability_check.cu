// Compile-only proof that kernels/arch.h, dtypes.h and reduce.h are single-source: the same headers the host path
// builds with g++ instantiate device kernels under nvcc (and, by the same #if branches, hipcc). Not built by
// default; check by hand or in CI with
//   nvcc -std=c++17 -arch=sm_90 -x cu -I. -Iinclude -c kernels/portability_check.cu -o /dev/null
#include "arch.h"
#include "dtypes.h"
#include "reduce.h"

namespace chorus {

/// Grid-stride elementwise reduction: the shape of the executor's inner loop, minus the FIFO.
template <bool kPre, bool kPost, typename Fn>
__global__ void reduceKernel(RedOp op, typename Fn::Elt* dst, const typename Fn::Elt* recv,
                             const typename Fn::Elt* local, size_t n) {
  const Fn fn(op);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = applyReduce<kPre, kPost>(fn, recv[i], local[i]);
  }
}

/// One producer step of a connection FIFO: publish data, then the counter; exercises arch.h's device side.
__global__ void fifoStepKernel(float* slot, uint64_t* tail, const uint64_t* head, uint64_t step) {
  while (loadAcquire(head) + 1 < step) cpuRelax();
  slot[threadIdx.x] = Half::fromFloat(float(threadIdx.x)).toFloat();
  memoryFence();
  if (threadIdx.x == 0) storeRelease(tail, step + loadRelaxed(head) * 0);
  if (threadIdx.x == kWarpSize) storeRelaxed(tail + 1, step);
}

// The two instantiations the brief asks for (float sum, half sum), plus the ones most likely to break on a
// device compiler: fp8 through CUDA's conversion intrinsics, premulsum's __fmul_rn, integer average.
template __global__ void reduceKernel<false, false, FuncSum<float>>(RedOp, float*, const float*, const float*, size_t);
template __global__ void reduceKernel<false, false, FuncSum<Half>>(RedOp, Half*, const Half*, const Half*, size_t);
template __global__ void reduceKernel<true, false, FuncPreMulSum<float>>(RedOp, float*, const float*, const float*,
                                                                         size_t);
template __global__ void reduceKernel<true, false, FuncPreMulSum<Fp8E4M3>>(RedOp, Fp8E4M3*, const Fp8E4M3*,
                                                                           const Fp8E4M3*, size_t);
template __global__ void reduceKernel<false, false, FuncMax<Fp8E5M2>>(RedOp, Fp8E5M2*, const Fp8E5M2*, const Fp8E5M2*,
                                                                      size_t);
template __global__ void reduceKernel<false, false, FuncMin<BFloat16>>(RedOp, BFloat16*, const BFloat16*,
                                                                       const BFloat16*, size_t);
template __global__ void reduceKernel<false, true, FuncSumPostDiv<int8_t>>(RedOp, int8_t*, const int8_t*, const int8_t*,
                                                                           size_t);

/// Host-side launch of the float sum, to prove the host pass of nvcc reads the same headers.
void launchFloatSum(float* dst, const float* recv, const float* local, size_t n, cudaStream_t stream) {
  const RedOp op = makeRedOp(0, int(DataType::kFloat32), 1);
  reduceKernel<false, false, FuncSum<float>><<<64, 256, 0, stream>>>(op, dst, recv, local, n);
}

}  // namespace chorus
