// all_gather_perf: nccl-tests' all_gather_perf on chorus (ncclAllGather; busbw = algbw * (n-1)/n).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kAllGather); }
