// randomNonce (src/core/process.h): the ids the nets give their contexts and listens, by which a peer tells
// connections apart.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <set>

#include "core/process.h"

namespace chorus {
namespace {

// Two children forked from a process that has drawn numbers draw different ones: ranks forked from one parent that
// had used a net must not give their contexts the same id (a peer would then take one rank's connection for
// another's).
TEST(RandomNonce, ForkedChildrenDrawTheirOwn) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 4; ++i) seen.insert(randomNonce());
  EXPECT_EQ(seen.size(), 4u);
  uint64_t got[2] = {0, 0};
  for (uint64_t& g : got) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      uint64_t v = randomNonce();
      _exit(write(fds[1], &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v)) ? 0 : 1);
    }
    close(fds[1]);
    EXPECT_EQ(read(fds[0], &g, sizeof(g)), static_cast<ssize_t>(sizeof(g)));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_NE(got[0], got[1]);
  EXPECT_NE(got[0], 0u);
  EXPECT_EQ(seen.count(got[0]) + seen.count(got[1]), 0u);
}

}  // namespace
}  // namespace chorus
