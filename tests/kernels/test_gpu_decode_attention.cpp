// CUDA decode attention against the CPU reference (in f32 on the same bf16-rounded inputs, itself
// checked against causal and MoDA attention in tests/kernels/test_decode_attention.cpp), within 1e-2
// relative L2: cache lengths 1 to 16385 (single keys, tile tails, several splits), Tq 1 to 5,
// batch 1 to 32, G 1, 2, 3, 4 and 8 (up to 4 rows per KV head take the register kernel) (G * Tq = 40 rows take two row
// blocks), head dims 64 and 128, with and without depth slots. Every cache has room past `length` filled with huge keys
// and NaN values, so a kernel that reads the unwritten tail fails. Two runs are bit-identical. Without a GPU the tests
// skip. The split kernel's own merge, by a counter or in a cluster, gives the combine kernel's bits. Ragged batches (a
// count per sequence, I32 [B]): every kernel (bf16 register and tile kernels, with and without depth slots; fp32; the
// host fallback) against the CPU reference, with rows holding 0, 1, capacity - Tq and a few thousand positions, each
// row's tail poisoned past its own length; a count of [B] equal entries gives what the one-count call gives, bit for
// bit; the per-row KV write, positions and advance equal the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct Case {
  int64_t B, Tq, Hk, G, d, length;
  int64_t slots = 0;  // depth slots read, the range [1, 1 + slots) of slots + 2
};

std::string describe_case(const Case& c) {
  char text[128];
  std::snprintf(text, sizeof(text), "B%lld_Tq%lld_Hk%lld_G%lld_d%lld_len%lld_L%lld", (long long)c.B, (long long)c.Tq,
                (long long)c.Hk, (long long)c.G, (long long)c.d, (long long)c.length, (long long)c.slots);
  return text;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return describe_case(info.param); }
// gtest prints a parameter with this, not as its raw bytes.
[[maybe_unused]] void PrintTo(const Case& c, std::ostream* os) { *os << describe_case(c); }

// A bf16 cache [B, Hk, capacity, d] whose first `length` positions are random and whose tail holds
// `poison`; on the GPU, and exactly as f32 on the host.
GpuInput poisoned_cache(const Case& c, int64_t capacity, double low, double high, double poison, uint64_t seed) {
  const Tensor valid = random_tensor({c.B * c.Hk, c.length, c.d}, DType::bf16, seed, low, high).to(DType::f32);
  Tensor cache = Tensor::full({c.B * c.Hk, capacity, c.d}, poison, DType::f32);
  const float* src = valid.data<float>();
  float* dst = cache.data<float>();
  for (int64_t bh = 0; bh < c.B * c.Hk; ++bh)
    std::copy(src + bh * c.length * c.d, src + (bh + 1) * c.length * c.d, dst + bh * capacity * c.d);
  const Tensor rounded = cache.view({c.B, c.Hk, capacity, c.d}).to(DType::bf16);
  return {rounded.to(kGpu), rounded.to(DType::f32)};
}

// One case's inputs on both sides.
struct Problem {
  Case c;
  double scale;
  GpuInput q, k_cache, v_cache, depth_k, depth_v;
  int64_t begin = 1, end = 1;

  Problem(const Case& cs, uint64_t seed) : c(cs), scale(1.0 / std::sqrt(double(cs.d))) {
    const int64_t capacity = c.length + 37;
    // Scores of standard deviation about 1.3: softmax rows far from uniform.
    q = random_input({c.B, c.Tq, c.G * c.Hk, c.d}, DType::bf16, seed, -2, 2);
    k_cache = poisoned_cache(c, capacity, -2, 2, 1e30, seed + 1);
    v_cache = poisoned_cache(c, capacity, -1, 1, NAN, seed + 2);
    if (c.slots > 0) {
      const Shape depth{c.B, c.Tq, c.slots + 2, c.Hk, c.d};
      depth_k = random_input(depth, DType::bf16, seed + 3, -2, 2);
      depth_v = random_input(depth, DType::bf16, seed + 4);
      end = begin + c.slots;
    }
  }
  Tensor run_gpu() const {
    return decode_attention(q.gpu, k_cache.gpu, v_cache.gpu, c.length, DepthSlots{depth_k.gpu, depth_v.gpu, begin, end},
                            scale);
  }
  Tensor run_cpu() const {
    return decode_attention(q.cpu, k_cache.cpu, v_cache.cpu, c.length, DepthSlots{depth_k.cpu, depth_v.cpu, begin, end},
                            scale);
  }
};

