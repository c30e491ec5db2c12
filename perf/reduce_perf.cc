// reduce_perf: nccl-tests' reduce_perf on chorus (ncclReduce; busbw = algbw).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kReduce); }
