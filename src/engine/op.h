// One enqueued operation, as the API validated it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algo/schedule.h"
#include "nccl.h"

namespace chorus {

/// What the current operation is, for error messages.
struct OpLabel {
  const char* coll = "";
  uint64_t seq = 0;
  size_t count = 0;
  int dtype = 0;
};

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
  /// The buffers are GPU memory: the call runs as a kernel on `stream` (src/engine/device_engine.cc).
  bool device = false;
  /// For an operator made by ncclRedOpCreatePreMulSum: its scalar, captured when the call is
  /// enqueued (NCCL lets the operator be destroyed as soon as the call returns, even inside a
  /// group). scalarPtr is set for a device-resident scalar, read when the operation starts.
  bool userOp = false;
  uint64_t scalarBits = 0;
  const void* scalarPtr = nullptr;
  /// scalarPtr is GPU memory: the kernel reads it when it starts (the host never dereferences it).
  bool scalarOnDevice = false;
  /// The call this operation runs for, where it is not the call itself: an allgather or reduce-scatter run as a tree
  /// allreduce (Planner::asTreeAllReduce). Logs and errors name that call; the planner runs the tree.
  const OpDesc* runsFor = nullptr;
};

}  // namespace chorus
