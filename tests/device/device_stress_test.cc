// A stress run of the device kernel through the emulated runtime, after a wrong all_gather result seen once on an
// H100 (4 processes, 8 B-256 MB: 4 wrong elements, not reproduced since): blocks of several threads (blockSync a
// real barrier), random delays at barriers and kernel starts, FIFOs of two small slots so that every operation
// wraps them many times, and sizes on each side of the slot and wrap boundaries, in both protocols, many times.
// Every element is checked. On a CPU this finds logic races (a thread reading shared state before the barrier that
// publishes it, a slot reused before it is drained), not weak-memory ones.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/params.h"
#include "device/emu_runtime.h"
#include "harness/ranks.h"
#include "kernels/fifo.h"
#include "nccl.h"
#include "runtime/runtime.h"

namespace chorus_test {
namespace {

EmuRuntime gEmu;

constexpr size_t kSlotBytes = 4096;
constexpr size_t kLLLines = 64;
constexpr int kIterations = 4;

class DeviceStress : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    setenv("NCCL_PROTO", GetParam(), 1);
    setenv("CHORUS_FIFO_SLOTS", "2", 1);
    setenv("CHORUS_FIFO_SLOT_BYTES", std::to_string(kSlotBytes).c_str(), 1);
    setenv("CHORUS_LL_LINES", std::to_string(kLLLines).c_str(), 1);
    setenv("CHORUS_TIMEOUT_S", "60", 1);
    setenv("CHORUS_DEVICE_DIRECT", "0", 1);  // the FIFOs are under test (device_direct_test.cc has the direct path,
    setenv("CHORUS_DEVICE_IPC", "0", 1);     // device_ipc_test.cc the inboxes)
    chorus::paramsReload();
    gEmu.threadsPerBlock = 4;
    gEmu.delayPercent = 10;
    gEmu.delayMaxUs = 30;
    chorus::setGpuRuntimeForTesting(&gEmu);
  }
  void TearDown() override {
    chorus::setGpuRuntimeForTesting(nullptr);
    for (const char* v : {"NCCL_PROTO", "CHORUS_FIFO_SLOTS", "CHORUS_FIFO_SLOT_BYTES", "CHORUS_LL_LINES",
                          "CHORUS_TIMEOUT_S", "CHORUS_DEVICE_DIRECT", "CHORUS_DEVICE_IPC"})
      unsetenv(v);
    chorus::paramsReload();
  }
};

// Per-rank byte counts around one slot, two slots (a full FIFO) and several wraps of the protocol's FIFO (a Simple
// slot carries kSlotBytes, an LL slot 4 payload bytes on each of its lines past the header); odd counts leave partial
// words. LL also takes the Simple sizes' largest, over 90 of its slots.
std::vector<size_t> sizes(bool ll) {
  const size_t slot = ll ? (kLLLines - chorus::FifoGeometry::kLLHeaderLines) * 4 : kSlotBytes;
  std::vector<size_t> out{4, 12};
  for (size_t base : {slot, 2 * slot, 5 * slot})
    for (long d : {-4L, 0L, 4L}) out.push_back(static_cast<size_t>(static_cast<long>(base) + d));
  out.push_back(3 * slot + slot * 1000 / 4096);  // within a slot, at no boundary
  if (ll) out.push_back(5 * kSlotBytes + 4);
  return out;
}

void allGatherStress(RankCtx& c) {
  const int n = c.nranks;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t(200 + c.rank));
  for (size_t bytes : sizes(std::string(getenv("NCCL_PROTO")) == "LL")) {
    size_t count = bytes / 4;
    DevBuf in(gEmu, count * 4), out(gEmu, count * n * 4);
    for (int it = 0; it < kIterations; it++) {
      auto v = [&](int rank, size_t i) { return uint32_t(it * 7919u + rank * 104729u + i * 31u); };
      for (size_t i = 0; i < count; i++) in.as<uint32_t>()[i] = v(c.rank, i);
      std::memset(out.as<char>(), 0xee, count * n * 4);
      ASSERT_EQ(ncclAllGather(in.as<uint32_t>(), out.as<uint32_t>(), count, ncclUint32, c.comm, s), ncclSuccess);
      ASSERT_EQ(gEmu.streamSynchronize(s), ncclSuccess);
      ncclResult_t e = ncclSuccess;
      ASSERT_EQ(ncclCommGetAsyncError(c.comm, &e), ncclSuccess);
      ASSERT_EQ(e, ncclSuccess) << ncclGetLastError(c.comm);
      int wrong = 0;
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++)
          if (out.as<uint32_t>()[q * count + i] != v(q, i) && wrong++ < 4)
            ADD_FAILURE() << "rank " << c.rank << ": " << bytes << " B per rank, iteration " << it << ": element " << i
                          << " of rank " << q << " is " << out.as<uint32_t>()[q * count + i];
      ASSERT_EQ(wrong, 0);
    }
  }
}

TEST_P(DeviceStress, AllGatherFourProcesses) { runRanks(4, Driver::kProcesses, allGatherStress, 300); }
TEST_P(DeviceStress, AllGatherFourThreads) { runRanks(4, Driver::kThreads, allGatherStress, 300); }

INSTANTIATE_TEST_SUITE_P(Protocols, DeviceStress, ::testing::Values("LL", "Simple"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace chorus_test
