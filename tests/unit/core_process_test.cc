// randomNonce (src/core/process.h): the ids the nets give their contexts and listens, by which a peer tells
// connections apart. memoryAccessible (NCCL_CHECK_POINTERS' host check): asking the kernel for each mapping and reading
// /proc/self/maps give the same verdict and the same words on the same ranges.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <string>

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

// The same ranges checked both ways: a whole mapping, two adjacent mappings (read-write then read-only) read and
// written, a page with no access, a hole left by munmap between two mappings, an address past user space, a range
// that wraps the address space, an empty range, and several uses at once, the verdict naming the first that fails.
TEST(MemoryAccessible, AskingTheKernelAndReadingTheMapAgree) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* m = static_cast<char*>(mmap(nullptr, 6 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(mprotect(m + page, page, PROT_READ), 0);  // [0] rw, [1] r, [2] none, [3] rw, [4] unmapped, [5] rw
  ASSERT_EQ(mprotect(m + 2 * page, page, PROT_NONE), 0);
  ASSERT_EQ(munmap(m + 4 * page, page), 0);
  const void* wild = reinterpret_cast<const void*>(uintptr_t(1) << 62);
  const void* wraps = reinterpret_cast<const void*>(UINTPTR_MAX - 15);
  struct Case {
    std::vector<MemoryUse> uses;
    int bad;            // -1: accessible
    const char* words;  // in the verdict
  };
  const Case cases[] = {
      {{{m, page, true}}, -1, ""},
      {{{m, 2 * page, false}}, -1, ""},
      {{{m + 10, page, true}}, 0, "read-only memory at"},
      {{{m + page, 2 * page, false}}, 0, "unreadable memory at"},
      {{{m + 3 * page, 2 * page, false}}, 0, "nothing is mapped at"},
      {{{m + 5 * page, page, true}}, -1, ""},
      {{{wild, 8, false}}, 0, "nothing is mapped at"},
      {{{wraps, 64, false}}, 0, "past the end of the address space"},
      {{{m + 2 * page, 0, true}}, -1, ""},
      {{{m, page, false}, {m + page, 8, true}, {m + 4 * page, 8, false}}, 1, "read-only memory at"},
      {{{m, 8, false}, {m + 3 * page + 8, page, false}}, 1, "nothing is mapped at"},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    const Case& c = cases[k];
    std::string verdict[2];
    for (MapsLookup how : {MapsLookup::kQuery, MapsLookup::kRead}) {
      int bad = -1;
      std::string why;
      const bool ok = memoryAccessible(c.uses.data(), static_cast<int>(c.uses.size()), &bad, &why, how);
      const char* way = how == MapsLookup::kQuery ? "asked" : "read";
      EXPECT_EQ(ok, c.bad < 0) << "case " << k << " " << way << ": " << why;
      if (!ok) {
        EXPECT_EQ(bad, c.bad) << "case " << k << " " << way;
        EXPECT_NE(why.find(c.words), std::string::npos) << "case " << k << " " << way << ": " << why;
      }
      verdict[how == MapsLookup::kQuery ? 0 : 1] = ok ? "ok" : std::to_string(bad) + " " + why;
    }
    EXPECT_EQ(verdict[0], verdict[1]) << "case " << k;
  }
  for (int i : {0, 1, 2, 3, 5}) munmap(m + i * page, page);
}

}  // namespace
}  // namespace chorus
