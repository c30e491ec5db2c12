// RCCL's additions to the NCCL API (include/rccl.h), written over the public NCCL API: ncclAllToAll forwards to
// ncclAlltoAll, ncclAllToAllv is one group of ncclSend/ncclRecv, and the MSCCL entry points refuse with a clear
// error. Compiled into every build; only librccl.so.1 exports them (src/api/librccl.map).
#include <cstdint>
#include <string>

#include "api/api.h"
#include "core/checks.h"
#include "core/debug.h"
#include "kernels/dtypes.h"
#include "rccl.h"

namespace chorus {
namespace {

/// Checks one direction of an alltoallv (send or receive side) for every peer: arrays present, a buffer wherever
/// a count is nonzero, and displacement + count representable in bytes.
ncclResult_t checkSide(ncclComm* comm, bool isSend, const void* buff, const size_t counts[], const size_t displs[],
                       int nranks, int rank, size_t esize) {
  const char* buffName = isSend ? "sendbuff" : "recvbuff";
  const char* countsName = isSend ? "sendcounts" : "recvcounts";
  const char* displsName = isSend ? "sdispls" : "rdispls";
  if (counts == nullptr || displs == nullptr)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclAllToAllv: rank %d: %s and %s must not be NULL", rank, countsName,
                displsName);
  for (int p = 0; p < nranks; p++) {
    if (counts[p] == 0) continue;
    if (buff == nullptr)
      CHORUS_FAIL(comm, ncclInvalidArgument, "ncclAllToAllv: rank %d: %s is NULL but %s[%d] = %zu", rank, buffName,
                  countsName, p, counts[p]);
    if (displs[p] > SIZE_MAX / esize - counts[p])
      CHORUS_FAIL(comm, ncclInvalidArgument, "ncclAllToAllv: rank %d: %s[%d] + %s[%d] = %zu + %zu elements overflows",
                  rank, displsName, p, countsName, p, displs[p], counts[p]);
  }
  return ncclSuccess;
}

}  // namespace
}  // namespace chorus

using chorus::DType;

NCCL_API(ncclResult_t, ncclAllToAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}

NCCL_API(ncclResult_t, ncclAllToAllv, const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
         void* recvbuff, const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  CHORUS_CHECK(chorus::checkCommUsable(comm, "ncclAllToAllv"));
  int nranks = 0, rank = 0;
  CHORUS_CHECK(ncclCommCount(comm, &nranks));
  CHORUS_CHECK(ncclCommUserRank(comm, &rank));
  if (!DType::valid(datatype))
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclAllToAllv: rank %d: invalid datatype %d (valid: 0..%d)", rank,
                static_cast<int>(datatype), ncclNumTypes - 1);
  const size_t esize = DType::size(datatype);
  CHORUS_CHECK(chorus::checkSide(comm, true, sendbuff, sendcounts, sdispls, nranks, rank, esize));
  CHORUS_CHECK(chorus::checkSide(comm, false, recvbuff, recvcounts, rdispls, nranks, rank, esize));
  if (sendbuff != nullptr && sendbuff == recvbuff)
    CHORUS_FAIL(comm, ncclInvalidUsage,
                "ncclAllToAllv: rank %d: in-place operation (sendbuff == recvbuff) is not supported by chorus; "
                "use separate buffers",
                rank);

  // One group: every send and receive of this rank progresses together, so no pair order can deadlock. Pairs
  // with a zero count are skipped on both sides (the peer's matching count must be zero too).
  const char* send = static_cast<const char*>(sendbuff);
  char* recv = static_cast<char*>(recvbuff);
  CHORUS_CHECK(ncclGroupStart());
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < nranks && res == ncclSuccess; i++) {
    // Start with this rank's right neighbour so that ranks do not all target rank 0 first.
    int p = (rank + i) % nranks;
    if (sendcounts[p] != 0) res = ncclSend(send + sdispls[p] * esize, sendcounts[p], datatype, p, comm, stream);
    if (res == ncclSuccess && recvcounts[p] != 0)
      res = ncclRecv(recv + rdispls[p] * esize, recvcounts[p], datatype, p, comm, stream);
  }
  if (res != ncclSuccess) {
    // Keep the failing call's text: ending the group may replace it.
    std::string why = chorus::threadLastError();
    (void)ncclGroupEnd();
    chorus::setLastError(comm, "%s", why.c_str());
    return res;
  }
  return ncclGroupEnd();
}

NCCL_API(ncclResult_t, mscclLoadAlgo, const char* mscclAlgoFilePath, mscclAlgoHandle_t* mscclAlgoHandle, int rank) {
  CHORUS_FAIL(nullptr, ncclInvalidUsage,
              "mscclLoadAlgo(%s): MSCCL algorithms are not supported by chorus (docs/status.md)",
              mscclAlgoFilePath != nullptr ? mscclAlgoFilePath : "NULL");
}

NCCL_API(ncclResult_t, mscclRunAlgo, const void* sendBuff, const size_t sendCounts[], const size_t sDisPls[],
         void* recvBuff, const size_t recvCounts[], const size_t rDisPls[], size_t count, ncclDataType_t dataType,
         int root, int peer, ncclRedOp_t op, mscclAlgoHandle_t mscclAlgoHandle, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_FAIL(nullptr, ncclInvalidUsage,
              "mscclRunAlgo(handle %d): MSCCL algorithms are not supported by chorus (docs/status.md)",
              mscclAlgoHandle);
}

NCCL_API(ncclResult_t, mscclUnloadAlgo, mscclAlgoHandle_t mscclAlgoHandle) {
  CHORUS_FAIL(nullptr, ncclInvalidUsage,
              "mscclUnloadAlgo(handle %d): MSCCL algorithms are not supported by chorus (docs/status.md)",
              mscclAlgoHandle);
}
