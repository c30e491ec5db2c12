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

/// The transports every suite runs against.
enum class Transport { kShm, kSocket };

/// Name of a transport, for parameterised test names.
inline const char* transportName(Transport t) { return t == Transport::kShm ? "shm" : "socket"; }

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
  /// Selects transport `t` for ranks started in this scope.
  void select(Transport t) { set("NCCL_SHM_DISABLE", t == Transport::kSocket ? "1" : "0"); }

 private:
  struct Saved {
    std::string name, value;
    bool had;
  };
  std::vector<Saved> saved_;
};


}  // namespace chorus_test
