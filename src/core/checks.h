// Error propagation idioms. No exceptions cross the C ABI: every internal function that
// can fail returns ncclResult_t and callers propagate with CHORUS_CHECK. The error is
// described once, where it is decided, with CHORUS_FAIL (which logs a WARN and sets the
// text ncclGetLastError returns).
#pragma once

#include "core/debug.h"
#include "nccl.h"

/// Propagates a failure of `call` to the caller.
#define CHORUS_CHECK(call)                              \
  do {                                                  \
    ncclResult_t chorus_res_ = (call);                  \
    if (chorus_res_ != ncclSuccess && chorus_res_ != ncclInProgress) return chorus_res_; \
  } while (0)

/// Records the cause (WARN + last error for `comm`, which may be null) and returns `result`.
#define CHORUS_FAIL(comm, result, ...)                \
  do {                                                \
    ::chorus::setLastError((comm), __VA_ARGS__);      \
    return (result);                                  \
  } while (0)

/// Checks a condition on user input; on failure returns ncclInvalidArgument with the text.
#define CHORUS_ARG_CHECK(comm, cond, ...)                                        \
  do {                                                                           \
    if (!(cond)) CHORUS_FAIL((comm), ncclInvalidArgument, __VA_ARGS__);          \
  } while (0)
