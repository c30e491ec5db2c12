// Counting this process's threads by name (/proc/self/task/*/comm), for tests that check which helper threads a
// transport started. Plain C++ and no chorus internals, so programs that link only the public library use it.
#pragma once

#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace chorus_test {

/// Whether a thread named `comm` matches `name`: the whole name, or its start when `name` ends in '*'.
inline bool threadNameMatches(const char* comm, const char* name) {
  const size_t len = strlen(name);
  return len > 0 && name[len - 1] == '*' ? strncmp(comm, name, len - 1) == 0 : strcmp(comm, name) == 0;
}

/// How many threads of this process each of `names` matches, counted in one pass over /proc/self/task (so that
/// counts taken together agree while threads come and go). A name matches a thread's whole name, or its start when it
/// ends in '*' (a net proxy is "chorus-net-" and the first 4 characters of its net's name: "chorus-net-Sock"; any net
/// proxy: "chorus-net-*"). Every count is -1 if /proc/self/task cannot be read.
///
/// A pass can miss a live thread: /proc lists tasks by position, so a thread that exits while the directory is read
/// shifts the ones after it past the reader (a rank's proxy went uncounted while another rank's communicator was
/// being destroyed). So passes repeat until two in a row see the same threads.
inline std::vector<int> countThreadsNamed(const std::vector<const char*>& names) {
  std::vector<std::string> prevTids;
  std::vector<int> n;
  for (int pass = 0; pass < 50; pass++) {
    std::vector<std::string> tids;
    n.assign(names.size(), 0);
    DIR* d = opendir("/proc/self/task");
    if (d == nullptr) return std::vector<int>(names.size(), -1);
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      tids.emplace_back(e->d_name);
      std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
      FILE* f = fopen(path.c_str(), "r");
      if (f == nullptr) continue;
      char buf[64] = {0};
      if (fgets(buf, sizeof(buf), f) != nullptr) {
        buf[strcspn(buf, "\n")] = 0;
        for (size_t i = 0; i < names.size(); i++)
          if (threadNameMatches(buf, names[i])) n[i]++;
      }
      fclose(f);
    }
    closedir(d);
    if (pass > 0 && tids == prevTids) break;
    prevTids.swap(tids);
  }
  return n;
}

/// The CPUs each thread of this process named `name` (matched as above) may run on, as its Cpus_allowed_list in
/// /proc/self/task/*/status says ("0-1"): one entry a thread, in no order.
inline std::vector<std::string> cpusOfThreadsNamed(const char* name) {
  std::vector<std::string> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    char buf[256] = {0};
    FILE* f = fopen((task + "/comm").c_str(), "r");
    if (f == nullptr) continue;
    const bool read = fgets(buf, sizeof(buf), f) != nullptr;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    if (!read || !threadNameMatches(buf, name)) continue;
    if ((f = fopen((task + "/status").c_str(), "r")) == nullptr) continue;
    while (fgets(buf, sizeof(buf), f) != nullptr) {
      if (strncmp(buf, "Cpus_allowed_list:", 18) != 0) continue;
      std::string list = buf + 18;
      list.erase(0, list.find_first_not_of(" \t"));
      list.erase(list.find_last_not_of(" \t\n") + 1);
      out.push_back(list);
    }
    fclose(f);
  }
  closedir(d);
  return out;
}

/// Threads of this process whose name is `name` (or starts with it, for a trailing '*'; see above).
inline int countThreadsNamed(const char* name) { return countThreadsNamed(std::vector<const char*>{name})[0]; }

}  // namespace chorus_test
