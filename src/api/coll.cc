// Collective and point-to-point entry points: argument checks as NCCL does them (and a few
// more: overflow, overlapping buffers), then enqueue into the current group.
#include <cstring>

#include "api/api.h"
#include "api/group.h"
#include "core/checks.h"
#include "core/comm.h"
#include "core/params.h"
#include "core/process.h"
#include "kernels/dtypes.h"
#include "runtime/device_probe.h"
#include "runtime/runtime.h"

using namespace chorus;

namespace {

IntParam kCheckPointers{"NCCL_CHECK_POINTERS", 0,
                        "1: every call first checks that each buffer it uses holds the length it uses: a GPU buffer "
                        "within its allocation (as the GPU runtime reports it), a host buffer in memory of this "
                        "process, readable (sendbuff) and writable (recvbuff). One that does not is refused with "
                        "ncclInvalidArgument naming it, instead of faulting. A host buffer's check asks the kernel "
                        "for its mappings (PROCMAP_QUERY, Linux 6.11; older kernels: reads /proc/self/maps), a few "
                        "us a call, so it is off by default, as in NCCL. A premulsum op's scalar given by "
                        "pointer (ncclScalarDevice) is checked too, for one element, and so is ncclCommRegister's "
                        "buffer (readable, or within one allocation of the communicator's GPU). GPU buffers are always "
                        "checked to be on the communicator's GPU.",
                        "general"};

// How many elements each buffer spans, in units of `count`.
struct Shape {
  size_t sendMul, recvMul;    // buffer length = count * mul elements
  bool sendUsed, recvUsed;    // whether the buffer is read/written on this rank
};

Shape shapeOf(Coll coll, int rank, int root, int nranks, bool isSend) {
  size_t n = static_cast<size_t>(nranks);
  switch (coll) {
    case Coll::kAllReduce: return {1, 1, true, true};
    case Coll::kAllGather: return {1, n, true, true};
    case Coll::kReduceScatter: return {n, 1, true, true};
    case Coll::kBroadcast: return {1, 1, rank == root, true};
    case Coll::kReduce: return {1, 1, true, rank == root};
    case Coll::kAllToAll: return {n, n, true, true};
    case Coll::kGather: return {1, n, true, rank == root};
    case Coll::kScatter: return {n, 1, rank == root, true};
    case Coll::kSendRecv: return {1, 1, isSend, !isSend};
    default: return {1, 1, true, true};
  }
}

bool collHasOp(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }
bool collHasRoot(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

// The in-place position of the smaller buffer inside the larger one, in units of count*size.
long inPlaceIndex(Coll coll, int rank, int root) {
  switch (coll) {
    case Coll::kAllGather: case Coll::kReduceScatter: return rank;
    case Coll::kGather: case Coll::kScatter: return root;
    default: return 0;
  }
}

// Host or device path, per call: GPU buffers run as a kernel on the stream, host buffers on the host path.
ncclResult_t choosePath(ncclComm* comm, const char* fn, const Shape& sh, OpDesc* op) {
  GpuRuntime* rt = gpuRuntime();
  if (rt == nullptr) {
    for (const void* p : {op->sendbuff, static_cast<const void*>(op->recvbuff), op->scalarPtr})
      if (p != nullptr && isDevicePointer(p))
        CHORUS_FAIL(comm, ncclInvalidUsage,
                    "%s: rank %d: buffer %p is GPU device memory, but this chorus build has no GPU backend (a "
                    "host-only build: host buffers only; build with CHORUS_CUDA or CHORUS_HIP, docs/build.md)", fn,
                    comm->rank, p);
    return ncclSuccess;
  }
  // The stream may be under capture: pointer queries run as setup (relaxed capture mode), never on the stream.
  SetupScope setup(rt);
  const void* bufs[2] = {sh.sendUsed ? op->sendbuff : nullptr, sh.recvUsed ? op->recvbuff : nullptr};
  int nDevice = 0, nUsed = 0;
  for (const void* p : bufs) {
    if (p == nullptr) continue;
    nUsed++;
    int dev = -1;
    MemKind kind = rt->pointerKind(p, &dev);
    if (kind == MemKind::kHost) continue;
    if (kind == MemKind::kDevice && dev != comm->cudaDev)
      CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: buffer %p is on GPU %d but the communicator uses GPU %d", fn,
                  comm->rank, p, dev, comm->cudaDev);
    nDevice++;
  }
  if (nDevice > 0 && nDevice != nUsed)
    CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: sendbuff %p and recvbuff %p must both be GPU memory or both "
                "host memory", fn, comm->rank, op->sendbuff, op->recvbuff);
  op->device = nDevice > 0;
  if (op->device && comm->cudaDev < 0)
    CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: GPU buffers on a communicator created without a GPU", fn,
                comm->rank);
  if (op->scalarPtr != nullptr) {
    int dev = -1;
    bool onGpu = rt->pointerKind(op->scalarPtr, &dev) != MemKind::kHost;
    if (onGpu && !op->device)
      CHORUS_FAIL(comm, ncclInvalidUsage, "%s: rank %d: the premulsum scalar %p is GPU memory but the buffers are host "
                  "memory; host-path operations read the scalar on the host", fn, comm->rank, op->scalarPtr);
    op->scalarOnDevice = onGpu;  // a host-memory scalar is read at enqueue, like an immediate one
  }
  return ncclSuccess;
}

