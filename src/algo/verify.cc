// Symbolic verifier (verify.h): simulates every rank of one channel on symbolic values.
//
// Cost: O(steps * tiles) simulated steps, each O(1) for the contiguous contribution sets real schedules build. A
// worklist (a stack: a woken rank runs next, while the FIFO it waited on is still in cache) holds the ranks that may
// advance; a blocked rank waits on exactly one FIFO and is woken when that FIFO changes, so the simulation never
// scans idle ranks. Block contents are value ids (4 bytes a block per tile): input leaves are encoded in the id, other
// values interned. Messages hold whole values, so memory is O(FIFOs * fifoDepth): O(n^2) for direct schedules.
#include "algo/verify.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "algo/rank_set.h"

namespace chorus {

namespace {

/// splitmix64's finaliser: spreads bits so that the hashes below rarely collide.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A symbolic block value. `expr` hashes the expression tree (commutative at each node), so two ranks that reduce
/// the same contributions in different association orders (bitwise different floats) hold different values.
struct Value {
  int32_t elem = 0;  ///< logical element: block index (reducing) or global input block id (non-reducing)
  int32_t tile = 0;
  uint64_t expr = 0;
  bool finalized = false;  ///< post-op applied
  RankSet ranks;           ///< contributing ranks

  bool operator==(const Value& o) const {
    return elem == o.elem && tile == o.tile && expr == o.expr && finalized == o.finalized && ranks == o.ranks;
  }
};

/// Interned values: id -> value, and value -> id by open addressing (ids start at 1; the table holds
/// (hash's high half, id) so that most probes compare no value).
class ValueTable {
 public:
  ValueTable() : values_(1), slots_(1024, 0) {}

  /// The id of v, adding it if new.
  uint32_t intern(const Value& v) {
    const uint64_t h = mix(v.expr ^ (static_cast<uint64_t>(v.elem) << 20) ^ v.tile ^ (v.finalized ? 7 : 0));
    const uint64_t tag = h & ~0xffffffffull;
    size_t i = static_cast<size_t>(h) & (slots_.size() - 1);
    for (; slots_[i] != 0; i = (i + 1) & (slots_.size() - 1)) {
      const uint32_t id = static_cast<uint32_t>(slots_[i]);
      if ((slots_[i] & ~0xffffffffull) == tag && values_[id] == v) return id;
    }
    const uint32_t id = static_cast<uint32_t>(values_.size());
    values_.push_back(v);
    slots_[i] = tag | id;
    if (2 * values_.size() > slots_.size()) grow();
    return id;
  }

  /// The value of an id intern() returned.
  const Value& operator[](uint32_t id) const { return values_[id]; }

 private:
  void grow() {
    std::vector<uint64_t> old(slots_.size() * 2, 0);
    old.swap(slots_);
    for (uint64_t e : old) {
      if (e == 0) continue;
      const Value& v = values_[static_cast<uint32_t>(e)];
      const uint64_t h = mix(v.expr ^ (static_cast<uint64_t>(v.elem) << 20) ^ v.tile ^ (v.finalized ? 7 : 0));
      size_t i = static_cast<size_t>(h) & (slots_.size() - 1);
      while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = e;
    }
  }

  std::vector<Value> values_;    // [0] unused: id 0 means "no value"
  std::vector<uint64_t> slots_;  // power-of-two size, at most half full
};

/// One message in flight: the value and the sender's step, for reports.
struct Message {
  Value value;                ///< the first block's
  std::vector<Value> others;  ///< blocks 1 .. span - 1 of a step that moves several (Step::span)
  int32_t step = 0;
  int32_t span = 1;
};

/// Bounded FIFO of one ordered pair; its messages live in Verifier::slots_ at base..base+depth-1.
struct Fifo {
  int src = 0;
  int dst = 0;
  int head = 0;
  int count = 0;
};

/// Builds a string from streamable parts.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

class Verifier {
 public:
  Verifier(const std::vector<Schedule>& s, const VerifyOptions& opt)
      : s_(s), opt_(opt), n_(static_cast<int>(s.size())) {}

