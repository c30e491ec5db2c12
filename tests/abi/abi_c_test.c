/* Built against NVIDIA's own nccl.h (C, not C++) and linked with chorus's libnccl.so.2:
 * two host ranks in this process all-reduce host buffers. Exit 0 on success. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

int main(void) {
  int version = 0;
  CHECK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) {
    fprintf(stderr, "version %d != header %d\n", version, NCCL_VERSION_CODE);
    return 1;
  }
  enum { kRanks = 2, kCount = 1000 };
  ncclComm_t comms[kRanks];
  CHECK(ncclCommInitAll(comms, kRanks, NULL));
  float* buf[kRanks];
  for (int r = 0; r < kRanks; r++) {
    buf[r] = (float*)malloc(kCount * sizeof(float));
    for (int i = 0; i < kCount; i++) buf[r][i] = (float)(r + 1) * i;
  }
  CHECK(ncclGroupStart());
  for (int r = 0; r < kRanks; r++) CHECK(ncclAllReduce(buf[r], buf[r], kCount, ncclFloat, ncclSum, comms[r], NULL));
  CHECK(ncclGroupEnd());
  for (int r = 0; r < kRanks; r++)
    for (int i = 0; i < kCount; i++)
      if (buf[r][i] != 3.0f * i) {
        fprintf(stderr, "rank %d element %d: %g != %g\n", r, i, buf[r][i], 3.0f * i);
        return 1;
      }
  int count = 0, rank = -1;
  CHECK(ncclCommCount(comms[1], &count));
  CHECK(ncclCommUserRank(comms[1], &rank));
  if (count != kRanks || rank != 1) return 1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  (void)config;
  for (int r = 0; r < kRanks; r++) {
    CHECK(ncclCommDestroy(comms[r]));
    free(buf[r]);
  }
  printf("abi_c_test: OK (2 host ranks, allreduce of %d floats, library version %d)\n", kCount, version);
  return 0;
}
