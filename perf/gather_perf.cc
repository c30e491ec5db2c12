// gather_perf: nccl-tests' gather_perf on chorus (ncclGather; busbw = algbw * (n-1)/n).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kGather); }