  std::string run() {
    std::string e = checkHeaders();
    if (e.empty()) e = checkSteps();
    if (!e.empty()) return e;
    setup();
    e = simulate();
    if (e.empty()) e = checkLeftovers();
    if (e.empty()) e = checkFinal();
    return e;
  }

 private:
  // ---- static checks -------------------------------------------------------------------------------------------

  std::string checkHeaders() {
    if (n_ == 0) return "no schedules";
    if (opt_.fifoDepth < 1 || opt_.tiles < 1) {
      return cat("bad options: fifoDepth ", opt_.fifoDepth, " tiles ", opt_.tiles);
    }
    coll_ = s_[0].coll;
    root_ = s_[0].root;
    if (coll_ >= Coll::kNumColls) return "rank 0: unknown collective";
    reduces_ = collReduces(coll_);
    if (collRooted(coll_) && (root_ < 0 || root_ >= n_)) return cat("root ", root_, " out of range [0, ", n_, ")");
    for (int r = 0; r < n_; ++r) {
      const Schedule& s = s_[r];
      if (s.rank != r || s.nranks != n_) {
        return cat("schedules[", r, "] is for rank ", s.rank, " of ", s.nranks, ", expected rank ", r, " of ", n_);
      }
      if (s.coll != coll_) return cat("rank ", r, " runs ", collName(s.coll), ", rank 0 runs ", collName(coll_));
      if (collRooted(coll_) && s.root != root_) return cat("rank ", r, " has root ", s.root, ", rank 0 has ", root_);
      if (s.inBlocks < 0 || s.outBlocks < 0) return cat("rank ", r, " has negative block counts");
    }
    if (coll_ == Coll::kSendRecv) return checkSendRecvLayout();
    int in = s_[0].inBlocks, out = s_[0].outBlocks;
    bool ok = true;
    switch (coll_) {
      case Coll::kAllReduce:
      case Coll::kBroadcast:
      case Coll::kReduce:
        ok = in == out && in >= 1;
        break;
      case Coll::kAllGather:
      case Coll::kGather:
        ok = in == 1 && out == n_;
        break;
      case Coll::kReduceScatter:
      case Coll::kScatter:
        ok = in == n_ && out == 1;
        break;
      case Coll::kAllToAll:
        ok = in == n_ && out == n_;
        break;
      default:
        break;
    }
    if (!ok) return cat(collName(coll_), " over ", n_, " ranks cannot use inBlocks=", in, " outBlocks=", out);
    for (int r = 1; r < n_; ++r) {
      if (s_[r].inBlocks != in || s_[r].outBlocks != out) {
        return cat("rank ", r, " has inBlocks=", s_[r].inBlocks, " outBlocks=", s_[r].outBlocks, ", rank 0 has ", in,
                   "/", out);
      }
    }
    return "";
  }

  // Derives each rank's send and receive lists from the pairs, as the group call numbers them.
  std::string checkSendRecvLayout() {
    sends_.assign(n_, {});
    recvs_.assign(n_, {});
    for (const auto& p : opt_.sendRecvPairs) {
      if (p.first < 0 || p.first >= n_ || p.second < 0 || p.second >= n_) {
        return cat("send/recv pair (", p.first, ", ", p.second, ") out of range [0, ", n_, ")");
      }
      sends_[p.first].push_back(p.second);
      recvs_[p.second].push_back(p.first);
    }
    for (int r = 0; r < n_; ++r) {
      if (s_[r].inBlocks != static_cast<int>(sends_[r].size()) ||
          s_[r].outBlocks != static_cast<int>(recvs_[r].size())) {
        return cat("rank ", r, " has inBlocks=", s_[r].inBlocks, " outBlocks=", s_[r].outBlocks, ", the pairs give ",
                   sends_[r].size(), " sends and ", recvs_[r].size(), " receives");
      }
    }
    return "";
  }

