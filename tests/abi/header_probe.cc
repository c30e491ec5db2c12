// Prints every ABI-relevant fact of whichever nccl.h it is compiled against: function
// types, enum values, struct sizes and offsets, macro values. Built twice (against
// chorus's include/nccl.h and NVIDIA's) and the two outputs must be identical.
#include <nccl.h>

#include <cstddef>
#include <cstdio>
#include <typeinfo>

#define FN(f) std::printf("fn %s %s\n", #f, typeid(decltype(&f)).name());
#define FN2(f) FN(f) FN(p##f)
#define VAL(v) std::printf("val %s %lld\n", #v, static_cast<long long>(v));
#define OFF(s, m) std::printf("off %s.%s %zu\n", #s, #m, offsetof(s, m));

int main() {
  FN2(ncclMemAlloc) FN2(ncclMemFree) FN2(ncclGetVersion) FN2(ncclGetUniqueId) FN2(ncclCommInitRankConfig)
  FN2(ncclCommInitRank) FN2(ncclCommInitAll) FN2(ncclCommFinalize) FN2(ncclCommDestroy) FN2(ncclCommAbort)
  FN2(ncclCommRevoke) FN2(ncclCommSplit) FN2(ncclCommShrink) FN2(ncclCommInitRankScalable) FN2(ncclGetErrorString)
  FN2(ncclGetLastError) FN2(ncclCommGetAsyncError) FN2(ncclCommCount) FN2(ncclCommCuDevice)
  FN2(ncclCommUserRank) FN2(ncclCommRegister) FN2(ncclCommDeregister) FN2(ncclCommWindowRegister)
  FN2(ncclCommWindowDeregister) FN2(ncclRedOpCreatePreMulSum) FN2(ncclRedOpDestroy) FN2(ncclReduce) FN2(ncclBcast)
  FN2(ncclBroadcast) FN2(ncclAllReduce) FN2(ncclReduceScatter) FN2(ncclAllGather) FN2(ncclAlltoAll) FN2(ncclGather)
  FN2(ncclScatter) FN2(ncclSend) FN2(ncclRecv) FN2(ncclGroupStart) FN2(ncclGroupEnd) FN2(ncclGroupSimulateEnd)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  FN2(ncclResetDebugInit)
#pragma GCC diagnostic pop

  VAL(NCCL_MAJOR) VAL(NCCL_MINOR) VAL(NCCL_PATCH) VAL(NCCL_VERSION_CODE) VAL(NCCL_VERSION(2, 28, 9))
  VAL(NCCL_VERSION(2, 8, 4)) VAL(NCCL_UNIQUE_ID_BYTES) VAL(sizeof(ncclUniqueId)) VAL(NCCL_CONFIG_UNDEF_INT)
  VAL(NCCL_SPLIT_NOCOLOR) VAL(NCCL_WIN_DEFAULT) VAL(NCCL_WIN_COLL_SYMMETRIC) VAL(NCCL_WIN_REQUIRED_ALIGNMENT)
  VAL(NCCL_CTA_POLICY_DEFAULT) VAL(NCCL_CTA_POLICY_EFFICIENCY) VAL(NCCL_CTA_POLICY_ZERO) VAL(NCCL_SHRINK_DEFAULT)
  VAL(NCCL_SHRINK_ABORT) VAL(NCCL_REVOKE_DEFAULT) VAL(NCCL_UNDEF_FLOAT * 1000)
  VAL(ncclSuccess) VAL(ncclUnhandledCudaError) VAL(ncclSystemError) VAL(ncclInternalError) VAL(ncclInvalidArgument)
  VAL(ncclInvalidUsage) VAL(ncclRemoteError) VAL(ncclInProgress) VAL(ncclNumResults) VAL(sizeof(ncclResult_t))
  VAL(ncclSum) VAL(ncclProd) VAL(ncclMax) VAL(ncclMin) VAL(ncclAvg) VAL(ncclNumOps) VAL(ncclMaxRedOp)
  VAL(sizeof(ncclRedOp_t))
  VAL(ncclInt8) VAL(ncclChar) VAL(ncclUint8) VAL(ncclInt32) VAL(ncclInt) VAL(ncclUint32) VAL(ncclInt64)
  VAL(ncclUint64) VAL(ncclFloat16) VAL(ncclHalf) VAL(ncclFloat32) VAL(ncclFloat) VAL(ncclFloat64) VAL(ncclDouble)
  VAL(ncclBfloat16) VAL(ncclFloat8e4m3) VAL(ncclFloat8e5m2) VAL(ncclNumTypes) VAL(sizeof(ncclDataType_t))
  VAL(ncclScalarDevice) VAL(ncclScalarHostImmediate)

  VAL(sizeof(ncclConfig_t)) OFF(ncclConfig_t, size) OFF(ncclConfig_t, magic) OFF(ncclConfig_t, version)
  OFF(ncclConfig_t, blocking) OFF(ncclConfig_t, cgaClusterSize) OFF(ncclConfig_t, minCTAs)
  OFF(ncclConfig_t, maxCTAs) OFF(ncclConfig_t, netName) OFF(ncclConfig_t, splitShare)
  OFF(ncclConfig_t, trafficClass) OFF(ncclConfig_t, commName) OFF(ncclConfig_t, collnetEnable)
  OFF(ncclConfig_t, CTAPolicy) OFF(ncclConfig_t, shrinkShare) OFF(ncclConfig_t, nvlsCTAs)
  OFF(ncclConfig_t, nChannelsPerNetPeer) OFF(ncclConfig_t, nvlinkCentricSched)
  VAL(sizeof(ncclSimInfo_t)) OFF(ncclSimInfo_t, estimatedTime)

  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&cfg);
  std::printf("config-initializer");
  for (size_t i = 0; i < sizeof(cfg); i++) std::printf(" %02x", b[i]);
  std::printf("\n");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  std::printf("siminfo-initializer %zu %x %u %g\n", sim.size, sim.magic, sim.version, sim.estimatedTime);
  std::printf("comm-null %d\n", NCCL_COMM_NULL == nullptr);
  return 0;
}
