// TEMPORARY (not committed): weak stand-in until the socket transport lands.
#include "core/checks.h"
#include "transports/socket/socket_transport.h"
namespace chorus {
__attribute__((weak)) ncclResult_t SocketTransport::create(ncclComm* comm, std::unique_ptr<SocketTransport>* out) {
  CHORUS_FAIL(comm, ncclInvalidUsage, "socket transport not built");
}
}