  std::string checkRef(const Schedule& s, BufRef ref, const char* what, bool needed, int span) {
    if (!needed) return ref.buf == Buf::kNone ? "" : cat(what, " is set but the op has none");
    if (ref.buf == Buf::kNone) return cat(what, " is missing");
    const int blocks = ref.buf == Buf::kInput ? s.inBlocks : s.outBlocks;
    if (ref.buf != Buf::kInput && ref.buf != Buf::kOutput) return cat(what, " names an unknown buffer");
    if (ref.block < 0 || ref.block >= blocks) {
      return cat(what, " block ", ref.block, " out of range [0, ", blocks, ")");
    }
    if (span > 1 && ref.block + span > blocks) {
      return cat(what, " blocks ", ref.block, "..", ref.block + span - 1, " out of range [0, ", blocks, ")");
    }
    return "";
  }

  std::string checkPeer(int rank, int peer, bool needed, const char* what) {
    if (!needed) return peer == -1 ? "" : cat(what, " ", peer, " set but the op does not use one");
    if (peer < 0 || peer >= n_) return cat(what, " ", peer, " out of range [0, ", n_, ")");
    if (peer == rank) return cat(what, " is the rank itself");
    return "";
  }

  std::string checkSteps() {
    for (int r = 0; r < n_; ++r) {
      const Schedule& s = s_[r];
      for (size_t i = 0; i < s.steps.size(); ++i) {
        const Step& st = s.steps[i];
        std::string e;
        if (st.op >= StepOp::kNumStepOps) {
          e = "unknown op";
        } else {
          const bool hasSrc = st.op != StepOp::kRecv && st.op != StepOp::kRecvCopySend;
          const bool hasDst = st.op != StepOp::kSend && st.op != StepOp::kRecvReduceSend;
          if (st.span < 1) e = "span 0";
          if (st.span > 1 && st.op != StepOp::kSend && st.op != StepOp::kRecv)
            e = cat("span ", st.span, " on an op other than send or recv");
          if (e.empty()) e = checkPeer(r, st.recvPeer, stepRecvs(st.op), "recvPeer");
          if (e.empty()) e = checkPeer(r, st.sendPeer, stepSends(st.op), "sendPeer");
          if (e.empty()) e = checkRef(s, st.src, "src", hasSrc, st.span);
          if (e.empty()) e = checkRef(s, st.dst, "dst", hasDst, st.span);
          if (e.empty() && hasDst && st.dst.buf != Buf::kOutput) e = "writes the input buffer";
        }
        if (!e.empty()) return cat("rank ", r, " step ", i, " (", formatStep(st), "): ", e);
      }
    }
    return "";
  }

  // ---- simulation state ----------------------------------------------------------------------------------------

  bool hasInput(int r) const { return !(coll_ == Coll::kBroadcast || coll_ == Coll::kScatter) || r == root_; }
  bool outputChecked(int r) const { return !(coll_ == Coll::kReduce || coll_ == Coll::kGather) || r == root_; }

  // Output block j's memory: its own slot (inBlocks + j), or the input block it aliases in place.
  int aliasedInput(int r, int j) const {
    if (!opt_.inPlace) return -1;
    switch (coll_) {
      case Coll::kAllReduce:
      case Coll::kBroadcast:
      case Coll::kReduce:
      case Coll::kAllToAll:
        return j;
      case Coll::kAllGather:
        return j == r ? 0 : -1;
      case Coll::kReduceScatter:
        return r;
      case Coll::kGather:
        return r == root_ && j == root_ ? 0 : -1;
      case Coll::kScatter:
        return r == root_ ? root_ : -1;
      default:
        return -1;
    }
  }

