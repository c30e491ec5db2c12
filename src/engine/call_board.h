// What each rank's device path made of every collective, posted where the other ranks of its host can read it, so a
// call that does not match a peer's is found while the ranks wait, not at CHORUS_TIMEOUT_S.
//
// The kernels compare calls themselves where both ranks exchange flags (inboxes, windows: the flag carries the call)
// or meet on the same FIFOs (a slot header carries it). They cannot when the two ranks took different paths for one
// collective (one through inboxes, the other through FIFOs, past a size limit or with another collective at that
// point), or the same path in another shape (a count that gives one rank more channels: it waits on the host for a
// connection the peer never makes). Each then waits for something the other never writes.
//
// So every rank posts, for each collective (its number in the communicator's sequence of collectives, the same on
// every rank), what it called and which path it took, in a ring of records in a shared-memory segment of its own
// (/dev/shm/chorus-<comm>-b0-<rank>-<rank>). The device engine's watchdog, and a host wait for a connection, compare
// this rank's records with each peer's on the same host: two records of one collective that differ are a mismatched
// call, reported as ncclInvalidUsage naming both calls. A peer on another host is not compared (its calls meet this
// rank's in FIFO slot headers). Records of collectives a peer ran elsewhere (host buffers) are simply absent.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace chorus {

/// The path a rank's device engine took for a collective.
enum class CallPath : uint32_t {
  kNone = 0,   ///< no record
  kNothing,    ///< a count of zero: nothing moves
  kFifos,      ///< a schedule over FIFOs (channels and lanes follow from the call)
  kOneShot,    ///< through the peers' inboxes, one-shot
  kTwoShot,    ///< through the peers' inboxes, two-shot
  kWindows,    ///< on registered windows
  kDirect,     ///< thread ranks of one GPU on each other's buffers
  kSendRecvs,  ///< as the sends and receives it is made of
};
const char* callPathText(CallPath path);

/// One collective as a rank called and ran it. 32 bytes.
struct CallRecord {
  uint64_t seq = 0;  ///< number in the communicator's collectives, from 1; 0: empty
  uint64_t count = 0;
  uint32_t desc = 0;  ///< packDesc(coll, dtype, op), as the kernels' fingerprints
  int32_t root = -1;
  CallPath path = CallPath::kNone;
  uint32_t pad = 0;
};

/// Whether two ranks' records of one collective disagree in a way the kernels would not report themselves.
bool callsConflict(const CallRecord& a, const CallRecord& b);
/// "allreduce #3 (count 100, float32, op 0) through FIFOs".
std::string describeCall(const CallRecord& r);

/// This rank's board and its view of the boards of the peers on its host.
class CallBoard {
 public:
  static constexpr uint32_t kSlots = 1024;  ///< records kept a rank (a peer that falls further behind is not compared)

  /// The board of `rank` of the communicator `commHash`, compared with `peers` (ranks on this host) whose processes
  /// are `peerPids` (kept in the segment for sweepStale).
  CallBoard(uint64_t commHash, int rank, std::vector<int> peers, std::vector<uint64_t> peerPids = {});
  /// Unlinks this rank's segment once every peer has mapped it (else sweepStale does, after this process exits).
  ~CallBoard();
  CallBoard(const CallBoard&) = delete;
  CallBoard& operator=(const CallBoard&) = delete;
  /// Creates this rank's segment; false with the reason in *why when it cannot (the board then posts nothing).
  bool open(std::string* why);
  /// Posts this rank's record of a collective (records come in increasing seq).
  void post(const CallRecord& r);
  /// Compares this rank's records with the peers' records of the same collectives that were not compared yet.
  /// Returns the first conflict as "rank R: collective #S ... does not match rank P's call ..." ("" when none);
  /// once one is found, every later call returns it. Thread-safe.
  std::string check();
  /// For a failure the kernels met before they compared the calls themselves (a peer whose kernel refused this
  /// rank's call and stopped before its own flag went out): when this rank's and `peer`'s records of collective `seq`
  /// are both on the boards and differ in the call (count, type, op, root) or its path, the text check() gives for a
  /// conflict; else "". Thread-safe.
  std::string differs(int peer, uint64_t seq);
  /// Segment name of a rank's board.
  static std::string segmentName(uint64_t commHash, int rank);
  /// Removes boards whose owner process and the peers' processes have all exited (what a killed rank leaves);
  /// returns how many.
  static int sweepStale();

 private:
  struct Segment;
  struct Peer {
    int rank;
    Segment* seg = nullptr;  ///< mapped once the peer made it (only its `mapped` count is written)
    uint64_t compared = 0;   ///< this rank's records up to this seq are compared with (or unknown to) it
  };
  bool readSlot(const Segment* seg, uint64_t seq, CallRecord* out) const;
  /// Maps the peer's segment if it is not yet and the peer made it. Under mutex_.
  void mapPeer(Peer* peer);
  std::string conflictText(const CallRecord& mine, int peer, const CallRecord& theirs) const;

  uint64_t commHash_;
  int rank_;
  std::vector<uint64_t> peerPids_;
  Segment* mine_ = nullptr;
  std::mutex mutex_;  ///< guards what follows
  std::vector<Peer> peers_;
  std::deque<CallRecord> posted_;  ///< this rank's records some peer has not been compared with (at most kSlots)
  std::string conflict_;
};

}  // namespace chorus
