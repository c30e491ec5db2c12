// A HIP program as PyTorch's ROCm build writes one: includes <rccl/rccl.h>-style rccl.h with the HIP headers,
// passes hipStream_t, and links librccl.so.1. Built by HIP builds only; runs without a GPU (host buffers).
#include <rccl.h>

#include <cstdio>
#include <cstring>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  ncclComm_t comm = nullptr;
  if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) {
    std::printf("ncclCommInitAll: %s\n", ncclGetLastError(nullptr));
    return 2;
  }
  hipStream_t stream = nullptr;
  float send[3] = {1, 2, 3}, recv[3] = {0, 0, 0};
  size_t counts[1] = {3}, displs[1] = {0};
  if (ncclAllToAllv(send, counts, displs, recv, counts, displs, ncclFloat, comm, stream) != ncclSuccess) {
    std::printf("ncclAllToAllv: %s\n", ncclGetLastError(comm));
    return 3;
  }
  if (std::memcmp(send, recv, sizeof(send)) != 0) return 4;
  if (ncclAllReduce(send, recv, 3, ncclFloat, ncclSum, comm, stream) != ncclSuccess) return 5;
  ncclCommDestroy(comm);
  std::printf("HIP program on librccl.so.1: OK (RCCL_ALLTOALLV=%d)\n", RCCL_ALLTOALLV);
  return 0;
}
