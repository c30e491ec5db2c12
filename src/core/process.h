// Liveness of other processes on this host (the peers of a communicator).
#pragma once

#include <sys/types.h>

namespace chorus {

/// Whether process `pid` has exited: gone entirely, or a zombie that its parent has not reaped yet (kill(pid, 0)
/// still succeeds on those). False for a live process, including one this process may not signal.
bool processGone(pid_t pid);

}  // namespace chorus
