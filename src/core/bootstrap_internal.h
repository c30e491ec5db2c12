// Bootstrap internals shared by bootstrap.cc (the ranks) and bootstrap_root.cc (the root
// thread): the unique id layout, the wire messages, and test seams. Not for other modules,
// except localHostHash().
//
// Wire formats are host-endian (ranks of one job share an architecture, as with NCCL) and
// every connection starts with a magic and the id's secret, checked before anything else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/socket.h"
#include "nccl.h"

namespace chorus {

/// "chorusID": first 8 bytes of every valid ncclUniqueId.
constexpr uint64_t kIdMagic = 0x44497375726f6863ull;
/// First 8 bytes a rank sends to the root.
constexpr uint64_t kHelloMagic = 0x6c6c65482d736863ull;  // "chs-Hell"
/// First 8 bytes of every root reply.
constexpr uint64_t kReplyMagic = 0x796c7065522d6863ull;  // "ch-Reply"
/// First 8 bytes a rank sends when it connects to another rank.
constexpr uint64_t kPeerMagic = 0x726565502d736863ull;  // "chs-Peer"
/// Start of every framed message between ranks (ring steps and point-to-point).
constexpr uint32_t kFrameMagic = 0x43484652u;  // "RFHC"
/// Longest error text carried in a root reply or ring error frame.
constexpr uint32_t kMaxErrorText = 1000;
/// Id flag: the id was derived from NCCL_COMM_ID (the secret is then derived from that string).
constexpr uint32_t kIdFromEnv = 1u;

/// The 128 bytes of an ncclUniqueId.
struct UniqueIdLayout {
  uint64_t magic;    ///< kIdMagic
  uint32_t version;  ///< version of the library that made the id
  uint32_t flags;    ///< kIdFromEnv
  PackedAddr root;   ///< where the root listens
  uint64_t secret;   ///< random; proves a connection belongs to this rendezvous
  uint8_t reserved[72];
  uint64_t checksum;  ///< fnv1a64 of the 120 bytes above
};
static_assert(sizeof(UniqueIdLayout) == NCCL_UNIQUE_ID_BYTES, "unique id layout must fill ncclUniqueId");

/// Rank -> root: the first message on a root connection.
struct HelloMsg {
  uint64_t magic;  ///< kHelloMagic
  uint64_t secret;
  uint32_t version;
  int32_t rank;
  int32_t nranks;
  uint32_t reserved;
  PackedAddr listen;  ///< where this rank accepts connections from other ranks
};

/// Root -> rank: the verdict. code == ncclSuccess carries the ring successor's address;
/// otherwise `textLen` bytes of error text follow.
struct RootReply {
  uint64_t magic;  ///< kReplyMagic
  int32_t code;
  uint32_t textLen;
  PackedAddr next;
};

/// Rank -> rank: the first message on every connection between ranks.
struct PeerHello {
  uint64_t magic;  ///< kPeerMagic
  uint64_t secret;
  int32_t rank;
  int32_t kind;  ///< kConnRing, kConnP2p or kConnProbe
};
/// PeerHello kinds.
constexpr int32_t kConnRing = 1;
constexpr int32_t kConnP2p = 2;
/// A liveness probe (Bootstrap::peerGone): closed at once by the accepting rank, without a warning.
constexpr int32_t kConnProbe = 3;

/// Header of a framed message. Ring: code != 0 means `len` bytes of error text follow instead of data.
struct FrameHeader {
  uint32_t magic;  ///< kFrameMagic
  int32_t code;    ///< ncclSuccess, or the error being forwarded
  int32_t tag;     ///< point-to-point tag (0 on the ring)
  uint32_t reserved;
  uint64_t len;
};

/// FNV-1a 64-bit hash.
/// Version this thread's bootstrap announces (NCCL_VERSION_CODE unless a test overrides it).
uint32_t bootstrapVersion();
/// Test seam: makes this thread's bootstrap announce `version` (0 restores NCCL_VERSION_CODE).
void bootstrapSetVersionForTest(uint32_t version);
/// Hash of the host name and network namespace: equal exactly for ranks that share both.
uint64_t localHostHash();

/// Decodes and validates an id (magic, checksum, address); on failure *why says what is wrong.
bool decodeUniqueId(const ncclUniqueId& id, UniqueIdLayout* out, std::string* why);
/// Fills `id` from its fields (computes the checksum).
void encodeUniqueId(const UniqueIdLayout& layout, ncclUniqueId* id);

/// Starts the detached root thread serving one rendezvous on `listen` (ownership moves to the thread).
/// `timeoutS` bounds the wait for the other ranks once the first one arrived (<= 0: forever).
ncclResult_t startRootThread(Socket listen, uint64_t secret, uint32_t version, double timeoutS);

}  // namespace chorus
