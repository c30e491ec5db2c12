#include "engine/tuner_plugin.h"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"
#include "core/params.h"
#include "core/plugin_lib.h"
#include "nccl.h"

namespace chorus {
namespace {

StrParam kTunerPlugin{"NCCL_TUNER_PLUGIN", "",
                      "Tuner plugin: a library path or name (libnccl-tuner-NAME.so), \"none\" to disable; unset tries "
                      "libnccl-tuner.so. NCCL 2.28's ABI, ncclTunerPlugin_v2 to _v5 (docs/tuner_plugin.md).",
                      "tuning"};

// The plugin ABI as NCCL 2.28 defines it (the layouts and calling conventions are the interface; written here from
// NCCL's documented plugin headers). collCostTable is float[7][3] passed as float**.
using Logger = void (*)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
using FuncT = int;  // ncclFunc_t: Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3, AllReduce 4, ... AlltoAll 8

struct NvlDomainInfoV5 {
  int nNvlDomains, minRanksPerNvlDomain, maxRanksPerNvlDomain;
};
struct ConstantsV5 {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
};
struct TunerV5 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, Logger log, NvlDomainInfoV5* nvl,
                       ConstantsV5* constants);
  ncclResult_t (*getCollInfo)(void* ctx, FuncT coll, size_t nBytes, int numPipeOps, float** table, int numAlgo,
                              int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* ctx);
};
struct TunerV4 {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, Logger log, void** ctx);
  ncclResult_t (*getCollInfo)(void* ctx, FuncT coll, size_t nBytes, int numPipeOps, float** table, int numAlgo,
                              int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* ctx);
};
struct TunerV3 {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, Logger log, void** ctx);
  ncclResult_t (*getCollInfo)(void* ctx, FuncT coll, size_t nBytes, int numPipeOps, float** table, int numAlgo,
                              int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* ctx);
};
struct TunerV2 {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, Logger log, void** ctx);
  ncclResult_t (*getCollInfo)(void* ctx, FuncT coll, size_t nBytes, int collNetSupport, int nvlsSupport, int numPipeOps,
                              int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* ctx);
};

// The process's plugin: one library, its version and entry points, shared by every communicator.
struct Loaded {
  std::mutex mu;
  bool tried = false;
  std::string setting;  ///< NCCL_TUNER_PLUGIN when last tried
  void* lib = nullptr;
  int version = 0;
  const void* sym = nullptr;
  std::string path;
};

Loaded& loaded() {
  static Loaded* l = new Loaded();  // never destroyed: communicators may outlive static destruction
  return *l;
}

// Loads the library on first use; later calls return what the first found. When none was found, a later
// NCCL_TUNER_PLUGIN that differs is tried again (a forked child, or a program that sets it after a first
// communicator); a loaded library stays for the life of the process, as communicators may use it.
Loaded* load() {
  Loaded& l = loaded();
  std::lock_guard<std::mutex> lock(l.mu);
  const std::string setting = kTunerPlugin.get();
  if (l.tried && (l.sym != nullptr || setting == l.setting)) return l.sym != nullptr ? &l : nullptr;
  l.tried = true;
  l.setting = setting;
  if (strcasecmp(setting.c_str(), "none") == 0) return nullptr;
  std::string tried;
  l.lib = openPluginLib("libnccl-tuner", setting, &l.path, &tried);
  if (l.lib == nullptr) {
    // Unset and absent is the common case: say so only at INFO.
    INFO(kInit | kTune, "tuner plugin: %s not loaded (%s); chorus's own tuning",
         setting.empty() ? "libnccl-tuner.so" : setting.c_str(), tried.c_str());
    return nullptr;
  }
  static const char* kSymbols[] = {"ncclTunerPlugin_v5", "ncclTunerPlugin_v4", "ncclTunerPlugin_v3",
                                   "ncclTunerPlugin_v2"};
  for (int i = 0; i < 4 && l.sym == nullptr; i++) {
    l.sym = dlsym(l.lib, kSymbols[i]);
    if (l.sym != nullptr) l.version = 5 - i;
  }
  if (l.sym == nullptr) {
    INFO(kInit | kTune,
         "tuner plugin: %s has none of ncclTunerPlugin_v5 .. _v2 (an unsupported version); chorus's "
         "own tuning",
         l.path.c_str());
    dlclose(l.lib);
    l.lib = nullptr;
    return nullptr;
  }
  INFO(kInit | kTune, "tuner plugin: loaded %s (%s, v%d)", l.path.c_str(),
       static_cast<const TunerV4*>(l.sym)->name ? static_cast<const TunerV4*>(l.sym)->name : "?", l.version);
  return &l;
}