class GpuDecodeAttention : public ::testing::TestWithParam<Case> {};

TEST_P(GpuDecodeAttention, MatchesCpuReference) {
  FATHOM_REQUIRE_GPU();
  const Problem p(GetParam(), 7000 + uint64_t(GetParam().length));
  const Tensor got = p.run_gpu();
  ASSERT_EQ(got.shape(), p.q.gpu.shape());
  ASSERT_EQ(got.dtype(), DType::bf16);
  EXPECT_GPU_CLOSE(got, p.run_cpu(), DType::bf16, "o");
}

// B, Tq, Hk, G, d, length, slots.
const Case kCases[] = {
    {1, 1, 2, 1, 64, 1},
    {1, 1, 2, 4, 128, 1, 2},
    {3, 3, 2, 3, 64, 63},
    {1, 3, 2, 8, 128, 63, 4},
    {1, 1, 4, 1, 128, 64},
    {3, 3, 1, 4, 64, 64, 1},
    {1, 3, 2, 8, 128, 1000},
    {3, 1, 2, 3, 128, 1000, 24},
    {3, 1, 2, 4, 64, 4097},
    {1, 3, 3, 3, 128, 4097, 8},
    {1, 1, 4, 1, 128, 16385},
    {1, 3, 2, 8, 64, 16385, 24},
    {3, 1, 1, 8, 128, 16385},
    {1, 5, 2, 8, 128, 129},
    {1, 5, 2, 8, 64, 1000, 3},
    {3, 3, 2, 1, 64, 4097, 2},
    // Few rows per KV head (the register kernel): a decoding batch of 32, R = 2 from G or from Tq,
    // R = 4 from four tokens, cache lengths off every tile and step size.
    {32, 1, 4, 1, 128, 200},
    {2, 1, 2, 2, 64, 77, 3},
    {1, 2, 2, 1, 128, 130},
    {3, 4, 1, 1, 64, 300},
    {1, 1, 1, 1, 64, 2},
    {2, 1, 3, 1, 128, 16385, 1},
};
INSTANTIATE_TEST_SUITE_P(Shapes, GpuDecodeAttention, ::testing::ValuesIn(kCases), case_name);

TEST(GpuDecodeAttentionDeterminism, TwoRunsAreBitIdentical) {
  FATHOM_REQUIRE_GPU();
  for (const Case& c : {Case{1, 3, 2, 8, 128, 16385, 24}, Case{3, 1, 2, 1, 64, 4097}, Case{32, 1, 4, 1, 128, 200}}) {
    const Problem p(c, 99);
    EXPECT_TRUE(bitwise_equal(p.run_gpu(), p.run_gpu())) << "length " << c.length;
  }
}

// A ragged problem: q [B, Tq, G * Hk, d] and caches whose row b holds past[b] + Tq valid positions
// (huge keys and NaN values after), in `dtype` on the GPU and exactly as f32 on the host.
struct RaggedProblem {
  std::vector<int32_t> past;
  double scale;
  GpuInput q, k_cache, v_cache, depth_k, depth_v;
  int64_t begin = 0, end = 0;

  RaggedProblem(std::vector<int32_t> counts, int64_t Tq, int64_t Hk, int64_t G, int64_t d, int64_t capacity,
                int64_t slots, DType dtype, uint64_t seed)
      : past(std::move(counts)), scale(1.0 / std::sqrt(double(d))) {
    const int64_t B = int64_t(past.size());
    q = random_input({B, Tq, G * Hk, d}, dtype, seed, -2, 2);
    k_cache = cache(B, Tq, Hk, d, capacity, dtype, seed + 1, 1e30);
    v_cache = cache(B, Tq, Hk, d, capacity, dtype, seed + 2, NAN);
    if (slots > 0) {
      const Shape depth{B, Tq, slots + 1, Hk, d};
      depth_k = random_input(depth, dtype, seed + 3, -2, 2);
      depth_v = random_input(depth, dtype, seed + 4);
      begin = 1, end = 1 + slots;
    }
  }
  GpuInput cache(int64_t B, int64_t Tq, int64_t Hk, int64_t d, int64_t capacity, DType dtype, uint64_t seed,
                 double poison) const {
    Tensor host = random_tensor({B, Hk, capacity, d}, dtype, seed, -2, 2).to(DType::f32);
    float* p = host.data<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hk; ++h)
        for (int64_t j = past[size_t(b)] + Tq; j < capacity; ++j)
          for (int64_t c = 0; c < d; ++c) p[((b * Hk + h) * capacity + j) * d + c] = float(poison);
    const Tensor rounded = host.to(dtype);
    return {rounded.to(kGpu), rounded.to(DType::f32)};
  }
  Tensor counts(Device device) const { return Tensor::from_vector(past, {int64_t(past.size())}).to(device); }
  Tensor run_gpu() const {
    return decode_attention(q.gpu, k_cache.gpu, v_cache.gpu, counts(kGpu),
                            DepthSlots{depth_k.gpu, depth_v.gpu, begin, end}, scale);
  }
  Tensor run_cpu() const {
    return decode_attention(q.cpu, k_cache.cpu, v_cache.cpu, counts(Device::cpu()),
                            DepthSlots{depth_k.cpu, depth_v.cpu, begin, end}, scale);
  }
};

