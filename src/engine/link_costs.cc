#include "engine/link_costs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>

#include "core/checks.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/files.h"
#include "core/hash.h"
#include "core/params.h"
#include "engine/engine.h"
#include "engine/tuner.h"
#include "runtime/runtime.h"

namespace chorus {
namespace {

IntParam kCalibrate{
    "CHORUS_CALIBRATE", 0,
    "1: measure the cost model's two link classes at init (a ping-pong of 8 B and 4 MB messages between "
    "two ranks of one host, and between rank 0 and a rank of another host), unless rank 0's "
    "CHORUS_CALIBRATE_FILE already has this cluster; 2: measure even then. Rank 0 hands the figures "
    "to every rank. A CHORUS_COST_INTRA / _INTER setting wins over the measurement of its class.",
    "tuning"};
StrParam kCalibrateFile{"CHORUS_CALIBRATE_FILE", "",
                        "Where rank 0 caches CHORUS_CALIBRATE's figures, one line a cluster (empty: "
                        "$XDG_CACHE_HOME/chorus/links, else $HOME/.cache/chorus/links).",
                        "tuning"};

constexpr double kDefaultIntraUs = 5, kDefaultIntraGBps = 5;
constexpr double kDefaultInterUs = 20, kDefaultInterGBps = 1.25;
constexpr int kWarmRounds = 3, kSmallRounds = 15, kLargeRounds = 3;
constexpr size_t kSmallBytes = 8, kLargeBytes = size_t(4) << 20;

LinkCost makeCost(double latencyUs, double gbps) {
  LinkCost c;
  c.latencyUs = latencyUs;
  c.bytesPerUs = gbps * 1000;
  return c;
}

std::string cacheFile() {
  if (kCalibrateFile.isSet() && !kCalibrateFile.get().empty()) return kCalibrateFile.get();
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  if (xdg != nullptr && xdg[0] != 0) return std::string(xdg) + "/chorus/links";
  if (home != nullptr && home[0] != 0) return std::string(home) + "/.cache/chorus/links";
  return "";
}

// Appends one line (O_APPEND: lines of ranks 0 of several jobs do not interleave), making the default folder.
bool appendLine(const std::string& path, const std::string& line, std::string* err) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    mkdir(path.substr(0, slash).c_str(), 0755);  // existing folders fail harmlessly
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    *err = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  const std::string text = line + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!ok) *err = "cannot write " + path + ": " + strerror(errno);
  close(fd);
  return ok;
}

std::string costText(const LinkCost& c) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g,%.4g", c.latencyUs, c.bytesPerUs / 1000);
  return buf;
}

// What one rank tells the others: rank 0 what its cache holds, the ranks that measured what they found.
struct Slot {
  int32_t hasIntra = 0, hasInter = 0;
  double intraUs = 0, intraPerUs = 0, interUs = 0, interPerUs = 0;
};

double microsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// One message each way with `peer` through the communicator's own transports: the initiator sends first and
// returns the round trip in microseconds; the other end answers (and returns 0).
ncclResult_t pingPong(ncclComm* comm, int peer, bool initiator, char* buf, size_t bytes, double* rttUs) {
  OpDesc send, recv;
  send.coll = recv.coll = Coll::kSendRecv;
  send.isSend = true;
  send.sendbuff = buf;
  recv.recvbuff = buf;
  send.count = recv.count = bytes;
  send.dtype = recv.dtype = ncclInt8;
  send.root = recv.root = peer;
  const auto t0 = std::chrono::steady_clock::now();
  CHORUS_CHECK(comm->engine->run({initiator ? send : recv}));
  CHORUS_CHECK(comm->engine->run({initiator ? recv : send}));
  *rttUs = initiator ? microsSince(t0) : 0;
  return ncclSuccess;
}

// The ping-pongs of one link class; the initiator fits them into *out.
ncclResult_t measure(ncclComm* comm, int peer, bool initiator, LinkCost* out, bool* fitted) {
  std::vector<char> buf(kLargeBytes, 1);
  std::vector<double> small, large;
  double rtt = 0;
  for (int i = 0; i < kWarmRounds; i++) CHORUS_CHECK(pingPong(comm, peer, initiator, buf.data(), kSmallBytes, &rtt));
  for (int i = 0; i < kSmallRounds; i++) {
    CHORUS_CHECK(pingPong(comm, peer, initiator, buf.data(), kSmallBytes, &rtt));
    small.push_back(rtt);
  }
  CHORUS_CHECK(pingPong(comm, peer, initiator, buf.data(), kLargeBytes, &rtt));  // warms the large path
  for (int i = 0; i < kLargeRounds; i++) {
    CHORUS_CHECK(pingPong(comm, peer, initiator, buf.data(), kLargeBytes, &rtt));
    large.push_back(rtt);
  }
  *fitted = initiator && fitLinkCost(small, large, kLargeBytes, out);
  return ncclSuccess;
}

}  // namespace

