// The launch counters of the inbox family (kernels/device_ipc.h, kernels/device_window.h), run here on the host as
// the CPU tests run the kernel: every launch, inbox or window, moves the counters of all kDevMaxBlocks blocks,
// whatever number of blocks it runs. Inbox launches and window launches use different numbers of blocks, and an
// inbox half is safe to reuse only while every block's counter is the same.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/device_kernel.h"
#include "kernels/reduce.h"

namespace chorus {
namespace {

TEST(KernelsIpc, EveryLaunchMovesEveryBlocksCounter) {
  for (uint8_t kind : {uint8_t(kDevDirectIpc), uint8_t(kDevDirectWindows)}) {
    for (int nb : {1, 3, kDevMaxBlocks}) {
      SCOPED_TRACE(std::string(kind == kDevDirectIpc ? "inbox" : "window") + " launch of " + std::to_string(nb) +
                   " block(s)");
      std::vector<uint64_t> counters(kDevMaxBlocks * kDirectSyncStride, 0);
      for (int b = 0; b < kDevMaxBlocks; b++) counters[b * kDirectSyncStride] = 41;
      DevStatus status{};
      int32_t abortWord = 0;
      std::vector<int32_t> in(64), out(64, 0);
      for (size_t i = 0; i < in.size(); i++) in[i] = int32_t(3 * i + 1);
      auto w = std::make_unique<DevWork>();  // zeroed: no peers, no deadline
      w->direct = kind;
      w->nDirect = 1;
      w->rank = 0;
      w->directColl = static_cast<uint8_t>(Coll::kAllReduce);
      w->esize = 4;
      w->inTotal = w->outTotal = in.size();
      w->reducing = 1;
      w->red = makeRedOp(ncclSum, ncclInt32, 1);
      w->nChannels = static_cast<uint8_t>(nb);
      w->ipcEpochs = counters.data();
      w->status = &status;
      w->abortFlag = &abortWord;
      w->in = reinterpret_cast<const char*>(in.data());
      w->out = reinterpret_cast<char*>(out.data());
      w->winIds = kind == kDevDirectWindows ? packWindowIds(1, 1) : 0;
      for (int b = 0; b < nb; b++) {
        DevShared shared;
        runDevBlock(*w, b, shared, 0, 1);
      }
      EXPECT_EQ(status.code, 0u);
      for (int b = 0; b < kDevMaxBlocks; b++) EXPECT_EQ(counters[b * kDirectSyncStride], 42u) << "block " << b;
      EXPECT_EQ(out, in);
    }
  }
}

}  // namespace
}  // namespace chorus