TEST(GpuDecodeAttentionRagged, EveryKernelReadsEachRowsCount) {
  FATHOM_REQUIRE_GPU();
  struct Ragged {
    int64_t Tq, Hk, G, d, slots;
    DType dtype;
    const char* what;
  };
  const Ragged cases[] = {
      {1, 2, 1, 64, 0, DType::bf16, "bf16 register kernel, R 1"},
      {1, 2, 2, 128, 2, DType::bf16, "bf16 register kernel, R 2, depth"},
      {2, 1, 2, 64, 0, DType::bf16, "bf16 register kernel, R 4"},
      {3, 2, 3, 128, 3, DType::bf16, "bf16 tile kernel, R 9, depth"},
      {5, 2, 8, 64, 0, DType::bf16, "bf16 tile kernel, two row blocks"},
      {1, 2, 3, 40, 0, DType::f32, "fp32 kernel"},
      {3, 1, 2, 24, 0, DType::f32, "fp32 kernel, Tq 3"},
      {1, 2, 3, 16, 2, DType::bf16, "host fallback (head dim 16), depth"},
  };
  for (const Ragged& c : cases) {
    const int64_t capacity = 4200;
    // Rows holding 0, 1, capacity - Tq, a tile tail and several splits' worth before the step.
    const std::vector<int32_t> past{0, 1, int32_t(capacity - c.Tq), 63, 2500, 7};
    const RaggedProblem p(past, c.Tq, c.Hk, c.G, c.d, capacity, c.slots, c.dtype, 500 + uint64_t(c.d));
    const Tensor got = p.run_gpu();
    ASSERT_EQ(got.shape(), p.q.gpu.shape()) << c.what;
    EXPECT_GPU_CLOSE(got, p.run_cpu(), c.dtype, c.what);
    EXPECT_TRUE(bitwise_equal(got, p.run_gpu())) << c.what << ": two runs differ";
  }
}

TEST(GpuDecodeAttentionRagged, EqualCountsAreTheOneCountCall) {
  FATHOM_REQUIRE_GPU();
  for (const DType dtype : {DType::bf16, DType::f32}) {
    const RaggedProblem p({300, 300, 300}, 1, 2, 3, 64, 400, dtype == DType::bf16 ? 2 : 0, dtype, 77);
    const Tensor one = Tensor::from_vector(std::vector<int32_t>{300}, {1}).to(kGpu);
    const DepthSlots depth{p.depth_k.gpu, p.depth_v.gpu, p.begin, p.end};
    EXPECT_TRUE(
        bitwise_equal(p.run_gpu(), decode_attention(p.q.gpu, p.k_cache.gpu, p.v_cache.gpu, one, depth, p.scale)))
        << dtype_name(dtype);
    EXPECT_TRUE(
        bitwise_equal(p.run_gpu(), decode_attention(p.q.gpu, p.k_cache.gpu, p.v_cache.gpu, 301, depth, p.scale)))
        << dtype_name(dtype);
  }
}

