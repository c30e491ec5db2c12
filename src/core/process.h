// Liveness of other processes on this host (the peers of a communicator).
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace chorus {

/// Whether process `pid` has exited: gone entirely, or a zombie that its parent has not reaped yet (kill(pid, 0)
/// still succeeds on those). False for a live process, including one this process may not signal.
bool processGone(pid_t pid);

/// A random nonzero 64-bit number, drawn from the kernel at each call: a process forked from one that drew numbers
/// does not repeat its parent's (a generator seeded once would, and two such children would draw the same ids).
uint64_t randomNonce();

}  // namespace chorus
