// One rank of the nets test across network namespaces (tests/transport/netns_nets_test.sh): several hosts on a
// bridge, several ranks a host (shared memory within a host, the net chosen by NCCL_NET across). Public API only.
//
// Usage: netns_coll <rank> <nranks> matrix   every collective and send/recv, several counts and types, checked
//                                            against closed forms; prints "rank R: OK" and which proxy ran
//        netns_coll <rank> <nranks> stream   1M-float allreduces until one fails (the script breaks a link or
//                                            kills a rank); prints "rank R: FAILED <code> after <s> s: <text>"
// NCCL_COMM_ID=<rank 0's address>:<port> must be set; every rank derives the same id from it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "transport/thread_names.h"

namespace {

int gRank = 0, gN = 0;
int gBad = 0;

void check(const char* what, size_t count, size_t i, double got, double want) {
  if (got != want && gBad++ < 5)
    fprintf(stderr, "rank %d: %s count %zu: element %zu is %g, expected %g\n", gRank, what, count, i, got, want);
}

bool ok(ncclResult_t res, const char* what, ncclComm_t comm) {
  if (res == ncclSuccess) return true;
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", gRank, what, ncclGetErrorString(res), ncclGetLastError(comm));
  gBad++;
  return false;
}

// Small integers keep every float sum exact.
float val(int rank, size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 89)); }

void matrixCount(ncclComm_t comm, size_t count) {
  const int n = gN, r = gRank;
  std::vector<float> in(count), out(count * n);
  for (size_t i = 0; i < count; i++) in[i] = val(r, i);
  // allreduce sum (float) and max (int32)
  if (ok(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr), "allreduce", comm))
    for (size_t i = 0; i < count; i++)
      check("allreduce", count, i, out[i], n * (n + 1) / 2.0 + n * static_cast<double>(i % 89));
  std::vector<int32_t> iin(count), iout(count);
  for (size_t i = 0; i < count; i++) iin[i] = static_cast<int32_t>((r * 7 + i) % 1000);
  if (ok(ncclAllReduce(iin.data(), iout.data(), count, ncclInt32, ncclMax, comm, nullptr), "allreduce max", comm))
    for (size_t i = 0; i < count; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want = std::max(want, static_cast<int32_t>((q * 7 + i) % 1000));
      check("allreduce max", count, i, iout[i], want);
    }
  // allgather
  if (ok(ncclAllGather(in.data(), out.data(), count, ncclFloat32, comm, nullptr), "allgather", comm))
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++) check("allgather", count, q * count + i, out[q * count + i], val(q, i));
  // reduce-scatter: block r of the sum of every rank's n blocks
  std::vector<float> big(count * n);
  for (size_t i = 0; i < big.size(); i++) big[i] = val(r, i);
  std::vector<float> rs(count);
  if (ok(ncclReduceScatter(big.data(), rs.data(), count, ncclFloat32, ncclSum, comm, nullptr), "reducescatter", comm))
    for (size_t i = 0; i < count; i++) {
      size_t j = r * count + i;
      check("reducescatter", count, i, rs[i], n * (n + 1) / 2.0 + n * static_cast<double>(j % 89));
    }
  // broadcast from rank 1, reduce to rank n-1
  std::vector<float> b(count);
  for (size_t i = 0; i < count; i++) b[i] = r == 1 % n ? val(7, i) : -1.0f;
  if (ok(ncclBroadcast(b.data(), b.data(), count, ncclFloat32, 1 % n, comm, nullptr), "broadcast", comm))
    for (size_t i = 0; i < count; i++) check("broadcast", count, i, b[i], val(7, i));
  std::vector<float> red(count, -1.0f);
  if (ok(ncclReduce(in.data(), red.data(), count, ncclFloat32, ncclSum, n - 1, comm, nullptr), "reduce", comm) &&
      r == n - 1)
    for (size_t i = 0; i < count; i++)
      check("reduce", count, i, red[i], n * (n + 1) / 2.0 + n * static_cast<double>(i % 89));
  // alltoall: block q of rank r's input goes to rank q
  std::vector<float> a2a(count * n), a2aOut(count * n);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) a2a[q * count + i] = static_cast<float>(r * 1000 + q * 10 + i % 7);
  if (ok(ncclAlltoAll(a2a.data(), a2aOut.data(), count, ncclFloat32, comm, nullptr), "alltoall", comm))
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++)
        check("alltoall", count, q * count + i, a2aOut[q * count + i], q * 1000 + r * 10 + i % 7);
  // send/recv around the ring
  std::vector<float> rx(count, -1.0f);
  ncclGroupStart();
  ncclSend(in.data(), count, ncclFloat32, (r + 1) % n, comm, nullptr);
  ncclRecv(rx.data(), count, ncclFloat32, (r + n - 1) % n, comm, nullptr);
  if (ok(ncclGroupEnd(), "send/recv", comm))
    for (size_t i = 0; i < count; i++) check("send/recv", count, i, rx[i], val((r + n - 1) % n, i));
}

int matrix(ncclComm_t comm) {
  for (size_t count : {size_t{1}, size_t{1031}, size_t{262147}}) matrixCount(comm, count);
  int sock = chorus_test::countThreadsNamed("chorus-net-Sock"), ucx = chorus_test::countThreadsNamed("chorus-net-UCX");
  // A net plugin's proxy thread: "chorus-net-" and its net's name, cut to a thread name's 15 characters.
  const char* want = getenv("NCCL_NET");
  const std::string named = std::string(want != nullptr ? want : "");
  int other = named.empty() ? 0 : chorus_test::countThreadsNamed(("chorus-net-" + named).substr(0, 15).c_str());
  ncclCommDestroy(comm);
  if (gBad != 0) {
    fprintf(stderr, "rank %d: %d wrong results\n", gRank, gBad);
    return 1;
  }
  printf("rank %d: OK (proxy threads: Socket %d, UCX %d, NCCL_NET %s %d)\n", gRank, sock, ucx,
         named.empty() ? "unset" : named.c_str(), other);
  return 0;
}

int stream(ncclComm_t comm) {
  const size_t count = 1 << 20;
  std::vector<float> in(count, 1.0f), out(count);
  for (int iter = 0;; iter++) {
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t res = ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    if (res == ncclSuccess) {
      if (iter == 0) printf("rank %d: streaming\n", gRank);
      fflush(stdout);
      continue;
    }
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("rank %d: FAILED %s after %.3f s: %s\n", gRank, ncclGetErrorString(res), took, ncclGetLastError(comm));
    fflush(stdout);
    ncclCommAbort(comm);
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s <rank> <nranks> matrix|stream  (with NCCL_COMM_ID=host:port)\n", argv[0]);
    return 2;
  }
  gRank = atoi(argv[1]);
  gN = atoi(argv[2]);
  ncclUniqueId id;
  ncclComm_t comm;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res == ncclSuccess) res = ncclCommInitRank(&comm, gN, id, gRank);
  if (res != ncclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s: %s\n", gRank, ncclGetErrorString(res), ncclGetLastError(nullptr));
    return 1;
  }
  if (strcmp(argv[3], "matrix") == 0) return matrix(comm);
  return stream(comm);
}
