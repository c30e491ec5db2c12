// Parameter values that are lists (src/core/params.h: splitList).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/params.h"

namespace chorus {
namespace {

using List = std::vector<std::string>;

TEST(ParamList, SplitsOnCommasTrimsAndDropsEmptyItems) {
  EXPECT_EQ(splitList("a,b,c"), (List{"a", "b", "c"}));
  EXPECT_EQ(splitList(" a ,\tb\t, c d "), (List{"a", "b", "c d"}));
  EXPECT_EQ(splitList("a,,b,"), (List{"a", "b"}));
  EXPECT_EQ(splitList(",  ,\t,"), List{});
  EXPECT_EQ(splitList(""), List{});
  EXPECT_EQ(splitList("mlx5_0:1"), (List{"mlx5_0:1"}));
}

}  // namespace
}  // namespace chorus