// A buffer NCCL_CHECK_POINTERS looks at: where it lies and the access the call needs.
struct BufferUse {
  const char* name;
  const void* p;
  size_t bytes;
  bool used, write, gpu;
};

// NCCL_CHECK_POINTERS: each buffer holds the length it is used for, and, in host memory, has the access it needs (a
// GPU buffer's allocation as the runtime reports it; where it cannot say, the buffer passes).
ncclResult_t checkBufferUses(ncclComm* comm, const char* fn, const BufferUse* uses, int count) {
  // Host memory: every use in one check of the process's mappings.
  MemoryUse mem[3];
  const BufferUse* of[3];
  int n = 0, bad = 0;
  bool anyGpu = false;
  for (int i = 0; i < count && n < 3; i++) {
    const BufferUse& u = uses[i];
    anyGpu |= u.used && u.gpu;
    if (u.used && !u.gpu) {
      mem[n] = MemoryUse{u.p, u.bytes, u.write};
      of[n++] = &u;
    }
  }
  std::string why;
  if (n > 0 && !memoryAccessible(mem, n, &bad, &why))
    CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: %s %p of %zu bytes %s (NCCL_CHECK_POINTERS=1)", fn, comm->rank,
                of[bad]->name, of[bad]->p, of[bad]->bytes, why.c_str());
  GpuRuntime* rt = anyGpu ? gpuRuntime() : nullptr;
  if (rt == nullptr) return ncclSuccess;
  SetupScope setup(rt);  // the stream may be under capture: queries run as setup
  for (int i = 0; i < count; i++) {
    const BufferUse& u = uses[i];
    if (!u.used || !u.gpu) continue;
    void* base = nullptr;
    size_t size = 0;
    if (rt->addressRange(u.p, &base, &size) != ncclSuccess) continue;
    const size_t from = reinterpret_cast<uintptr_t>(u.p) - reinterpret_cast<uintptr_t>(base);
    if (from > size || u.bytes > size - from)
      CHORUS_FAIL(comm, ncclInvalidArgument,
                  "%s: rank %d: %s %p of %zu bytes runs past the end of its GPU allocation (%zu bytes at %p) "
                  "(NCCL_CHECK_POINTERS=1)",
                  fn, comm->rank, u.name, u.p, u.bytes, size, base);
  }
  return ncclSuccess;
}

// A call's buffers, and a premulsum op's scalar given by pointer (ncclScalarDevice), one element, wherever it lies.
ncclResult_t checkBuffers(ncclComm* comm, const char* fn, const Shape& sh, const OpDesc& op, size_t esize) {
  const BufferUse uses[3] = {
      {"sendbuff", op.sendbuff, op.count * sh.sendMul * esize, sh.sendUsed, false, op.device},
      {"recvbuff", op.recvbuff, op.count * sh.recvMul * esize, sh.recvUsed, true, op.device},
      {"the premulsum scalar", op.scalarPtr, esize, op.scalarPtr != nullptr, false, op.scalarOnDevice}};
  return checkBufferUses(comm, fn, uses, 3);
}