int ncclFunc(Coll c) {
  switch (c) {
    case Coll::kBroadcast:
      return 0;
    case Coll::kReduce:
      return 1;
    case Coll::kAllGather:
      return 2;
    case Coll::kReduceScatter:
      return 3;
    case Coll::kAllReduce:
      return 4;
    case Coll::kAllToAll:
      return 8;
    case Coll::kScatter:
      return 9;
    case Coll::kGather:
      return 10;
    default:
      return 5;  // SendRecv
  }
}

}  // namespace

std::unique_ptr<TunerPlugin> TunerPlugin::open(uint64_t commId, size_t nRanks, size_t nNodes) {
  Loaded* l = load();
  if (l == nullptr) return nullptr;
  std::unique_ptr<TunerPlugin> p(new TunerPlugin());
  ncclResult_t rc;
  if (l->version == 5) {
    NvlDomainInfoV5 nvl{static_cast<int>(nNodes), static_cast<int>(nRanks / std::max<size_t>(nNodes, 1)),
                        static_cast<int>((nRanks + nNodes - 1) / std::max<size_t>(nNodes, 1))};
    ConstantsV5 constants;
    std::memset(&constants, 0, sizeof(constants));  // chorus has no use for NCCL's constants; the plugin may edit
    rc = static_cast<const TunerV5*>(l->sym)->init(&p->ctx_, commId, nRanks, nNodes, pluginLog, &nvl, &constants);
  } else {
    // v2 to v4 share init's signature and place.
    rc = static_cast<const TunerV4*>(l->sym)->init(nRanks, nNodes, pluginLog, &p->ctx_);
  }
  if (rc != ncclSuccess) {
    WARN("tuner plugin %s: init failed (%d); this communicator uses chorus's own tuning", l->path.c_str(),
         static_cast<int>(rc));
    return nullptr;
  }
  return p;
}

TunerPlugin::~TunerPlugin() {
  Loaded& l = loaded();
  // finalize (v5) and destroy (v2-v4) sit at the same place, after getCollInfo.
  if (l.version == 5) {
    static_cast<const TunerV5*>(l.sym)->finalize(ctx_);
  } else {
    static_cast<const TunerV4*>(l.sym)->destroy(ctx_);
  }
}

const char* TunerPlugin::name() const {
  const char* n = static_cast<const TunerV4*>(loaded().sym)->name;
  return n ? n : "?";
}

bool TunerPlugin::getCollInfo(Coll coll, size_t nBytes, int numPipeOps, CostTable table, int* nChannels) {
  Loaded& l = loaded();
  *nChannels = 0;
  float** t = reinterpret_cast<float**>(table);
  ncclResult_t rc;
  switch (l.version) {
    case 5:
      rc = static_cast<const TunerV5*>(l.sym)->getCollInfo(ctx_, ncclFunc(coll), nBytes, numPipeOps, t, kAlgos, kProtos,
                                                           0, nChannels);
      break;
    case 4:
      rc = static_cast<const TunerV4*>(l.sym)->getCollInfo(ctx_, ncclFunc(coll), nBytes, numPipeOps, t, kAlgos, kProtos,
                                                           0, nChannels);
      break;
    case 3:
      rc = static_cast<const TunerV3*>(l.sym)->getCollInfo(ctx_, ncclFunc(coll), nBytes, numPipeOps, t, kAlgos, kProtos,
                                                           nChannels);
      break;
    default: {
      // v2 answers with an algorithm and a protocol, which become the one usable entry of the table.
      int algo = -1, proto = -1;
      rc = static_cast<const TunerV2*>(l.sym)->getCollInfo(ctx_, ncclFunc(coll), nBytes, 0, 0, numPipeOps, &algo,
                                                           &proto, nChannels);
      if (rc == ncclSuccess && algo >= 0 && algo < kAlgos && proto >= 0 && proto < kProtos && table[algo][proto] >= 0) {
        for (int a = 0; a < kAlgos; a++)
          for (int p = 0; p < kProtos; p++)
            if (a != algo || p != proto) table[a][p] = -1;
      }
      break;
    }
  }
  if (rc != ncclSuccess) {
    INFO(kTune, "tuner plugin %s: getCollInfo failed (%d) for %s of %zu bytes; chorus's own choice", name(),
         static_cast<int>(rc), collName(coll), nBytes);
    return false;
  }
  return true;
}

bool choiceFromTable(const TunerPlugin::CostTable table, Algo ringFamily, Choice* choice) {
  int bestA = -1, bestP = -1;
  for (int a : {TunerPlugin::kTree, TunerPlugin::kRing})
    for (int p = 0; p < TunerPlugin::kProtos; p++)
      if (table[a][p] >= 0 && (bestA < 0 || table[a][p] < table[bestA][bestP])) bestA = a, bestP = p;
  if (bestA < 0) return false;
  choice->algo = bestA == TunerPlugin::kTree ? Algo::kTree : ringFamily;
  choice->proto = bestP == TunerPlugin::kLL ? Proto::kLL : Proto::kSimple;
  return true;
}

}  // namespace chorus