  void setup() {
    // A lagged schedule runs enough tiles to reach the steady state, where every rank runs a part of two tiles in a
    // round (algo/schedule.h, TileOrder), and to drain it.
    tiles_ = opt_.tiles;
    for (const Schedule& s : s_)
      if (s.lagFrom >= 0 && s.lag > 0) tiles_ = std::max(tiles_, s.lag + 2);
    int64_t slotTotal = 0, stepTotal = 0;
    inOffset_.resize(n_);
    int32_t offset = 0;
    slotBase_.resize(n_);
    stepBase_.resize(n_);
    outSlot_.resize(n_);
    inAlias_.resize(n_);
    for (int r = 0; r < n_; ++r) {
      const Schedule& s = s_[r];
      inOffset_[r] = offset;
      offset += s.inBlocks;
      slotBase_[r] = slotTotal;
      slotTotal += static_cast<int64_t>(s.inBlocks + s.outBlocks) * tiles_;
      stepBase_[r] = stepTotal;
      stepTotal += static_cast<int64_t>(s.steps.size());
      outSlot_[r].resize(s.outBlocks);
      inAlias_[r].assign(s.inBlocks, -1);
      for (int j = 0; j < s.outBlocks; ++j) {
        const int a = aliasedInput(r, j);
        outSlot_[r][j] = a >= 0 ? a : s.inBlocks + j;
        if (a >= 0) inAlias_[r][a] = j;
      }
    }
    blockValue_.assign(slotTotal, 0);

    // One FIFO per ordered pair that some step uses, found once here instead of per simulated step.
    std::unordered_map<int64_t, int> fifoOf;
    auto fifoId = [&](int src, int dst) {
      const int64_t key = static_cast<int64_t>(src) * n_ + dst;
      auto it = fifoOf.find(key);
      if (it != fifoOf.end()) return it->second;
      const int id = static_cast<int>(fifos_.size());
      fifos_.push_back(Fifo{src, dst, 0, 0});
      fifoOf.emplace(key, id);
      return id;
    };
    recvFifo_.assign(stepTotal, -1);
    sendFifo_.assign(stepTotal, -1);
    for (int r = 0; r < n_; ++r) {
      for (size_t i = 0; i < s_[r].steps.size(); ++i) {
        const Step& st = s_[r].steps[i];
        if (stepRecvs(st.op)) recvFifo_[stepBase_[r] + i] = fifoId(st.recvPeer, r);
        if (stepSends(st.op)) sendFifo_[stepBase_[r] + i] = fifoId(r, st.sendPeer);
      }
    }
    messages_.resize(fifos_.size() * static_cast<size_t>(opt_.fifoDepth));
  }

  uint32_t& slot(int r, int tile, int slotIndex) {
    return blockValue_[slotBase_[r] + static_cast<int64_t>(tile) * (s_[r].inBlocks + s_[r].outBlocks) + slotIndex];
  }

  static uint64_t leafExpr(int r, int block, int tile) {
    return mix(mix(mix(static_cast<uint64_t>(r)) + static_cast<uint64_t>(block)) + static_cast<uint64_t>(tile));
  }

  Value leaf(int r, int block, int tile) const {
    Value v;
    v.elem = reduces_ ? block : inOffset_[r] + block;
    v.tile = tile;
    v.ranks = RankSet::of(r);
    v.expr = leafExpr(r, block, tile);
    return v;
  }

  // Block ids: 0 is the input (input slots) or nothing yet (output slots); kLeafTag | g is input block g of
  // inOffset_'s global numbering, unmodified (most blocks of non-reducing collectives; no table needed); other ids
  // index values_. A stored value's tile is always its slot's tile (messages of another tile are refused), so ids
  // leave the tile out.
  static constexpr uint32_t kLeafTag = 0x80000000u;

  uint32_t store(const Value& v) {
    if (!v.finalized && v.ranks.ranges() == 1 && v.ranks.data()[0].hi - v.ranks.data()[0].lo == 1) {
      const int o = v.ranks.data()[0].lo;
      const int block = reduces_ ? v.elem : v.elem - inOffset_[o];
      const int64_t g = static_cast<int64_t>(inOffset_[o]) + block;
      if (block >= 0 && block < s_[o].inBlocks && g < kLeafTag && v.expr == leafExpr(o, block, v.tile)) {
        return kLeafTag | static_cast<uint32_t>(g);
      }
    }
    return values_.intern(v);
  }

