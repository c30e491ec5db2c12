// Choosing (algorithm, protocol) per call: NCCL_ALGO / NCCL_PROTO when set, otherwise a
// size-based default. Every rank makes the same choice from the same inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algo/schedule.h"
#include "topo/cost_model.h"

namespace chorus {

/// Transfer protocol.
enum class Proto { kSimple, kLL };

/// The (algorithm, protocol) for one call of `bytes` (per-rank buffer size) on nranks.
struct Choice {
  Algo algo;
  Proto proto;
};

/// Picks the algorithm and protocol; honours NCCL_ALGO and NCCL_PROTO when they allow one that applies.
/// llMax: largest message that uses LL by default (-1: CHORUS_LL_MAX_BYTES, the host path's setting). hosts: the
/// communicator spans several hosts with the same number of ranks (at least 2) on each, so hierarchical
/// allreduce, allgather and reduce-scatter apply. spread (without hosts): the ranks span several hosts, but not as
/// many on each laid out host by host (one rank a host, say): small allreduces and allgathers run recursive doubling
/// (CHORUS_DOUBLING_SPREAD_MAX_BYTES, CHORUS_DOUBLING_ALLGATHER_MAX_BYTES), the rest the ring. byHost (with hosts):
/// rank order lists each host's ranks together, so recursive-doubling allgather, which runs in rank order, crosses
/// hosts in its last rounds, which carry the most blocks: from CHORUS_DOUBLING_ALLGATHER_BY_HOST_MAX_BYTES such
/// allgathers run hierarchical instead.
Choice chooseAlgo(Coll coll, size_t bytes, int nranks, int64_t llMax = -1, bool hosts = false, bool spread = false,
                  bool byHost = false);
/// The cost model's links, from CHORUS_COST_INTRA / CHORUS_COST_INTER (a setting that does not parse gives the
/// default).
LinkCost costIntra();
LinkCost costInter();
/// Whether CHORUS_COST_INTRA / CHORUS_COST_INTER is set: a setting wins over the communicator's own figures.
bool costIntraSet();
bool costInterSet();
/// CHORUS_TUNER_MODEL: pick algorithms by the cost model rather than by thresholds.
bool tunerByModel();
/// Whether NCCL_ALGO or NCCL_PROTO restricts collective `coll`: they force, and a tuner plugin is not asked.
bool tuningForced(Coll coll);
/// Why NCCL_ALGO or NCCL_PROTO does not parse (an unknown algorithm, protocol or collective), "" when both do.
std::string tuningSettingsError();
/// Whether an allgather (reduce-scatter) of this full buffer in bytes, across hosts with as many ranks on each, runs
/// as a tree allreduce: of its output zeroed but for the rank's own block (of its input, each rank keeping its block).
/// CHORUS_ALLGATHER_TREE_MAX_BYTES, CHORUS_REDUCESCATTER_TREE_MAX_BYTES; never where NCCL_ALGO/PROTO force.
bool asTreeAllReduce(Coll coll, size_t fullBytes);
/// The element size that tree allreduce sums in, for a collective of `elemBytes` elements: an allgather's zero-padded
/// output byte by byte (1: every byte has one nonzero term at most; the host engine sums it as ncclUint8), a
/// reduce-scatter's input in its own type.
inline size_t asTreeElemBytes(Coll coll, size_t elemBytes) { return coll == Coll::kAllGather ? 1 : elemBytes; }
/// CHORUS_TREE_DUAL_MIN_BYTES: the smallest tree collective (full buffer) that runs both trees, one a channel.
size_t treeDualMinBytes();
/// CHORUS_HIER_MIN_BYTES: the smallest collective that runs hierarchical where it applies.
int64_t hierMinBytes();
/// Hash of the tuning environment (ranks must agree on it).
unsigned long tunerEnvHash();

}  // namespace chorus
