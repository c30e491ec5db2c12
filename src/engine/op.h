// One enqueued operation, as the API validated it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algo/schedule.h"
#include "nccl.h"

namespace chorus {

/// One collective or point-to-point call, validated, waiting in a group.
struct OpDesc {
  Coll coll = Coll::kAllReduce;  ///< kSendRecv for ncclSend/ncclRecv
  bool isSend = false;           ///< for kSendRecv: send (true) or recv
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  ///< elements per rank, as the API names it (recvcount, sendcount, count)
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;  ///< root, or peer for send/recv
  cudaStream_t stream = nullptr;
};

}  // namespace chorus