LinkCosts linkCostsAtInit(const std::vector<PeerInfo>& peers) {
  LinkCosts c;
  c.intra = makeCost(kDefaultIntraUs, kDefaultIntraGBps);
  c.inter = makeCost(kDefaultInterUs, kDefaultInterGBps);
  c.intraFrom = c.interFrom = "default";
  uint32_t slowest = 0;
  bool known = !peers.empty();
  for (const PeerInfo& p : peers) {
    known &= p.nicMbps > 0;
    slowest = slowest == 0 ? p.nicMbps : std::min(slowest, p.nicMbps);
  }
  if (known) {
    c.inter.bytesPerUs = slowest / 8.0 * 0.92;  // Mb/s -> bytes a us, at what TCP or RDMA reach of a port's rate
    c.interFrom = "NIC speed " + std::to_string(slowest) + " Mbit/s";
  }
  return c;
}

int calibrateSetting() { return static_cast<int>(kCalibrate.get()); }

LinkCosts modelLinkCosts(const ncclComm* comm) {
  LinkCosts c = comm->links;
  if (costIntraSet()) c.intra = costIntra(), c.intraFrom = "CHORUS_COST_INTRA";
  if (costInterSet()) c.inter = costInter(), c.interFrom = "CHORUS_COST_INTER";
  return c;
}

std::string describeLinkCosts(const LinkCosts& c) {
  char buf[320];
  std::snprintf(buf, sizeof(buf), "within a host %.3g us a step, %.4g GB/s (%s); between hosts %.3g us, %.4g GB/s (%s)",
                c.intra.latencyUs, c.intra.bytesPerUs / 1000, c.intraFrom.c_str(), c.inter.latencyUs,
                c.inter.bytesPerUs / 1000, c.interFrom.c_str());
  return buf;
}

bool fitLinkCost(const std::vector<double>& smallRttUs, const std::vector<double>& largeRttUs, size_t largeBytes,
                 LinkCost* out) {
  if (smallRttUs.empty() || largeRttUs.empty() || largeBytes == 0) return false;
  std::vector<double> s = smallRttUs;
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  const double latency = s[s.size() / 2] / 2;
  const double fastestSmall = *std::min_element(smallRttUs.begin(), smallRttUs.end()) / 2;
  const double fastestLarge = *std::min_element(largeRttUs.begin(), largeRttUs.end()) / 2;
  if (fastestLarge <= 0) return false;
  // The large message's own time: its fastest trip less the fastest small one's. A busy host can make even the
  // fastest small trip no faster than the large one; the whole trip then bounds the bandwidth from below.
  const double oneWay = fastestLarge > fastestSmall ? fastestLarge - fastestSmall : fastestLarge;
  out->latencyUs = latency;
  out->bytesPerUs = static_cast<double>(largeBytes) / oneWay;
  return true;
}

uint64_t calibrationKey(const std::vector<PeerInfo>& peers, uint64_t envHash) {
  std::string s = std::to_string(envHash);
  for (const PeerInfo& p : peers) s += "|" + std::to_string(p.hostHash) + (p.cudaDev >= 0 ? "g" : "h");
  return fnv1a64(s);
}

std::string calibrationLine(uint64_t key, const LinkCost* intra, const LinkCost* inter, int64_t unixTime) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "chorus-links 1 %016llx %s %s %lld", static_cast<unsigned long long>(key),
                intra ? costText(*intra).c_str() : "-", inter ? costText(*inter).c_str() : "-",
                static_cast<long long>(unixTime));
  return buf;
}

bool findCalibration(const std::string& text, uint64_t key, LinkCost* intra, bool* hasIntra, LinkCost* inter,
                     bool* hasInter) {
  std::istringstream in(text);
  std::string line;
  bool found = false;
  while (std::getline(in, line)) {
    char magic[16] = {0}, a[64] = {0}, b[64] = {0};
    int version = 0;
    unsigned long long k = 0;
    if (std::sscanf(line.c_str(), "%15s %d %llx %63s %63s", magic, &version, &k, a, b) != 5) continue;
    if (std::string(magic) != "chorus-links" || version != 1 || k != key) continue;
    LinkCost ci, ce;
    const bool okI = std::string(a) != "-" && parseLinkCost(a, &ci);
    const bool okE = std::string(b) != "-" && parseLinkCost(b, &ce);
    if ((std::string(a) != "-" && !okI) || (std::string(b) != "-" && !okE) || (!okI && !okE)) continue;
    *hasIntra = okI;
    *hasInter = okE;
    if (okI) *intra = ci;
    if (okE) *inter = ce;
    found = true;
  }
  return found;
}

