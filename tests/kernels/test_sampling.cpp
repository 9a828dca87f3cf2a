// The CPU sampler (kernels/sampling): its draws against the exact probabilities on awkward rows, the
// ties, NaN and -inf rules, sample_rows' contract and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/argmax/argmax.h"
#include "kernels/sampling/sampling.h"
#include "tests/kernels/test_sampling_support.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Counts of `draws` CPU draws from one row, draw indices 0 .. draws - 1.
std::vector<int64_t> cpu_counts(const std::vector<float>& row, const SamplingOptions& options, int64_t draws) {
  std::vector<int64_t> counts(row.size(), 0);
  for (int64_t d = 0; d < draws; ++d) ++counts[size_t(cpu::sample_row(row, options, uint64_t(d)))];
  return counts;
}

std::string settings_name(const SamplingOptions& o) {
  return "temperature " + std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) + " top_p " +
         std::to_string(o.top_p);
}

const SamplingOptions kSettings[] = {{.temperature = 1.0, .seed = 1},
                                     {.temperature = 0.7, .top_k = 3, .seed = 2},
                                     {.temperature = 1.3, .top_p = 0.83, .seed = 3},
                                     {.temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 4},
                                     {.temperature = 2.0, .top_k = 500, .top_p = 0.6, .seed = 5}};

}  // namespace

TEST(Sampling, CpuDrawsFollowTheExactProbabilities) {
  const std::vector<std::pair<std::string, std::vector<float>>> rows = {{"V=1", {0.3f}},
                                                                        {"V=7 tied, -inf", tied_row(7, 11)},
                                                                        {"V=1000 peaked", peaked_row(1000, 12)},
                                                                        {"V=1000 flat", flat_row(1000)},
                                                                        {"V=1000 tied, -inf", tied_row(1000, 13)}};
  for (const auto& [name, row] : rows)
    for (const SamplingOptions& options : kSettings)
      expect_distribution(cpu_counts(row, options, 20000), sampling_probabilities(row, options),
                          name + ", " + settings_name(options));
  // The check has the power to see a small error: draws at temperature 1 are not draws at 1.1.
  const std::vector<float> row = peaked_row(1000, 12);
  EXPECT_NE(distribution_mismatch(cpu_counts(row, {.temperature = 1.0}, 20000),
                                  sampling_probabilities(row, {.temperature = 1.1})),
            "");
}

