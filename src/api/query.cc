// Small entry points: queries, error strings, memory, registration.
#include <stdlib.h>

#include <cstring>
#include <mutex>

#include "api/api.h"
#include "api/group.h"
#include "core/checks.h"
#include "core/comm.h"
#include "core/params.h"
#include "engine/engine.h"
#include "engine/windows.h"
#include "runtime/runtime.h"

using namespace chorus;

namespace {

// Validates a comm for a query: queries work on any live communicator, even revoked ones.
ncclResult_t checkQuery(const ncclComm* comm, const void* out, const char* fn) {
  if (comm == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (!commValid(comm))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "%s: %p is not a valid communicator (destroyed?)", fn, (const void*)comm);
  if (out == nullptr) CHORUS_FAIL(const_cast<ncclComm*>(comm), ncclInvalidArgument, "%s: output pointer is NULL", fn);
  return ncclSuccess;
}

// A registration handle: remembers the range so that deregistration can be checked.
struct Registration {
  uint64_t magic = 0x7265676973746572ull;
  const ncclComm* comm;
  void* buff;
  size_t size;
};

// Checks and runs (or, in a group, defers) a collective window registration.
ncclResult_t windowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  CHORUS_CHECK(checkQuery(comm, win, "ncclCommWindowRegister"));
  *win = nullptr;
  if (buff == nullptr || size == 0)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommWindowRegister: buff %p / size %zu must be non-null / non-zero",
                buff, size);
  if (winFlags & ~(NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC))
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommWindowRegister: unknown winFlags %#x", winFlags);
  if ((winFlags & NCCL_WIN_COLL_SYMMETRIC) && (reinterpret_cast<uintptr_t>(buff) % NCCL_WIN_REQUIRED_ALIGNMENT) != 0)
    CHORUS_FAIL(comm, ncclInvalidArgument,
                "ncclCommWindowRegister: a symmetric window must be %d-byte aligned (buff %p)",
                NCCL_WIN_REQUIRED_ALIGNMENT, buff);
  CHORUS_CHECK(checkCommUsable(comm, "ncclCommWindowRegister"));
  auto* w = new ncclWindow_vidmem;
  w->magic = kWindowMagic;
  w->comm = comm;
  w->buff = static_cast<char*>(buff);
  w->size = size;
  w->flags = winFlags;
  auto add = [comm, w]() {
    ActiveCall active(comm);
    return comm->engine->windows().add(w);
  };
  if (inGroup()) {
    // Collective: the exchange runs at ncclGroupEnd, beside the other ranks' (one thread may drive several). The
    // handle is valid now; collectives use the window once the group has ended.
    *win = w;
    return enqueueInit(add, comm);
  }
  ncclResult_t res = add();
  if (res != ncclSuccess) {
    w->magic = 0;
    delete w;
    return res;
  }
  *win = w;
  return ncclSuccess;
}

}  // namespace

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  CHORUS_CHECK(checkQuery(comm, count, "ncclCommCount"));
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  CHORUS_CHECK(checkQuery(comm, device, "ncclCommCuDevice"));
  *device = comm->cudaDev;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  CHORUS_CHECK(checkQuery(comm, rank, "ncclCommUserRank"));
  *rank = comm->rank;
  return ncclSuccess;
}

NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the chorus developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  // The text lives in thread-local storage (or the communicator), valid until the next error.
  static thread_local std::string text;
  if (comm != nullptr && commValid(comm)) {
    text = commLastError(comm);
    if (!text.empty()) return text.c_str();
  }
  return threadLastError();
}

extern "C" __attribute__((visibility("default"))) void ncclResetDebugInit() { paramsReload(); }
extern "C" __attribute__((visibility("default"), alias("ncclResetDebugInit"))) void pncclResetDebugInit();
// NVIDIA's library exports this helper too (programs built against it may reference it).
extern "C" __attribute__((visibility("default"), alias("ncclResetDebugInit"))) void ncclResetDebugInitInternal();

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == nullptr) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  if (size == 0) CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclMemAlloc: size is 0");
  // As NCCL: device memory of the caller's current GPU where a GPU runtime is in use (programs such as nccl-tests
  // allocate every buffer this way and then cudaMemset it); page-aligned host memory where there is none.
  if (GpuRuntime* rt = gpuRuntime()) {
    SetupScope setup(rt);
    int dev = -1;
    void* p = nullptr;
    if (rt->getDevice(&dev) != ncclSuccess || rt->deviceAlloc(size, &p) != ncclSuccess)
      CHORUS_FAIL(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: cannot allocate %zu bytes on GPU %d: %s", size, dev,
                  rt->lastError().c_str());
    *ptr = p;
    INFO(kAlloc, "ncclMemAlloc %p size %zu (device memory, GPU %d)", p, size, dev);
    return ncclSuccess;
  }
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size) != 0)
    CHORUS_FAIL(nullptr, ncclSystemError, "ncclMemAlloc: cannot allocate %zu bytes of host memory", size);
  *ptr = p;
  INFO(kAlloc, "ncclMemAlloc %p size %zu (host memory: no GPU in use)", p, size);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  GpuRuntime* rt = gpuRuntime();
  SetupScope setup(rt);
  int dev = -1;
  if (rt != nullptr && rt->pointerKind(ptr, &dev) == MemKind::kDevice) {
    rt->deviceFree(ptr);
    return ncclSuccess;
  }
  free(ptr);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  CHORUS_CHECK(checkQuery(comm, handle, "ncclCommRegister"));
  if (buff == nullptr && size > 0)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommRegister: buff is NULL with size %zu", size);
  *handle = new Registration{0x7265676973746572ull, comm, buff, size};
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  if (comm == nullptr || !commValid(comm))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommDeregister: %p is not a valid communicator", (void*)comm);
  auto* reg = static_cast<Registration*>(handle);
  if (reg == nullptr || reg->magic != 0x7265676973746572ull || reg->comm != comm)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommDeregister: %p is not a registration of this communicator",
                handle);
  reg->magic = 0;
  delete reg;
  return ncclSuccess;
}

// A collective registration; refused inside a group, it fails the group as NCCL's does (group.h, noteRefusedCall).
NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  return noteRefusedCall(windowRegister(comm, buff, size, win, winFlags));
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  if (comm == nullptr || !commValid(comm))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommWindowDeregister: %p is not a valid communicator", (void*)comm);
  if (win == nullptr || win->magic != kWindowMagic || win->comm != comm)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommWindowDeregister: %p is not a window of this communicator",
                (void*)win);
  if (comm->engine) comm->engine->windows().remove(win);
  win->magic = 0;
  delete win;
  return ncclSuccess;
}