// A merge test's device-count cases: both(run) runs `run` under the combine kernel and under the merge and returns
// the two outputs, which must be equal bit for bit. One count for every sequence (three of 300 positions, a cache of
// 400), then one count per sequence (rows holding `past`, a cache of `capacity`) at G 1, 2 and 4, against the CPU
// reference too.
template <typename Both>
void expect_device_counts_merge_bitwise(const Both& both, const std::vector<int32_t>& past, int64_t capacity,
                                        uint64_t seed) {
  {
    const RaggedProblem p({300, 300, 300}, 1, 2, 2, 128, 400, 0, DType::bf16, seed + 40);
    const Tensor one = Tensor::from_vector(std::vector<int32_t>{300}, {1}).to(kGpu);
    const auto [combined, merged] =
        both([&] { return decode_attention(p.q.gpu, p.k_cache.gpu, p.v_cache.gpu, one, DepthSlots{}, p.scale); });
    EXPECT_TRUE(bitwise_equal(merged, combined)) << "one count for every sequence";
  }
  for (const int64_t G : {1, 2, 4}) {
    const RaggedProblem p(past, 1, 2, G, G == 2 ? 64 : 128, capacity, 0, DType::bf16, seed + uint64_t(G));
    const auto [combined, merged] = both([&] { return p.run_gpu(); });
    EXPECT_TRUE(bitwise_equal(merged, combined)) << "ragged, G " << G;
    EXPECT_GPU_CLOSE(merged, p.run_cpu(), DType::bf16, "ragged, merged, G " + std::to_string(G));
  }
}

// The few-rows split kernel merging its own splits (FATHOM_MERGE_IN_SPLIT=always; the cluster merge off, as it would
// take the grids of up to 8 splits) against the combine kernel, bit for bit: every case above with a host length
// (those with depth slots or more than 4 rows a KV head keep the combine kernel and must be unchanged; the rest are
// asserted to merge), and device counts, one for every sequence and one per sequence; each twice, so a counter left
// nonzero shows.
TEST(GpuDecodeAttentionMerge, TheSplitKernelsMergeGivesTheCombineKernelsBits) {
  FATHOM_REQUIRE_GPU();
  const MergeInClusterScope cluster(Toggle::off);
  const auto both = [](auto&& run) {
    Tensor out[2];
    {
      const MergeInSplitScope apart(Usage::never);
      out[0] = run();
    }
    const MergeInSplitScope inside(Usage::always);
    out[1] = run();
    EXPECT_TRUE(bitwise_equal(run(), out[1])) << "a second merged run differs";
    return std::pair{out[0], out[1]};
  };
  for (const Case& c : kCases) {
    const Problem p(c, 9000 + uint64_t(c.length));
    {
      const MergeInSplitScope inside(Usage::always);
      EXPECT_EQ(merges_in_split(c.G * c.Tq, c.slots > 0, 2), c.G * c.Tq <= 4 && c.slots == 0) << describe_case(c);
    }
    const auto [combined, merged] = both([&] { return p.run_gpu(); });
    EXPECT_TRUE(bitwise_equal(merged, combined)) << describe_case(c);
  }
  expect_device_counts_merge_bitwise(both, {0, 1, 4199, 63, 2500, 7}, 4200, 600);
}

// The few-rows split kernel merging its splits through its cluster's shared memory (FATHOM_MERGE_IN_CLUSTER=on)
// against the combine kernel, bit for bit, and against the CPU reference: host lengths of 1 to 8 splits (R 1, 2 and
// 4, head dims 64 and 128, batch 1 to 24: a split of at most 96 blocks, fewer than an H100 or H200 has SMs), then
// device counts in a cache of 7 tiles, one for every sequence and one per sequence, where a row of few positions leaves
// most of its cluster's blocks with nothing to do; each twice.
TEST(GpuDecodeAttentionMerge, TheClusterMergeGivesTheCombineKernelsBits) {
  FATHOM_REQUIRE_GPU();
  const auto both = [](auto&& run) {
    const MergeInSplitScope apart(Usage::never);
    Tensor combined;
    {
      const MergeInClusterScope off(Toggle::off);
      combined = run();
    }
    const MergeInClusterScope on(Toggle::on);
    const Tensor merged = run();
    EXPECT_TRUE(bitwise_equal(run(), merged)) << "a second merged run differs";
    return std::pair{combined, merged};
  };
  // B, Tq, Hk, G, d, length: 1 to 8 splits of one tile each.
  const Case cases[] = {
      {1, 1, 2, 1, 64, 300}, {1, 1, 4, 1, 128, 512}, {3, 1, 2, 2, 128, 200}, {24, 1, 4, 1, 64, 300},
      {2, 2, 2, 2, 64, 129}, {1, 1, 2, 4, 128, 511}, {1, 1, 1, 1, 128, 1},   {5, 1, 3, 2, 64, 65},
  };
  for (const Case& c : cases) {
    {
      const MergeInClusterScope on(Toggle::on);
      ASSERT_EQ(cuda::decode_attention_merge(c.B, c.Hk, c.G * c.Tq, c.length, false, false, kGpu), DecodeMerge::cluster)
          << describe_case(c);
    }
    const Problem p(c, 9500 + uint64_t(c.length));
    const auto [combined, merged] = both([&] { return p.run_gpu(); });
    EXPECT_TRUE(bitwise_equal(merged, combined)) << describe_case(c);
    EXPECT_GPU_CLOSE(merged, p.run_cpu(), DType::bf16, describe_case(c));
  }
  {
    const MergeInClusterScope on(Toggle::on);
    for (const int64_t R : {1, 2, 4})
      ASSERT_EQ(cuda::decode_attention_merge(6, 2, R, 400, false, true, kGpu), DecodeMerge::cluster) << "R " << R;
  }
  expect_device_counts_merge_bitwise(both, {0, 1, 399, 63, 250, 7}, 400, 700);  // clusters of 7
}

