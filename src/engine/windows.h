// Registered windows of a communicator (ncclCommWindowRegister). Registration is collective, as in NCCL: every rank
// registers its own buffer of the same size, and the k-th registration of every rank is the same window (id k).
// Where every rank is a process (or thread) of one host with its buffer in its GPU's memory, each rank maps every
// other rank's buffer (same process: the pointer; another process: CUDA/HIP IPC of the allocation holding it), so
// that collectives on window buffers run on the users' own buffers (kernels/device_window.h). All ranks agree on
// whether a window is usable so: a second exchange says whether every rank mapped every peer.
//
// Deregistration is local (as in NCCL): it closes this rank's mappings of the peers' buffers. A window's buffer
// must stay allocated until every rank has deregistered it or destroyed the communicator.
//
// Thread ownership: registration and lookup run on the thread that calls the communicator (or, in a group, on the
// group's thread for it); a mutex guards the list all the same, since lookups and registrations of one
// communicator may come from different threads over its life.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/comm.h"

/// The window behind ncclWindow_t.
struct ncclWindow_vidmem {
  uint64_t magic = 0;
  const ncclComm* comm = nullptr;
  char* buff = nullptr;
  size_t size = 0;
  int flags = 0;
  uint32_t id = 0;      ///< its registration number on the communicator, the same on every rank; 0 until registered
  bool direct = false;  ///< every rank reaches every rank's buffer (the verdict is the same on every rank)
  std::vector<char*> peers;   ///< direct windows, by rank: that rank's buffer as this process reaches it
  std::vector<void*> opened;  ///< by rank: the IPC mapping of the allocation holding it, to close (null: none)
};

namespace chorus {

/// ncclWindow_vidmem::magic of a live window.
constexpr uint64_t kWindowMagic = 0x77696e646f772121ull;

/// Where a buffer is: the direct window that holds it and its offset there.
struct WindowRef {
  const ncclWindow_vidmem* win = nullptr;
  size_t offset = 0;
};

/// The windows of one communicator.
class WindowTable {
 public:
  explicit WindowTable(ncclComm* comm) : comm_(comm) {}
  /// Closes the mappings of windows still registered (the device engine has waited for the device by then) and
  /// frees them: a communicator's windows end with it.
  ~WindowTable();
  WindowTable(const WindowTable&) = delete;
  WindowTable& operator=(const WindowTable&) = delete;

  /// Collective: registers `win` (buff, size and flags set) as this rank's part of the next window. Refuses sizes
  /// that differ between ranks, naming them. On failure `win` is not registered.
  ncclResult_t add(ncclWindow_vidmem* win);
  /// Local: forgets `win` (the caller frees it) and closes this rank's mappings of the peers' buffers. False, with
  /// `win` not read, when it is not one of this table's windows.
  bool remove(ncclWindow_vidmem* win);
  /// Keeps `win`, whose registration in a group failed after its handle was given out, so that deregistration finds
  /// and frees it as usual; collectives never use it.
  void keepFailed(ncclWindow_vidmem* win);
  /// The direct window (lowest id) holding [p, p + bytes), or none.
  WindowRef find(const void* p, size_t bytes) const;

 private:
  /// Maps every peer's buffer of `win` (described by the gathered entries); false if any could not be.
  struct Entry;
  bool mapPeers(ncclWindow_vidmem* win, const std::vector<Entry>& all);
  void unmap(ncclWindow_vidmem* win);
  /// Whether some rank lives in another process (its buffers are reached through IPC).
  bool exportNeeded() const;

  ncclComm* comm_;
  mutable std::mutex mutex_;
  std::vector<ncclWindow_vidmem*> wins_;
  std::vector<ncclWindow_vidmem*> failed_;  ///< keepFailed's, until deregistered
  uint32_t registrations_ = 0;  ///< registrations so far: the next one's id is this + 1 on every rank
};

}  // namespace chorus
