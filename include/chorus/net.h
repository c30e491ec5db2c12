/* chorus net ABI: the interface between chorus's proxy and a network (between hosts).
 *
 * It is NCCL's net plugin interface, version 11 (ncclNet_v11_t, as NCCL 2.28 loads it), declared here so that
 * chorus's own nets (Socket, UCX, IB verbs) and an external NCCL net plugin look the same to the proxy. An external
 * plugin exports a symbol `ncclNetPlugin_v11` (or an older version, v6 to v10, which chorus adapts) of this shape;
 * see docs/net.md.
 *
 * The semantics chorus relies on (the same as NCCL's):
 *  - listen() returns a handle of at most NCCL_NET_HANDLE_MAXSIZE bytes that the other end passes to connect();
 *    one listen is accepted once. connect() and accept() never block: they return success with a null comm until
 *    the connection is up, and are called again.
 *  - isend()/irecv() never block: a null request means "not now, try again". Messages on one connection match
 *    receives in the order both were posted; a message must not be larger than the receive it matches.
 *  - test() completes a request (and frees it); an error from any call fails the connection.
 */
#ifndef CHORUS_NET_H_
#define CHORUS_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
/* Requests a net may have outstanding on one comm (NCCL 2.28's limit; v6 plugins allow 8). */
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4

/* NCCL's logger: level (0 none .. 5 trace, NCCL's ncclDebugLogLevel), subsystem flags, source location. */
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
/* NCCL's profiler callback for net events; chorus passes null (no profiler). */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);

typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11];
} ncclNetVDeviceProps_v11_t;

#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
typedef struct {
  int trafficClass; /* plugin-specific; NCCL_NET_TRAFFIC_CLASS_UNDEF when unset */
} ncclNetCommConfig_v11_t;

typedef struct {
  char* name;                      /* for logs ("eth0", "mlx5_0") */
  char* pciPath;                   /* the device's path in /sys, or null */
  uint64_t guid;                   /* the NIC chip (ports of one NIC share it) */
  int ptrSupport;                  /* NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF */
  int regIsGlobal;                 /* regMr is not tied to one comm */
  int forceFlush;                  /* receives into GPU memory need iflush */
  int speed;                       /* port speed, Mbit/s */
  int port;                        /* port number */
  float latency;                   /* microseconds */
  int maxComms;                    /* comms the device can hold */
  int maxRecvs;                    /* receives one irecv may group */
  ncclNetDeviceType netDeviceType; /* offload type (chorus uses HOST) */
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;  /* largest message */
  size_t maxCollBytes; /* largest collective-network message */
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logFunction,
                       ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_NET_H_ */
