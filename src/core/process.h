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

/// Whether [p, p + bytes) is memory of this process for its whole length, readable and, with `write`, writable, as
/// /proc/self/maps lists it at the time of the call. On false, *why says where it is not ("nothing is mapped at
/// 0x..."). True where /proc/self/maps cannot be read (nothing to check against).
bool memoryAccessible(const void* p, size_t bytes, bool write, std::string* why);

}  // namespace chorus
