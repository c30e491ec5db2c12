/* An environment plugin in NCCL 2.28's ABI (ncclEnvPlugin_v1), built by the test suite for
 * tests/unit/core_params_test.cc: TESTENV_<NAME> in the real environment stands for NAME, and other names pass
 * through. init says what it was given on stderr (TESTENV_FAIL_INIT=1 makes it fail), and so does finalize. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int ncclResult_t; /* ncclSuccess is 0, ncclInternalError 3 */

static ncclResult_t envInit(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix) {
  if (getenv("TESTENV_FAIL_INIT") != NULL) return 3;
  fprintf(stderr, "test env plugin: init %u.%u.%u%s\n", major, minor, patch, suffix);
  return 0;
}

static ncclResult_t envFinalize(void) {
  fprintf(stderr, "test env plugin: finalize\n");
  return 0;
}

static const char* envGet(const char* name) {
  char key[256];
  snprintf(key, sizeof(key), "TESTENV_%s", name);
  const char* v = getenv(key);
  return v != NULL ? v : getenv(name);
}

typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} ncclEnv_v1_t;

__attribute__((visibility("default")))
const ncclEnv_v1_t ncclEnvPlugin_v1 = {"ChorusTestEnv", envInit, envFinalize, envGet};
