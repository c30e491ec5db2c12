// The test harness itself: what ctest hands every test (tests/CMakeLists.txt, chorus_add_gtest) reaches it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "harness/source_dir.h"

namespace {

// ctest gives every test CHORUS_TIMEOUT_S=20 and CHORUS_SOURCE_DIR. Both must arrive: a list of variables in one
// property once delivered only the first, and tests then found the tree through the compiler's file paths alone.
TEST(Harness, CtestPassesEveryVariable) {
  const char* timeout = std::getenv("CHORUS_TIMEOUT_S");
  if (timeout == nullptr || std::string(timeout) != "20") GTEST_SKIP() << "not run by ctest";
  const char* dir = std::getenv("CHORUS_SOURCE_DIR");
  ASSERT_NE(dir, nullptr) << "ctest set CHORUS_TIMEOUT_S but not CHORUS_SOURCE_DIR";
  std::string f = __FILE__;
  EXPECT_EQ(std::string(dir), f.substr(0, f.rfind("/tests/unit/")));
}

}  // namespace