  Value load(uint32_t id, int tile) const {
    if (id & kLeafTag) {
      const int32_t g = static_cast<int32_t>(id & ~kLeafTag);
      const int o = static_cast<int>(std::upper_bound(inOffset_.begin(), inOffset_.end(), g) - inOffset_.begin()) - 1;
      return leaf(o, g - inOffset_[o], tile);
    }
    return values_[id];
  }

  std::string describe(const Value& v) const {
    std::string d;
    if (reduces_) {
      d = cat("block ", v.elem, " of ranks ", v.ranks.str(), v.finalized ? " (final)" : "");
    } else {
      const int origin = v.ranks.ranges() > 0 ? v.ranks.data()[0].lo : -1;
      d = origin >= 0 && origin < n_ ? cat("rank ", origin, "'s in[", v.elem - inOffset_[origin], "]") : "nothing";
    }
    return cat(d, " tile ", v.tile);
  }

  // ---- step execution ------------------------------------------------------------------------------------------

  /// Records a problem for the step being run; returns false so that callers can `return fail(...)`.
  template <typename... Args>
  bool fail(const Args&... args) {
    err_ = cat(args...);
    return false;
  }

  bool read(int r, int tile, BufRef ref, Value* v) {
    if (ref.buf == Buf::kInput) {
      if (!hasInput(r)) return fail("reads in[", ref.block, "], but only the root has an input in ", collName(coll_));
      *v = leaf(r, ref.block, tile);
      const uint32_t id = slot(r, tile, ref.block);
      // A reducing collective re-applies the pre-multiplier to whatever it reads from the input, so even an
      // identical value written back (a self-copy) is corrupt when read again as input.
      if (id != 0 && (reduces_ || !(load(id, tile) == *v))) {
        return fail("in-place alias corruption: reads in[", ref.block, "] after out[", inAlias_[r][ref.block],
                    "], the same memory in place, was overwritten");
      }
      return true;
    }
    const int s = outSlot_[r][ref.block];
    const uint32_t id = slot(r, tile, s);
    if (id == 0) {
      return fail("reads out[", ref.block, "] before anything was written there",
                  s < s_[r].inBlocks ? " (in place it still holds the input)" : "");
    }
    *v = load(id, tile);
    return true;
  }

  bool combine(const Value& a, const Value& b, Value* out) {
    if (!reduces_) return fail("reduces, but ", collName(coll_), " does not combine values");
    if (a.elem != b.elem || a.tile != b.tile) {
      return fail("reduces values of different logical elements: ", describe(a), " and ", describe(b));
    }
    if (a.finalized || b.finalized) {
      return fail("reduces a value that is already final: ", describe(a.finalized ? a : b));
    }
    int shared = -1;
    if (!RankSet::unite(a.ranks, b.ranks, &out->ranks, &shared, &arena_)) {
      return fail("rank ", shared, " counted twice: ", describe(a), " op ", describe(b));
    }
    out->elem = a.elem;
    out->tile = a.tile;
    out->finalized = false;
    // Commutative: a op b and b op a are bitwise equal, so the pair is hashed in a fixed order.
    const uint64_t lo = a.expr < b.expr ? a.expr : b.expr, hi = a.expr < b.expr ? b.expr : a.expr;
    out->expr = mix(lo * 0x2545f4914f6cdd1dull + mix(hi));
    return true;
  }

  // Whether the step's `final` flag is right for the value it produces; applies the post-op.
  bool applyFinal(const Step& st, Value* v) {
    if (!reduces_) return st.final ? fail("final set, but ", collName(coll_), " does not reduce") : true;
    const bool full = v->ranks.isRange(0, n_);
    if (st.final) {
      if (v->finalized) return fail("final set on a value that is already final (post-op twice): ", describe(*v));
      if (!full) return fail("final set, but rank ", v->ranks.firstMissing(n_), " is missing: ", describe(*v));
      v->finalized = true;
      v->expr = mix(v->expr ^ 0x5f0e1a5ull);
    } else if (full && !v->finalized) {
      return fail("produces a value holding every rank's contribution but is not final: ", describe(*v));
    }
    return true;
  }

  void wake(int r) {
    if (!queued_[r]) {
      queued_[r] = true;
      ready_.push_back(r);
    }
  }

