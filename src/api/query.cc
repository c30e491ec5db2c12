// Small entry points: queries, error strings, memory, registration.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "api/api.h"
#include "api/group.h"
#include "core/checks.h"
#include "core/comm.h"
#include "core/debug.h"
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

IntParam kLocalRegister{
    "NCCL_LOCAL_REGISTER", 1,
    "0: ncclCommRegister registers nothing and returns a NULL handle, as in NCCL (ncclCommDeregister "
    "takes NULL). chorus's registrations change no path yet: they are checked and counted.",
    "general"};

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
    // handle is valid now; collectives use the window once the group has ended. One whose registration fails there
    // is kept, so that deregistration finds it and frees it as usual.
    *win = w;
    return enqueueInit(
        [comm, w, add]() {
          ncclResult_t res = add();
          if (res != ncclSuccess) comm->engine->windows().keepFailed(w);
          return res;
        },
        comm);
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
  *handle = nullptr;
  if (buff == nullptr && size > 0)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommRegister: buff is NULL with size %zu", size);
  if (kLocalRegister.get() == 0) {
    INFO(kReg, "rank %d: skipping registration of %p (%zu bytes): NCCL_LOCAL_REGISTER=0", comm->rank, buff, size);
    return ncclSuccess;
  }
  CHORUS_CHECK(checkRegisteredBuffer(comm, "ncclCommRegister", buff, size));
  static const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t at = reinterpret_cast<uintptr_t>(buff);
  if (size > UINTPTR_MAX - at || UINTPTR_MAX - at - size < kPage)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclCommRegister: buff %p + size %zu overflows", buff, size);
  const uintptr_t begin = at & ~(kPage - 1), end = (at + size + kPage - 1) & ~(kPage - 1);
  std::lock_guard<std::mutex> lock(comm->mutex);
  for (auto& r : comm->registrations) {
    if (r->begin <= begin && end <= r->end) {
      r->refs++;
      *handle = r.get();
      return ncclSuccess;
    }
  }
  auto reg = std::make_unique<BufferRegistration>();
  reg->begin = begin;
  reg->end = end;
  *handle = reg.get();
  comm->registrations.push_back(std::move(reg));
  INFO(kReg, "rank %d: registered %p (%zu bytes)", comm->rank, buff, size);
  return ncclSuccess;
}

// A handle is looked up among the communicator's own, never read through: a stale or foreign one is refused intact.
NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  if (comm == nullptr || !commValid(comm))
    CHORUS_FAIL(nullptr, ncclInvalidArgument, "ncclCommDeregister: %p is not a valid communicator", (void*)comm);
  if (handle == nullptr) return ncclSuccess;  // NCCL_LOCAL_REGISTER=0's handle, as in NCCL
  std::lock_guard<std::mutex> lock(comm->mutex);
  auto& regs = comm->registrations;
  auto it = std::find_if(regs.begin(), regs.end(), [handle](const auto& r) { return r.get() == handle; });
  if (it == regs.end())
    CHORUS_FAIL(comm, ncclInvalidUsage,
                "ncclCommDeregister: %p is not a registration of this communicator (another's, or deregistered as "
                "often as it was registered)",
                handle);
  if (--(*it)->refs == 0) regs.erase(it);
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
  // Looked up among the communicator's windows before it is read: a stale or foreign handle is refused intact.
  if (win == nullptr || !comm->engine || !comm->engine->windows().remove(win))
    CHORUS_FAIL(comm, ncclInvalidArgument,
                "ncclCommWindowDeregister: %p is not a window of this communicator (another's, deregistered, or "
                "registered in a group that has not ended)",
                (void*)win);
  win->magic = 0;
  delete win;
  return ncclSuccess;
}
