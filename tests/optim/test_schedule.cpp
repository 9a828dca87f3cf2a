#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/schedule.h"

using namespace fathom;

TEST(Schedule, WarmupThenCosineToFloor) {
  Schedule s{"cosine", 1e-3, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.lr(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr(10), 1e-3);
  EXPECT_NEAR(s.lr(60), 0.55e-3, 1e-12);  // halfway: mean of peak and floor
  EXPECT_NEAR(s.lr(110), 1e-4, 1e-12);
  EXPECT_NEAR(s.lr(500), 1e-4, 1e-12);  // past the end: stays at the floor
  for (int i = 11; i < 110; ++i) EXPECT_LT(s.lr(i), s.lr(i - 1));
}

TEST(Schedule, LinearAndConstant) {
  Schedule lin{"linear", 2e-3, 0, 100, 0.0};
  EXPECT_DOUBLE_EQ(lin.lr(0), 2e-3);
  EXPECT_NEAR(lin.lr(25), 1.5e-3, 1e-15);
  EXPECT_NEAR(lin.lr(100), 0.0, 1e-15);
  Schedule flat{"constant", 5e-4, 4, 100, 0.1};
  EXPECT_DOUBLE_EQ(flat.lr(1), 2.5e-4);
  EXPECT_DOUBLE_EQ(flat.lr(77), 5e-4);
  Schedule bad{"exponential", 1e-3, 0, 10, 0.1};
  EXPECT_THROW(bad.lr(3), Error);
}
