#include "transports/ib/ib_select.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/params.h"

namespace chorus {

namespace {

IntParam kIbMqpRetryCnt{"NCCL_IB_MQP_RETRY_CNT", 34,
                        "IB net: how often a queue pair's state change (ibv_modify_qp) that failed with ETIMEDOUT is "
                        "tried again, as NCCL (0-1000).",
                        "network"};
IntParam kIbMqpRetrySleepMs{"NCCL_IB_MQP_RETRY_SLEEP_MSEC", 100,
                            "IB net: the n-th retry of a queue pair's state change waits n x this many ms before it "
                            "(0-10000).",
                            "network"};
IntParam kIbMqpRetryAll{"NCCL_IB_MQP_RETRY_ALL", 0,
                        "IB net: 1: a queue pair's state change is retried (NCCL_IB_MQP_RETRY_CNT) whatever error it "
                        "failed with; 0: only after ETIMEDOUT, as NCCL.",
                        "network"};

}  // namespace

int64_t clampParam(const IntParam& p, int64_t lo, int64_t hi) { return std::clamp(p.get(), lo, hi); }

IbModifyRetry ibModifyRetry() {
  IbModifyRetry r;
  r.retries = static_cast<int>(clampParam(kIbMqpRetryCnt, 0, 1000));
  r.sleepMs = static_cast<int>(clampParam(kIbMqpRetrySleepMs, 0, 10000));
  r.all = kIbMqpRetryAll.get() != 0;
  return r;
}

int ibRetryModifyQp(const IbModifyRetry& policy, const std::function<int()>& modify,
                    const std::function<void(int ms, int err)>& wait, int* attempts) {
  int err = modify();
  *attempts = 1;
  // Some providers return a negative errno.
  while (err != 0 && (policy.all || err == ETIMEDOUT || err == -ETIMEDOUT) && *attempts <= policy.retries) {
    wait(policy.sleepMs * *attempts, err);
    err = modify();
    ++*attempts;
  }
  return err;
}

namespace {

bool allZero(const uint8_t* p, int n) {
  for (int i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

bool linkLocal(const IbGid& g) {
  // fe80::/64: the default GID of every port, derived from its GUID or MAC; not routable.
  return g.raw[0] == 0xfe && g.raw[1] == 0x80 && allZero(g.raw + 2, 6);
}

// The index of the lowest set bit of `bits`, or -1 when none is.
int lowestBit(int bits) {
  for (int i = 0; i < 31; ++i) {
    if (bits & (1 << i)) return i;
  }
  return -1;
}

}  // namespace

IbHcaFilter parseIbHcaFilter(const std::string& spec) {
  IbHcaFilter f;
  size_t pos = 0;
  if (pos < spec.size() && spec[pos] == '^') {
    f.exclude = true;
    ++pos;
  }
  if (pos < spec.size() && spec[pos] == '=') {
    f.exact = true;
    ++pos;
  }
  for (const std::string& item : splitList(spec.substr(pos))) {
    IbHcaEntry e;
    size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      const char* text = item.c_str() + colon + 1;
      char* stop = nullptr;
      long port = strtol(text, &stop, 10);
      if (stop != text && *stop == '\0' && port > 0) e.port = static_cast<int>(port);
    }
    if (!e.name.empty()) f.entries.push_back(e);
  }
  return f;
}

bool ibHcaSelected(const IbHcaFilter& filter, const std::string& hca, int port) {
  if (filter.entries.empty()) return true;
  bool listed = false;
  for (const IbHcaEntry& e : filter.entries) {
    bool nameOk = filter.exact ? hca == e.name : hca.compare(0, e.name.size(), e.name) == 0;
    if (nameOk && (e.port < 0 || e.port == port)) {
      listed = true;
      break;
    }
  }
  return listed != filter.exclude;
}

bool ibGidConfigured(const IbGid& gid) {
  if (allZero(gid.raw, 16)) return false;
  // A bare fe80:: (the prefix with no interface id) is an unset entry on some drivers.
  return !(gid.raw[0] == 0xfe && gid.raw[1] == 0x80 && allZero(gid.raw + 2, 14));
}

bool ibGidIsIpv4(const IbGid& gid) { return allZero(gid.raw, 10) && gid.raw[10] == 0xff && gid.raw[11] == 0xff; }

IbGidPrefs parseIbGidPrefs(const std::string& family, const std::string& range, int64_t roceVersion,
                           std::vector<std::string>* notes) {
  IbGidPrefs p;
  if (family == "AF_INET6") {
    p.ipv6 = true;
  } else if (!family.empty() && family != "AF_INET") {
    notes->push_back("NCCL_IB_ADDR_FAMILY=" + family + " is neither AF_INET nor AF_INET6: AF_INET");
  }
  p.roceVersion = static_cast<int>(roceVersion);
  if (range.empty()) return p;
  const size_t slash = range.find('/');
  const std::string base = range.substr(0, slash);
  const int most = p.ipv6 ? 128 : 32;
  char* end = nullptr;
  const long len = slash == std::string::npos ? -1 : std::strtol(range.c_str() + slash + 1, &end, 10);
  uint8_t addr[16] = {0};
  const bool parsed = inet_pton(p.ipv6 ? AF_INET6 : AF_INET, base.c_str(), addr) == 1;
  if (!parsed || len < 0 || len > most || end == nullptr || *end != '\0') {
    notes->push_back("NCCL_IB_ADDR_RANGE=" + range + " is not an " + (p.ipv6 ? "IPv6" : "IPv4") +
                     " address/prefix length: ignored");
    return p;
  }
  p.hasRange = true;
  p.rangeText = range;
  if (p.ipv6) {
    std::memcpy(p.range.raw, addr, 16);
    p.prefixLen = static_cast<int>(len);
  } else {
    p.range.raw[10] = p.range.raw[11] = 0xff;
    std::memcpy(p.range.raw + 12, addr, 4);
    p.prefixLen = 96 + static_cast<int>(len);  // within the IPv4-mapped GID
  }
  return p;
}

bool ibGidMatches(const IbGidPrefs& prefs, const IbGid& gid) {
  if (ibGidIsIpv4(gid) == prefs.ipv6) return false;
  if (!prefs.hasRange) return true;
  for (int bit = 0; bit < prefs.prefixLen; bit++) {
    const uint8_t mask = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((gid.raw[bit / 8] & mask) != (prefs.range.raw[bit / 8] & mask)) return false;
  }
  return true;
}

int selectIbGidIndex(IbLinkLayer linkLayer, const std::vector<IbGidEntry>& gids, int64_t forced, std::string* why,
                     const IbGidPrefs& prefs) {
  const int n = static_cast<int>(gids.size());
  if (forced >= 0) {
    // Plain InfiniBand needs no GID: index 0 stands even when the table was not read.
    if (forced < n || (forced == 0 && linkLayer == IbLinkLayer::kInfiniband)) return static_cast<int>(forced);
    *why = "NCCL_IB_GID_INDEX=" + std::to_string(forced) + " is outside the port's GID table (" + std::to_string(n) +
           " entries)";
    return -1;
  }
  if (linkLayer == IbLinkLayer::kInfiniband) {
    // As NCCL: the routable GID where its entry carries a FLID (so that routers reach the port from other subnets).
    const int r = prefs.routableFlidIndex;
    return r >= 0 && r < n && ibGidFlid(gids[r].gid) != 0 ? r : 0;
  }
  if (linkLayer != IbLinkLayer::kEthernet) {
    *why = "the link layer is neither InfiniBand nor Ethernet";
    return -1;
  }
  // RoCE: in order of preference, as the address family, range and RoCE version choose.
  auto firstWhere = [&](auto pred) {
    for (int i = 0; i < n; ++i) {
      if (ibGidConfigured(gids[i].gid) && pred(gids[i])) return i;
    }
    return -1;
  };
  const IbGidType version = prefs.roceVersion == 1 ? IbGidType::kIbRoceV1 : IbGidType::kRoceV2;
  auto wanted = [&](const IbGidEntry& e) { return !linkLocal(e.gid) && ibGidMatches(prefs, e.gid); };
  int idx = firstWhere([&](const IbGidEntry& e) { return wanted(e) && e.type == version; });
  if (idx < 0) idx = firstWhere(wanted);
  if (idx < 0 && prefs.hasRange) {
    *why = "no routable " + std::string(prefs.ipv6 ? "IPv6" : "IPv4") +
           " GID of the port is in NCCL_IB_ADDR_RANGE=" + prefs.rangeText;
    return -1;
  }
  if (idx < 0) idx = firstWhere([](const IbGidEntry& e) { return e.type == IbGidType::kRoceV2 && !linkLocal(e.gid); });
  if (idx < 0) idx = firstWhere([](const IbGidEntry& e) { return !linkLocal(e.gid); });
  if (idx < 0) idx = firstWhere([](const IbGidEntry&) { return true; });
  if (idx < 0) *why = "the port has no configured GID (no IP address on its Ethernet interface?)";
  return idx;
}

int ibPortSpeedMbps(int activeSpeed, int activeWidth) {
  // Lane rates of the active_speed bits: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR (Mbit/s).
  static const int kLaneMbps[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000};
  // Lane counts of the active_width bits: 1x, 4x, 8x, 12x, 2x.
  static const int kLanes[] = {1, 4, 8, 12, 2};
  int s = lowestBit(activeSpeed);
  int w = lowestBit(activeWidth);
  // An unknown code counts as the slowest lane rate or a single lane, so the speed is never 0.
  int lane = s >= 0 && s < 8 ? kLaneMbps[s] : kLaneMbps[0];
  int lanes = w >= 0 && w < 5 ? kLanes[w] : 1;
  return lane * lanes;
}

int ibMtuBytes(int mtu) { return mtu >= 1 && mtu <= 5 ? 128 << mtu : 0; }

std::vector<IbDevice> selectIbDevices(const std::vector<IbPortDesc>& ports, const std::string& hcaSpec,
                                      int64_t gidIndex, std::vector<std::string>* skipped, const IbGidPrefs& prefs) {
  IbHcaFilter filter = parseIbHcaFilter(hcaSpec);
  std::vector<IbDevice> out;
  for (const IbPortDesc& p : ports) {
    if (!ibHcaSelected(filter, p.hca, p.port)) continue;
    std::string where = p.hca + ":" + std::to_string(p.port);
    std::string why;
    if (!p.active) {
      why = "port is not active";
    } else if (p.linkLayer != IbLinkLayer::kInfiniband && p.linkLayer != IbLinkLayer::kEthernet) {
      why = "unknown link layer";
    }
    IbDevice d;
    if (why.empty()) d.gidIndex = selectIbGidIndex(p.linkLayer, p.gids, gidIndex, &why, prefs);
    if (!why.empty()) {
      if (skipped != nullptr) skipped->push_back(where + ": " + why);
      continue;
    }
    d.port = p;
    d.name = p.hca;
    if (d.gidIndex < static_cast<int>(p.gids.size())) d.gid = p.gids[d.gidIndex].gid;
    d.speedMbps = ibPortSpeedMbps(p.activeSpeed, p.activeWidth);
    out.push_back(std::move(d));
  }
  return out;
}

int ibGidFlid(const IbGid& gid) { return gid.raw[4] << 8 | gid.raw[5]; }

int ibGidLocalSubnet(const IbGid& gid) { return gid.raw[6] << 8 | gid.raw[7]; }

std::string ibGidText(const IbGid& gid) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (inet_ntop(AF_INET6, gid.raw, buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

}  // namespace chorus
