// chorus-env: lists every environment parameter chorus reads, with its current value.
//   chorus-env             current values
//   chorus-env --markdown  the content of docs/env.md
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/params.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--markdown") == 0) {
    std::fputs(chorus::paramsMarkdown().c_str(), stdout);
    return 0;
  }
  chorus::loadNcclConfFiles();  // values from NCCL's configuration files count, as they do for the library
  for (const chorus::ParamInfo* p : chorus::paramRegistry()) {
    const char* v = std::getenv(p->env);  // a listing tool: shows the raw environment next to the default
    std::printf("%-28s %-12s %s\n", p->env, v ? v : "(default)", p->def);
  }
  return 0;
}
