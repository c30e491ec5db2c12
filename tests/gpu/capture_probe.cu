// Which CUDA runtime calls, made while a stream is being captured, fail or invalidate the capture: each is tried in
// thread-local and global mode, with and without the calling thread in relaxed mode (chorus's SetupScope), then a
// kernel is launched and the capture ended. Not part of the test suite: scripts/gpu_session.sh capturediag builds
// and runs it on a GPU machine (nvcc -gencode=arch=compute_90,code=sm_90 -o capture_probe capture_probe.cu).
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
struct Big {
  char b[32000];
};
__global__ void small(int* p) {
  if (p) p[0] = 1;
}
__global__ void big(Big w) {
  if (w.b[0] == 7) ((int*)nullptr)[0] = 0;
}
static void probe(const char* name, cudaStreamCaptureMode mode, bool relaxedScope,
                  const std::function<cudaError_t(cudaStream_t)>& f) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaGetLastError();
  cudaStreamBeginCapture(s, mode);
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  if (relaxedScope) cudaThreadExchangeStreamCaptureMode(&m);
  cudaError_t e = f(s);
  if (relaxedScope) cudaThreadExchangeStreamCaptureMode(&m);
  small<<<1, 1, 0, s>>>(nullptr);
  cudaError_t l = cudaGetLastError();
  cudaGraph_t g = nullptr;
  cudaError_t end = cudaStreamEndCapture(s, &g);
  std::printf("%-44s mode=%d relaxedScope=%d call=%s launch-after=%s end=%s\n", name, (int)mode, relaxedScope,
              cudaGetErrorName(e), cudaGetErrorName(l), cudaGetErrorName(end));
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  cudaStreamDestroy(s);
}
int main() {
  int* d;
  cudaMalloc(&d, 1 << 20);
  small<<<1, 1>>>(d);
  cudaDeviceSynchronize();
  for (auto mode : {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal})
    for (bool r : {false, true}) {
      probe("nothing", mode, r, [](cudaStream_t) { return cudaSuccess; });
      probe("cudaStreamGetId", mode, r, [](cudaStream_t s) {
        unsigned long long id;
        return cudaStreamGetId(s, &id);
      });
      probe("cudaStreamGetCaptureInfo", mode, r, [](cudaStream_t s) {
        cudaStreamCaptureStatus st;
        unsigned long long id;
        return cudaStreamGetCaptureInfo(s, &st, &id);
      });
      probe("cudaPointerGetAttributes(dev)", mode, r, [d](cudaStream_t) {
        cudaPointerAttributes a;
        return cudaPointerGetAttributes(&a, d);
      });
      probe("cudaMalloc", mode, r, [](cudaStream_t) {
        void* p;
        return cudaMalloc(&p, 4096);
      });
      probe("big-param kernel (32000 B)", mode, r, [](cudaStream_t s) {
        Big w{};
        big<<<1, 32, 0, s>>>(w);
        return cudaGetLastError();
      });
      probe("cudaMemcpyAsync d2d", mode, r,
            [d](cudaStream_t s) { return cudaMemcpyAsync(d + 1024, d, 4096, cudaMemcpyDefault, s); });
    }
  return 0;
}
