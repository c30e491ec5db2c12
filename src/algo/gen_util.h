// Internal to src/algo: helpers the generator files share to emit steps tersely.
#pragma once

#include <vector>

#include "algo/generators.h"
#include "algo/schedule.h"

namespace chorus {
namespace gen {

/// Block b of the input.
inline BufRef in(int b) { return BufRef{Buf::kInput, b}; }
/// Block b of the output.
inline BufRef out(int b) { return BufRef{Buf::kOutput, b}; }
/// a mod n in [0, n), for negative a too.
inline int mod(int a, int n) { return ((a % n) + n) % n; }
/// Whether n ranks form 2 or more hosts of P ranks each (ScheduleRequest::localRanks): where trees are node-aware and
/// ring and tree channels rotate within the hosts.
inline bool equalHosts(int n, int P) { return P >= 2 && n % P == 0 && n / P >= 2; }

/// Appends steps to a schedule; each call is one step of schedule.h's StepOp, named after it.
class Steps {
 public:
  explicit Steps(Schedule* s) : steps_(&s->steps) {}

  /// send(src) to `to`; with span > 1, blocks src.block .. src.block + span - 1 as one message (Step::span).
  void send(int to, BufRef src, bool final = false, int span = 1) { add(StepOp::kSend, to, -1, src, {}, final, span); }
  /// dst = recv from `from`; with span > 1, into blocks dst.block .. dst.block + span - 1.
  void recv(int from, BufRef dst, int span = 1) { add(StepOp::kRecv, -1, from, {}, dst, false, span); }
  /// send(recv op src).
  void recvReduceSend(int from, int to, BufRef src) { add(StepOp::kRecvReduceSend, to, from, src, {}, false); }
  /// dst = recv op src.
  void recvReduceCopy(int from, BufRef src, BufRef dst, bool final = false) {
    add(StepOp::kRecvReduceCopy, -1, from, src, dst, final);
  }
  /// dst = recv op src; send(dst).
  void recvReduceCopySend(int from, int to, BufRef src, BufRef dst, bool final = false) {
    add(StepOp::kRecvReduceCopySend, to, from, src, dst, final);
  }
  /// dst = recv; send(recv).
  void recvCopySend(int from, int to, BufRef dst) { add(StepOp::kRecvCopySend, to, from, {}, dst, false); }
  /// dst = src, locally.
  void copy(BufRef src, BufRef dst, bool final = false) { add(StepOp::kCopy, -1, -1, src, dst, final); }
  /// dst = dst op src, locally.
  void localReduce(BufRef src, BufRef dst, bool final = false) { add(StepOp::kLocalReduce, -1, -1, src, dst, final); }

 private:
  void add(StepOp op, int sendPeer, int recvPeer, BufRef src, BufRef dst, bool final, int span = 1) {
    Step s;
    s.op = op;
    s.sendPeer = sendPeer;
    s.recvPeer = recvPeer;
    s.src = src;
    s.dst = dst;
    s.final = final;
    s.span = static_cast<uint16_t>(span);
    steps_->push_back(s);
  }

  std::vector<Step>* steps_;
};

// One generator per family. Each fills out->steps (and the layout) for a request that algoSupported() accepted and
// whose nranks >= 2; buildSchedule handles nranks == 1 (a local copy) for all of them.
void genRing(const ScheduleRequest& req, Schedule* out);
void genTree(const ScheduleRequest& req, Schedule* out);
void genDirect(const ScheduleRequest& req, Schedule* out);
void genOneShot(const ScheduleRequest& req, Schedule* out);
void genTwoShot(const ScheduleRequest& req, Schedule* out);
void genHier(const ScheduleRequest& req, Schedule* out);
void genRail(const ScheduleRequest& req, Schedule* out);
void genDoubling(const ScheduleRequest& req, Schedule* out);
/// spanBound() of recursive doubling.
int doublingSpanBound(Coll coll, int nranks);

}  // namespace gen
}  // namespace chorus
