// CUDA sampling against the CPU sampler's probabilities: 20000 draws of awkward rows (V = 1, 7, 1000,
// 128256; peaked, flat, tied, with -inf) under several settings and dtypes match the exact
// distribution by chi-square (1e-6 false-failure rate per check) and never leave the kept set; tokens
// repeat run to run and depend only on the row, seed and draw index; greedy and top_k = 1 are argmax.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "kernels/argmax/argmax.h"
#include "kernels/sampling/sampling.h"
#include "tests/kernels/test_sampling_support.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

std::string settings_name(const SamplingOptions& o) {
  return "temperature " + std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) + " top_p " +
         std::to_string(o.top_p);
}

// The row's values after rounding to dtype, as the kernel reads them.
std::vector<float> rounded(const std::vector<float>& row, DType dt) {
  return Tensor::from_vector(row, {int64_t(row.size())}).to(dt).to(DType::f32).to_vector<float>();
}

// One row copied into a [rows, V] GPU batch (rows * V about 2^27 at most), so many draws take few calls.
struct ReplicatedRow {
  Tensor batch;
  ReplicatedRow(const std::vector<float>& row, DType dt) {
    const int64_t V = int64_t(row.size()), rows = std::clamp<int64_t>((int64_t(1) << 27) / V, 1, 4096);
    batch = Tensor::empty({rows, V}, dt, kGpu);
    batch.narrow(0, 1).copy_from(Tensor::from_vector(row, {1, V}).to(dt).to(kGpu));
    for (int64_t filled = 1; filled < rows; filled *= 2) {
      const int64_t len = std::min(filled, rows - filled);
      batch.narrow(filled, len).copy_from(batch.narrow(0, len));
    }
  }
  // Counts of `draws` GPU draws, draw indices 0 .. draws - 1.
  std::vector<int64_t> counts(const SamplingOptions& options, int64_t draws) const {
    std::vector<int64_t> counts(size_t(batch.dim(1)), 0);
    for (int64_t first = 0; first < draws; first += batch.dim(0)) {
      const int64_t m = std::min(batch.dim(0), draws - first);
      std::vector<int64_t> indices(static_cast<size_t>(m));
      for (int64_t r = 0; r < m; ++r) indices[size_t(r)] = first + r;
      const Tensor tokens = sample_rows(batch.narrow(0, m), options, Tensor::from_vector(indices, {m}).to(kGpu));
      for (int32_t t : tokens.to(Device::cpu()).to_vector<int32_t>()) {
        EXPECT_TRUE(t >= 0 && t < batch.dim(1)) << "token " << t;
        if (t >= 0 && t < batch.dim(1)) ++counts[size_t(t)];
      }
    }
    return counts;
  }
};

void expect_gpu_draws_follow(const std::string& name, const std::vector<float>& row, DType dt,
                             std::initializer_list<SamplingOptions> settings) {
  const ReplicatedRow replicated(row, dt);
  const std::vector<float> values = rounded(row, dt);
  for (const SamplingOptions& options : settings)
    expect_distribution(replicated.counts(options, 20000), sampling_probabilities(values, options),
                        name + " " + dtype_name(dt) + ", " + settings_name(options));
}

// Rows of one batch, each with its own values: [B, V] on the host.
std::vector<float> batch_of_rows(int64_t B, int64_t V, uint64_t seed) {
  std::vector<float> values;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<float> row = b % 3 == 2 ? tied_row(V, seed + uint64_t(b)) : peaked_row(V, seed + uint64_t(b));
    values.insert(values.end(), row.begin(), row.end());
  }
  return values;
}

}  // namespace