TEST(GpuDecodeAttentionRagged, KvWritePositionsAndAdvancePerRow) {
  FATHOM_REQUIRE_GPU();
  for (const int64_t d : {64, 5}) {  // 16-byte units and 2-byte units
    const int64_t B = 4, Tq = 2, Hk = 3, capacity = 9;
    const GpuInput rows = random_input({B, Tq, Hk, d}, DType::bf16, 8);
    const std::vector<int32_t> past{0, 1, int32_t(capacity - Tq), 4};
    const Tensor counts = Tensor::from_vector(past, {B});
    Tensor on_gpu = Tensor::zeros({B, Hk, capacity, d}, DType::bf16, kGpu);
    Tensor on_cpu = Tensor::zeros({B, Hk, capacity, d}, DType::bf16);
    kv_cache_write(on_gpu, rows.gpu, counts.to(kGpu));
    kv_cache_write(on_cpu, rows.gpu.to(Device::cpu()), counts);
    EXPECT_TRUE(bitwise_equal(on_gpu, on_cpu)) << "d " << d;
  }
  Tensor past = Tensor::from_vector(std::vector<int32_t>{0, 5, 2}, {3}).to(kGpu);
  EXPECT_EQ(positions_after(past, 3).to(Device::cpu()).to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 5, 6, 7, 2, 3, 4}));
  advance_positions(past, 2);
  EXPECT_EQ(past.to(Device::cpu()).to_vector<int32_t>(), (std::vector<int32_t>{2, 7, 4}));
}

TEST(GpuDecodeAttentionErrors, UnsupportedHeadDimAndDtype) {
  FATHOM_REQUIRE_GPU();
  const Tensor q = Tensor::zeros({1, 1, 2, 96}, DType::bf16, kGpu),
               kv = Tensor::zeros({1, 2, 4, 96}, DType::bf16, kGpu);
  expect_error([&] { cuda::decode_attention(q, kv, kv, 4, DepthSlots{}, 0.1); }, {"head dim d = 96", "64 and 128"});
  // The dispatch decodes head dims without a kernel through the host reference.
  const Tensor o = decode_attention(q, kv, kv, 4, 0.1);
  EXPECT_EQ(o.shape(), q.shape());
  EXPECT_TRUE(o.device() == kGpu && o.dtype() == DType::bf16);
  const Tensor q32 = Tensor::zeros({1, 1, 2, 64}, DType::f32, kGpu),
               kv32 = Tensor::zeros({1, 2, 4, 64}, DType::f32, kGpu);
  // The dispatch decodes F32 with the fp32 attention kernel (test_gpu_attention.cpp); this one refuses it.
  expect_error([&] { cuda::decode_attention(q32, kv32, kv32, 4, DepthSlots{}, 0.1); },
               {"q F32[1, 1, 2, 64]", "must be BF16"});
  const Tensor kv_cpu = Tensor::zeros({1, 2, 4, 96}, DType::bf16);
  expect_error([&] { decode_attention(q, kv_cpu, kv_cpu, 4, 0.1); }, {"tensors on different devices"});
}

}  // namespace
