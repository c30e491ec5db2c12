// The device kernel's block-wide copies and reductions (kernels/reduce_block.h) split work over the threads of a
// block and unroll each thread's loop (several loads in flight). Run here thread by thread (the loops share nothing
// but the buffers) for block sizes 1, 3, 4 and 256, against reduceHost/copyHost bit for bit: every element written
// exactly once, the unrolled groups and the tail alike, for every dtype and op, in place and misaligned.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/reduce_block.h"

namespace chorus {
namespace {

constexpr int kBlockSizes[] = {1, 3, 4, 256};
constexpr size_t kCounts[] = {0, 1, 7, 31, 32, 33, 255, 1000, 1025, 4099};

std::vector<char> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng() & 0x3f);  // small magnitudes: no overflow surprises in any dtype
  return v;
}

TEST(KernelsBlock, ReduceAndCopyMatchTheHostLoopsForEveryBlockSize) {
  for (int dtype = 0; dtype < ncclNumTypes; dtype++) {
    size_t es = DType::size(dtype);
    for (int ncclOp = 0; ncclOp < ncclNumOps; ncclOp++) {
      RedOp op = makeRedOp(ncclOp, dtype, 3);
      for (uint32_t flags : {0u, uint32_t(kPreLocal), uint32_t(kPostOp)}) {
        // Offset 0: every buffer 16-byte aligned (operator new's alignment), as FIFO slots and most user buffers
        // are; offset one element: misaligned by an element, as a block of a buffer split by element counts may be.
        for (size_t off : {size_t(0), es})
          for (size_t n : kCounts) {
            std::vector<char> recvBuf = randomBytes(n * es + 32, 1), localBuf = randomBytes(n * es + 32, 2);
            std::vector<char> want(n * es + 16), gotBuf(n * es + 32);
            ASSERT_EQ(reinterpret_cast<uintptr_t>(recvBuf.data()) % 16, 0u);
            ASSERT_EQ(reinterpret_cast<uintptr_t>(localBuf.data()) % 16, 0u);
            ASSERT_EQ(reinterpret_cast<uintptr_t>(gotBuf.data()) % 16, 0u);
            const char* recv = recvBuf.data() + off;
            const char* local = localBuf.data() + off;
            char* got = gotBuf.data() + off;
            reduceHost(op, want.data(), recv, local, n, flags);
            for (int nt : kBlockSizes) {
              std::fill(gotBuf.begin(), gotBuf.end(), char(0x55));
              for (int t = 0; t < nt; t++) blockReduce(op, got, recv, local, n, flags, t, nt);
              ASSERT_EQ(std::memcmp(got, want.data(), n * es), 0)
                  << "reduce dtype " << dtype << " op " << ncclOp << " flags " << flags << " n " << n << " nt " << nt
                  << " offset " << off;
              ASSERT_EQ(got[n * es], char(0x55)) << "wrote past the end";
              if (off > 0) {
                ASSERT_EQ(gotBuf[off - 1], char(0x55)) << "wrote before the start";
              }
              // In place: dst is the received operand.
              std::vector<char> inPlaceBuf = recvBuf;
              char* inPlace = inPlaceBuf.data() + off;
              for (int t = 0; t < nt; t++) blockReduce(op, inPlace, inPlace, local, n, flags, t, nt);
              ASSERT_EQ(std::memcmp(inPlace, want.data(), n * es), 0)
                  << "in place, n " << n << " nt " << nt << " offset " << off;
            }
          }
        for (size_t n : kCounts) {
          std::vector<char> recv = randomBytes(n * es + 16, 1);
          std::vector<char> want(n * es + 16), got(n * es + 16);
          copyHost(op, want.data(), recv.data(), n, flags);
          for (int nt : kBlockSizes) {
            std::fill(got.begin(), got.end(), char(0x55));
            for (int t = 0; t < nt; t++) blockCopy(op, got.data(), recv.data(), n, flags, t, nt);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), n * es), 0)
                << "copy dtype " << dtype << " op " << ncclOp << " flags " << flags << " n " << n << " nt " << nt;
            ASSERT_EQ(got[n * es], char(0x55)) << "wrote past the end";
          }
        }
      }
    }
  }
}

// Raw byte copies take 16-byte, 4-byte or byte-sized units by the alignment of both ends.
TEST(KernelsBlock, ByteCopiesAtEveryAlignment) {
  std::vector<char> src = randomBytes(9000, 3);
  std::vector<char> dst(9000);
  for (size_t so : {0, 1, 4, 8, 16}) {
    for (size_t doff : {0, 3, 4, 16}) {
      for (size_t bytes : {0, 5, 16, 17, 64, 1000, 4096, 8191}) {
        for (int nt : kBlockSizes) {
          std::fill(dst.begin(), dst.end(), char(0x7e));
          for (int t = 0; t < nt; t++) blockCopyBytes(dst.data() + doff, src.data() + so, bytes, t, nt);
          ASSERT_EQ(std::memcmp(dst.data() + doff, src.data() + so, bytes), 0)
              << "src+" << so << " dst+" << doff << " bytes " << bytes << " nt " << nt;
          ASSERT_EQ(dst[doff + bytes], char(0x7e)) << "wrote past the end";
          if (doff > 0) {
            ASSERT_EQ(dst[doff - 1], char(0x7e)) << "wrote before the start";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus
