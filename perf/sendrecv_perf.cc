// sendrecv_perf: nccl-tests' sendrecv_perf on chorus (ncclSend/ncclRecv around a ring; busbw = algbw).
#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::perfMain(argc, argv, chorus::perf::PerfColl::kSendRecv); }
