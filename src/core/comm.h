// The communicator: what every entry point receives as ncclComm_t.
//
// Ownership: a communicator is created by one init call and used by one thread at a time
// for enqueueing (as in NCCL); the abort flag and async error are atomics because
// ncclCommAbort, ncclCommGetAsyncError and the engine's worker read them from other threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "nccl.h"
#include "topo/cost_model.h"

namespace chorus {

class Engine;
class Worker;

/// The subset of ncclConfig_t chorus acts on, with defaults resolved.
struct CommConfig {
  int blocking = 1;
  int minCTAs = 1;
  int maxCTAs = 0;  ///< 0: not set (no cap beyond the device's)
  int splitShare = 0;
  int trafficClass = NCCL_CONFIG_UNDEF_INT;  ///< handed to the net (NCCL_NET_TRAFFIC_CLASS_UNDEF when unset)
  std::string commName;
  std::string netName;
};

/// State of a communicator's life.
enum class CommState : int { kInitializing, kReady, kRevoked, kFinalized, kFailed };

/// A user-created reduction operator (ncclRedOpCreatePreMulSum).
struct UserRedOp {
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  uint64_t scalarBits = 0;          ///< host-immediate scalar, in the dtype's format
  const void* scalarPtr = nullptr;  ///< device-resident scalar (read at launch)
};

/// A buffer registration (ncclCommRegister): the pages it covers and the registrations that share it. As in NCCL,
/// registering a range within an existing registration's pages returns that registration once more.
struct BufferRegistration {
  uintptr_t begin = 0, end = 0;  ///< page-aligned
  int refs = 1;
};

constexpr uint64_t kCommMagic = 0x63686f7275732121ull;  // "chorus!!"
constexpr uint64_t kCommDeadMagic = 0xdeadc0117deadull;

}  // namespace chorus

/// The communicator object behind ncclComm_t.
struct ncclComm {
  uint64_t magic = chorus::kCommMagic;
  int rank = 0;
  int nranks = 0;
  int cudaDev = -1;
  uint64_t commHash = 0;  ///< same on every rank of this communicator
  chorus::CommConfig config;
  std::atomic<int> state{static_cast<int>(chorus::CommState::kInitializing)};
  std::atomic<int> abortFlag{0};
  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<int> activeCalls{0};  ///< entry points running on this comm (abort waits for 0)
  bool ownsAbortFlag = true;
  std::unique_ptr<chorus::Bootstrap> bootstrap;
  std::vector<chorus::PeerInfo> peers;
  /// The cost model's link classes (src/engine/link_costs.h): the same on every rank.
  chorus::LinkCosts links;
  std::unique_ptr<chorus::Engine> engine;
  std::thread initThread;  ///< nonblocking init runs here
  std::thread childJobs;   ///< the newest nonblocking split/shrink of this comm (it joins the one before it first)
  std::atomic<int> pendingChildJobs{0};    ///< nonblocking splits/shrinks not finished; other calls wait for them
  std::unique_ptr<chorus::Worker> worker;  ///< runs this comm's part of multi-communicator groups

  std::mutex mutex;     ///< guards redOps and registrations
  std::mutex errMutex;  ///< guards lastError and failCause (taken inside setLastError, never held while calling out)
  std::string lastError;
  std::string failCause;  ///< once failed: the last error when the first call was refused for it (checkCommUsable)
  std::map<int, chorus::UserRedOp> redOps;
  int nextRedOp = ncclNumOps;
  /// Live ncclCommRegister handles, by page range; those left at destroy end with the communicator.
  std::vector<std::unique_ptr<chorus::BufferRegistration>> registrations;
  uint64_t splitCount = 0;  ///< number of splits made from this comm (derives child ids)

  ncclComm();
  ~ncclComm();
};

namespace chorus {
/// Stores `text` as comm's last error (called by setLastError).
void commStoreLastError(ncclComm* comm, const char* text);
/// Whether `comm` looks like a live communicator (magic intact).
bool commValid(const ncclComm* comm);
/// Last error of comm ("" when none).
std::string commLastError(ncclComm* comm);
/// How messages name a communicator: "comm 0x... rank 2 of 8 \"name\"".
std::string commLabel(const ncclComm* comm);
}  // namespace chorus