  std::string where(int r, int i, int tile) const {
    return cat("rank ", r, " step ", i, " (", formatStep(s_[r].steps[i]), ") tile ", tile, ": ");
  }

  // Runs step i of rank r for `tile`; its FIFOs have a message / a free slot. On a problem err_ says where and what.
  bool exec(int r, int i, int tile) {
    const Step& st = s_[r].steps[i];
    const int64_t k = stepBase_[r] + i;
    Value got, local, produced;
    bool ok = true;
    others_.clear();
    if (stepRecvs(st.op)) {
      Fifo& f = fifos_[recvFifo_[k]];
      Message& m = messages_[static_cast<size_t>(recvFifo_[k]) * opt_.fifoDepth + f.head];
      got = m.value;
      others_.swap(m.others);
      if (m.span != st.span) {
        ok = fail("receives ", st.span, " block(s) from ", st.recvPeer, " in one message, but its step ", m.step,
                  " sent ", m.span);
      }
      f.head = (f.head + 1) % opt_.fifoDepth;
      --f.count;
      if (waitFifo_[f.src] == recvFifo_[k]) wake(f.src);
      if (got.tile != tile) {
        ok = fail("receives from ", st.recvPeer, " a message of tile ", got.tile, " (sent by step ", m.step,
                  "): the two ranks disagree on how many messages a tile has");
      }
    }
    if (ok) {
      switch (st.op) {
        case StepOp::kSend:
          ok = read(r, tile, st.src, &produced);
          for (int j = 1; ok && j < st.span; ++j) {
            others_.emplace_back();
            ok = read(r, tile, BufRef{st.src.buf, st.src.block + j}, &others_.back());
          }
          break;
        case StepOp::kCopy:
          ok = read(r, tile, st.src, &produced);
          break;
        case StepOp::kRecv:
        case StepOp::kRecvCopySend:
          produced = got;
          break;
        case StepOp::kRecvReduceSend:
        case StepOp::kRecvReduceCopy:
        case StepOp::kRecvReduceCopySend:
          ok = read(r, tile, st.src, &local) && combine(got, local, &produced);
          break;
        case StepOp::kLocalReduce:
          ok = read(r, tile, st.dst, &got) && read(r, tile, st.src, &local) && combine(got, local, &produced);
          break;
        default:
          break;
      }
    }
    if (!ok || !applyFinal(st, &produced)) {
      err_ = where(r, i, tile) + err_;
      return false;
    }
    if (st.dst.buf == Buf::kOutput) {
      slot(r, tile, outSlot_[r][st.dst.block]) = store(produced);
      for (size_t j = 0; j < others_.size(); ++j) {  // a receive of several blocks (its span checked above)
        if (others_[j].tile != tile) {
          err_ = where(r, i, tile) + cat("receives block ", j + 1, " of tile ", others_[j].tile);
          return false;
        }
        slot(r, tile, outSlot_[r][st.dst.block + 1 + static_cast<int>(j)]) = store(others_[j]);
      }
    }
    if (stepSends(st.op)) {
      Fifo& f = fifos_[sendFifo_[k]];
      Message& m = messages_[static_cast<size_t>(sendFifo_[k]) * opt_.fifoDepth + (f.head + f.count) % opt_.fifoDepth];
      m.value = produced;
      m.others.swap(others_);  // a send of several blocks: the rest (receives of several only write, never send)
      m.span = st.span;
      m.step = i;
      ++f.count;
      if (waitFifo_[f.dst] == sendFifo_[k]) wake(f.dst);
    }
    return true;
  }

  // Where rank r is in its tile order: the step it runs next, and that step's tile; false once it has run them all.
  // A cursor moves to the next part of its round, or to the next round, when its part is done.
  struct Cursor {
    uint64_t round = 0, tile = 0;
    int which = -1;  ///< part of the round; -1 before the first
    uint32_t step = 0, end = 0;
  };

