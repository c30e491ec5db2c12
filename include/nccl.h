/* chorus: NCCL-compatible collective communication.
 *
 * This header declares the host API of NCCL 2.28 with identical names, signatures, enum
 * values and struct layouts, so programs written for NCCL build and run against chorus
 * unchanged. It compiles without CUDA: when <cuda_runtime.h> is not reachable,
 * cudaStream_t is declared as the same opaque pointer type CUDA uses.
 */
#ifndef NCCL_H_
#define NCCL_H_

#if defined(__has_include)
#if __has_include(<cuda_runtime.h>) && !defined(CHORUS_NO_CUDA_HEADERS)
#include <cuda_runtime.h>
#define CHORUS_HAVE_CUDA_HEADERS 1
#endif
#endif
#if !defined(CHORUS_HAVE_CUDA_HEADERS) && !defined(CHORUS_STREAM_TYPE_DECLARED)
/** Opaque CUDA stream handle (same type as CUDA's own). NULL is the default stream. rccl.h sets
 * CHORUS_STREAM_TYPE_DECLARED when it declares the API with hipStream_t instead. */
typedef struct CUstream_st* cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

/** chorus's own version, reported in logs next to the NCCL-compatible one. */
#define CHORUS_MAJOR 0
#define CHORUS_MINOR 1
#define CHORUS_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque communicator handle. */
typedef struct ncclComm* ncclComm_t;
/** Opaque registered memory window. */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/** Rendezvous token made by ncclGetUniqueId on one rank and passed to every rank. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/** Result codes. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

#define NCCL_REVOKE_DEFAULT 0x00

/** Communicator configuration; start from NCCL_CONFIG_INITIALIZER. Layout of NCCL 2.28. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                     \
  {                                                                                                 \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),             \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                                               \
  }

/** Result of ncclGroupSimulateEnd; start from NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

/** Reduction operators. Values >= ncclNumOps are made by ncclRedOpCreatePreMulSum. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/** Element types. */
typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/** Where the scalar of ncclRedOpCreatePreMulSum lives and when it is read. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Declares both the function and its pncclXxx profiling alias. */
#define CHORUS_DECL(ret, name, args) \
  ret name args;                     \
  ret p##name args;

/** Memory for buffer registration (device memory with a GPU, page-aligned host memory without). */
CHORUS_DECL(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))
/** Frees memory from ncclMemAlloc. */
CHORUS_DECL(ncclResult_t, ncclMemFree, (void* ptr))
/** The NCCL_VERSION_CODE this library is compatible with. */
CHORUS_DECL(ncclResult_t, ncclGetVersion, (int* version))
/** Makes the rendezvous id; call on one rank and send it to all. */
CHORUS_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))
/** Creates a communicator with a configuration (blocking or nonblocking). */
CHORUS_DECL(ncclResult_t, ncclCommInitRankConfig,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))
/** Creates a communicator; every rank calls it with the same id. */
CHORUS_DECL(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
/** Creates ndev communicators in this process (host ranks when there is no GPU and devlist is NULL). */
CHORUS_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist))
/** Flushes outstanding work; the communicator may then be destroyed without blocking. */
CHORUS_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
/** Frees a communicator. */
CHORUS_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
/** Aborts outstanding work (releasing blocked calls) and frees the communicator. */
CHORUS_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
/** Stops in-flight operations; the communicator may then only be split, shrunk or destroyed. */
CHORUS_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
/** Splits a communicator by color, ordering ranks by key. */
CHORUS_DECL(ncclResult_t, ncclCommSplit,
            (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))
/** Makes a communicator without the listed ranks. */
CHORUS_DECL(ncclResult_t, ncclCommShrink,
            (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
             ncclConfig_t* config, int shrinkFlags))
/** Creates a communicator from several ids (rendezvous spread over nId roots). */
CHORUS_DECL(ncclResult_t, ncclCommInitRankScalable,
            (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config))
/** Text of a result code. */
CHORUS_DECL(const char*, ncclGetErrorString, (ncclResult_t result))
/** Text of the last error on this communicator (or in this thread when comm is NULL). */
CHORUS_DECL(const char*, ncclGetLastError, (ncclComm_t comm))
/** Re-reads the logging environment. */
__attribute__((deprecated("ncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void ncclResetDebugInit();
__attribute__((deprecated("pncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void pncclResetDebugInit();
/** Asynchronous error state (ncclInProgress while a nonblocking init runs). */
CHORUS_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))
/** Number of ranks. */
CHORUS_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))
/** CUDA device of the communicator (-1 for a host rank). */
CHORUS_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))
/** This rank. */
CHORUS_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))
/** Registers a buffer for zero-copy use. */
CHORUS_DECL(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle))
/** Deregisters a buffer. */
CHORUS_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))
/** Registers a memory window. */
CHORUS_DECL(ncclResult_t, ncclCommWindowRegister,
            (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))
/** Deregisters a memory window. */
CHORUS_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
/** Creates "sum of scalar * input" for one communicator and dtype. */
CHORUS_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
            (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
             ncclComm_t comm))
/** Destroys an operator made by ncclRedOpCreatePreMulSum. */
CHORUS_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
/** Reduce to root. In place when sendbuff == recvbuff. */
CHORUS_DECL(ncclResult_t, ncclReduce,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
             ncclComm_t comm, cudaStream_t stream))
/** Broadcast in place (deprecated form). */
CHORUS_DECL(ncclResult_t, ncclBcast,
            (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
/** Broadcast from root. */
CHORUS_DECL(ncclResult_t, ncclBroadcast,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
             cudaStream_t stream))
/** All-reduce. */
CHORUS_DECL(ncclResult_t, ncclAllReduce,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))
/** Reduce-scatter: rank i gets block i of the reduction. */
CHORUS_DECL(ncclResult_t, ncclReduceScatter,
            (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))
/** All-gather: rank i's data lands at recvbuff + i * sendcount. */
CHORUS_DECL(ncclResult_t, ncclAllGather,
            (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))
/** All-to-all with count elements per pair. */
CHORUS_DECL(ncclResult_t, ncclAlltoAll,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))
/** Gather to root. */
CHORUS_DECL(ncclResult_t, ncclGather,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
             cudaStream_t stream))
/** Scatter from root. */
CHORUS_DECL(ncclResult_t, ncclScatter,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
             cudaStream_t stream))
/** Point-to-point send (pair with ncclRecv on peer). */
CHORUS_DECL(ncclResult_t, ncclSend,
            (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
             cudaStream_t stream))
/** Point-to-point receive (pair with ncclSend on peer). */
CHORUS_DECL(ncclResult_t, ncclRecv,
            (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))
/** Starts a group: calls are fused until ncclGroupEnd. Groups nest. */
CHORUS_DECL(ncclResult_t, ncclGroupStart, ())
/** Ends a group and launches it. */
CHORUS_DECL(ncclResult_t, ncclGroupEnd, ())
/** Ends a group without running it, returning the estimated time. */
CHORUS_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

#undef CHORUS_DECL

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // NCCL_H_
