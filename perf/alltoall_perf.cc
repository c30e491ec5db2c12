// alltoall_perf: nccl-tests' alltoall_perf on chorus (ncclAlltoAll; busbw = algbw * (n-1)/n).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kAllToAll); }
