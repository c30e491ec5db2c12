// NCCL tuner plugins: NCCL_TUNER_PLUGIN loads a library that may change the algorithm, protocol and channel count
// of every collective, through the ABI NCCL 2.28 loads (ncclTunerPlugin_v5 down to _v2, docs/tuner_plugin.md).
//
// The library is opened once per process, as NCCL does: NCCL_TUNER_PLUGIN names a path or a library
// ("libnccl-tuner-NAME.so" is tried for a plain NAME), unset tries "libnccl-tuner.so", "none" disables it. A missing
// or incompatible library is one INFO line and chorus's own tuning. Each communicator then makes its own plugin
// context; getCollInfo sees NCCL's cost table, where chorus fills the entries it can run (Ring: chorus's choice among
// its non-tree algorithms, Tree: its double binary tree; protocols LL and Simple) with the cost model's times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "algo/schedule.h"
#include "engine/tuner.h"

namespace chorus {

/// One communicator's view of the process's tuner plugin.
class TunerPlugin {
 public:
  /// The plugin for a communicator of nRanks over nNodes hosts, or null when none is loaded or its init fails.
  static std::unique_ptr<TunerPlugin> open(uint64_t commId, size_t nRanks, size_t nNodes);
  ~TunerPlugin();

  /// NCCL's cost table: [algorithm][protocol] in microseconds, -1 where the entry cannot run.
  static constexpr int kAlgos = 7, kProtos = 3;
  static constexpr int kTree = 0, kRing = 1, kLL = 0, kLL128 = 1, kSimple = 2;
  using CostTable = float[kAlgos][kProtos];

  /// Asks the plugin about one collective of nBytes (NCCL's nBytes: the larger of the send and receive buffers).
  /// On success the table holds the plugin's costs and *nChannels its channel count (0: unchanged); false when
  /// the plugin failed the call (chorus's own choice stands).
  bool getCollInfo(Coll coll, size_t nBytes, int numPipeOps, CostTable table, int* nChannels);

  /// The plugin's name, for logs.
  const char* name() const;

 private:
  TunerPlugin() = default;
  void* ctx_ = nullptr;
};

/// Applies a plugin's table to a choice: the cheapest entry that is not negative picks Ring (the caller's
/// non-tree algorithm `ringFamily`) or Tree, and LL or Simple (LL128 runs as Simple). Returns false and leaves
/// *choice alone when no entry is usable.
bool choiceFromTable(const TunerPlugin::CostTable table, Algo ringFamily, Choice* choice);

}  // namespace chorus
