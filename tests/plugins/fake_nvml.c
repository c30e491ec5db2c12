/* A stand-in for NVIDIA's NVML (libnvidia-ml.so.1) with just the NVLink queries chorus's topology probe makes, for
 * tests/unit/core_topo_test.cc on machines without NVIDIA's driver. The links come from FAKE_NVML_LINKS, read at each
 * call: "BUSID=END,END,...;BUSID=..." lists each GPU's NVLinks in link order, an END being another GPU's bus id,
 * "switch" (an NVSwitch) or "down" (an inactive link). FAKE_NVML_INIT_FAIL=1 fails nvmlInit_v2; FAKE_NVML_NO_TYPE=1
 * makes nvmlDeviceGetNvLinkRemoteDeviceType say "not supported", as NVML before 11.0 has no such call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6, kUnknown = 999 };

typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} PciInfo;

/* The `index`-th entry of FAKE_NVML_LINKS (its GPU's bus id in *gpu), or NULL. */
static const char* entry(int index, unsigned gpu[3]) {
  const char* s = getenv("FAKE_NVML_LINKS");
  for (int i = 0; s != NULL && *s != 0; i++) {
    unsigned f = 0;
    if (sscanf(s, "%x:%x:%x.%x=", &gpu[0], &gpu[1], &gpu[2], &f) != 4) return NULL;
    if (i == index) return strchr(s, '=') + 1;
    s = strchr(s, ';');
    if (s != NULL) s++;
  }
  return NULL;
}

/* The `link`-th END of an entry, copied into out (at most n bytes); 0 when the GPU has no such link. */
static int linkEnd(const char* e, unsigned link, char* out, size_t n) {
  for (unsigned i = 0; e != NULL && *e != 0 && *e != ';'; i++) {
    size_t len = strcspn(e, ",;");
    if (i == link) {
      if (len >= n) len = n - 1;
      memcpy(out, e, len);
      out[len] = 0;
      return 1;
    }
    e += len;
    if (*e == ',') e++;
  }
  return 0;
}

EXPORT int nvmlInit_v2(void) {
  const char* fail = getenv("FAKE_NVML_INIT_FAIL");
  return fail != NULL && strcmp(fail, "1") == 0 ? kUnknown : kSuccess;
}

EXPORT int nvmlShutdown(void) { return kSuccess; }

EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** dev) {
  unsigned want[3], f = 0, gpu[3];
  if (id == NULL || dev == NULL || sscanf(id, "%x:%x:%x.%x", &want[0], &want[1], &want[2], &f) != 4)
    return kInvalidArgument;
  for (int i = 0; entry(i, gpu) != NULL; i++) {
    if (gpu[0] == want[0] && gpu[1] == want[1] && gpu[2] == want[2]) {
      *dev = (void*)(intptr_t)(i + 1);
      return kSuccess;
    }
  }
  return kNotFound;
}

/* The END of a device's link, or kInvalidArgument past its links. */
static int endOf(void* dev, unsigned link, char* out, size_t n) {
  unsigned gpu[3];
  const char* e = entry((int)(intptr_t)dev - 1, gpu);
  return e != NULL && linkEnd(e, link, out, n) ? kSuccess : kInvalidArgument;
}

EXPORT int nvmlDeviceGetNvLinkState(void* dev, unsigned link, int* active) {
  char end[64];
  int r = endOf(dev, link, end, sizeof(end));
  if (r == kSuccess) *active = strcmp(end, "down") != 0;
  return r;
}

EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* dev, unsigned link, PciInfo* pci) {
  char end[64];
  unsigned f = 0;
  int r = endOf(dev, link, end, sizeof(end));
  if (r != kSuccess) return r;
  memset(pci, 0, sizeof(*pci));
  if (strcmp(end, "switch") == 0) { /* an NVSwitch's own PCI function, no GPU's */
    pci->bus = 0xc0;
  } else if (sscanf(end, "%x:%x:%x.%x", &pci->domain, &pci->bus, &pci->device, &f) != 4) {
    return kUnknown;
  }
  snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
  return kSuccess;
}

EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void* dev, unsigned link, int* type) {
  char end[64];
  const char* noType = getenv("FAKE_NVML_NO_TYPE");
  if (noType != NULL && strcmp(noType, "1") == 0) return kNotSupported;
  int r = endOf(dev, link, end, sizeof(end));
  if (r == kSuccess) *type = strcmp(end, "switch") == 0 ? 2 : 0;
  return r;
}
