/* A tuner plugin for chorus's tests, written against NCCL 2.28's tuner plugin ABI: ncclTunerPlugin_v5 by default,
 * ncclTunerPlugin_v2 when built with TUNER_V2. The environment steers it:
 *   CHORUS_TEST_TUNER_ALGO     "tree" or "ring": make that algorithm's Simple entry the cheapest (v2: pick it);
 *                              unset: leave the table alone
 *   CHORUS_TEST_TUNER_CHANNELS a channel count to ask for
 *   CHORUS_TEST_TUNER_FAIL     "init" or "coll": fail that call
 * Every getCollInfo logs the costs it was given (INFO, TUNING), so tests can see what chorus passed. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

enum { kAlgos = 7, kProtos = 3, kTree = 0, kRing = 1, kSimple = 2, kInfo = 3, kTuning = 0x40 };

typedef struct {
  logger_t log;
  size_t nRanks, nNodes;
} Ctx;

static const char* env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

static ncclResult_t makeCtx(size_t nRanks, size_t nNodes, logger_t log, void** ctx) {
  if (strcmp(env("CHORUS_TEST_TUNER_FAIL"), "init") == 0) return ncclInternalError;
  Ctx* c = (Ctx*)calloc(1, sizeof(Ctx));
  c->log = log;
  c->nRanks = nRanks;
  c->nNodes = nNodes;
  *ctx = c;
  if (log) log(kInfo, kTuning, __FILE__, __LINE__, "test tuner: init %zu ranks %zu nodes", nRanks, nNodes);
  return ncclSuccess;
}

static ncclResult_t freeCtx(void* ctx) {
  free(ctx);
  return ncclSuccess;
}

static int wanted(void) {
  const char* a = env("CHORUS_TEST_TUNER_ALGO");
  return strcmp(a, "tree") == 0 ? kTree : strcmp(a, "ring") == 0 ? kRing : -1;
}

static void setChannels(int* nChannels) {
  if (env("CHORUS_TEST_TUNER_CHANNELS")[0]) *nChannels = atoi(env("CHORUS_TEST_TUNER_CHANNELS"));
}

#ifdef TUNER_V2

static ncclResult_t init2(size_t nRanks, size_t nNodes, logger_t log, void** ctx) {
  return makeCtx(nRanks, nNodes, log, ctx);
}

static ncclResult_t getCollInfo2(void* ctx, int coll, size_t nBytes, int collNet, int nvls, int numPipeOps,
                                 int* algorithm, int* protocol, int* nChannels) {
  Ctx* c = (Ctx*)ctx;
  (void)collNet, (void)nvls, (void)numPipeOps;
  if (strcmp(env("CHORUS_TEST_TUNER_FAIL"), "coll") == 0) return ncclInternalError;
  if (c->log) c->log(kInfo, kTuning, __FILE__, __LINE__, "test tuner v2: coll %d bytes %zu", coll, nBytes);
  if (wanted() >= 0) {
    *algorithm = wanted();
    *protocol = kSimple;
  }
  setChannels(nChannels);
  return ncclSuccess;
}

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, logger_t, void**);
  ncclResult_t (*getCollInfo)(void*, int, size_t, int, int, int, int*, int*, int*);
  ncclResult_t (*destroy)(void*);
} TunerV2;

__attribute__((visibility("default")))
const TunerV2 ncclTunerPlugin_v2 = {"chorus-test-v2", init2, getCollInfo2, freeCtx};

#else

typedef struct {
  int nNvlDomains, minRanksPerNvlDomain, maxRanksPerNvlDomain;
} NvlDomainInfo;

static ncclResult_t init5(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, logger_t log, NvlDomainInfo* nvl,
                          void* constants) {
  (void)commId, (void)nvl, (void)constants;
  return makeCtx(nRanks, nNodes, log, ctx);
}

static ncclResult_t getCollInfo5(void* ctx, int coll, size_t nBytes, int numPipeOps, float** collCostTable, int numAlgo,
                                 int numProto, int regBuff, int* nChannels) {
  Ctx* c = (Ctx*)ctx;
  float(*table)[kProtos] = (float(*)[kProtos])collCostTable;
  (void)numPipeOps, (void)regBuff;
  if (strcmp(env("CHORUS_TEST_TUNER_FAIL"), "coll") == 0) return ncclInternalError;
  if (numAlgo != kAlgos || numProto != kProtos) return ncclInternalError;
  if (c->log)
    c->log(kInfo, kTuning, __FILE__, __LINE__, "test tuner: coll %d bytes %zu ring %.1f tree %.1f", coll, nBytes,
           table[kRing][kSimple], table[kTree][kSimple]);
  if (wanted() >= 0 && table[wanted()][kSimple] >= 0) table[wanted()][kSimple] = 0;
  setChannels(nChannels);
  return ncclSuccess;
}

typedef struct {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, logger_t, NvlDomainInfo*, void*);
  ncclResult_t (*getCollInfo)(void*, int, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*finalize)(void*);
} TunerV5;

__attribute__((visibility("default"))) const TunerV5 ncclTunerPlugin_v5 = {"chorus-test", init5, getCollInfo5, freeCtx};

#endif
