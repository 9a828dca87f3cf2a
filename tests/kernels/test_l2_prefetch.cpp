// plan_l2_prefetch (kernels/runtime/l2_prefetch.h): what a kernel asks L2 for, for the weights read after it. Whole
// groups while they fit the room, equal 16-byte multiples of each tensor of the first group that does not, nothing
// after it; a group past the ranges' limit or a tensor off 16-byte alignment ends the plan.
#include <gtest/gtest.h>

#include "kernels/runtime/l2_prefetch.h"

using namespace fathom;

namespace {

Tensor bytes(int64_t n) { return Tensor::empty({n}, DType::u8, Device::cpu()); }

}  // namespace

TEST(L2Prefetch, WholeGroupsThenEqualSharesOfTheFirstThatDoesNotFit) {
  const Tensor o = bytes(4096), gate = bytes(100000), up = bytes(100000), down = bytes(50000);
  const WeightGroups groups{{o}, {up, gate}, {down}};

  const L2Prefetch all = plan_l2_prefetch(groups, 1 << 20);  // everything fits
  ASSERT_EQ(all.count, 4);
  EXPECT_EQ(all.data[0], o.raw());
  EXPECT_EQ(all.bytes[0], 4096u);
  EXPECT_EQ(all.data[1], up.raw());
  EXPECT_EQ(all.data[2], gate.raw());
  EXPECT_EQ(all.bytes[1], 100000u);
  EXPECT_EQ(all.data[3], down.raw());
  EXPECT_EQ(all.total, 4096u + 200000u + 50000u);
  EXPECT_EQ(all.room, uint64_t(1) << 20);

  // o whole; up and gate share the 60000 left, as 16-byte multiples; down never, after a partial group.
  const L2Prefetch part = plan_l2_prefetch(groups, 4096 + 60000);
  ASSERT_EQ(part.count, 3);
  EXPECT_EQ(part.bytes[0], 4096u);
  EXPECT_EQ(part.bytes[1], 30000u / 16 * 16);
  EXPECT_EQ(part.bytes[2], 30000u / 16 * 16);
  EXPECT_EQ(part.total, 4096u + 2 * (30000u / 16 * 16));

  // A room smaller than the first group: that group's share of it, and nothing else.
  const L2Prefetch small = plan_l2_prefetch(groups, 1000);
  ASSERT_EQ(small.count, 1);
  EXPECT_EQ(small.bytes[0], 992u);

  EXPECT_EQ(plan_l2_prefetch(groups, 0).count, 0);
  EXPECT_EQ(plan_l2_prefetch({}, 1 << 20).count, 0);
}

TEST(L2Prefetch, LengthsRoundDownToTheBulkUnit) {
  const Tensor odd = bytes(1024 + 7);
  const L2Prefetch plan = plan_l2_prefetch({{odd}}, 1 << 20);
  ASSERT_EQ(plan.count, 1);
  EXPECT_EQ(plan.bytes[0], 1024u);
}

TEST(L2Prefetch, MoreRangesThanALaunchCarriesOrAnUnalignedTensorEndThePlan) {
  const Tensor a = bytes(64);
  const L2Prefetch many = plan_l2_prefetch({{a}, {a, a}, {a, a}}, 1 << 20);  // the third group would make 5
  EXPECT_EQ(many.count, 3);
  const Tensor base = bytes(4096);
  const Tensor unaligned = base.narrow(8, 256);  // 8 bytes into a 16-byte aligned allocation
  const L2Prefetch stopped = plan_l2_prefetch({{a}, {unaligned}, {a}}, 1 << 20);
  EXPECT_EQ(stopped.count, 1);
  EXPECT_EQ(l2_prefetch_room(50u << 20), 25u << 20);
}
