// Verifiable data for the perf tools: inputs whose reductions are exact (or within a known tolerance), the
// matching expected results, and the element-by-element comparison behind the #wrong column.
//
// Every input is a small integer chosen so that any summation order gives the same bits in every dtype
// (fp8 included); only ncclAvg on floating types (premulsum by 1/n, rounded per element) is compared with a
// tolerance. Values depend on (seed, rank, global element index), so a block that lands at the wrong offset
// or from the wrong rank is counted wrong.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

namespace chorus {
namespace perf {

/// Reduction selector as nccl-tests numbers it: ncclSum..ncclAvg, then kOpMulSum (ncclRedOpCreatePreMulSum).
enum PerfOp : int { kOpSum = 0, kOpProd = 1, kOpMax = 2, kOpMin = 3, kOpAvg = 4, kOpMulSum = 5, kNumPerfOps = 6 };

/// Bytes per element of a dtype (0 for an invalid one).
size_t wordSize(ncclDataType_t type);
/// nccl-tests' name of a dtype ("float", "half", "bfloat16", "f8e4m3"...).
const char* typeName(ncclDataType_t type);
/// nccl-tests' name of an op ("sum", "prod", "max", "min", "avg", "mulsum").
const char* opName(int op);
/// Whether a dtype is a floating-point type.
bool isFloatType(ncclDataType_t type);

/// The premulsum factor of a rank (1 or 2: products stay exact).
double premulScalar(int rank);
/// Encodes a value in a dtype's own format into the low bytes of *out (for ncclRedOpCreatePreMulSum).
void encodeScalar(double value, ncclDataType_t type, uint64_t* out);

/// Writes count elements of rank's input for op; element i is the value of global index offset + i.
void fillInput(void* buf, size_t count, size_t offset, ncclDataType_t type, int op, int nranks, int rank,
               uint64_t seed);
/// Writes the reduction by op over ranks 0..nranks-1 of fillInput (same offset and seed).
void fillExpected(void* buf, size_t count, size_t offset, ncclDataType_t type, int op, int nranks, uint64_t seed);
/// Number of elements of got that differ from want: bitwise, or beyond the tolerance of an inexact op.
int64_t countWrong(const void* got, const void* want, size_t count, ncclDataType_t type, int op, int nranks);

}  // namespace perf
}  // namespace chorus
