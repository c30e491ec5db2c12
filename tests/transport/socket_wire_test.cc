// White-box tests of the socket transport's wire protocol: one SocketProxy talks to raw
// sockets that play the peer, so that hellos, frames, stashing, failure notices in both
// directions and the flush at shutdown are checked byte by byte.
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/socket.h"
#include "transports/socket/socket_proxy.h"

namespace chorus {
namespace {

constexpr uint64_t kHash = 0x1234abcdull;

FifoGeometry smallGeometry() {
  FifoGeometry g;
  g.nSlots = 4;
  g.slotBytes = 4096;
  g.llLines = 64;
  return g;
}

SockAddr loopback(int port = 0) {
  SockAddr a;
  std::string why;
  EXPECT_EQ(parseAddress("127.0.0.1:" + std::to_string(port), &a, &why), ncclSuccess) << why;
  return a;
}

template <class Pred>
bool waitUntil(Pred pred, double seconds = 5.0) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

uint64_t load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// Rank 0 of a 2-rank communicator whose socket transport is under test; rank 1 is played by
// raw sockets: `peerListen` is rank 1's listen socket, the proxy's own address is `self`.
class SocketWire : public testing::Test {
 protected:
  void SetUp() override {
    comm_.rank = 0;
    comm_.nranks = 2;
    comm_.commHash = kHash;
    comm_.peers.resize(2);
    ASSERT_TRUE(Socket::listen(loopback(), &peerListen_).ok());
    Socket mine;
    ASSERT_TRUE(Socket::listen(loopback(), &mine).ok());
    self_ = mine.local();
    proxy_ = std::make_unique<SocketProxy>(&comm_, std::move(mine), std::vector<SockAddr>{self_, peerListen_.local()});
    ASSERT_EQ(proxy_->start(), ncclSuccess);
  }
  void TearDown() override { proxy_.reset(); }

  // Connects to the proxy as rank `from` and sends a hello (fields overridable by `edit`).
  template <class Edit>
  Socket connectAsPeer(int channel, Edit edit) {
    Socket s;
    EXPECT_TRUE(Socket::connect(self_, Deadline::after(5), nullptr, &s).ok());
    SocketHello h;
    h.commHash = kHash;
    h.channel = channel;
    h.from = 1;
    h.to = 0;
    h.nSlots = geo_.nSlots;
    h.slotBytes = geo_.slotBytes;
    edit(h);
    EXPECT_TRUE(s.sendAll(&h, sizeof(h), Deadline::after(5), nullptr).ok());
    return s;
  }
  Socket connectAsPeer(int channel) {
    return connectAsPeer(channel, [](SocketHello&) {});
  }

  void sendFrame(Socket& s, uint64_t seq, const std::vector<char>& payload) {
    SlotHeader h{};
    h.seq = seq;
    h.bytes = static_cast<uint32_t>(payload.size());
    ASSERT_TRUE(s.sendAll(&h, sizeof(h), Deadline::after(5), nullptr).ok());
    ASSERT_TRUE(s.sendAll(payload.data(), payload.size(), Deadline::after(5), nullptr).ok());
  }

  // Whether the proxy closed `s`: EOF (or reset) before `seconds`.
  static bool closedByProxy(Socket& s, double seconds = 5.0) {
    char c;
    IoResult r = s.recvAll(&c, 1, Deadline::after(seconds), nullptr);
    return r.status == IoStatus::kEof || r.status == IoStatus::kReset;
  }

