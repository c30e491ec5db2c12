// reduce_scatter_perf: nccl-tests' reduce_scatter_perf on chorus (ncclReduceScatter; busbw = algbw * (n-1)/n).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kReduceScatter); }
