// chorus-env: lists every environment parameter chorus reads, with its current value.
//   chorus-env             current values
//   chorus-env --markdown  the content of docs/env.md
#include <cstdio>
#include <cstring>
#include <string>

#include "core/params.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--markdown") == 0) {
    std::fputs(chorus::paramsMarkdown().c_str(), stdout);
    return 0;
  }
  // What the library reads: the environment, NCCL's configuration files and the environment plugin.
  for (const chorus::ParamInfo* p : chorus::paramRegistry()) {
    std::string v;
    std::printf("%-28s %-12s %s\n", p->env, chorus::paramSetting(p->env, &v) ? v.c_str() : "(default)", p->def);
  }
  return 0;
}
