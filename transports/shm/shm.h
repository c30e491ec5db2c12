// Shared-memory transport: a FIFO in a POSIX shared-memory segment that both ends map,
// for ranks on the same host (threads of one process or separate processes).
#pragma once

#include <cstddef>
#include <string>

#include "kernels/fifo.h"
#include "nccl.h"

namespace chorus {

/// One mapped shm FIFO.
struct ShmSegment {
  std::string name;
  void* base = nullptr;
  size_t size = 0;
};

/// Name of the segment for (comm, channel, sender, receiver): both ends derive it alone. `kind` keeps the
/// families apart: 'c' host-path FIFOs, 'd' device-connection rendezvous records, 'b' call boards.
std::string shmFifoName(uint64_t commHash, int channel, int from, int to, char kind = 'c');
/// What a segment of /dev/shm is, from its name (without the leading '/'): one of shmFifoName's families, or a pinned
/// device FIFO (a device-connection record's name with "-h" appended).
enum class ShmKind { kOther, kHostFifo, kDeviceRecord, kPinnedDeviceFifo, kCallBoard };
ShmKind shmKind(const char* name);
/// Opens the named segment (creating it when `create`), grows it to at least `size` (zero-filled) and maps it.
/// On failure returns null with errno in *err and the failing call ("shm_open", "ftruncate", "mmap") in *call.
void* shmMapNamed(const std::string& name, size_t size, bool create, int* err, const char** call);
/// Creates or opens the named segment (whichever end comes first creates it zero-filled, which
/// is a valid empty FIFO) and maps it; the second end to attach unlinks the name. `peerPid` is the process of
/// the other end (recorded with this one, for shmSweepStale). Both ends in one process (ranks as threads) share one
/// mapping, so that both see the FIFO at the same addresses; shmFifoClose unmaps it after the last.
ncclResult_t shmFifoOpen(const std::string& name, const FifoGeometry& geo, ShmSegment* seg, uint64_t peerPid);
/// Records the processes of a FIFO's two ends in its control block unless an end already did.
void shmFifoRecordEnds(FifoCtrl* ctrl, uint64_t peerPid);
/// Unmaps. The name stays while the far end has not attached yet: a sender may finish
/// (its data waiting in the FIFO) before the receiver first opens it. With unlinkName
/// (the communicator failed or was aborted) the name is removed regardless.
void shmFifoClose(ShmSegment* seg, bool unlinkName);
/// Removes this user's FIFO segments (/dev/shm/chorus-*) whose two end processes have both exited: what ranks
/// killed before their peers attached leave behind. A segment one of whose ends is alive stays (its receiver may
/// not have opened it yet, with the data of a sender that finished and left), and so does one whose ends are not
/// recorded yet. Returns how many were removed. Called at communicator init.
int shmSweepStale();
/// Whether the FIFO segment `name` ("/chorus-...") is garbage: the processes of both its ends have exited (what
/// shmSweepStale removes).
bool shmFifoStale(const std::string& name);
/// Removes this user's segments /dev/shm/chorus-* whose name (without the leading '/') `match` accepts and that
/// `stale` ("/chorus-...") calls garbage; returns how many. shmSweepStale is this for FIFOs.
int shmSweep(bool (*match)(const char* name), bool (*stale)(const std::string& name));
/// Maps the first `bytes` of the segment `name` read-only if this user owns it and it is at least that long;
/// null otherwise. munmap(p, bytes) when done.
const void* shmMapMine(const std::string& name, size_t bytes);
/// Whether the process `pid` has exited (or is a zombie); false for 0, which records no process.
bool shmPidGone(uint64_t pid);

}  // namespace chorus
