// One rank of the multi-host test (tests/transport/netns_test.sh runs two of them in different
// network namespaces): joins through NCCL_COMM_ID with the public API only, runs a 1M-float
// allreduce, checks every element against its closed form and prints "OK".
//
// Usage: netns_rank <rank> <nranks>   (NCCL_COMM_ID=<rank 0's address>:<port> must be set)
//        netns_rank <rank> 2 --peer-gone <file>
//   Rank 1 exits right after init; rank 0 waits until <file> exists (the script makes it once rank 1's process
//   is gone), then its allreduce must fail with ncclRemoteError naming rank 1, well before CHORUS_TIMEOUT_S:
//   across hosts no pid can be checked, so chorus finds the rank gone through its ports.

#include <unistd.h>

#include <chrono>
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

// The --peer-gone scenario (see the top of the file).
int peerGone(int rank, ncclComm_t comm, const char* goFile) {
  if (rank != 0) _exit(0);  // as a crash right after init: nothing is closed
  while (access(goFile, F_OK) != 0) usleep(2000);
  std::vector<float> buf(4099, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text = ncclGetLastError(comm);
  fprintf(stderr, "rank 0: allreduce with rank 1 gone returned %s after %.3f s: %s\n", ncclGetErrorString(res), took,
          text.c_str());
  ncclCommAbort(comm);
  const char* limit = getenv("CHORUS_TIMEOUT_S");
  double half = (limit ? atof(limit) : 300.0) / 2;
  bool named = text.find("rank 1 failed (a peer process died)") != std::string::npos;
  if (res != ncclRemoteError || !named || took >= half) return 1;
  printf("rank 0: OK\n");
  return 0;
}

int main(int argc, char** argv) {
  bool gone = argc == 5 && strcmp(argv[3], "--peer-gone") == 0;
  if (argc != 3 && !gone) {
    fprintf(stderr, "usage: %s <rank> <nranks> [--peer-gone <file>]  (with NCCL_COMM_ID=host:port)\n", argv[0]);
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
  if (gone) return peerGone(rank, comm, argv[4]);

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
  int proxies = chorus_test::countThreadsNamed("chorus-net-Sock");
  ncclCommDestroy(comm);
  if (bad != 0) {
    fprintf(stderr, "rank %d: %d wrong elements\n", rank, bad);
    return 1;
  }
  if (proxies < 1) {
    fprintf(stderr, "rank %d: the allreduce did not use the socket net\n", rank);
    return 1;
  }
  printf("rank %d: OK\n", rank);
  return 0;
}
