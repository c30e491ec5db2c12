// The host entry points of NCCL's device API (nccl_device.h, NCCL 2.28): device communicators, LSA and GIN
// barriers, LL all-to-all. chorus does not support the device API. The symbols are exported so that programs
// linked against them load and run their other paths: the functions that return ncclResult_t refuse with
// ncclInvalidUsage and a clear ncclGetLastError text (docs/status.md). The team queries answer what is true of
// chorus: the world team is the communicator, and the load/store-accessible (LSA) team is the rank alone, since
// chorus maps no peer memory for user kernels.
#include "api/api.h"
#include "core/checks.h"
#include "core/comm.h"

namespace {

// Layout of nccl_device/core.h's ncclTeam (returned by value).
struct Team {
  int nRanks, rank, stride;
};

constexpr const char* kUnsupported =
    "the NCCL device API (nccl_device.h: device communicators, LSA/GIN barriers, LL all-to-all) is not supported "
    "by chorus (docs/status.md)";

// The communicator, or null (with the reason as the last error) when it is not usable.
ncclComm* usable(ncclComm_t comm, const char* fn) {
  return chorus::checkCommUsable(comm, fn) == ncclSuccess ? comm : nullptr;
}

}  // namespace

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const void* reqs, void* outDevComm) {
  CHORUS_FAIL(comm, ncclInvalidUsage, "ncclDevCommCreate: %s", kUnsupported);
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const void* devComm) {
  CHORUS_FAIL(comm, ncclInvalidUsage, "ncclDevCommDestroy: %s", kUnsupported);
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, Team team, int nBarriers, void* outHandle,
         void* outReq) {
  CHORUS_FAIL(comm, ncclInvalidUsage, "ncclGinBarrierCreateRequirement: %s", kUnsupported);
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, Team team, int nBarriers, void* outHandle, void* outReq) {
  CHORUS_FAIL(nullptr, ncclInvalidUsage, "ncclLsaBarrierCreateRequirement: %s", kUnsupported);
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, void* outHandle, void* outReq) {
  CHORUS_FAIL(nullptr, ncclInvalidUsage, "ncclLLA2ACreateRequirement: %s", kUnsupported);
}

/// No LL all-to-all resources can be created, so none are needed.
NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) { return 0; }

NCCL_API(Team, ncclTeamWorld, ncclComm_t comm) {
  ncclComm* c = usable(comm, "ncclTeamWorld");
  return c ? Team{c->nranks, c->rank, 1} : Team{0, -1, 1};
}

NCCL_API(Team, ncclTeamLsa, ncclComm_t comm) {
  ncclComm* c = usable(comm, "ncclTeamLsa");
  return c ? Team{1, 0, 1} : Team{0, -1, 1};
}

/// The outer factor of the LSA team: with an LSA team of one, every rank.
NCCL_API(Team, ncclTeamRail, ncclComm_t comm) {
  ncclComm* c = usable(comm, "ncclTeamRail");
  return c ? Team{c->nranks, c->rank, 1} : Team{0, -1, 1};
}

/// World rank of member `rank` of `team` (a team is every stride-th world rank around this one), -1 if none.
NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, Team team, int rank) {
  ncclComm* c = usable(comm, "ncclTeamRankToWorld");
  if (c == nullptr || rank < 0 || rank >= team.nRanks) return -1;
  int world = c->rank + (rank - team.rank) * team.stride;
  return world >= 0 && world < c->nranks ? world : -1;
}

/// LSA rank of member `rank` of `team`: 0 for this rank itself (the LSA team is the rank alone), else -1.
NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, Team team, int rank) {
  ncclComm* c = usable(comm, "ncclTeamRankToLsa");
  if (c == nullptr || rank < 0 || rank >= team.nRanks) return -1;
  return c->rank + (rank - team.rank) * team.stride == c->rank ? 0 : -1;
}
