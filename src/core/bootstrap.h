// Bootstrap: the out-of-band TCP network every communicator starts with.
//
// ncclGetUniqueId starts a root listener (a thread in the calling process) and packs its
// address, a random secret, a magic and the library version into the id. Every rank
// connects to the root and proves the secret before anything else it sends is read; the
// root checks versions, rank numbers and nranks, then tells each rank its ring neighbour;
// the ranks then exchange PeerInfo with an allgather over that ring. Every wait has a
// deadline (CHORUS_TIMEOUT_S) and watches the abort flag; failures name the rank or
// address on every rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/timeout.h"
#include "nccl.h"

namespace chorus {

/// What each rank tells the others at init.
struct PeerInfo {
  int32_t rank = 0;
  int32_t cudaDev = -1;   ///< -1 for host ranks
  uint64_t hostHash = 0;  ///< same value on the same host (and network namespace)
  uint64_t pid = 0;
  int64_t busId = -1;         ///< PCI bus id of the GPU, -1 without one
  uint32_t version = 0;       ///< NCCL_VERSION_CODE of the library
  uint32_t deviceBlocks = 0;  ///< blocks of the collective kernel its GPU runs at once; 0: no GPU or unknown
  uint64_t envHash = 0;       ///< hash of environment settings that must agree across ranks
  uint32_t nicMbps = 0;       ///< its host's NIC speed from the topology (topologyNicMbps), 0: unknown
  int32_t calibrate = 0;      ///< its CHORUS_CALIBRATE (must agree; not in envHash, which keys the calibration cache)
  int32_t gpuNuma = -1;       ///< NUMA node of its GPU in its host's topology (topologyGpuNuma), -1: unknown
  int32_t maxBlocks = 0;      ///< its config's maxCTAs, at most NCCL_MAX_NCHANNELS: blocks of a device launch; 0: any
  int32_t minBlocks = 1;      ///< its config's minCTAs, at least NCCL_MIN_NCHANNELS: blocks of a collective's launch
  char hostname[64] = {0};
};

/// Fills an id (starts the root thread). Honours NCCL_COMM_ID, NCCL_SOCKET_IFNAME and NCCL_SOCKET_FAMILY.
ncclResult_t bootstrapGetUniqueId(ncclUniqueId* id);

/// Human-readable form of the root address in an id ("10.0.0.1:41234"), or why the id is invalid.
std::string uniqueIdDescribe(const ncclUniqueId& id);

/// A rank's bootstrap state: the connection to its ring neighbours and listen socket.
class Bootstrap {
 public:
  /// Joins the rendezvous described by `id` as `rank` of `nranks` and exchanges PeerInfo.
  /// `abortFlag` (may be null) is polled by every wait. On failure *out stays null and the
  /// error text (naming rank/address) has been recorded with setLastError(comm, ...).
  static ncclResult_t create(ncclComm* comm, const ncclUniqueId& id, int rank, int nranks, const PeerInfo& mine,
                             std::atomic<int>* abortFlag, std::unique_ptr<Bootstrap>* out);
  ~Bootstrap();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  /// Every rank's PeerInfo, indexed by rank.
  const std::vector<PeerInfo>& peers() const { return peers_; }

  /// In-place allgather: rank r's `bytesPerRank` bytes at data + r*bytesPerRank go to everyone.
  ncclResult_t allGather(void* data, size_t bytesPerRank);
  /// Every rank waits for every other.
  ncclResult_t barrier();
  /// Point-to-point messages (tag separates concurrent users); blocking, with deadline.
  ncclResult_t send(int peer, int tag, const void* data, size_t size);
  /// send for progress loops and failure notices: within `seconds` (a refused connection ends it at once), and a
  /// failure is never recorded as the communicator's error (*why says it). `abortable` false: an abort does not cut
  /// it short (a failure notice still goes while the failed rank aborts). Returns whether it went.
  bool sendQuiet(int peer, int tag, const void* data, size_t size, double seconds, std::string* why,
                 bool abortable = true);
  ncclResult_t recv(int peer, int tag, void* data, size_t size);
  /// recv without waiting: *got says whether the message was there (read at once if it is arriving now). Returns
  /// at once, *got false, while another thread is inside recv. For progress loops (a net proxy's connection setup):
  /// a failure fills *why and is not recorded as the communicator's error.
  ncclResult_t tryRecv(int peer, int tag, void* data, size_t size, bool* got, std::string* why);
  /// Closes sockets so that blocked peers see this rank leave (used on abort).
  void close();

  /// "rank 3 (pid 1234 on node7)": how messages name a peer.
  std::string describePeer(int peer) const;
  /// Whether rank `peer`'s process is known to be gone, with *why saying how that was found ("rank 1 (pid N on
  /// h) exited"). On this host the pid tells; on another host, one connection attempt to its bootstrap port does:
  /// refused means the process exited or destroyed its communicator. A live or unreachable peer gives false. Thread
  /// safe; takes up to half a second for a remote peer.
  bool peerGone(int peer, std::string* why) const;

  struct Impl;

 private:
  Bootstrap() = default;
  int rank_ = 0;
  int nranks_ = 0;
  std::vector<PeerInfo> peers_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
