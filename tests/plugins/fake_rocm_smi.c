/* A stand-in for AMD's ROCm SMI (librocm_smi64.so) with just the link queries chorus's topology probe makes, for
 * tests/unit/core_topo_test.cc on machines without AMD's driver. Read at each call: FAKE_RSMI_GPUS lists the devices'
 * PCI bus ids in ROCm SMI's device order ("0000:c1:00.0,0000:29:00.0"); FAKE_RSMI_XGMI lists the xGMI paths between
 * devices as "I-J:WEIGHT:HOPS" ("0-1:15:1,1-2:30:2"), every other pair being PCIe (weight 40, two hops).
 * FAKE_RSMI_INIT_FAIL=1 fails rsmi_init; FAKE_RSMI_NO_WEIGHT=1 makes rsmi_topo_get_link_weight fail. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { kSuccess = 0, kInvalidArgs = 1, kNotSupported = 2, kInitError = 8 };
enum { kPcie = 1, kXgmi = 2 };

static int flag(const char* name) {
  const char* v = getenv(name);
  return v != NULL && strcmp(v, "1") == 0;
}

/* Device `index`'s bus id from FAKE_RSMI_GPUS into d/b/v/f; 0 when there is none. */
static int device(uint32_t index, unsigned* d, unsigned* b, unsigned* v, unsigned* f) {
  const char* s = getenv("FAKE_RSMI_GPUS");
  for (uint32_t i = 0; s != NULL && *s != 0; i++) {
    if (i == index) return sscanf(s, "%x:%x:%x.%x", d, b, v, f) == 4;
    s = strchr(s, ',');
    if (s != NULL) s++;
  }
  return 0;
}

/* The xGMI path between devices a and b from FAKE_RSMI_XGMI (either order): 1 with its weight and hops, else 0. */
static int xgmi(uint32_t a, uint32_t b, uint64_t* weight, uint64_t* hops) {
  const char* s = getenv("FAKE_RSMI_XGMI");
  while (s != NULL && *s != 0) {
    unsigned i = 0, j = 0;
    unsigned long long w = 0, h = 0;
    if (sscanf(s, "%u-%u:%llu:%llu", &i, &j, &w, &h) == 4 && ((i == a && j == b) || (i == b && j == a))) {
      *weight = w;
      *hops = h;
      return 1;
    }
    s = strchr(s, ',');
    if (s != NULL) s++;
  }
  return 0;
}

EXPORT int rsmi_init(uint64_t flags) {
  (void)flags;
  return flag("FAKE_RSMI_INIT_FAIL") ? kInitError : kSuccess;
}

EXPORT int rsmi_shut_down(void) { return kSuccess; }

EXPORT int rsmi_num_monitor_devices(uint32_t* n) {
  unsigned d, b, v, f;
  uint32_t i = 0;
  while (device(i, &d, &b, &v, &f)) i++;
  *n = i;
  return kSuccess;
}

EXPORT int rsmi_dev_pci_id_get(uint32_t index, uint64_t* bdf) {
  unsigned d, b, v, f;
  if (!device(index, &d, &b, &v, &f)) return kInvalidArgs;
  *bdf = ((uint64_t)d << 32) | ((uint64_t)b << 8) | ((uint64_t)v << 3) | f;
  return kSuccess;
}

EXPORT int rsmi_topo_get_link_type(uint32_t a, uint32_t b, uint64_t* hops, int* type) {
  uint64_t weight = 0;
  unsigned d, bb, v, f;
  if (!device(a, &d, &bb, &v, &f) || !device(b, &d, &bb, &v, &f)) return kInvalidArgs;
  if (xgmi(a, b, &weight, hops)) {
    *type = kXgmi;
  } else {
    *type = kPcie;
    *hops = 2;
  }
  return kSuccess;
}

EXPORT int rsmi_topo_get_link_weight(uint32_t a, uint32_t b, uint64_t* weight) {
  uint64_t hops = 0;
  if (flag("FAKE_RSMI_NO_WEIGHT")) return kNotSupported;
  if (!xgmi(a, b, weight, &hops)) *weight = 40;
  return kSuccess;
}