  bool current(int r, int* step, int* tile) {
    Cursor& c = cursor_[r];
    const TileOrder order(static_cast<uint64_t>(tiles_), static_cast<uint32_t>(s_[r].steps.size()), s_[r].lagFrom,
                          s_[r].lag);
    while (c.which < 0 || c.step >= c.end) {
      if (++c.which == 2) {
        c.which = 0;
        ++c.round;
      }
      if (c.round >= order.rounds()) return false;
      uint32_t first = 0;
      if (order.part(c.round, c.which, &c.tile, &first, &c.end)) {
        c.step = first;
      } else {
        c.step = c.end = 0;
      }
    }
    *step = static_cast<int>(c.step);
    *tile = static_cast<int>(c.tile);
    return true;
  }

  // Runs rank r until it blocks (waitFifo_ names the FIFO) or finishes; false on a problem (err_).
  bool advance(int r) {
    int i = 0, tile = 0;
    while (current(r, &i, &tile)) {
      const int64_t k = stepBase_[r] + i;
      if (recvFifo_[k] >= 0 && fifos_[recvFifo_[k]].count == 0) {
        waitFifo_[r] = recvFifo_[k];
        return true;
      }
      if (sendFifo_[k] >= 0 && fifos_[sendFifo_[k]].count == opt_.fifoDepth) {
        waitFifo_[r] = sendFifo_[k];
        return true;
      }
      waitFifo_[r] = -1;
      if (!exec(r, i, tile)) return false;
      ++cursor_[r].step;
    }
    return true;
  }

  std::string simulate() {
    cursor_.assign(n_, Cursor());
    waitFifo_.assign(n_, -1);
    queued_.assign(n_, true);
    for (int r = n_ - 1; r >= 0; --r) ready_.push_back(r);  // rank 0 first
    while (!ready_.empty()) {
      const int r = ready_.back();
      ready_.pop_back();
      queued_[r] = false;
      if (!advance(r)) return err_;
    }
    std::string blocked;
    int count = 0;
    for (int r = 0; r < n_; ++r) {
      int i = 0, tile = 0;
      if (!current(r, &i, &tile)) continue;
      if (++count > 8) continue;
      const Fifo& f = fifos_[waitFifo_[r]];
      blocked += cat(count > 1 ? "; " : "", "rank ", r, " step ", i, " (", formatStep(s_[r].steps[i]), ") tile ", tile,
                     f.dst == r ? cat(" waits for a message from ", f.src)
                                : cat(" waits for a free slot towards ", f.dst, " (", f.count, " queued)"));
    }
    if (count == 0) return "";
    return cat("deadlock: no rank can advance: ", blocked, count > 8 ? cat("; and ", count - 8, " more") : "");
  }

  // ---- final state ---------------------------------------------------------------------------------------------

  std::string checkLeftovers() const {
    for (size_t f = 0; f < fifos_.size(); ++f) {
      if (fifos_[f].count == 0) continue;
      const Message& m = messages_[f * opt_.fifoDepth + fifos_[f].head];
      return cat("messages left unreceived: ", fifos_[f].count, " from rank ", fifos_[f].src, " to rank ",
                 fifos_[f].dst, ", the first sent by rank ", fifos_[f].src, " step ", m.step, " (",
                 formatStep(s_[fifos_[f].src].steps[m.step]), ") tile ", m.value.tile);
    }
    return "";
  }

  // What rank r's output block j must hold at the end (reducing: elem, ranks and finalized only).
  Value expected(int r, int j, int tile) const {
    switch (coll_) {
      case Coll::kAllGather:
      case Coll::kGather:
        return leaf(j, 0, tile);
      case Coll::kBroadcast:
        return leaf(root_, j, tile);
      case Coll::kAllToAll:
        return leaf(j, r, tile);
      case Coll::kScatter:
        return leaf(root_, r, tile);
      case Coll::kSendRecv: {
        // The k-th receive of r from p meets the k-th send of p to r.
        const int p = recvs_[r][j];
        int k = 0;
        for (int x = 0; x < j; ++x) k += recvs_[r][x] == p;
        for (int i = 0; i < static_cast<int>(sends_[p].size()); ++i) {
          if (sends_[p][i] == r && k-- == 0) return leaf(p, i, tile);
        }
        return Value();
      }
      default: {
        Value v;
        v.elem = coll_ == Coll::kReduceScatter ? r : j;
        v.tile = tile;
        v.finalized = true;
        v.ranks = RankSet::range(0, n_);
        return v;
      }
    }
  }

