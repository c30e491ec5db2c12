// broadcast_perf: nccl-tests' broadcast_perf on chorus (ncclBroadcast; busbw = algbw).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kBroadcast); }
