// FIFO slots by default (CHORUS_FIFO_SLOTS unset): 16 when ranks reach each other through a net (two NCCL_HOSTID
// hosts, or NCCL_SHM_DISABLE=1 on one), 8 when shared memory joins every rank; CHORUS_FIFO_SLOTS overrides either.
// NCCL_BUFFSIZE sets the bytes the slots share.
// Rank 0's INIT log names the choice. Each run also checks allgather and allreduce results at a size of several
// tiles of the larger FIFO (a tile is half a FIFO: 1 MB with 16 slots of 128 KB), out of place.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "nccl.h"

namespace chorus_test {
namespace {

int32_t v(int rank, size_t i) { return int32_t(rank * 100003 + int32_t(i % 9973)); }

// Runs `nranks` processes, rank r on host r % hosts, with `env` (NAME=VALUE pairs) set in each; returns rank 0's log.
std::string runLog(int nranks, int hosts, const std::vector<std::pair<const char*, const char*>>& env) {
  const std::string log = "/tmp/chorus_fifo_slots_" + std::to_string(getpid()) + ".log";
  auto child = [&](int rank, const ncclUniqueId& id) {
    setenv("NCCL_HOSTID", ("slots-host-" + std::to_string(rank % hosts)).c_str(), 1);
    for (const auto& [name, value] : env) setenv(name, value, 1);
    if (rank == 0) logInfoTo(log, "INIT");
    chorus::paramsReload();
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 10;
    const size_t N = 700001;  // int32 a rank: 2.8 MB, almost 3 tiles of 1 MB; odd, so the last slice is partial
    std::vector<int32_t> in(N), out(N * nranks);
    for (size_t i = 0; i < N; i++) in[i] = v(rank, i);
    if (ncclAllGather(in.data(), out.data(), N, ncclInt32, comm, nullptr) != ncclSuccess) return 11;
    for (int q = 0; q < nranks; q++)
      for (size_t i = 0; i < N; i++)
        if (out[q * N + i] != v(q, i)) return 12;
    if (ncclAllReduce(in.data(), out.data(), N, ncclInt32, ncclSum, comm, nullptr) != ncclSuccess) return 13;
    for (size_t i = 0; i < N; i++) {
      int32_t want = 0;
      for (int q = 0; q < nranks; q++) want += v(q, i);
      if (out[i] != want) return 14;
    }
    ncclCommDestroy(comm);
    return 0;
  };
  return forkRanksForLog(nranks, child, log, 120);
}

TEST(FifoSlots, SixteenWhenRanksAreJoinedByANet) {
  const std::string log = runLog(4, 2, {});
  EXPECT_NE(log.find("FIFOs of 16 slots x 131072 bytes (ranks joined by a net)"), std::string::npos) << log;
}

TEST(FifoSlots, SixteenWhenSharedMemoryIsDisabled) {
  const std::string log = runLog(2, 1, {{"NCCL_SHM_DISABLE", "1"}});
  EXPECT_NE(log.find("FIFOs of 16 slots x 131072 bytes (ranks joined by a net)"), std::string::npos) << log;
}

TEST(FifoSlots, EightWithinOneHost) {
  const std::string log = runLog(3, 1, {});
  EXPECT_NE(log.find("FIFOs of 8 slots x 131072 bytes (shared memory between all ranks)"), std::string::npos) << log;
}

TEST(FifoSlots, TheSettingWinsAcrossHosts) {
  const std::string log = runLog(4, 2, {{"CHORUS_FIFO_SLOTS", "4"}});
  EXPECT_NE(log.find("FIFOs of 4 slots x 131072 bytes (CHORUS_FIFO_SLOTS)"), std::string::npos) << log;
}

// NCCL_BUFFSIZE is a connection's Simple buffer, as in NCCL: the FIFO's slots share it, on one host and across hosts,
// and the results stay right at the larger tiles; CHORUS_FIFO_SLOT_BYTES, where set, wins.
TEST(FifoSlots, NcclBuffSizeIsShared) {
  std::string log = runLog(3, 1, {{"NCCL_BUFFSIZE", "2097152"}});
  EXPECT_NE(log.find("FIFOs of 8 slots x 262144 bytes (shared memory between all ranks; the slots share "
                     "NCCL_BUFFSIZE=2097152)"),
            std::string::npos)
      << log;
  log = runLog(4, 2, {{"NCCL_BUFFSIZE", "4194304"}});
  EXPECT_NE(log.find("FIFOs of 16 slots x 262144 bytes (ranks joined by a net; the slots share NCCL_BUFFSIZE=4194304)"),
            std::string::npos)
      << log;
  log = runLog(3, 1, {{"NCCL_BUFFSIZE", "2097152"}, {"CHORUS_FIFO_SLOT_BYTES", "65536"}});
  EXPECT_NE(log.find("FIFOs of 8 slots x 65536 bytes (shared memory between all ranks)"), std::string::npos) << log;
}

}  // namespace
}  // namespace chorus_test
