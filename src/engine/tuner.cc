#include "engine/tuner.h"

#include <strings.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "algo/generators.h"
#include "core/hash.h"
#include "core/params.h"

namespace chorus {
namespace {

StrParam kAlgo{"NCCL_ALGO", "",
               "Allowed algorithms, comma-separated, or ^list to exclude: Ring, Tree, Direct, OneShot, TwoShot, "
               "Hierarchical, Rail, RecDoubling (NCCL's CollNetDirect, CollNetChain, NVLS, NVLSTree and PAT are "
               "accepted and ignored). As in NCCL 2.28, per collective: \"ring;allreduce:tree,ring;broadcast:^tree\" "
               "(the first list may have no prefix and applies to every collective; each COLLECTIVE:LIST replaces "
               "it for that one). An unknown name or collective fails the communicator's init. An algorithm that "
               "cannot run a collective is skipped; Rail (allgather, reduce-scatter) runs only across hosts with as "
               "many ranks on each.",
               "tuning"};
StrParam kProto{"NCCL_PROTO", "",
                "Allowed protocols: Simple, LL (LL128 is accepted and treated as Simple); ^ excludes; per collective "
                "as NCCL_ALGO.",
                "tuning"};
IntParam kLLThreshold{"CHORUS_LL_MAX_BYTES", 0,
                      "Largest per-rank message that uses LL by default (0: LL only when NCCL_PROTO asks for it; on "
                      "the host path Simple measured as fast at 8 B and 2-3x faster at 1-32 KiB).",
                      "tuning"};
IntParam kOneShotMax{"CHORUS_ONESHOT_MAX_BYTES", 8192, "Largest allreduce that uses one-shot by default.", "tuning"};

constexpr int kColls = static_cast<int>(Coll::kNumColls);

// What an NCCL_ALGO or NCCL_PROTO setting allows, per collective: `set[c]` when an entry applies to collective c, and
// then `allowed[c][e]` for element e of the names parsed against.
struct AllowTable {
  bool set[kColls] = {};
  std::vector<bool> allowed[kColls];
};

// Parses NCCL 2.28's list syntax (its parseList): entries separated by ';', each "COLLECTIVE:LIST" or, the first
// only, "LIST" for every collective; a LIST is names separated by ',', all excluded instead with a leading '^'. A
// later entry replaces what an earlier one said for its collective. `names` are the elements chorus acts on,
// `ignored` those NCCL has that chorus accepts without effect. False with *err for an unknown name or collective, or a
// prefix missing after the first entry.
bool parseAllowTable(const std::string& text, const std::vector<const char*>& names,
                     const std::vector<const char*>& ignored, AllowTable* out, std::string* err) {
  *out = AllowTable();
  size_t start = 0;
  for (int entry = 0; start <= text.size(); entry++) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    std::string list = colon == std::string::npos ? item : item.substr(colon + 1);
    int first = 0, last = kColls;  // the collectives the entry applies to
    if (colon != std::string::npos) {
      const std::string prefix = item.substr(0, colon);
      while (first < kColls && strcasecmp(prefix.c_str(), collName(static_cast<Coll>(first))) != 0) first++;
      if (first == kColls) {
        *err = "unknown collective \"" + prefix + "\"";
        return false;
      }
      last = first + 1;
    } else if (entry > 0) {
      *err = "every entry after the first needs a COLLECTIVE: prefix (\"" + item + "\")";
      return false;
    }
    const bool exclude = !list.empty() && list[0] == '^';
    if (exclude) list.erase(0, 1);
    std::vector<bool> row(names.size(), exclude);
    for (const std::string& tok : splitList(list)) {
      size_t e = 0;
      while (e < names.size() && strcasecmp(tok.c_str(), names[e]) != 0) e++;
      if (e < names.size()) {
        row[e] = !exclude;
        continue;
      }
      const bool known =
          std::any_of(ignored.begin(), ignored.end(), [&](const char* n) { return strcasecmp(tok.c_str(), n) == 0; });
      if (!known) {
        *err = "unknown name \"" + tok + "\"";
        return false;
      }
    }
    for (int c = first; c < last; c++) {
      out->set[c] = true;
      out->allowed[c] = row;
    }
  }
  return true;
}

const std::vector<const char*>& algoNames() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> v;
    for (int a = 0; a < static_cast<int>(Algo::kNumAlgos); a++) v.push_back(algoName(static_cast<Algo>(a)));
    return v;
  }();
  return names;
}
const std::vector<const char*> kNcclOnlyAlgos = {"CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
enum ProtoName : size_t { kProtoLL, kProtoSimple, kProtoLL128 };         // indexes of kProtoNames
const std::vector<const char*> kProtoNames = {"LL", "Simple", "LL128"};  // LL128 runs as Simple

// "a, b, c": names for an error message.
std::string joinNames(const std::vector<const char*>& names) {
  std::string out;
  for (const char* n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// From docs/perf/net.md ("Node-aware trees and rail": 4 hosts x 2 ranks, 1 Gbit/s links, 40 iterations a size, five
// runs, both placements; sizes are the buffer nccl-tests names: allreduce's, allgather's output, reduce-scatter's
// input):
// - allreduce: the node-aware tree took 0.6-2.3 ms at 4-64 KB where the ring took 1.0-3.0 ms, and 3x the ring's time
//   from 256 KB. Hierarchical beat the ring by 10-20% at 128-256 KB and from 2 MB, and lost by 5-35% at 512 KB - 1 MB
//   (the ring band below). Those runs had BBR congestion control in the hosts; with cubic ("TCP congestion control",
//   two runs of 256 KB - 2 MB) hierarchical was faster than the ring at every allreduce and reduce-scatter size, and
//   for allgather at all but 1 MB, where the two were within 3% either way, so the band is off by default;
// - allgather and reduce-scatter: rail took 0.8-1.2 ms at 16-64 KB where the ring and hierarchical took 0.9-1.6 ms,
//   was even with the ring at 4 KB and with hierarchical at 256 KB, and 35% slower than the ring at 1 MB, where
//   hierarchical was 3-9% slower than the ring.
IntParam kHierMin{"CHORUS_HIER_MIN_BYTES", 65536,
                  "Smallest allreduce buffer, allgather output or reduce-scatter input (bytes) that runs hierarchical "
                  "when ranks span several hosts with as many ranks on each (a ring whose hops cross hosts the "
                  "fewest times), outside CHORUS_HIER_RING_BAND.",
                  "tuning"};
StrParam kHierRingBand{"CHORUS_HIER_RING_BAND", "0,0",
                       "\"LOW,HIGH\": sizes above LOW and below HIGH (bytes) run the ring rather than hierarchical "
                       "(0,0, the default: no band). With BBR congestion control on the hosts, 262144,2097152 "
                       "measured faster: there hierarchical's two flows a link lost to the ring's one "
                       "(docs/perf/net.md, \"TCP congestion control\").",
                       "tuning"};
// The tree below 64 KB: with cubic in the hosts (docs/perf/net.md, "64 KB and below with cubic": three rounds, both
// placements) the tree was the fastest of it, hierarchical and recursive doubling at 16 and 32 KB in every series, and
// hierarchical faster than the tree at 64 KB in 5 of 6 (even in the sixth; 1.34-1.58 ms against 1.57-1.88).
IntParam kTreeMax{"CHORUS_TREE_MAX_BYTES", 65535,
                  "Largest allreduce (bytes) that runs the node-aware tree when ranks span several hosts with as many "
                  "ranks on each (0: never by default).",
                  "tuning"};
// One tree below 16 KB (docs/perf/net.md, "One tree below 16 KB": 4 hosts x 2 ranks, 1 Gbit/s, both placements, two
// rounds of both): on one channel the tree allreduce took 80-93 us at 128-512 B against 122-180 on two, and 249-274
// against 289-388 at 8 KB; from 16 KB two were faster (409-437 us against 487-646), each tree carrying half the bytes.
IntParam kTreeDualMin{"CHORUS_TREE_DUAL_MIN_BYTES", static_cast<int64_t>(kTreeDualMinBytes),
                      "Smallest tree collective (its full buffer, bytes) that runs both trees of the double binary "
                      "tree, one a channel; smaller ones run one tree on one channel.",
                      "tuning"};
// Small allreduces across hosts (docs/perf/net.md, "Recursive doubling", "The tuner's choice" and "One tree below
// 16 KB": 4 hosts x 2 ranks, 1 Gbit/s, both placements). Recursive doubling was the default from 128 B to 1 KB, where
// it beat the tree of two channels. Since a tree below 16 KB runs on one channel (CHORUS_TREE_DUAL_MIN_BYTES), the
// tree took 70-110 us at 8-512 B and 100-140 at 2 KB, recursive doubling 110-170 and 200-250, the ring 120-560 (two
// runs), so recursive doubling is off by default there (it still runs with one rank a host, below).
IntParam kDoublingMin{"CHORUS_DOUBLING_MIN_BYTES", 128,
                      "Smallest allreduce (bytes) that runs recursive doubling when ranks span several hosts with as "
                      "many ranks on each (up to CHORUS_DOUBLING_MAX_BYTES).",
                      "tuning"};
IntParam kDoublingMax{"CHORUS_DOUBLING_MAX_BYTES", 0,
                      "Largest allreduce (bytes) that runs recursive doubling by default across hosts with as many "
                      "ranks on each, from CHORUS_DOUBLING_MIN_BYTES (0, the default: never there; one rank a host "
                      "follows CHORUS_DOUBLING_SPREAD_MAX_BYTES).",
                      "tuning"};
// Ranks on several hosts but not as many on each laid host by host (one rank a host, say): no tree or rail is node
// aware there, and the alternatives to recursive doubling are the plain tree, one-shot (n-1 messages a rank across the
// links) and the ring. Forced on 4 hosts x 1 rank (2-core VM, 1 Gbit/s; docs/perf/net.md, "7. Small calls driven by
// the rank's thread") recursive doubling took 95 us at 512 B where the others took 110-206, 159 at 4 KB against
// 189-252, 571 at 32 KB against 606-902; at 8-64 B the four were within the runs' spread (81-111 us). On 2 hosts it
// was even with one-shot (one exchange either way) and ahead of the tree and the ring to 4 KB.
// It stops at 32 KB: forced at 16 KB - 128 KB (docs/perf/net.md, "8. One read a small slot"), at 64 KB it took
// 1298-1301 us over 4 hosts x 1 where the ring took 881-980 (it sends log2(n) x S bytes a rank, the ring 2(n-1)/n x
// S), and over 2 hosts 594-602 against the ring's 561-588; at 32 KB the two were even on both.
IntParam kDoublingSpreadMax{"CHORUS_DOUBLING_SPREAD_MAX_BYTES", 32768,
                            "Largest allreduce (bytes) that runs recursive doubling by default when ranks span several "
                            "hosts without as many on each laid out host by host (one rank a host, say); larger ones "
                            "run the ring (0: never). Allgathers there follow CHORUS_DOUBLING_ALLGATHER_MAX_BYTES.",
                            "tuning"};
// Small allgathers across hosts (docs/perf/net.md, "Recursive-doubling allgather, a round as one message": 4 hosts x 2
// ranks, 1 Gbit/s, both placements, two runs in opposite orders of the algorithms): forced, recursive doubling was
// the fastest of it, the ring, rail and hierarchical at 128 B - 64 KB in 39 of 40 series (0.68-1.18 ms, the others
// 0.83-2.06 ms). Host by host it sends twice the ring's bytes across hosts: in one run at larger sizes it was even
// with rail at 128 KB and slower at 256 KB.
// With cubic ("64 KB and below with cubic", three rounds) at 64 KB host by host it took 1.05-1.27 ms against rail's
// 0.67-0.73 (round-robin the two were even), so it stops below 64 KB. At 32 KB it was the fastest round-robin in 3 of
// 3 series, and host by host slower than hierarchical in 2 of 3 (0.61-0.66 ms against 0.50-0.51).
IntParam kDoublingGatherMax{"CHORUS_DOUBLING_ALLGATHER_MAX_BYTES", 65535,
                            "Largest allgather output (bytes) that runs recursive doubling by default when ranks span "
                            "several hosts (0: never).",
                            "tuning"};
// Recursive-doubling allgather runs in rank order: with ranks placed host by host its last rounds, which carry the
// most blocks, cross hosts, twice the bytes a ring sends across; placed round-robin its first, the fewest. Over 4
// namespace hosts x 2 ranks host by host (docs/perf/net.md, "Allgather at 4-512 KB by placement", three runs, and
// the six runs of docs/perf/sim.md's model check at 8 and 32 KB) hierarchical took 175-273 us at 8 KB against
// recursive doubling's 266-331, 314-339 at 16 KB against 370-405, and was even at 32 KB (444-572 against 446-495);
// at 4 KB recursive doubling was the faster (167-255 against 201-284).
IntParam kDoublingGatherByHostMax{"CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES", 4096,
                                  "Largest allgather output (bytes) that runs recursive doubling by default when the "
                                  "ranks span several hosts with as many on each and rank order lists each host's "
                                  "ranks together; larger ones, up to CHORUS_DOUBLING_ALLGATHER_MAX_BYTES, run "
                                  "hierarchical.",
                                  "tuning"};
// Tiny allgathers across hosts as a tree allreduce of the output, zeroed but for the rank's own block: one tree
// makes 2(n-1) messages where recursive doubling makes n log2(n), and on hosts whose ranks outnumber their cores the
// messages are the cost. Over 4 namespace hosts x 2 ranks (docs/perf/net.md, "Allgather as a tree allreduce", three
// rounds, both placements) it took 76-104 us at 128 B - 1 KB against recursive doubling's 103-216, 105-119 at 2 KB
// against 112-192; from 4 KB recursive doubling was as fast or faster.
IntParam kGatherTreeMax{"CHORUS_ALLGATHER_TREE_MAX_BYTES", 2048,
                        "Largest allgather output (bytes) that runs, on the host path across hosts with as many ranks "
                        "on each, as a tree allreduce of its output zeroed but for the rank's own block (0: never).",
                        "tuning"};
// Tiny reduce-scatters across hosts as a tree allreduce of the input, each rank keeping its block: one tree makes
// 2(n-1) messages where the ring makes n(n-1). Over 4 namespace hosts x 2 ranks (docs/perf/net.md, "Allgather as a
// tree allreduce", three rounds, both placements) it took 71-127 us at 128 B - 1 KB against the ring's 200-348,
// 94-138 at 2 KB against 220-377, 158-185 at 4 KB against 230-284; at 8 KB rail was faster (170-252 against 242-271).
IntParam kScatterTreeMax{"CHORUS_REDUCESCATTER_TREE_MAX_BYTES", 4096,
                         "Largest reduce-scatter input (bytes) that runs, on the host path across hosts with as many "
                         "ranks on each, as a tree allreduce of the input into scratch memory, each rank keeping its "
                         "block (0: never).",
                         "tuning"};
// Rail from 8 KB: at 8 KB reduce-scatter, rail took 0.24-0.35 ms against the ring's 0.29-0.45 in 6 of 6 series
// (cubic, "64 KB and below with cubic"; hierarchical 0.21-0.31).
IntParam kRailMin{"CHORUS_RAIL_MIN_BYTES", 8192,
                  "Smallest allgather output or reduce-scatter input (bytes) that runs rail when ranks span several "
                  "hosts with as many ranks on each (up to CHORUS_RAIL_MAX_BYTES; allgathers up to "
                  "CHORUS_DOUBLING_ALLGATHER_MAX_BYTES run recursive doubling).",
                  "tuning"};
// Rail to 64 KB: with cubic in the hosts (docs/perf/net.md, "TCP congestion control", two runs) hierarchical was
// faster than rail at 128 KB in 7 of 8 series and at 256 KB in 8 of 8, rail faster at 64 KB in 6 of 8.
IntParam kRailMax{"CHORUS_RAIL_MAX_BYTES", 65536,
                  "Largest allgather output or reduce-scatter input (bytes) that runs rail by default.", "tuning"};

// CHORUS_HIER_RING_BAND's bounds; a setting that does not parse is no band (0, 0).
void parseRingBand(const std::string& band, int64_t* lo, int64_t* hi) {
  long long l = 0, h = 0;
  if (std::sscanf(band.c_str(), "%lld,%lld", &l, &h) != 2) l = h = 0;
  *lo = l, *hi = h;
}

Algo defaultAlgo(Coll coll, size_t bytes, int nranks, int64_t oneShotMax, bool hosts, bool spread, bool byHost,
                 int64_t bandLo, int64_t bandHi) {
  const int64_t full = static_cast<int64_t>(fullBufferBytes(coll, bytes, nranks));
  if (spread && !hosts) {
    if (coll == Coll::kAllReduce && full <= kDoublingSpreadMax.get()) return Algo::kDoubling;
    if (coll == Coll::kAllGather && full <= kDoublingGatherMax.get()) return Algo::kDoubling;
    if (coll == Coll::kAllReduce || coll == Coll::kAllGather || coll == Coll::kReduceScatter) return Algo::kRing;
  }
  const bool hier = hosts && full >= kHierMin.get() && !(full > bandLo && full < bandHi);
  switch (coll) {
    case Coll::kAllReduce:
      // Across hosts one-shot sends every rank's buffer over the NICs n-1 times: at 4 KB on 4 hosts x 2 ranks it
      // took twice the ring's time (docs/perf/net.md).
      if (nranks >= 2 && !hosts && bytes <= static_cast<size_t>(oneShotMax)) return Algo::kOneShot;
      if (hosts && full >= kDoublingMin.get() && full <= kDoublingMax.get()) return Algo::kDoubling;
      if (hosts && full <= kTreeMax.get()) return Algo::kTree;
      return hier ? Algo::kHier : Algo::kRing;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
      if (coll == Coll::kAllGather && hosts && full <= kDoublingGatherMax.get())
        return byHost && full > kDoublingGatherByHostMax.get() ? Algo::kHier : Algo::kDoubling;
      if (hosts && full >= kRailMin.get() && full <= kRailMax.get()) return Algo::kRail;
      return hier ? Algo::kHier : Algo::kRing;
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter:
    case Coll::kSendRecv: return Algo::kDirect;
    default: return Algo::kRing;
  }
}

// Link classes of the cost model behind ncclGroupSimulateEnd, the tuner plugin's table and CHORUS_TUNER_MODEL:
// "latency in us a step,bandwidth in GB/s".
StrParam kCostIntra{"CHORUS_COST_INTRA", "5,5",
                    "Cost model (ncclGroupSimulateEnd, CHORUS_TUNER_MODEL): the link between ranks of one host, as "
                    "\"latency a step in us,bandwidth a rank in GB/s\" (a third number: the bytes a link passes at "
                    "once, docs/cost_model.md). Set, it wins over CHORUS_CALIBRATE; unset, the default or the "
                    "calibrated figure.",
                    "tuning"};
StrParam kCostInter{"CHORUS_COST_INTER", "20,1.25",
                    "Cost model (ncclGroupSimulateEnd, CHORUS_TUNER_MODEL): the link between hosts, as \"latency a "
                    "step in us,bandwidth a NIC in GB/s\" (one NIC a host; a third number: the bytes a link passes "
                    "at once when a slot's turn comes, a shaper's burst, docs/cost_model.md). Set, it wins over "
                    "CHORUS_CALIBRATE; unset, the calibrated figure, else the slowest host's NIC speed at 92% where "
                    "every host's topology knows it, else the default.",
                    "tuning"};
IntParam kTunerModel{"CHORUS_TUNER_MODEL", 0,
                     "1: pick each collective's algorithm by the cost model under CHORUS_COST_INTRA / "
                     "CHORUS_COST_INTER (the cheapest that can run it) instead of the measured thresholds.",
                     "tuning"};

LinkCost linkCost(const std::string& text, const char* fallback) {
  LinkCost c;
  if (!parseLinkCost(text, &c)) parseLinkCost(fallback, &c);
  return c;
}

// NCCL_ALGO / NCCL_PROTO parsed once per parameter generation (chooseAlgo runs on every call). A setting that does
// not parse restricts nothing here: the communicator's init refuses it (tuningSettingsError).
struct Allowed {
  uint64_t gen = 0;
  AllowTable algos, protos;
  int64_t llMax = 0, oneShotMax = 0;
  int64_t bandLo = 0, bandHi = 0;  ///< CHORUS_HIER_RING_BAND

  bool algoSet(Coll c) const { return algos.set[static_cast<int>(c)]; }
  bool algo(Coll c, Algo a) const { return !algoSet(c) || algos.allowed[static_cast<int>(c)][static_cast<int>(a)]; }
  bool protoSet(Coll c) const { return protos.set[static_cast<int>(c)]; }
  bool proto(Coll c, size_t e) const { return !protoSet(c) || protos.allowed[static_cast<int>(c)][e]; }
};

const Allowed& allowedNow() {
  static thread_local Allowed cache;
  uint64_t gen = paramsGeneration();
  if (cache.gen != gen) {
    std::string err;
    if (!parseAllowTable(kAlgo.get(), algoNames(), kNcclOnlyAlgos, &cache.algos, &err)) cache.algos = AllowTable();
    if (!parseAllowTable(kProto.get(), kProtoNames, {}, &cache.protos, &err)) cache.protos = AllowTable();
    cache.llMax = kLLThreshold.get();
    cache.oneShotMax = kOneShotMax.get();
    parseRingBand(kHierRingBand.get(), &cache.bandLo, &cache.bandHi);
    cache.gen = gen;
  }
  return cache;
}

}  // namespace

Choice chooseAlgo(Coll coll, size_t bytes, int nranks, int64_t llMax, bool hosts, bool spread, bool byHost) {
  const Allowed& al = allowedNow();
  Choice c;
  Algo def = defaultAlgo(coll, bytes, nranks, al.oneShotMax, hosts, spread, byHost, al.bandLo, al.bandHi);
  c.algo = def;
  if (al.algoSet(coll) && !al.algo(coll, def)) {
    // Prefer, in order, the algorithms a user is most likely to force.
    static const Algo kOrder[] = {Algo::kRing,    Algo::kTree, Algo::kDirect, Algo::kOneShot,
                                  Algo::kTwoShot, Algo::kHier, Algo::kRail, Algo::kDoubling};
    static_assert(sizeof(kOrder) / sizeof(kOrder[0]) == static_cast<size_t>(Algo::kNumAlgos));
    for (Algo a : kOrder) {
      // Rail without hosts of equal size would be the direct allgather under another name.
      if (a == Algo::kRail && !hosts) continue;
      if (al.algo(coll, a) && algoSupported(coll, a, nranks)) {
        c.algo = a;
        break;
      }
    }
  }
  if (!algoSupported(coll, c.algo, nranks)) c.algo = algoSupported(coll, Algo::kRing, nranks) ? Algo::kRing : Algo::kDirect;
  if (llMax < 0) llMax = al.llMax;
  bool llDefault = bytes <= static_cast<size_t>(llMax);
  if (al.protoSet(coll)) {
    const bool ll = al.proto(coll, kProtoLL), simple = al.proto(coll, kProtoSimple) || al.proto(coll, kProtoLL128);
    c.proto = ll && (!simple || llDefault) ? Proto::kLL : Proto::kSimple;
  } else {
    c.proto = llDefault ? Proto::kLL : Proto::kSimple;
  }
  return c;
}

int64_t hierMinBytes() { return kHierMin.get(); }

LinkCost costIntra() { return linkCost(kCostIntra.get(), "5,5"); }
LinkCost costInter() { return linkCost(kCostInter.get(), "20,1.25"); }
bool costIntraSet() { return kCostIntra.isSet(); }
bool costInterSet() { return kCostInter.isSet(); }
bool tunerByModel() { return kTunerModel.get() != 0; }

bool asTreeAllReduce(Coll coll, size_t fullBytes) {
  int64_t most = 0;
  if (coll == Coll::kAllGather) most = kGatherTreeMax.get();
  if (coll == Coll::kReduceScatter) most = kScatterTreeMax.get();
  return !tuningForced(coll) && fullBytes > 0 && most > 0 && fullBytes <= static_cast<size_t>(most);
}

size_t treeDualMinBytes() { return static_cast<size_t>(std::max<int64_t>(0, kTreeDualMin.get())); }

bool tuningForced(Coll coll) {
  const Allowed& al = allowedNow();
  return al.algoSet(coll) || al.protoSet(coll);
}

std::string tuningSettingsError() {
  AllowTable table;
  std::string err;
  std::vector<const char*> colls;
  for (int c = 0; c < kColls; c++) colls.push_back(collName(static_cast<Coll>(c)));
  if (!parseAllowTable(kAlgo.get(), algoNames(), kNcclOnlyAlgos, &table, &err))
    return "NCCL_ALGO=\"" + kAlgo.get() + "\": " + err + " (chorus's algorithms: " + joinNames(algoNames()) +
           "; NCCL's " + joinNames(kNcclOnlyAlgos) + " are accepted and not used; collectives: " + joinNames(colls) +
           ")";
  if (!parseAllowTable(kProto.get(), kProtoNames, {}, &table, &err))
    return "NCCL_PROTO=\"" + kProto.get() + "\": " + err + " (protocols: " + joinNames(kProtoNames) + ")";
  return "";
}

unsigned long tunerEnvHash() {
  std::string s = kAlgo.get() + "|" + kProto.get() + "|" + std::to_string(kLLThreshold.get()) + "|" +
                  std::to_string(kOneShotMax.get()) + "|" + std::to_string(kHierMin.get()) + "|" +
                  std::to_string(kTreeMax.get()) + "|" + std::to_string(kTreeDualMin.get()) + "|" +
                  std::to_string(kGatherTreeMax.get()) + "|" + std::to_string(kScatterTreeMax.get()) + "|" +
                  std::to_string(kDoublingMin.get()) + "|" +
                  std::to_string(kDoublingMax.get()) + "|" + std::to_string(kDoublingGatherMax.get()) + "|" +
                  std::to_string(kDoublingGatherByHostMax.get()) + "|" +
                  std::to_string(kDoublingSpreadMax.get()) + "|" +
                  std::to_string(kRailMin.get()) + "|" +
                  std::to_string(kRailMax.get()) + "|" + kHierRingBand.get() + "|" + std::to_string(kTunerModel.get()) +
                  "|" + kCostIntra.get() + "|" + kCostInter.get();
  return fnv1a64(s);
}

}  // namespace chorus
