// Export macro for the C API: defines `name` and the profiling alias `p##name`, both with
// default visibility; everything else in the library is hidden (and the version script
// src/api/libnccl.map exports exactly these names).
#pragma once

#include "nccl.h"

#define NCCL_API(ret, name, ...)                                                              \
  extern "C" __attribute__((visibility("default"))) ret name(__VA_ARGS__);                    \
  extern "C" __attribute__((visibility("default"), alias(#name))) ret p##name(__VA_ARGS__);   \
  extern "C" __attribute__((visibility("default"))) ret name(__VA_ARGS__)

namespace chorus {
/// Validates a communicator handle for use by an entry point (null, destroyed, revoked...).
ncclResult_t checkCommUsable(ncclComm* comm, const char* fn, bool allowRevoked = false);
/// NCCL_CHECK_POINTERS for a buffer given outside a call (ncclCommRegister): [p, p + bytes) lies in memory of this
/// process (readable) or within one GPU allocation of the communicator's GPU. Passes when the variable is 0.
ncclResult_t checkRegisteredBuffer(ncclComm* comm, const char* fn, const void* p, size_t bytes);
/// RAII count of calls running on a communicator, so ncclCommAbort/Destroy wait for them.
class ActiveCall {
 public:
  explicit ActiveCall(ncclComm* comm);
  ~ActiveCall();

 private:
  ncclComm* comm_;
};
}  // namespace chorus