TEST(Sampling, TiesGoToTheLowerIndex) {
  // Five equal logits: top_k = 2 keeps ids 0 and 1 only; top_p = 0.5 keeps the first three (mass 3/5).
  const std::vector<float> flat(5, 1.0f);
  std::vector<int64_t> counts = cpu_counts(flat, {.top_k = 2, .seed = 7}, 4000);
  EXPECT_EQ(counts[2] + counts[3] + counts[4], 0);
  EXPECT_GT(counts[0], 1800);
  EXPECT_GT(counts[1], 1800);
  counts = cpu_counts(flat, {.top_p = 0.5, .seed = 7}, 3000);
  EXPECT_EQ(counts[3] + counts[4], 0);
  for (int i = 0; i < 3; ++i) EXPECT_GT(counts[size_t(i)], 900) << i;
  // top_k = 1 and greedy are the argmax: the first of the tied maxima.
  const std::vector<float> tied{1.0f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(cpu::sample_row(tied, {.temperature = 1, .top_k = 1}, 5), 1);
  EXPECT_EQ(cpu::sample_row(tied, {.temperature = 0}, 5), 1);
}

TEST(Sampling, NanIsNeverChosenAndRowsWithoutAFiniteMaximumTakeTheArgmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> with_nan{nan, 0.0f, nan, 0.5f};
  const std::vector<int64_t> counts = cpu_counts(with_nan, {.seed = 3}, 2000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_EQ(counts[1] + counts[3], 2000);
  EXPECT_EQ(cpu::sample_row(std::vector<float>{-inf, -inf, -inf}, {}, 0), 0);
  EXPECT_EQ(cpu::sample_row(std::vector<float>{nan, -inf, nan}, {}, 0), 1);
  EXPECT_EQ(cpu::sample_row(std::vector<float>{nan, nan}, {}, 0), 0);
  EXPECT_EQ(cpu::sample_row(std::vector<float>{1.0f, inf, 2.0f, inf}, {}, 0), 1);
  // -inf tokens are never drawn, even when top_k asks for more tokens than are finite.
  const std::vector<float> sparse{-inf, 1.0f, -inf, 1.5f};
  const std::vector<int64_t> sparse_counts = cpu_counts(sparse, {.top_k = 3, .seed = 9}, 2000);
  EXPECT_EQ(sparse_counts[0] + sparse_counts[2], 0);
}

TEST(Sampling, SampleRowsDrawsEachRowWithItsOwnDrawIndex) {
  const int64_t B = 5, V = 300;
  std::vector<float> values;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<float> row = peaked_row(V, uint64_t(20 + b));
    values.insert(values.end(), row.begin(), row.end());
  }
  const Tensor logits = Tensor::from_vector(values, {B, V});
  const std::vector<int64_t> draws{7, 0, 123456789012345, 7, 42};
  const Tensor draw_indices = Tensor::from_vector(draws, {B});
  for (const SamplingOptions& options : kSettings) {
    const std::vector<int32_t> got = sample_rows(logits, options, draw_indices).to_vector<int32_t>();
    ASSERT_EQ(got.size(), size_t(B));
    for (int64_t b = 0; b < B; ++b)
      EXPECT_EQ(got[size_t(b)], cpu::sample_row(std::span<const float>(values.data() + b * V, size_t(V)), options,
                                                uint64_t(draws[size_t(b)])))
          << settings_name(options) << " row " << b;
  }
  // Temperature 0 is argmax_rows; BF16 and F16 logits sample their rounded values.
  EXPECT_EQ(sample_rows(logits, {.temperature = 0}, draw_indices).to_vector<int32_t>(),
            argmax_rows(logits).to_vector<int32_t>());
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tensor rounded = logits.to(dt);
    EXPECT_EQ(sample_rows(rounded, kSettings[3], draw_indices).to_vector<int32_t>(),
              sample_rows(rounded.to(DType::f32), kSettings[3], draw_indices).to_vector<int32_t>())
        << dtype_name(dt);
  }
  EXPECT_EQ(sample_rows(Tensor::empty({0, V}, DType::f32), {}, Tensor::empty({0}, DType::i64)).numel(), 0);
}

TEST(Sampling, SampleRowsNamesBadArguments) {
  const Tensor logits = Tensor::zeros({2, 10}, DType::f32);
  const Tensor draws = Tensor::from_vector(std::vector<int64_t>{0, 1}, {2});
  expect_error([&] { sample_rows(Tensor::zeros({10}, DType::f32), {}, draws); }, {"sample_rows", "[batch, vocab]"});
  expect_error([&] { sample_rows(Tensor::zeros({2, 0}, DType::f32), {}, draws); }, {"sample_rows", "vocab"});
  expect_error([&] { sample_rows(Tensor{}, {}, draws); }, {"sample_rows", "undefined"});
  expect_error([&] { sample_rows(Tensor::zeros({2, 10}, DType::i32), {}, draws); }, {"F32, BF16 or F16", "I32"});
  expect_error([&] { sample_rows(logits, {}, Tensor{}); }, {"draw_indices", "undefined"});
  expect_error([&] { sample_rows(logits, {}, Tensor::zeros({3}, DType::i64)); }, {"draw_indices must be [2]"});
  expect_error([&] { sample_rows(logits, {}, Tensor::zeros({2, 1}, DType::i64)); }, {"draw_indices must be [2]"});
  expect_error([&] { sample_rows(logits, {}, Tensor::zeros({2}, DType::i32)); }, {"draw_indices must be I64", "I32"});
  expect_error([&] { sample_rows(logits, {.top_p = 0}, draws); }, {"--top-p"});
  expect_error([&] { sample_rows(logits, {.top_k = -1}, draws); }, {"--top-k"});
  expect_error([&] { sample_rows(logits, {.temperature = std::nan("")}, draws); }, {"--temperature"});
}
