// all_reduce_perf: nccl-tests' all_reduce_perf on chorus (ncclAllReduce; busbw = algbw * 2(n-1)/n).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kAllReduce); }