ncclResult_t validateAndEnqueue(const char* fn, OpDesc op, ncclComm* comm) {
  CHORUS_CHECK(checkCommUsable(comm, fn));
  if (static_cast<int>(op.dtype) < 0 || op.dtype >= ncclNumTypes)
    CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: invalid datatype %d (valid: 0..%d)", fn, comm->rank,
                static_cast<int>(op.dtype), ncclNumTypes - 1);
  if (collHasOp(op.coll)) {
    int o = static_cast<int>(op.op);
    if (o < 0 || o >= static_cast<int>(ncclMaxRedOp))
      CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: invalid reduction op %d", fn, comm->rank, o);
    if (o >= ncclNumOps) {
      std::lock_guard<std::mutex> lock(comm->mutex);
      auto it = comm->redOps.find(o);
      if (it == comm->redOps.end())
        CHORUS_FAIL(comm, ncclInvalidArgument,
                    "%s: rank %d: reduction op %d was not created on this communicator (or was destroyed)", fn,
                    comm->rank, o);
      if (it->second.dtype != op.dtype)
        CHORUS_FAIL(comm, ncclInvalidArgument,
                    "%s: rank %d: reduction op %d was created for datatype %d, used with datatype %d", fn,
                    comm->rank, o, static_cast<int>(it->second.dtype), static_cast<int>(op.dtype));
      op.userOp = true;
      op.scalarBits = it->second.scalarBits;
      op.scalarPtr = it->second.scalarPtr;
    }
  }
  bool isP2P = op.coll == Coll::kSendRecv;
  if (collHasRoot(op.coll) || isP2P) {
    if (op.root < 0 || op.root >= comm->nranks)
      CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: %s %d is out of range [0, %d)", fn, comm->rank,
                  isP2P ? "peer" : "root", op.root, comm->nranks);
  }
  Shape sh = shapeOf(op.coll, comm->rank, op.root, comm->nranks, op.isSend);
  size_t esize = DType::size(op.dtype);
  size_t maxMul = std::max(sh.sendMul, sh.recvMul);
  if (op.count > 0 && op.count > SIZE_MAX / esize / maxMul)
    CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: count %zu x %zu ranks x %zu bytes overflows", fn, comm->rank,
                op.count, maxMul, esize);
  if (op.count > 0) {
    if (sh.sendUsed && op.sendbuff == nullptr)
      CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: sendbuff is NULL with count %zu", fn, comm->rank, op.count);
    if (sh.recvUsed && op.recvbuff == nullptr)
      CHORUS_FAIL(comm, ncclInvalidArgument, "%s: rank %d: recvbuff is NULL with count %zu", fn, comm->rank, op.count);
    if (sh.sendUsed && sh.recvUsed && !isP2P) {
      // Buffers may be the same (in place, at the collective's in-place offset) or disjoint.
      auto s = reinterpret_cast<uintptr_t>(op.sendbuff);
      auto r = reinterpret_cast<uintptr_t>(op.recvbuff);
      size_t sbytes = op.count * sh.sendMul * esize, rbytes = op.count * sh.recvMul * esize;
      bool overlap = s < r + rbytes && r < s + sbytes;
      if (overlap) {
        size_t block = op.count * esize * inPlaceIndex(op.coll, comm->rank, op.root);
        bool inPlace = sh.sendMul >= sh.recvMul ? r == s + block : s == r + block;
        if (op.coll == Coll::kAllToAll && s != r) inPlace = false;
        if (!inPlace)
          CHORUS_FAIL(comm, ncclInvalidArgument,
                      "%s: rank %d: sendbuff %p and recvbuff %p overlap but are not the in-place layout (recvbuff "
                      "must equal sendbuff%s)", fn, comm->rank, op.sendbuff, op.recvbuff,
                      block ? " + rank*count" : "");
      }
    }
  }
  if (op.count > 0) CHORUS_CHECK(choosePath(comm, fn, sh, &op));
  if (op.count > 0 && kCheckPointers.get() != 0) CHORUS_CHECK(checkBuffers(comm, fn, sh, op, esize));
  TRACE(kCall, "%s: rank %d send %p recv %p count %zu dtype %d op %d root/peer %d", fn, comm->rank, op.sendbuff,
        op.recvbuff, op.count, op.dtype, op.op, op.root);
  return enqueueOp(comm, op);
}

// A refused call inside a group fails the group too (group.h, noteRefusedCall).
ncclResult_t checkAndEnqueue(const char* fn, const OpDesc& op, ncclComm* comm) {
  return noteRefusedCall(validateAndEnqueue(fn, op, comm));
}

