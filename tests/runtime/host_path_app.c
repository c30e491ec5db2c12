/* A host-buffer allreduce over 2 ranks of one process: on a machine without a GPU, a GPU build must serve it on
 * the host path (tests/runtime/host_path_test.sh checks the NCCL_DEBUG=INFO log). Exits 0 when the sums are right. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  ncclComm_t comms[2];
  float a[8], b[8];
  for (int i = 0; i < 8; i++) {
    a[i] = (float)i;
    b[i] = (float)(100 * i);
  }
  if (ncclCommInitAll(comms, 2, NULL) != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  ncclGroupStart();
  ncclAllReduce(a, a, 8, ncclFloat, ncclSum, comms[0], NULL);
  ncclAllReduce(b, b, 8, ncclFloat, ncclSum, comms[1], NULL);
  if (ncclGroupEnd() != ncclSuccess) {
    fprintf(stderr, "allreduce: %s\n", ncclGetLastError(comms[0]));
    return 2;
  }
  for (int i = 0; i < 8; i++) {
    if (a[i] != 101.0f * i || b[i] != a[i]) {
      fprintf(stderr, "element %d: %g %g, expected %g\n", i, a[i], b[i], 101.0f * i);
      return 3;
    }
  }
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
  printf("host-path allreduce OK\n");
  return 0;
}
