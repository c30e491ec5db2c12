// scatter_perf: nccl-tests' scatter_perf on chorus (ncclScatter; busbw = algbw * (n-1)/n).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kScatter); }
