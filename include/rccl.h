/* chorus: RCCL-compatible header.
 *
 * RCCL (AMD's NCCL for ROCm) installs this API as <rccl/rccl.h>: NCCL's host API plus a few additions. chorus
 * declares the NCCL part once, in nccl.h, and adds RCCL's extras here. The extras are implemented in every build
 * but exported only by librccl.so.1 (the HIP build); see docs/status.md for what is supported.
 *
 * In a HIP program (hipcc, or __HIP_PLATFORM_AMD__ from hip::host) stream parameters are declared as hipStream_t,
 * as in RCCL's header, so that code passing a hipStream_t compiles unchanged. That needs this header to be included
 * before nccl.h; the ABI is the same either way (a stream is one pointer).
 */
#ifndef CHORUS_RCCL_H_
#define CHORUS_RCCL_H_

#if !defined(NCCL_H_) && (defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || defined(__HIPCC__))
#include <hip/hip_runtime_api.h>
#define CHORUS_STREAM_TYPE_DECLARED 1
#ifndef CHORUS_NO_CUDA_HEADERS
#define CHORUS_NO_CUDA_HEADERS 1
#endif
#define cudaStream_t hipStream_t
#include "nccl.h"
#undef cudaStream_t
/** Stream type of the RCCL additions below. */
#define CHORUS_RCCL_STREAM hipStream_t
#else
#include "nccl.h"
#define CHORUS_RCCL_STREAM cudaStream_t
#endif

/** Feature macros RCCL defines (programs such as rccl-tests test them). */
#define RCCL_BFLOAT16 1
#define RCCL_GATHER_SCATTER 1
#define RCCL_ALLTOALLV 1

#ifdef __cplusplus
extern "C" {
#endif

/** Handle to an MSCCL algorithm (RCCL's optional MSCCL datapath; not supported by chorus). */
typedef int mscclAlgoHandle_t;

/** All-to-all with count elements per pair: RCCL's spelling of NCCL's ncclAlltoAll. */
ncclResult_t ncclAllToAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          CHORUS_RCCL_STREAM stream);
ncclResult_t pncclAllToAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           CHORUS_RCCL_STREAM stream);

/** All-to-all with per-peer counts and displacements (elements, not bytes): this rank sends sendcounts[j]
 * elements from sendbuff + sdispls[j] to rank j and receives recvcounts[j] elements from rank j into
 * recvbuff + rdispls[j]. sendbuff and recvbuff must not be the same buffer. */
ncclResult_t ncclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[], void* recvbuff,
                           const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
                           CHORUS_RCCL_STREAM stream);
ncclResult_t pncclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[], void* recvbuff,
                            const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
                            CHORUS_RCCL_STREAM stream);

/** MSCCL: load an algorithm file. chorus returns ncclInvalidUsage (MSCCL algorithms are not supported). */
ncclResult_t mscclLoadAlgo(const char* mscclAlgoFilePath, mscclAlgoHandle_t* mscclAlgoHandle, int rank);
ncclResult_t pmscclLoadAlgo(const char* mscclAlgoFilePath, mscclAlgoHandle_t* mscclAlgoHandle, int rank);

/** MSCCL: run a loaded algorithm. chorus returns ncclInvalidUsage. */
ncclResult_t mscclRunAlgo(const void* sendBuff, const size_t sendCounts[], const size_t sDisPls[], void* recvBuff,
                          const size_t recvCounts[], const size_t rDisPls[], size_t count, ncclDataType_t dataType,
                          int root, int peer, ncclRedOp_t op, mscclAlgoHandle_t mscclAlgoHandle, ncclComm_t comm,
                          CHORUS_RCCL_STREAM stream);
ncclResult_t pmscclRunAlgo(const void* sendBuff, const size_t sendCounts[], const size_t sDisPls[], void* recvBuff,
                           const size_t recvCounts[], const size_t rDisPls[], size_t count, ncclDataType_t dataType,
                           int root, int peer, ncclRedOp_t op, mscclAlgoHandle_t mscclAlgoHandle, ncclComm_t comm,
                           CHORUS_RCCL_STREAM stream);

/** MSCCL: unload an algorithm. chorus returns ncclInvalidUsage. */
ncclResult_t mscclUnloadAlgo(mscclAlgoHandle_t mscclAlgoHandle);
ncclResult_t pmscclUnloadAlgo(mscclAlgoHandle_t mscclAlgoHandle);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CHORUS_RCCL_H_