  ncclComm comm_;
  FifoGeometry geo_ = smallGeometry();
  Socket peerListen_;
  SockAddr self_;
  std::unique_ptr<SocketProxy> proxy_;
};

TEST_F(SocketWire, RejectsStrangersAndDeliversStashedFrames) {
  Socket wrongComm = connectAsPeer(0, [](SocketHello& h) { h.commHash = kHash + 1; });
  Socket wrongMagic = connectAsPeer(0, [](SocketHello& h) { h.magic = 42; });
  Socket wrongRank = connectAsPeer(0, [](SocketHello& h) { h.to = 1; });
  EXPECT_TRUE(closedByProxy(wrongComm));
  EXPECT_TRUE(closedByProxy(wrongMagic));
  EXPECT_TRUE(closedByProxy(wrongRank));

  // The sender connects and writes before the receive side is registered: the proxy stashes it.
  Socket peer = connectAsPeer(0);
  std::vector<char> a(100, 'a'), b(geo_.slotBytes, 'b'), none;
  sendFrame(peer, 1, a);
  sendFrame(peer, 2, b);
  sendFrame(peer, 3, none);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Fifo f;
  ASSERT_EQ(proxy_->connectRecv(0, 1, geo_, &f), ncclSuccess);
  ASSERT_TRUE(waitUntil([&] { return load(&f.ctrl->tail) == 3; })) << "tail " << load(&f.ctrl->tail);
  EXPECT_EQ(f.hdrs[0].seq, 1u);
  EXPECT_EQ(f.hdrs[0].bytes, 100u);
  EXPECT_EQ(std::memcmp(f.data, a.data(), a.size()), 0);
  EXPECT_EQ(f.hdrs[1].bytes, geo_.slotBytes);
  EXPECT_EQ(std::memcmp(f.data + geo_.slotBytes, b.data(), b.size()), 0);
  EXPECT_EQ(f.hdrs[2].bytes, 0u);
  EXPECT_EQ(load(&f.ctrl->poison), 0u);

  // A clean close between frames poisons only after the executor consumed what arrived.
  peer.close();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(load(&f.ctrl->poison), 0u) << "poisoned while published slots were unread";
  store(&f.ctrl->head, 3);
  ASSERT_TRUE(waitUntil([&] { return load(&f.ctrl->poison) != 0; }));
  EXPECT_EQ(load(&f.ctrl->poison), makePoison(PoisonReason::kPeerDied, 1));
}

TEST_F(SocketWire, ReceiveSideStopsWhenFullAndResumes) {
  Fifo f;
  ASSERT_EQ(proxy_->connectRecv(0, 1, geo_, &f), ncclSuccess);
  Socket peer = connectAsPeer(0);
  const int frames = 3 * static_cast<int>(geo_.nSlots);
  std::thread writer([&] {
    for (int i = 0; i < frames; i++) sendFrame(peer, static_cast<uint64_t>(i), std::vector<char>(1000, char(i)));
  });
  // Play the executor: consume slot by slot and check every frame lands in order.
  for (int i = 0; i < frames; i++) {
    ASSERT_TRUE(waitUntil([&] { return load(&f.ctrl->tail) > static_cast<uint64_t>(i); })) << "frame " << i;
    EXPECT_LE(load(&f.ctrl->tail) - i, geo_.nSlots) << "the proxy overran the FIFO";
    uint32_t slot = i % geo_.nSlots;
    EXPECT_EQ(f.hdrs[slot].seq, static_cast<uint64_t>(i));
    EXPECT_EQ(f.data[static_cast<size_t>(slot) * geo_.slotBytes + 999], char(i));
    store(&f.ctrl->head, i + 1);
  }
  writer.join();
}

TEST_F(SocketWire, PoisonFrameFromPeerReachesTheFifo) {
  Fifo f;
  ASSERT_EQ(proxy_->connectRecv(2, 1, geo_, &f), ncclSuccess);
  Socket peer = connectAsPeer(2);
  SlotHeader notice{};
  notice.seq = makePoison(PoisonReason::kTimeout, 1);
  notice.bytes = kPoisonFrameBytes;
  ASSERT_TRUE(peer.sendAll(&notice, sizeof(notice), Deadline::after(5), nullptr).ok());
  ASSERT_TRUE(waitUntil([&] { return load(&f.ctrl->poison) != 0; }));
  EXPECT_EQ(load(&f.ctrl->poison), makePoison(PoisonReason::kTimeout, 1));
  EXPECT_EQ(load(&f.ctrl->tail), 0u);
}

TEST_F(SocketWire, SendSideWritesHelloAndFramesAndFreesSlots) {
  Fifo f;
  ASSERT_EQ(proxy_->connectSend(5, 1, geo_, &f), ncclSuccess);
  Socket in;
  ASSERT_TRUE(peerListen_.accept(&in, Deadline::after(5), nullptr).ok());
  SocketHello h;
  ASSERT_TRUE(in.recvAll(&h, sizeof(h), Deadline::after(5), nullptr).ok());
  EXPECT_EQ(h.magic, kSocketHelloMagic);
  EXPECT_EQ(h.commHash, kHash);
  EXPECT_EQ(h.channel, 5);
  EXPECT_EQ(h.from, 0);
  EXPECT_EQ(h.to, 1);
  EXPECT_EQ(h.nSlots, geo_.nSlots);
  EXPECT_EQ(h.slotBytes, geo_.slotBytes);

  // Play the executor: publish more slots than the FIFO holds, reusing them as head frees them.
  const uint32_t sizes[] = {0, 1, 4096, 333, 4095, 7, 4096, 12};
  std::thread producer([&] {
    for (uint64_t s = 0; s < 8; s++) {
      while (s - load(&f.ctrl->head) >= geo_.nSlots) std::this_thread::yield();
      uint32_t slot = s % geo_.nSlots;
      f.hdrs[slot] = SlotHeader{};
      f.hdrs[slot].seq = 100 + s;
      f.hdrs[slot].bytes = sizes[s];
      std::memset(f.data + static_cast<size_t>(slot) * geo_.slotBytes, static_cast<int>('A' + s), sizes[s]);
      store(&f.ctrl->tail, s + 1);
    }
  });
  for (uint64_t s = 0; s < 8; s++) {
    SlotHeader got;
    ASSERT_TRUE(in.recvAll(&got, sizeof(got), Deadline::after(5), nullptr).ok());
    EXPECT_EQ(got.seq, 100 + s);
    ASSERT_EQ(got.bytes, sizes[s]);
    std::vector<char> payload(got.bytes);
    ASSERT_TRUE(in.recvAll(payload.data(), payload.size(), Deadline::after(5), nullptr).ok());
    EXPECT_EQ(payload, std::vector<char>(sizes[s], static_cast<char>('A' + s))) << "frame " << s;
  }
  producer.join();
  ASSERT_TRUE(waitUntil([&] { return load(&f.ctrl->head) == 8; }));

  // The receiver's failure notice (8 bytes back) poisons the send FIFO with its word.
  uint64_t word = makePoison(PoisonReason::kMismatch, 1);
  ASSERT_TRUE(in.sendAll(&word, sizeof(word), Deadline::after(5), nullptr).ok());
  ASSERT_TRUE(waitUntil([&] { return load(&f.ctrl->poison) != 0; }));
  EXPECT_EQ(load(&f.ctrl->poison), word);
}

TEST_F(SocketWire, LocalPoisonIsPassedOnThenClosed) {
  Fifo sf, rf;
  ASSERT_EQ(proxy_->connectSend(0, 1, geo_, &sf), ncclSuccess);
  Socket in;
  ASSERT_TRUE(peerListen_.accept(&in, Deadline::after(5), nullptr).ok());
  SocketHello h;
  ASSERT_TRUE(in.recvAll(&h, sizeof(h), Deadline::after(5), nullptr).ok());
  ASSERT_EQ(proxy_->connectRecv(0, 1, geo_, &rf), ncclSuccess);
  Socket out = connectAsPeer(0);

  uint64_t word = makePoison(PoisonReason::kPeerDied, 1);
  store(&sf.ctrl->poison, word);
  store(&rf.ctrl->poison, word);
  SlotHeader notice;
  ASSERT_TRUE(in.recvAll(&notice, sizeof(notice), Deadline::after(5), nullptr).ok());
  EXPECT_EQ(notice.bytes, kPoisonFrameBytes);
  EXPECT_EQ(notice.seq, word);
  EXPECT_TRUE(closedByProxy(in));
  uint64_t back = 0;
  ASSERT_TRUE(out.recvAll(&back, sizeof(back), Deadline::after(5), nullptr).ok());
  EXPECT_EQ(back, word);
  EXPECT_TRUE(closedByProxy(out));
}

// A status query gets 0 from a healthy proxy. Once the rank failed (markFailed), the proxy answers queries, new
// connections and connections it had stashed with the poison word, so that a peer reaching it late learns the cause.
TEST_F(SocketWire, FailedRankAnswersLateConnectionsWithItsPoisonWord) {
  auto query = [&]() {
    Socket s = connectAsPeer(kStatusQueryChannel);
    uint64_t word = ~0ull;
    EXPECT_TRUE(s.recvAll(&word, sizeof(word), Deadline::after(5), nullptr).ok());
    EXPECT_TRUE(closedByProxy(s));
    return word;
  };
  EXPECT_EQ(query(), 0u) << "a healthy rank answers 0";
  Socket early = connectAsPeer(3);  // stashed: this rank never registered channel 3
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const uint64_t word = makePoison(PoisonReason::kPeerDied, 1);
  proxy_->markFailed(word);
  proxy_->markFailed(makePoison(PoisonReason::kError, 0));  // the first failure is the cause
  EXPECT_EQ(query(), word);
  uint64_t got = 0;
  ASSERT_TRUE(early.recvAll(&got, sizeof(got), Deadline::after(5), nullptr).ok()) << "the stashed sender is told";
  EXPECT_EQ(got, word);
  Socket late = connectAsPeer(0);
  got = 0;
  ASSERT_TRUE(late.recvAll(&got, sizeof(got), Deadline::after(5), nullptr).ok()) << "a new sender is told";
  EXPECT_EQ(got, word);
  EXPECT_TRUE(closedByProxy(late));
}

TEST_F(SocketWire, ShutdownFlushesPublishedSlots) {
  Fifo f;
  ASSERT_EQ(proxy_->connectSend(0, 1, geo_, &f), ncclSuccess);
  Socket in;
  ASSERT_TRUE(peerListen_.accept(&in, Deadline::after(5), nullptr).ok());
  // Nobody reads yet: publish until the socket buffers are full and the FIFO is full behind them,
  // so that shutdown() starts with published slots the kernel has not taken.
  uint64_t s = 0, lastHead = 0;
  auto lastMove = std::chrono::steady_clock::now();
  for (;;) {
    uint64_t head = load(&f.ctrl->head);
    auto now = std::chrono::steady_clock::now();
    if (head != lastHead) lastHead = head, lastMove = now;
    if (s - head < geo_.nSlots) {
      uint32_t slot = s % geo_.nSlots;
      f.hdrs[slot] = SlotHeader{};
      f.hdrs[slot].seq = s;
      f.hdrs[slot].bytes = geo_.slotBytes;
      store(&f.ctrl->tail, ++s);
      continue;
    }
    if (now - lastMove > std::chrono::milliseconds(100)) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_EQ(s - load(&f.ctrl->head), geo_.nSlots);
  size_t expected = sizeof(SocketHello) + s * (sizeof(SlotHeader) + geo_.slotBytes);
  size_t received = 0;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<char> buf(1 << 16);
    for (;;) {
      size_t got = 0;
      IoResult r = in.recvSome(buf.data(), buf.size(), &got);
      received += got;
      if (!r.ok()) break;
      if (got == 0) waitFd(in.fd(), POLLIN, Deadline::after(5), nullptr, "test");
    }
  });
  proxy_->shutdown();  // returns once every published slot is in the kernel
  reader.join();
  EXPECT_EQ(received, expected) << s << " slots published";
  EXPECT_EQ(load(&f.ctrl->head), s);
}

}  // namespace
}  // namespace chorus
