// The repository root for tests that read its files (topology nodes under topo/): ctest passes it in
// CHORUS_SOURCE_DIR; a test run by hand finds it from this file's path.
#pragma once

#include <cstdlib>
#include <string>

namespace chorus_test {

inline std::string sourceDir() {
  if (const char* d = std::getenv("CHORUS_SOURCE_DIR")) return d;
  std::string f = __FILE__;
  return f.substr(0, f.rfind("/tests/harness/"));
}

}  // namespace chorus_test
