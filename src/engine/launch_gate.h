// Ranks of one communicator that are threads of one process on one GPU. Their kernels wait for each other, and a
// thread that synchronizes the device (cudaFree does, and so do cudaDeviceSynchronize and cudaMemcpy in some
// cases) waits for every kernel on it, including a peer's kernel that waits for this thread's next call: a
// deadlock. So no such rank launches a kernel before every co-located rank it waits on, directly or through
// another, has made its matching call. Then all the kernels of one operation are queued before any of these
// threads can block on the device, and each can finish (they fit the GPU together: DeviceEngine caps channels).
//
// Matching: the k-th launch of rank a that waits on rank b meets the k-th launch of b that waits on a (collectives
// wait on every rank; a send/recv batch on its peers; both sides keep per-peer order). A launch passes once every
// rank reachable from it through such waits is at the gate with its matching launch; the whole group passes then.
//
// Processes sharing a GPU need none of this: a process's device synchronization waits for its own work only.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm.h"
#include "runtime/runtime.h"

namespace chorus {

/// The launch gate of the co-located thread ranks of one communicator on one GPU.
class LaunchGate {
 public:
  /// The gate comm's rank shares with the other ranks of comm in this process on its GPU; null when it has none.
  static std::shared_ptr<LaunchGate> join(ncclComm* comm);
  /// What a collective launch tells the matching launches of the other ranks: what was called (to refuse
  /// mismatched calls before any kernel runs) and its buffers (a direct launch reads and writes its peers').
  struct Payload {
    bool arrived = false;  ///< in `all`: this rank's launch met this one (else it is not a rank of the gate)
    bool set = false;      ///< a collective's (a send/recv launch passes none)
    uint64_t count = 0;
    uint32_t desc = 0;  ///< packDesc(coll, dtype, op)
    int32_t root = -1;
    const void* in = nullptr;
    void* out = nullptr;
  };
  /// Ranks of the gate.
  const std::vector<int>& members() const { return members_; }
  /// Waits until the co-located ranks among `peers` (and those they wait on) made their matching launch, bounded
  /// by CHORUS_TIMEOUT_S and comm's abort flag; fails naming the ranks that did not come or that failed. With
  /// `mine`, *all receives (by rank) the payloads the ranks of the matching launches passed.
  ncclResult_t pass(ncclComm* comm, const std::vector<int>& peers, const Payload* mine = nullptr,
                    std::vector<Payload>* all = nullptr);
  /// Device memory (kDirectSyncBytes, zeroed) that the gate's ranks' direct launches meet at; made on first use.
  ncclResult_t syncMemory(GpuRuntime* rt, uint64_t** out);
  ~LaunchGate();
  /// Rank `rank` failed or left: ranks waiting for it stop waiting and fail, naming it and `why`.
  void fail(int rank, const std::string& why);

  explicit LaunchGate(std::vector<int> members) : members_(std::move(members)) {}

 private:
  struct Member {
    bool pending = false;           ///< at the gate with a launch
    bool released = false;          ///< that launch may go
    std::map<int, uint64_t> want;   ///< pending launch: its index among this rank's launches waiting on each peer
    std::map<int, uint64_t> count;  ///< launches so far that waited on each peer
    std::string failed;             ///< nonempty once the rank failed or left
    Payload payload;                ///< of the pending launch
    std::vector<Payload> received;  ///< the matching launches' payloads, by rank, set at release
  };
  bool tryRelease(int rank);  // with mutex_ held

  std::vector<int> members_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int, Member> state_;
  GpuRuntime* syncRt_ = nullptr;
  void* sync_ = nullptr;
};

}  // namespace chorus
