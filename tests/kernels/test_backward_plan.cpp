// The flash backward's plan (kernels/attention/backward_plan.h): when the dK/dV pass splits the heads, when
// it forms dQ, and the scratch each choice needs. Host arithmetic, so it runs without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/attention/backward_plan.h"

using namespace fathom::cuda::flash;

namespace {

constexpr int kBlock = 128;  // the dK/dV key block of the shipped configurations
constexpr int kWidth = 64;   // the dQ sums' width where the pass forms them (d = 64 on sm_90a)

// Bytes of the statistics (lse2, delta) of B x Hq rows padded to 128.
size_t stat_bytes(int64_t B, int64_t Hq, int64_t T) { return size_t(2 * B * Hq * ((T + 127) / 128 * 128)) * 4; }

}  // namespace

TEST(BackwardPlan, GridsOf192CtasOrMoreFormDqUnsplit) {
  // T = 4096, 8 KV heads: 32 key blocks x 8 = 256 CTAs.
  const BackwardScratch s = backward_scratch(1, 4096, 64, 8, 64, kBlock, kWidth);
  EXPECT_EQ(s.splits, 1);
  EXPECT_EQ(s.dq_width, kWidth);
  EXPECT_EQ(s.Tpad, 4096);
  // Statistics, fp32 sums [B, Hq, Tpad, 64], a counter per 64 of their rows and the ticket.
  const size_t rows = size_t(64 * 4096);
  EXPECT_EQ(s.bytes(), stat_bytes(1, 64, 4096) + rows * kWidth * 4 + (rows / 64 + 1) * 4);
}

TEST(BackwardPlan, SmallerGridsSplitTheHeadsInstead) {
  // T = 1024 (Table 7): 8 x 8 = 64 CTAs, split over the G = 8 heads up to 512.
  const BackwardScratch s = backward_scratch(1, 1024, 64, 8, 64, kBlock, kWidth);
  EXPECT_EQ(s.dq_width, 0);
  EXPECT_EQ(s.splits, 8);
  // Statistics and fp32 dK, dV partials [splits, B, T, Hk, d].
  EXPECT_EQ(s.bytes(), stat_bytes(1, 64, 1024) + 2 * size_t(8) * 1024 * 8 * 64 * 4);
  // T = 2048: 128 CTAs are still split; from 192 (T = 3072) on the pass forms dQ.
  EXPECT_EQ(backward_scratch(1, 2048, 64, 8, 64, kBlock, kWidth).dq_width, 0);
  EXPECT_EQ(backward_scratch(1, 191 * 128, 8, 1, 64, kBlock, kWidth).dq_width, 0);
  EXPECT_EQ(backward_scratch(1, 192 * 128, 8, 1, 64, kBlock, kWidth).dq_width, kWidth);
  EXPECT_EQ(backward_scratch(1, 3072, 64, 8, 64, kBlock, kWidth).dq_width, kWidth);
}

TEST(BackwardPlan, WithoutAPassThatFormsDqTheSplitFillsTheGpu) {
  // d = 128, or a caller that does not take the sums: the heads split while the grid has fewer than
  // 1024 CTAs and heads remain.
  EXPECT_EQ(backward_scratch(1, 4096, 64, 8, 128, kBlock, 0).splits, 4);   // 256 -> 1024 CTAs
  EXPECT_EQ(backward_scratch(1, 4096, 24, 8, 128, kBlock, 0).splits, 2);   // G = 3: the next split would pass 3
  EXPECT_EQ(backward_scratch(8, 2048, 32, 32, 128, kBlock, 0).splits, 1);  // 4096 CTAs: full already
  EXPECT_EQ(backward_scratch(1, 100, 2, 2, 64, kBlock, 0).splits, 1);      // G = 1: nothing to split
}

TEST(BackwardPlan, PlacementFollowsTheLayout) {
  struct Args {
    int Tpad = 0;
    float *lse2 = nullptr, *delta = nullptr, *dk_part = nullptr, *dv_part = nullptr, *dq_acc = nullptr;
    int *dq_turn = nullptr, *dq_ticket = nullptr;
  };
  // Split: statistics, then the two partials, no sums.
  const BackwardScratch split = backward_scratch(2, 100, 4, 2, 64, kBlock, 0);
  ASSERT_EQ(split.splits, 2);
  std::vector<float> workspace(split.bytes() / 4);
  Args a;
  split.place(a, workspace.data());
  EXPECT_EQ(a.Tpad, 128);
  EXPECT_EQ(a.delta - a.lse2, 2 * 4 * 128);
  EXPECT_EQ(a.dk_part - a.lse2, 2 * 2 * 4 * 128);
  EXPECT_EQ(a.dv_part - a.dk_part, 2 * 2 * 100 * 2 * 64);
  EXPECT_EQ(a.dq_acc, nullptr);
  EXPECT_EQ(a.dq_turn, nullptr);
  EXPECT_EQ(a.dq_ticket, nullptr);
  // With dQ (1 x 32 KV heads x 8 key blocks = 256 CTAs): statistics, then the sums, then the counters.
  const BackwardScratch fused = backward_scratch(1, 1000, 32, 32, 64, kBlock, kWidth);
  ASSERT_EQ(fused.dq_width, kWidth);
  ASSERT_EQ(fused.splits, 1);
  std::vector<float> fused_workspace(fused.bytes() / 4);
  Args b;
  fused.place(b, fused_workspace.data());
  EXPECT_EQ(b.Tpad, 1024);
  EXPECT_EQ(b.dk_part, b.dv_part);  // no partials
  EXPECT_EQ(b.dq_acc - b.lse2, 2 * 32 * 1024);
  EXPECT_EQ(reinterpret_cast<float*>(b.dq_turn) - b.dq_acc, 32 * 1024 * kWidth);
  EXPECT_EQ(dq_counters(1, 32, 1024), size_t(32 * 1024 / 64 + 1));
  EXPECT_EQ(b.dq_ticket, b.dq_turn + 32 * 1024 / 64);  // the last counter
  EXPECT_EQ(reinterpret_cast<char*>(b.dq_turn + dq_counters(1, 32, 1024)),
            reinterpret_cast<char*>(fused_workspace.data()) + fused.bytes());
}