TEST(GpuSampling, SmallVocabulariesDrawFromTheCpuSamplersDistribution) {
  FATHOM_REQUIRE_GPU();
  const std::initializer_list<SamplingOptions> settings = {{.temperature = 1.0, .seed = 1},
                                                           {.temperature = 0.7, .top_k = 3, .seed = 2},
                                                           {.temperature = 1.3, .top_p = 0.83, .seed = 3},
                                                           {.temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 4},
                                                           {.temperature = 2.0, .top_k = 500, .top_p = 0.6, .seed = 5},
                                                           {.temperature = 0.05, .top_p = 0.999, .seed = 6}};
  expect_gpu_draws_follow("V=1", {0.3f}, DType::f32, settings);
  expect_gpu_draws_follow("V=7 tied, -inf", tied_row(7, 11), DType::f32, settings);
  expect_gpu_draws_follow("V=1000 peaked", peaked_row(1000, 12), DType::f32, settings);
  expect_gpu_draws_follow("V=1000 flat", flat_row(1000), DType::f32, settings);
  expect_gpu_draws_follow("V=1000 tied, -inf", tied_row(1000, 13), DType::f32, settings);
  for (DType dt : {DType::bf16, DType::f16})
    expect_gpu_draws_follow("V=1000 peaked", peaked_row(1000, 14), dt, settings);
}

TEST(GpuSampling, LargeVocabulariesDrawFromTheCpuSamplersDistribution) {
  FATHOM_REQUIRE_GPU();
  const std::initializer_list<SamplingOptions> settings = {
      {.temperature = 1.0, .seed = 1},
      {.temperature = 0.7, .top_k = 50, .seed = 2},
      {.temperature = 1.0, .top_p = 0.9, .seed = 3},
      {.temperature = 0.6, .top_k = 50, .top_p = 0.9, .seed = 4},
      {.temperature = 1.5, .top_k = 3000, .top_p = 0.5, .seed = 5}};
  expect_gpu_draws_follow("V=128256 peaked", peaked_row(128256, 21), DType::f32, settings);
  expect_gpu_draws_follow("V=128256 peaked", peaked_row(128256, 22), DType::bf16, settings);
  expect_gpu_draws_follow("V=128256 tied, -inf", tied_row(128256, 23), DType::bf16, settings);
  expect_gpu_draws_follow("V=50257 flat", flat_row(50257), DType::f32,
                          {{.top_k = 1234, .seed = 7}, {.top_p = 0.537, .seed = 8}});
}

TEST(GpuSampling, TokensRepeatAndDependOnlyOnTheRowSeedAndDrawIndex) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 64, V = 50257;  // odd vocabulary: rows start at every alignment
  const std::vector<float> values = batch_of_rows(B, V, 31);
  std::vector<int64_t> draws(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) draws[size_t(b)] = 1000003 * b + 17;
  for (DType dt : {DType::f32, DType::bf16})
    for (const SamplingOptions& options : {SamplingOptions{.temperature = 1.0, .seed = 5},
                                           SamplingOptions{.temperature = 0.9, .top_k = 50, .top_p = 0.9, .seed = 6},
                                           SamplingOptions{.temperature = 1.2, .top_p = 0.7, .seed = 7}}) {
      const std::string what = std::string(dtype_name(dt)) + ", " + settings_name(options);
      const Tensor logits = Tensor::from_vector(values, {B, V}).to(dt);
      const Tensor gpu_logits = logits.to(kGpu), gpu_draws = Tensor::from_vector(draws, {B}).to(kGpu);
      const std::vector<int32_t> first =
          sample_rows(gpu_logits, options, gpu_draws).to(Device::cpu()).to_vector<int32_t>();
      EXPECT_EQ(sample_rows(gpu_logits, options, gpu_draws).to(Device::cpu()).to_vector<int32_t>(), first) << what;
      const std::vector<float> host = logits.to(DType::f32).to_vector<float>();
      for (int64_t b = 0; b < B; ++b) {
        const std::span<const float> row(host.data() + b * V, size_t(V));
        // The token is one the CPU sampler could draw.
        EXPECT_GT(sampling_probabilities(row, options)[size_t(first[size_t(b)])], 0) << what << " row " << b;
        // Alone, at its own draw index, the row gives the same token.
        if (b % 9 == 0) {
          const Tensor one = sample_rows(gpu_logits.narrow(b, 1), options,
                                         Tensor::from_vector(std::vector<int64_t>{draws[size_t(b)]}, {1}).to(kGpu));
          EXPECT_EQ(one.to(Device::cpu()).to_vector<int32_t>()[0], first[size_t(b)]) << what << " row " << b;
        }
      }
    }
}

