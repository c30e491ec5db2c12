// Helpers for the transport suites: choosing the transport through the environment, and
// checking which one a communicator really uses.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/params.h"
#include "transport/thread_names.h"

namespace chorus_test {

/// The transports every suite runs against: shared memory, and the net proxy over the socket net (one socket per
/// connection, and striped over 2 helper threads x 2 sockets), the UCX net and an external net plugin (the test
/// suite's TCP plugin in NCCL's v11 ABI); and the IB net over the fake verbs (tests/unit/ib_verbs_fake.h), which
/// carries data between the thread ranks of one process only.
enum class Transport { kShm, kSocket, kSocketStriped, kUcx, kPlugin, kIbFake };

/// Name of a transport, for parameterised test names.
inline const char* transportName(Transport t) {
  switch (t) {
    case Transport::kShm:
      return "shm";
    case Transport::kSocket:
      return "socket";
    case Transport::kSocketStriped:
      return "socket_striped";
    case Transport::kUcx:
      return "ucx";
    case Transport::kPlugin:
      return "plugin";
    case Transport::kIbFake:
      return "ib_fake";
  }
  return "?";
}

/// The name of the proxy thread a transport between hosts runs (none for shm).
inline const char* proxyThreadName(Transport t) {
  switch (t) {
    case Transport::kShm:
      return nullptr;
    case Transport::kSocket:
    case Transport::kSocketStriped:
      return "chorus-net-Sock";
    case Transport::kUcx:
      return "chorus-net-UCX";
    case Transport::kPlugin:
      return "chorus-net-Chor";  // the test plugin, "ChorusTestNet"
    case Transport::kIbFake:
      return "chorus-net-IB";
  }
  return nullptr;
}

#ifdef CHORUS_TEST_NET_V11
/// The test net plugin (tests/plugins/test_net.c, v11).
constexpr const char* kTestNetPlugin = CHORUS_TEST_NET_V11;
#else
constexpr const char* kTestNetPlugin = "";
#endif

/// Sets environment variables for one scope and restores them after. Every rank must agree on the
/// transport (the bootstrap compares settings), so the variables are set before any rank starts:
/// forked ranks inherit them, thread ranks read them after paramsReload().
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) {
        setenv(it->name.c_str(), it->value.c_str(), 1);
      } else {
        unsetenv(it->name.c_str());
      }
    }
    chorus::paramsReload();
  }
  /// Sets `name` to `value` until the end of the scope.
  void set(const char* name, const char* value) {
    const char* old = getenv(name);
    saved_.push_back({name, old ? old : "", old != nullptr});
    setenv(name, value, 1);
    chorus::paramsReload();
  }
  /// Unsets `name` until the end of the scope (the setting's default applies).
  void unset(const char* name) {
    const char* old = getenv(name);
    saved_.push_back({name, old ? old : "", old != nullptr});
    unsetenv(name);
    chorus::paramsReload();
  }
  /// Selects transport `t` for ranks started in this scope.
  void select(Transport t) {
    set("NCCL_SHM_DISABLE", t == Transport::kShm ? "0" : "1");
    if (t == Transport::kUcx) {
      set("NCCL_NET", "UCX");
      set("UCX_TLS", "tcp");  // UCX over TCP between "hosts", as between namespaces or machines
    } else if (t == Transport::kPlugin) {
      set("NCCL_NET_PLUGIN", kTestNetPlugin);
      set("NCCL_NET", "ChorusTestNet");
    } else if (t == Transport::kIbFake) {
      set("NCCL_NET", "IB");  // the caller puts the fake in place of libibverbs (FakeIbProcessNet)
    } else {
      set("NCCL_NET", "Socket");
      if (t == Transport::kSocketStriped) {
        set("NCCL_SOCKET_NTHREADS", "2");
        set("NCCL_NSOCKS_PERTHREAD", "2");
      }
    }
  }

 private:
  struct Saved {
    std::string name, value;
    bool had;
  };
  std::vector<Saved> saved_;
};

}  // namespace chorus_test
