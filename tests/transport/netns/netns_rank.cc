// One rank of the multi-host test (tests/transport/netns_test.sh runs two of them in different
// network namespaces): joins through NCCL_COMM_ID with the public API only, runs a 1M-float
// allreduce, checks every element against its closed form and prints "OK".
//
// Usage: netns_rank <rank> <nranks>   (NCCL_COMM_ID=<rank 0's address>:<port> must be set)

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "transport/thread_names.h"

namespace {

int fail(int rank, const char* what, ncclResult_t res, ncclComm_t comm) {
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, ncclGetErrorString(res), ncclGetLastError(comm));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <rank> <nranks>  (with NCCL_COMM_ID=host:port)\n", argv[0]);
    return 2;
  }
  const int rank = atoi(argv[1]), nranks = atoi(argv[2]);
  // With NCCL_COMM_ID set every rank derives the same id; rank 0 hosts the root at that address.
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) return fail(rank, "ncclGetUniqueId", res, nullptr);
  ncclComm_t comm;
  res = ncclCommInitRank(&comm, nranks, id, rank);
  if (res != ncclSuccess) return fail(rank, "ncclCommInitRank", res, nullptr);

  const size_t count = 1 << 20;
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < count; i++) in[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 101));
  res = ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
  if (res != ncclSuccess) return fail(rank, "ncclAllReduce", res, comm);
  int bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = static_cast<float>(nranks * (nranks + 1) / 2 + nranks * static_cast<int>(i % 101));
    if (out[i] != want && bad++ < 5) fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, i, out[i], want);
  }
  // The ranks sit in different namespaces (different hosts to chorus): only sockets reach across.
  int proxies = chorus_test::countThreadsNamed("chorus-sock");
  ncclCommDestroy(comm);
  if (bad != 0) {
    fprintf(stderr, "rank %d: %d wrong elements\n", rank, bad);
    return 1;
  }
  if (proxies < 1) {
    fprintf(stderr, "rank %d: the allreduce did not use the socket transport\n", rank);
    return 1;
  }
  printf("rank %d: OK\n", rank);
  return 0;
}
