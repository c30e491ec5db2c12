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
/// Defers a communicator init (a creation, split or window registration) to the group end when inside a group, else
/// runs it now. Deferred work runs concurrently at the group end, except that work passing the same `serialOn`
/// communicator (whose bootstrap it uses) runs in call order, one after the other; every item runs even if one
/// before it failed, since the other ranks' items expect it, and the first failure is the group's.
ncclResult_t enqueueInit(std::function<ncclResult_t()> init, const ncclComm* serialOn = nullptr);
/// Records a call of this thread's group that was refused (`res` an error, the thread's last error its text): a
/// collective, a send or receive, a communicator creation or a window registration. As in NCCL, ncclGroupEnd then
/// launches none of the group's operations and returns the first such error. No-op outside a group and for
/// ncclSuccess or ncclInProgress. Returns `res`.
ncclResult_t noteRefusedCall(ncclResult_t res);
/// Joins a communicator creation (init, split, shrink) of config.blocking `blocking` to this thread's group: as in
/// NCCL, blocking and nonblocking creations cannot share a group, and the second kind is refused with
/// ncclInvalidArgument, naming `fn`; a group of nonblocking creations ends with ncclInProgress. ncclSuccess outside a
/// group. Every creation calls it before it starts.
ncclResult_t joinGroupCreation(int blocking, const char* fn);

}  // namespace chorus