  std::string checkFinal() {
    std::vector<uint64_t> firstExpr;  // allreduce: rank 0's expression per (tile, block)
    for (int r = 0; r < n_; ++r) {
      if (!outputChecked(r)) continue;
      const int outBlocks = s_[r].outBlocks;
      for (int tile = 0; tile < tiles_; ++tile) {
        for (int j = 0; j < outBlocks; ++j) {
          const int s = outSlot_[r][j];
          const uint32_t id = slot(r, tile, s);
          auto at = [&] { return cat("rank ", r, " out[", j, "] tile ", tile); };
          const Value want = expected(r, j, tile);
          if (id == 0 && s >= s_[r].inBlocks) return cat(at(), " is never written; it should hold ", describe(want));
          const Value got = id == 0 ? leaf(r, s, tile) : load(id, tile);
          bool same = got.elem == want.elem && got.tile == want.tile && got.finalized == want.finalized &&
                      got.ranks == want.ranks;
          if (!reduces_) same = same && got.expr == want.expr;
          if (!same) {
            const int missing = got.ranks.firstMissing(n_);
            return cat(
                at(), " holds ", describe(got), ", expected ", describe(want),
                reduces_ && got.elem == want.elem && missing >= 0 ? cat(" (rank ", missing, " is missing)") : "");
          }
          if (coll_ == Coll::kAllReduce) {
            const size_t key = static_cast<size_t>(tile) * outBlocks + j;
            if (firstExpr.empty()) firstExpr.assign(static_cast<size_t>(tiles_) * outBlocks, 0);
            if (r == 0) {
              firstExpr[key] = got.expr;
            } else if (got.expr != firstExpr[key]) {
              return cat(at(), " was reduced in a different order than rank 0's: results not bitwise identical");
            }
          }
        }
      }
    }
    return "";
  }

  const std::vector<Schedule>& s_;
  const VerifyOptions& opt_;
  const int n_;
  Coll coll_ = Coll::kAllReduce;
  int root_ = 0;
  bool reduces_ = false;
  std::vector<std::vector<int>> sends_, recvs_;  // kSendRecv: peers per rank, in call order

  std::vector<int32_t> inOffset_;             // global id of each rank's in[0] (non-reducing elems)
  std::vector<int64_t> slotBase_, stepBase_;  // per rank offsets into blockValue_ and the per-step tables
  std::vector<std::vector<int>> outSlot_;     // [rank][out block] -> slot
  std::vector<std::vector<int>> inAlias_;     // [rank][in block] -> out block aliasing it, or -1
  std::vector<uint32_t> blockValue_;          // interned value id per (rank, tile, slot); 0: input / unwritten
  ValueTable values_;
  RankSetArena arena_;  // range lists of sets with more than two ranges

  std::vector<Fifo> fifos_;
  std::vector<Message> messages_;         // fifo f's ring at f * fifoDepth
  std::vector<Value> others_;             // the step being run: blocks 1 .. span - 1 it sends or received
  std::vector<int> recvFifo_, sendFifo_;  // per (rank, step): FIFO used, or -1
  int tiles_ = 1;                         // tiles simulated (VerifyOptions::tiles, more for lagged schedules)
  std::vector<Cursor> cursor_;            // per rank: where it is in its tile order
  std::vector<int> waitFifo_;             // per rank: FIFO it is blocked on, or -1
  std::vector<bool> queued_;
  std::vector<int> ready_;  // ranks that may advance (a stack)
  std::string err_;         // the problem a hot-path check found
};

}  // namespace

std::string verifySchedules(const std::vector<Schedule>& schedules, const VerifyOptions& opt) {
  return Verifier(schedules, opt).run();
}

}  // namespace chorus
