// Counting this process's threads by name (/proc/self/task/*/comm), for tests that check which helper threads a
// transport started. Plain C++ and no chorus internals, so programs that link only the public library use it.
#pragma once

#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace chorus_test {

/// Threads of this process whose name is `name` (the socket transport's proxy is "chorus-sock"); -1 if
/// /proc/self/task cannot be read.
inline int countThreadsNamed(const char* name) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
    FILE* f = fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char buf[64] = {0};
    if (fgets(buf, sizeof(buf), f) != nullptr) {
      buf[strcspn(buf, "\n")] = 0;
      if (strcmp(buf, name) == 0) n++;
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

}  // namespace chorus_test
