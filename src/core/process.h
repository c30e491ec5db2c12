// Liveness of other processes on this host (the peers of a communicator).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus {

/// Whether process `pid` has exited: gone entirely, or a zombie that its parent has not reaped yet (kill(pid, 0)
/// still succeeds on those). False for a live process, including one this process may not signal.
bool processGone(pid_t pid);

/// A random nonzero 64-bit number, drawn from the kernel at each call: a process forked from one that drew numbers
/// does not repeat its parent's (a generator seeded once would, and two such children would draw the same ids).
uint64_t randomNonce();

/// A range of this process's memory that a call reads, or reads and writes.
struct MemoryUse {
  const void* p;
  size_t bytes;
  bool write;
};

/// How memoryAccessible learns the mappings: kQuery asks the kernel for each mapping a use covers (Linux 6.11's
/// PROCMAP_QUERY), and reads /proc/self/maps where the kernel does not answer (older kernels: the first refusal is
/// kept for the process); kRead always reads the file.
enum class MapsLookup { kQuery, kRead };

/// Whether each of uses[0, n) is memory of this process for its whole length, readable and, for a write, writable, as
/// /proc/self/maps lists it at the time of the call (read once for all of them, or its mappings asked one by one:
/// `how`; each thread keeps the file open). On false, *bad is the first use that is not and *why says where ("nothing
/// is mapped at 0x..."). True where /proc/self/maps cannot be opened (nothing to check against). At most 4 uses: any
/// past the fourth are not checked.
bool memoryAccessible(const MemoryUse* uses, int n, int* bad, std::string* why, MapsLookup how = MapsLookup::kQuery);

}  // namespace chorus
