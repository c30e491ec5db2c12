// Group semantics (ncclGroupStart/End): per-thread nesting depth and the operations and
// communicator inits collected until the outermost ncclGroupEnd.
#pragma once

#include <functional>
#include <vector>

#include "core/comm.h"
#include "engine/op.h"

namespace chorus {

/// Whether this thread is inside ncclGroupStart/End.
bool inGroup();
/// Adds a validated operation to this thread's group, or runs it at once (implicit group).
ncclResult_t enqueueOp(ncclComm* comm, const OpDesc& op);
/// Defers a communicator init to the group end when inside a group, else runs it now.
ncclResult_t enqueueInit(std::function<ncclResult_t()> init);
/// Records that a nonblocking communicator creation started inside this thread's group: ncclGroupEnd then
/// returns ncclInProgress, as NCCL does (no-op outside a group).
void noteNonblockingInit();

}  // namespace chorus
