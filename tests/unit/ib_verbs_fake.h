// An in-process fake of the verbs the IB net uses (ib_verbs.h), so that the net's whole state machine runs on a
// machine without an HCA: an RDMA write is a memcpy into the registered memory of the queue pair it is connected to,
// completion queues are plain queues, and the fabric checks what real hardware would (queue pair states, keys and
// bounds of both memory regions, a posted receive for every immediate, CQ overruns), reporting a violation as an
// error completion the way an HCA does.
//
// Threading: every fake object takes the fabric's mutex, so the fake may be driven from several threads; a receiver
// that polls its FIFO without the mutex (as the net does) then races with memcpy, which real DMA does too, so tests
// drive both ends from one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transports/ib/ib_verbs.h"

namespace chorus {

class FakeIbQp;
class FakeIbCq;

/// The fabric every fake HCA of a test is attached to.
class FakeIbFabric {
 public:
  /// One RDMA write as the fabric carried it.
  struct WriteRecord {
    uint32_t srcQpn = 0;
    uint32_t dstQpn = 0;
    size_t length = 0;
    bool withImm = false;
    uint32_t imm = 0;
  };

  /// Makes the next write posted on any queue pair complete with `status` (an IbWcStatus) instead of being carried,
  /// and moves that queue pair to the error state, as a failing HCA does.
  void failNextWrite(int status);
  /// Every write carried so far, in order.
  std::vector<WriteRecord> writes() const;
  /// Forgets the writes carried so far.
  void clearWrites();
  /// Queue pairs that exist.
  int liveQps() const;
  /// Memory registrations that exist.
  int liveMrs() const;

 private:
  friend class FakeIbQp;
  friend class FakeIbCq;
  friend class FakeIbHca;
  struct MrRec {
    uint64_t addr;
    size_t size;
  };
  bool covers(uint32_t key, uint64_t addr, size_t len) const;  // mu_ held

  mutable std::mutex mu_;
  uint32_t nextQpn_ = 0x100;
  uint32_t nextKey_ = 0x1000;
  std::map<uint32_t, FakeIbQp*> qps_;
  std::map<uint32_t, MrRec> mrs_;  // by key; a registration's lkey and rkey are equal
  int failStatus_ = kIbWcSuccess;
  std::vector<WriteRecord> log_;
};

/// A "host": the fake HCAs (ports) a test makes up, over a shared fabric.
class FakeIbVerbs : public IbVerbs {
 public:
  /// Offers `ports` (their hca names are the HCAs openHca() opens).
  FakeIbVerbs(std::shared_ptr<FakeIbFabric> fabric, std::vector<IbPortDesc> ports);
  const char* name() const override { return "fake verbs"; }
  ncclResult_t listPorts(std::vector<IbPortDesc>* out, std::string* why) override;
  ncclResult_t openHca(const std::string& hca, std::unique_ptr<IbHca>* out) override;
  const char* statusText(int status) const override;

 private:
  std::shared_ptr<FakeIbFabric> fabric_;
  std::vector<IbPortDesc> ports_;
};

/// A made-up active RoCE port with one RoCE v2 IPv4 GID (10.0.0.<n>), for tests.
IbPortDesc fakeIbPort(const std::string& hca, int port, int n);

}  // namespace chorus
