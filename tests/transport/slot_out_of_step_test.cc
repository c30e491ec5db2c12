// The host path's slot check (Executor::checkOrdinal, HostPlatform::outOfOrder): a slot read at another place on
// its connection than its sender wrote it would give another slice's data, or an older call's, with nothing else to
// notice when the sizes agree. Two processes on one host: after a first allreduce, rank 0 moves the produced-slot
// count (FifoCtrl::tail) of each of its shared-memory FIFOs to rank 1 one slot on, so that rank 1 reads a slot
// before rank 0 has written it. Rank 1's next call stops with ncclInternalError naming the connection and both
// places; rank 0, which starts its call only once rank 1's has returned, learns that rank 1 stopped. Neither waits
// for its deadline.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/params.h"
#include "harness/ranks.h"
#include "kernels/fifo.h"
#include "nccl.h"

namespace chorus_test {
namespace {

enum Outcome { kOk = 0, kSetup = 10, kFirstCall, kNoFifo, kSecondCallPassed, kWrongError };

// Moves the produced-slot count of every shared-memory FIFO this process maps from rank `from` to rank `to` one slot
// on; returns how many. The segments' names are unlinked once both ends map them, so they are found in the process's
// map ("/dev/shm/chorus-<comm>-c<channel>-<from>-<to> (deleted)").
int skipSlotOfFifos(int from, int to) {
  std::ifstream maps("/proc/self/maps");
  const std::string tail = "-" + std::to_string(from) + "-" + std::to_string(to);
  std::string line;
  int moved = 0;
  while (std::getline(maps, line)) {
    const size_t at = line.find("/dev/shm/chorus-");
    if (at == std::string::npos) continue;
    std::string name = line.substr(at);
    const size_t del = name.find(" (deleted)");
    if (del != std::string::npos) name.resize(del);
    // The host FIFO family (kind 'c' after the communicator's 16 hex digits) of this pair.
    const size_t kindAt = strlen("/dev/shm/chorus-") + 16 + 1;
    if (name.size() <= kindAt || name[kindAt] != 'c' || name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    auto* ctrl = reinterpret_cast<chorus::FifoCtrl*>(std::stoull(line.substr(0, line.find('-')), nullptr, 16));
    __atomic_fetch_add(&ctrl->tail, 1, __ATOMIC_RELEASE);
    moved++;
  }
  return moved;
}

int rankMain(int rank, const ncclUniqueId& id, int signal[2]) {
  setenv("NCCL_PROTO", "Simple", 1);  // an LL line's flag says its place already
  setenv("NCCL_ALGO", "Ring", 1);
  setenv("CHORUS_TIMEOUT_S", "60", 1);  // well past what the test waits: a failure at the deadline says so
  chorus::paramsReload();
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return kSetup;
  const size_t count = 65536;
  std::vector<float> buf(count, 1.0f);
  if (ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess ||
      buf[count - 1] != 2.0f) {
    fprintf(stderr, "rank %d: first call: %s (last element %g)\n", rank, ncclGetLastError(comm), buf[count - 1]);
    return kFirstCall;
  }
  if (rank == 0) {
    // Rank 1 is done reading the first call's slots only when its call returns; moving the count while it still
    // reads would not matter (it reads no further than the call's slots), and rank 1 starts its second call alone.
    const int moved = skipSlotOfFifos(0, 1);
    if (moved == 0) {
      fprintf(stderr, "rank 0: no shared-memory FIFO to rank 1 in the process's map\n");
      return kNoFifo;
    }
    char c;
    if (read(signal[0], &c, 1) != 1) return kSetup;  // rank 1's second call has returned
  }
  ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr);
  const std::string text = ncclGetLastError(comm);
  if (rank == 1 && write(signal[1], "x", 1) != 1) return kSetup;
  if (res == ncclSuccess) {
    fprintf(stderr, "rank %d: the second call passed\n", rank);
    return kSecondCallPassed;
  }
  const bool named = rank == 1
                         ? res == ncclInternalError && text.find("out of step") != std::string::npos &&
                               text.find("its connection from rank 0") != std::string::npos
                         : text.find("rank 1") != std::string::npos && text.find("deadline") == std::string::npos &&
                               text.find("timed out") == std::string::npos;
  if (!named) {
    fprintf(stderr, "rank %d: second call: %s: %s\n", rank, ncclGetErrorString(res), text.c_str());
    return kWrongError;
  }
  ncclCommAbort(comm);
  return kOk;
}

TEST(SlotOutOfStep, ARankThatReadsAheadStopsAndItsPeerLearnsIt) {
  int signal[2];
  ASSERT_EQ(pipe(signal), 0);
  std::vector<int> status = forkRanks(
      2, [&](int rank, const ncclUniqueId& id) { return rankMain(rank, id, signal); }, 50);
  close(signal[0]);
  close(signal[1]);
  for (int r = 0; r < 2; r++)
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " " << describeStatus(status[r]);
}

}  // namespace
}  // namespace chorus_test
