// NCCL's device API (nccl_device.h) through the shipped library: programs that reference it load; the calls that
// would create device communicators or their resources refuse with ncclInvalidUsage and say why; the team queries
// describe chorus (the world team is the communicator, the load/store-accessible team is the rank alone).
#include <gtest/gtest.h>

#include <string>

#include "nccl.h"

// The host entry points, declared as nccl_device/core.h does (that header is NVIDIA's, not part of chorus).
extern "C" {
struct ncclTeam {
  int nRanks, rank, stride;
};
ncclResult_t ncclDevCommCreate(ncclComm_t, const void* reqs, void* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const void* devComm);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam, int nBarriers, void* outHandle, void* outReq);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* outHandle, void* outReq);
ncclTeam ncclTeamWorld(ncclComm_t);
ncclTeam ncclTeamLsa(ncclComm_t);
ncclTeam ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, ncclTeam, int rank);
int ncclTeamRankToLsa(ncclComm_t, ncclTeam, int rank);
}

namespace {

class DeviceApi : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ncclCommInitAll(comms_, 2, nullptr), ncclSuccess) << ncclGetLastError(nullptr); }
  void TearDown() override {
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }
  ncclComm_t comms_[2] = {};
};

TEST_F(DeviceApi, CreationRefusesWithAReason) {
  char devComm[512] = {};
  EXPECT_EQ(ncclDevCommCreate(comms_[0], nullptr, devComm), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms_[0])).find("device API"), std::string::npos)
      << ncclGetLastError(comms_[0]);
  EXPECT_EQ(ncclDevCommDestroy(comms_[0], devComm), ncclInvalidUsage);
  char handle[64] = {}, req[128] = {};
  EXPECT_EQ(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comms_[0]), 1, handle, req), ncclInvalidUsage);
  EXPECT_EQ(ncclLLA2ACreateRequirement(1, 1, handle, req), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not supported"), std::string::npos)
      << ncclGetLastError(nullptr);
}

TEST_F(DeviceApi, TeamsDescribeTheCommunicator) {
  for (int r = 0; r < 2; r++) {
    ncclTeam world = ncclTeamWorld(comms_[r]);
    EXPECT_EQ(world.nRanks, 2);
    EXPECT_EQ(world.rank, r);
    EXPECT_EQ(world.stride, 1);
    ncclTeam lsa = ncclTeamLsa(comms_[r]);
    EXPECT_EQ(lsa.nRanks, 1);
    EXPECT_EQ(lsa.rank, 0);
    ncclTeam rail = ncclTeamRail(comms_[r]);
    EXPECT_EQ(rail.nRanks, 2);
    for (int m = 0; m < 2; m++) {
      EXPECT_EQ(ncclTeamRankToWorld(comms_[r], world, m), m);
      EXPECT_EQ(ncclTeamRankToLsa(comms_[r], world, m), m == r ? 0 : -1);
    }
    EXPECT_EQ(ncclTeamRankToWorld(comms_[r], world, 2), -1);
    EXPECT_EQ(ncclTeamRankToWorld(comms_[r], lsa, 0), r);
  }
  EXPECT_EQ(ncclTeamWorld(nullptr).nRanks, 0);
}

}  // namespace