ncclResult_t calibrateLinkCosts(ncclComm* comm) {
  const int n = comm->nranks, me = comm->rank;
  const std::vector<PeerInfo>& peers = comm->peers;
  const int mode = peers[me].calibrate;
  for (const PeerInfo& p : peers)
    if (p.calibrate != mode)
      CHORUS_FAIL(comm, ncclInvalidUsage,
                  "rank %d runs with CHORUS_CALIBRATE=%d and rank %d with CHORUS_CALIBRATE=%d; every rank must use "
                  "the same value",
                  me, mode, p.rank, p.calibrate);
  if (mode == 0 || n < 2) return ncclSuccess;
  // Within a host: the first two ranks that share one. GPU ranks' collectives move device memory through kernels, not
  // the host memory a host-buffer ping-pong measures, so their class keeps its figure.
  int intraA = -1, intraB = -1;
  const bool gpuRanks = comm->cudaDev >= 0 && gpuRuntime() != nullptr;
  for (int a = 0; a < n && intraA < 0 && !gpuRanks && !costIntraSet(); a++)
    for (int b = a + 1; b < n; b++)
      if (peers[b].hostHash == peers[a].hostHash) {
        intraA = a, intraB = b;
        break;
      }
  // Between hosts: rank 0 and the first rank of another host.
  int interB = -1;
  for (int b = 1; b < n && !costInterSet(); b++)
    if (peers[b].hostHash != peers[0].hostHash) {
      interB = b;
      break;
    }
  if (intraA < 0 && interB < 0) return ncclSuccess;

  const uint64_t key = calibrationKey(peers, peers[me].envHash);
  const std::string path = me == 0 ? cacheFile() : "";
  std::vector<Slot> slots(n);
  if (me == 0 && mode == 1 && !path.empty()) {
    LinkCost ci, ce;
    bool hi = false, he = false;
    std::string cache, absent;  // no cache yet is no error
    if (readFileText(path, &cache, &absent) && findCalibration(cache, key, &ci, &hi, &ce, &he)) {
      slots[0].hasIntra = hi, slots[0].intraUs = ci.latencyUs, slots[0].intraPerUs = ci.bytesPerUs;
      slots[0].hasInter = he, slots[0].interUs = ce.latencyUs, slots[0].interPerUs = ce.bytesPerUs;
    }
  }
  CHORUS_CHECK(comm->bootstrap->allGather(slots.data(), sizeof(Slot)));
  const Slot cached = slots[0];
  const bool measureIntra = intraA >= 0 && !cached.hasIntra;
  const bool measureInter = interB >= 0 && !cached.hasInter;
  Slot mine;
  LinkCost c;
  bool fitted = false;
  if (measureIntra && (me == intraA || me == intraB)) {
    CHORUS_CHECK(measure(comm, me == intraA ? intraB : intraA, me == intraA, &c, &fitted));
    if (fitted) mine.hasIntra = 1, mine.intraUs = c.latencyUs, mine.intraPerUs = c.bytesPerUs;
  }
  if (measureInter && (me == 0 || me == interB)) {
    CHORUS_CHECK(measure(comm, me == 0 ? interB : 0, me == 0, &c, &fitted));
    if (fitted) mine.hasInter = 1, mine.interUs = c.latencyUs, mine.interPerUs = c.bytesPerUs;
  }
  if (measureIntra || measureInter) {
    slots.assign(n, Slot());
    slots[me] = mine;
    CHORUS_CHECK(comm->bootstrap->allGather(slots.data(), sizeof(Slot)));
  }

  LinkCosts& links = comm->links;
  const std::string fromCache = "calibrated, cached in " + (path.empty() ? std::string("rank 0's file") : path);
  const Slot& si = measureIntra ? slots[intraA] : cached;
  const Slot& se = measureInter ? slots[0] : cached;
  if (intraA >= 0 && si.hasIntra) {
    links.intra.latencyUs = si.intraUs, links.intra.bytesPerUs = si.intraPerUs;
    links.intraFrom = measureIntra ? "calibrated" : fromCache;
  }
  if (interB >= 0 && se.hasInter) {
    links.inter.latencyUs = se.interUs, links.inter.bytesPerUs = se.interPerUs;
    links.interFrom = measureInter ? "calibrated" : fromCache;
  }
  if (me == 0 && (measureIntra || measureInter) && !path.empty()) {
    const bool hi = intraA >= 0 && si.hasIntra, he = interB >= 0 && se.hasInter;
    std::string err;
    if ((hi || he) &&
        !appendLine(path, calibrationLine(key, hi ? &links.intra : nullptr, he ? &links.inter : nullptr, time(nullptr)),
                    &err))
      WARN("CHORUS_CALIBRATE: %s; the figures are used but not cached", err.c_str());
  }
  return ncclSuccess;
}

}  // namespace chorus
