// Internal to src/algo: compact sets of ranks for the verifier (verify.cc).
//
// Contributions in real schedules are contiguous in ring or in-order tree numbering, so a set is a short sorted list
// of half-open ranges, at most two of them (a range that wraps past n-1) inline; longer lists live on the heap.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace chorus {

/// Ranks lo..hi-1.
struct RankRange {
  int32_t lo;
  int32_t hi;
};

/// Storage for the range lists of sets with more than two ranges; it must outlive every set made with it.
using RankSetArena = std::deque<std::vector<RankRange>>;

/// A set of ranks as sorted, disjoint, non-adjacent ranges. Trivially copyable: lists longer than two ranges live in
/// a RankSetArena.
class RankSet {
 public:
  RankSet() = default;

  /// The set {rank}.
  static RankSet of(int rank) {
    RankSet s;
    s.count_ = 1;
    s.inline_[0] = {rank, rank + 1};
    return s;
  }

  /// The set lo..hi-1 (empty when hi <= lo).
  static RankSet range(int lo, int hi) {
    RankSet s;
    if (hi > lo) {
      s.count_ = 1;
      s.inline_[0] = {lo, hi};
    }
    return s;
  }

  /// Number of ranges.
  int ranges() const { return count_; }
  /// The ranges, sorted.
  const RankRange* data() const { return count_ <= kInline ? inline_.data() : big_->data(); }
  /// Whether the set is exactly lo..hi-1.
  bool isRange(int lo, int hi) const { return count_ == 1 && inline_[0].lo == lo && inline_[0].hi == hi; }

  /// Smallest rank of [0, n) not in the set, or -1.
  int firstMissing(int n) const {
    int next = 0;
    for (int i = 0; i < count_ && next < n; ++i) {
      if (data()[i].lo > next) return next;
      if (data()[i].hi > next) next = data()[i].hi;
    }
    return next < n ? next : -1;
  }

  /// Union of a and b into *out (long lists stored in *arena); false (and *shared, a rank in both) when they overlap.
  static bool unite(const RankSet& a, const RankSet& b, RankSet* out, int* shared, RankSetArena* arena) {
    const int total = a.count_ + b.count_;
    std::array<RankRange, 2 * kInline> small;
    std::vector<RankRange> large;
    RankRange* merged = small.data();
    if (total > static_cast<int>(small.size())) {
      large.resize(total);
      merged = large.data();
    }
    const RankRange *pa = a.data(), *pb = b.data();
    int ia = 0, ib = 0, m = 0;
    while (ia < a.count_ || ib < b.count_) {
      const bool takeA = ib == b.count_ || (ia < a.count_ && pa[ia].lo < pb[ib].lo);
      const RankRange next = takeA ? pa[ia++] : pb[ib++];
      if (m > 0 && next.lo < merged[m - 1].hi) {
        // The running range is contiguous and next's own set never overlaps itself: next.lo is in the other set.
        *shared = next.lo;
        return false;
      }
      if (m > 0 && next.lo == merged[m - 1].hi) {
        merged[m - 1].hi = next.hi;
      } else {
        merged[m++] = next;
      }
    }
    out->assign(merged, m, arena);
    return true;
  }

  bool operator==(const RankSet& o) const {
    if (count_ != o.count_) return false;
    const RankRange *p = data(), *q = o.data();
    for (int i = 0; i < count_; ++i) {
      if (p[i].lo != q[i].lo || p[i].hi != q[i].hi) return false;
    }
    return true;
  }

  /// "{0-3,7}", eliding the middle of long lists.
  std::string str() const {
    std::string s = "{";
    for (int i = 0; i < count_; ++i) {
      if (count_ > 8 && i == 4) {
        s += "...,";
        i = count_ - 3;
      }
      const RankRange r = data()[i];
      s += std::to_string(r.lo);
      if (r.hi - r.lo > 1) s += "-" + std::to_string(r.hi - 1);
      if (i + 1 < count_) s += ",";
    }
    return s + "}";
  }

 private:
  static constexpr int kInline = 2;

  void assign(const RankRange* r, int m, RankSetArena* arena) {
    count_ = m;
    if (m <= kInline) {
      for (int i = 0; i < m; ++i) inline_[i] = r[i];
      big_ = nullptr;
    } else {
      arena->emplace_back(r, r + m);
      big_ = &arena->back();
    }
  }

  int32_t count_ = 0;
  std::array<RankRange, kInline> inline_ = {};
  const std::vector<RankRange>* big_ = nullptr;  ///< all ranges when count_ > kInline (in an arena)
};

}  // namespace chorus
