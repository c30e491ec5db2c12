#include "engine/tuner.h"

#include <strings.h>

#include <string>
#include <vector>

#include "algo/generators.h"
#include "core/params.h"

namespace chorus {
namespace {

StrParam kAlgo{"NCCL_ALGO", "",
               "Allowed algorithms, comma-separated, or ^list to exclude: Ring, Tree, Direct, OneShot, TwoShot "
               "(NCCL's other names are accepted and ignored). An algorithm that cannot run a collective is skipped.",
               "tuning"};
StrParam kProto{"NCCL_PROTO", "", "Allowed protocols: Simple, LL (LL128 is accepted and treated as Simple); ^ excludes.",
                "tuning"};
IntParam kLLThreshold{"CHORUS_LL_MAX_BYTES", 16384, "Largest per-rank message that uses LL by default.", "tuning"};
IntParam kOneShotMax{"CHORUS_ONESHOT_MAX_BYTES", 8192, "Largest allreduce that uses one-shot by default.", "tuning"};

// Parses an NCCL-style allow list ("a,b" or "^a,b"); returns whether `name` is allowed.
bool allowed(const std::string& list, const char* name) {
  if (list.empty()) return true;
  bool exclude = list[0] == '^';
  std::string body = exclude ? list.substr(1) : list;
  bool found = false;
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t comma = body.find(',', pos);
    std::string tok = body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (strcasecmp(tok.c_str(), name) == 0) found = true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !found : found;
}

Algo defaultAlgo(Coll coll, size_t bytes, int nranks) {
  switch (coll) {
    case Coll::kAllReduce:
      if (nranks > 2 && bytes <= static_cast<size_t>(kOneShotMax.get())) return Algo::kOneShot;
      return Algo::kRing;
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter:
    case Coll::kSendRecv: return Algo::kDirect;
    default: return Algo::kRing;
  }
}

}  // namespace

Choice chooseAlgo(Coll coll, size_t bytes, int nranks) {
  Choice c;
  std::string algos = kAlgo.get();
  Algo def = defaultAlgo(coll, bytes, nranks);
  c.algo = def;
  if (!algos.empty() && !allowed(algos, algoName(def))) {
    // Prefer, in order, the algorithms a user is most likely to force.
    static const Algo kOrder[] = {Algo::kRing, Algo::kTree, Algo::kDirect, Algo::kOneShot, Algo::kTwoShot};
    for (Algo a : kOrder) {
      if (allowed(algos, algoName(a)) && algoSupported(coll, a, nranks)) {
        c.algo = a;
        break;
      }
    }
  }
  if (!algoSupported(coll, c.algo, nranks)) c.algo = algoSupported(coll, Algo::kRing, nranks) ? Algo::kRing : Algo::kDirect;
  std::string protos = kProto.get();
  bool llDefault = bytes <= static_cast<size_t>(kLLThreshold.get());
  bool llOk = allowed(protos, "LL"), simpleOk = allowed(protos, "Simple") || allowed(protos, "LL128");
  if (!protos.empty()) {
    c.proto = llOk && (!simpleOk || llDefault) ? Proto::kLL : Proto::kSimple;
  } else {
    c.proto = llDefault ? Proto::kLL : Proto::kSimple;
  }
  return c;
}

unsigned long tunerEnvHash() {
  std::string s = kAlgo.get() + "|" + kProto.get() + "|" + std::to_string(kLLThreshold.get()) + "|" +
                  std::to_string(kOneShotMax.get());
  unsigned long h = 1469598103934665603ul;
  for (char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ul;
  return h;
}

}  // namespace chorus
