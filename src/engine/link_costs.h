// The cost model's two link classes for one communicator (topo/cost_model.h): where each figure comes from, and
// CHORUS_CALIBRATE, which measures them at init.
//
// Every rank must use the same figures, or tuners that follow the model pick different algorithms and the ranks'
// schedules do not match. So a figure is either a setting every rank shares (CHORUS_COST_INTRA / _INTER), or
// derived from what every rank was told at init (the hosts' NIC speeds in PeerInfo), or measured by one pair of
// ranks and handed to all of them over the bootstrap. In that order of precedence:
//   1. CHORUS_COST_INTRA / CHORUS_COST_INTER, when set (read again by ncclResetDebugInit);
//   2. with CHORUS_CALIBRATE, a ping-pong between two ranks of one host and between rank 0 and a rank of another
//      host, through the communicator's own transports, cached in CHORUS_CALIBRATE_FILE by rank 0;
//   3. between hosts, the slowest host's NIC speed from its topology at 92% (what TCP or RDMA reach of a port's
//      rate), latency 20 us;
//   4. the defaults: 5 us and 5 GB/s within a host, 20 us and 1.25 GB/s between hosts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "topo/cost_model.h"

struct ncclComm;

namespace chorus {

/// The figures before any measurement (3 and 4 above; the settings, 1, are applied when the model is used):
/// the same on every rank, since every rank has the same peers.
LinkCosts linkCostsAtInit(const std::vector<PeerInfo>& peers);

/// The figures the model uses now: a CHORUS_COST_* setting wins over comm's own.
LinkCosts modelLinkCosts(const ncclComm* comm);

/// CHORUS_CALIBRATE (0 off, 1 measure unless rank 0's cache has this cluster, 2 always measure): collective over the
/// communicator, called by every rank after its engine exists. Refines comm's link costs; a failed measurement is
/// the init's failure (a peer that cannot move 4 MB now would fail the first collective).
ncclResult_t calibrateLinkCosts(ncclComm* comm);

/// CHORUS_CALIBRATE, which each rank tells the others in its PeerInfo.
int calibrateSetting();

/// One INFO line's text: "within a host 5 us a step, 5 GB/s (default); between hosts ...".
std::string describeLinkCosts(const LinkCosts& c);

// The parts without a communicator, for tests.

/// Round trips of a ping-pong: small messages (their median half is the latency a step) and `largeBytes` ones (half
/// the fastest, less half the fastest small one, is the large message's time, which gives the bandwidth; where the
/// small trips were no faster, the whole half trip). False only when a set of samples is empty.
bool fitLinkCost(const std::vector<double>& smallRttUs, const std::vector<double>& largeRttUs, size_t largeBytes,
                 LinkCost* out);

/// What identifies a cluster in the cache: the ranks' hosts in rank order, whether the ranks drive GPUs, and the
/// settings every rank shares (transports and FIFO geometry among them).
uint64_t calibrationKey(const std::vector<PeerInfo>& peers, uint64_t envHash);

/// A line of the cache file: "chorus-links 1 KEY INTRA INTER TIME", each class "LAT,GBPS" or "-" when not measured.
std::string calibrationLine(uint64_t key, const LinkCost* intra, const LinkCost* inter, int64_t unixTime);

/// The last line of `text` for `key`: *hasIntra / *hasInter say which classes it measured. False when none.
bool findCalibration(const std::string& text, uint64_t key, LinkCost* intra, bool* hasIntra, LinkCost* inter,
                     bool* hasInter);

}  // namespace chorus