OpDesc makeOp(Coll coll, const void* send, void* recv, size_t count, ncclDataType_t dtype, ncclRedOp_t redop, int root,
              cudaStream_t stream) {
  OpDesc op;
  op.coll = coll;
  op.sendbuff = send;
  op.recvbuff = recv;
  op.count = count;
  op.dtype = dtype;
  op.op = redop;
  op.root = root;
  op.stream = stream;
  return op;
}

}  // namespace

namespace chorus {

ncclResult_t checkRegisteredBuffer(ncclComm* comm, const char* fn, const void* p, size_t bytes) {
  if (kCheckPointers.get() == 0 || p == nullptr || bytes == 0) return ncclSuccess;
  GpuRuntime* rt = gpuRuntime();
  bool gpu = false;
  if (rt != nullptr) {
    SetupScope setup(rt);
    int dev = -1;
    MemKind kind = rt->pointerKind(p, &dev);
    if (kind == MemKind::kDevice && dev != comm->cudaDev)
      CHORUS_FAIL(comm, ncclInvalidArgument,
                  "%s: rank %d: buff %p is on GPU %d but the communicator uses GPU %d "
                  "(NCCL_CHECK_POINTERS=1)",
                  fn, comm->rank, p, dev, comm->cudaDev);
    gpu = kind != MemKind::kHost;
  } else {
    gpu = isDevicePointer(p);  // a host-only build cannot say more of it
  }
  const BufferUse use{"buff", p, bytes, true, false, gpu};
  return checkBufferUses(comm, fn, &use, 1);
}

}  // namespace chorus

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclAllReduce", makeOp(Coll::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, stream),
                         comm);
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclAllGather",
                         makeOp(Coll::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream), comm);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclReduceScatter",
                         makeOp(Coll::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream), comm);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclBroadcast",
                         makeOp(Coll::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream), comm);
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return checkAndEnqueue("ncclBcast", makeOp(Coll::kBroadcast, buff, buff, count, datatype, ncclSum, root, stream),
                         comm);
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclReduce", makeOp(Coll::kReduce, sendbuff, recvbuff, count, datatype, op, root, stream),
                         comm);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclAlltoAll",
                         makeOp(Coll::kAllToAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream), comm);
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclGather", makeOp(Coll::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root, stream),
                         comm);
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return checkAndEnqueue("ncclScatter",
                         makeOp(Coll::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, stream), comm);
}

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  OpDesc op = makeOp(Coll::kSendRecv, sendbuff, nullptr, count, datatype, ncclSum, peer, stream);
  op.isSend = true;
  return checkAndEnqueue("ncclSend", op, comm);
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  OpDesc op = makeOp(Coll::kSendRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, stream);
  op.isSend = false;
  return checkAndEnqueue("ncclRecv", op, comm);
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  CHORUS_CHECK(checkCommUsable(comm, "ncclRedOpCreatePreMulSum"));
  if (op == nullptr) CHORUS_FAIL(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op is NULL");
  if (scalar == nullptr) CHORUS_FAIL(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: scalar is NULL");
  if (static_cast<int>(datatype) < 0 || datatype >= ncclNumTypes)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid datatype %d", static_cast<int>(datatype));
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid residence %d", static_cast<int>(residence));
  UserRedOp u;
  u.dtype = datatype;
  u.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(&u.scalarBits, scalar, DType::size(datatype));
  } else {
    u.scalarPtr = scalar;  // read when each operation starts
  }
  std::lock_guard<std::mutex> lock(comm->mutex);
  int id = comm->nextRedOp;
  while (comm->redOps.count(id)) id++;
  if (id >= static_cast<int>(ncclMaxRedOp))
    CHORUS_FAIL(comm, ncclInvalidUsage, "ncclRedOpCreatePreMulSum: too many reduction operators");
  comm->redOps[id] = u;
  comm->nextRedOp = id + 1;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  CHORUS_CHECK(checkCommUsable(comm, "ncclRedOpDestroy", /*allowRevoked=*/true));
  if (static_cast<int>(op) < ncclNumOps)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclRedOpDestroy: op %d is a built-in operator", static_cast<int>(op));
  std::lock_guard<std::mutex> lock(comm->mutex);
  if (comm->redOps.erase(static_cast<int>(op)) == 0)
    CHORUS_FAIL(comm, ncclInvalidArgument, "ncclRedOpDestroy: op %d was not created on this communicator",
                static_cast<int>(op));
  return ncclSuccess;
}
