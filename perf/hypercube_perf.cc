// hypercube_perf: nccl-tests' hypercube_perf on chorus (all-gather by ncclSend/ncclRecv recursive doubling; busbw =
// algbw).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kHyperCube); }
