// Socket transport wire format. One TCP connection carries one one-way FIFO (channel, from -> to).
//
//   sender -> receiver:  SocketHello, then frames: SlotHeader (32 bytes) + header.bytes payload bytes.
//                        A frame whose header.bytes == kPoisonFrameBytes is a failure notice: header.seq
//                        holds the sender's FIFO poison word; the sender closes right after it.
//   receiver -> sender:  nothing, except one 8-byte poison word when the receiving rank fails; then it closes.
//   status query:        a SocketHello with channel kStatusQueryChannel; the listener answers with its poison word
//                        (0 while healthy) and closes. A receive side whose sender has not connected asks this.
//   A rank that failed keeps listening until its communicator is destroyed and answers every later connection
//   with its poison word, so that peers that reach it only now still learn the cause (the culprit it names).
//
// Both ends run the same build (the bootstrap refuses version mismatches), so the structs travel as
// they are, in host byte order.
#pragma once

#include <cstdint>

#include "kernels/fifo.h"

namespace chorus {

/// Magic that opens every socket-transport connection ("chsock01").
constexpr uint64_t kSocketHelloMagic = 0x31306b636f736863ull;

/// First message on a connection: who is sending, for which communicator and channel, with which geometry.
struct SocketHello {
  uint64_t magic = kSocketHelloMagic;
  uint64_t commHash = 0;
  int32_t channel = 0;
  int32_t from = -1;  ///< sending rank
  int32_t to = -1;    ///< receiving rank (the listener's owner)
  uint32_t nSlots = 0;
  uint32_t slotBytes = 0;
  uint32_t pad = 0;
};
static_assert(sizeof(SocketHello) == 40, "SocketHello is a wire format");
static_assert(sizeof(SlotHeader) == 32, "SlotHeader is a wire format");

/// SocketHello::channel of a status query (see the top of this file).
constexpr int32_t kStatusQueryChannel = -2;

/// SlotHeader::bytes value that marks a failure-notice frame (never a valid payload size).
constexpr uint32_t kPoisonFrameBytes = 0xffffffffu;

/// Packs a FIFO poison word: (reason << 32) | (culprit rank + 1).
inline uint64_t makePoison(PoisonReason reason, int culprit) {
  return (static_cast<uint64_t>(reason) << 32) | static_cast<uint64_t>(static_cast<uint32_t>(culprit + 1));
}

/// Whether a poison word received from a peer is well formed for a communicator of `nranks`.
inline bool poisonWordValid(uint64_t word, int nranks) {
  uint32_t reason = static_cast<uint32_t>(word >> 32);
  uint32_t culpritPlus1 = static_cast<uint32_t>(word);
  return reason >= static_cast<uint32_t>(PoisonReason::kPeerDied) &&
         reason <= static_cast<uint32_t>(PoisonReason::kError) && culpritPlus1 >= 1 &&
         culpritPlus1 <= static_cast<uint32_t>(nranks);
}

}  // namespace chorus