TEST(GpuSampling, GreedyAndTopOneAreTheArgmaxAndDegenerateRowsAgreeWithTheCpu) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 9, V = 1000;
  const Tensor logits = Tensor::from_vector(batch_of_rows(B, V, 41), {B, V}).to(DType::bf16).to(kGpu);
  const Tensor draws = Tensor::from_vector(std::vector<int64_t>(size_t(B), 3), {B}).to(kGpu);
  const std::vector<int32_t> argmax = argmax_rows(logits).to(Device::cpu()).to_vector<int32_t>();
  EXPECT_EQ(sample_rows(logits, {.temperature = 0}, draws).to(Device::cpu()).to_vector<int32_t>(), argmax);
  EXPECT_EQ(
      sample_rows(logits, {.temperature = 1, .top_k = 1, .seed = 2}, draws).to(Device::cpu()).to_vector<int32_t>(),
      argmax);
  // A vanishing temperature leaves weight on the maxima only: the one of a peaked row, either of a tied row's.
  const std::vector<int32_t> cold =
      sample_rows(logits, {.temperature = 1e-30, .seed = 2}, draws).to(Device::cpu()).to_vector<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    if (b % 3 == 2) {
      EXPECT_TRUE(cold[size_t(b)] == 1 || cold[size_t(b)] == V - 1) << "row " << b << ": " << cold[size_t(b)];
    } else {
      EXPECT_EQ(cold[size_t(b)], argmax[size_t(b)]) << "row " << b;
    }
  }
  // Rows with NaNs, -inf only, NaN only, +inf: the same answer as the CPU.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> odd{nan,  0.0f, nan,  0.5f,  //
                               -inf, -inf, -inf, -inf,  //
                               nan,  -inf, nan,  -inf,  //
                               nan,  nan,  nan,  nan,   //
                               1.0f, inf,  2.0f, inf};
  const Tensor cpu_odd = Tensor::from_vector(odd, {5, 4});
  const Tensor odd_draws = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4}, {5});
  for (const SamplingOptions& options :
       {SamplingOptions{.seed = 1}, SamplingOptions{.top_k = 1}, SamplingOptions{.temperature = 0},
        SamplingOptions{.top_k = 2, .top_p = 0.5}}) {
    const std::vector<int32_t> gpu =
        sample_rows(cpu_odd.to(kGpu), options, odd_draws.to(kGpu)).to(Device::cpu()).to_vector<int32_t>();
    const std::vector<int32_t> cpu = sample_rows(cpu_odd, options, odd_draws).to_vector<int32_t>();
    for (int r = 1; r < 5; ++r) EXPECT_EQ(gpu[size_t(r)], cpu[size_t(r)]) << settings_name(options) << " row " << r;
    EXPECT_TRUE(gpu[0] == 1 || gpu[0] == 3) << "a NaN was chosen: " << gpu[0];
  }
}

TEST(GpuSampling, NamesDrawIndicesOnAnotherDevice) {
  FATHOM_REQUIRE_GPU();
  const Tensor logits = Tensor::zeros({2, 10}, DType::f32, kGpu);
  expect_error([&] { sample_rows(logits, {}, Tensor::zeros({2}, DType::i64)); },
               {"draw_indices are on cpu", "logits on cuda:0"});
  expect_error([&] { sample_rows(logits.to(Device::cpu()), {}, Tensor::zeros({2}, DType::i64, kGpu)); },
               {"draw_indices are on cuda:0", "logits on cpu"});
}
