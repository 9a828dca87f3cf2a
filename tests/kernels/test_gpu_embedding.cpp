// CUDA embedding against the CPU reference: vocabularies of 50257 and 100352 + 5, odd widths,
// skewed id distributions whose frequent ids span many summing chunks, bit-identical gradients
// across runs, bf16 gradients into an f32 table gradient.
#include <vector>

#include "core/philox.h"
#include "kernels/embedding/embedding.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
// n ids in [0, vocab) where about half are one of three frequent ids, like real text.
Tensor skewed_ids(int64_t n, int64_t vocab, uint64_t seed, DType dtype) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = philox::draw(seed, uint64_t(i), 0).v[0], s = philox::draw(seed, uint64_t(i), 0).v[1];
    v[size_t(i)] = (r % 2 == 0) ? int64_t(s % 3) * 1000 % vocab : int64_t(s % uint32_t(vocab));
  }
  Tensor t = Tensor::from_vector(v, {n});
  return dtype == DType::i64 ? t : t.to(DType::i32);
}
}  // namespace

TEST(GpuEmbedding, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  struct Case {
    int64_t vocab, dim, tokens;
  };
  const Case cases[] = {{50257, 64, 1000}, {100352 + 5, 128, 4097}, {1000, 77, 20000}, {300, 3, 7}, {5, 1024, 3000}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& c : cases)
      for (DType id_type : {DType::i32, DType::i64}) {
        const std::string what = std::string(dtype_name(dt)) + " V=" + std::to_string(c.vocab) +
                                 " d=" + std::to_string(c.dim) + " n=" + std::to_string(c.tokens) + " ids " +
                                 dtype_name(id_type);
        const Tensor ids = skewed_ids(c.tokens, c.vocab, seed++, id_type);
        GpuInput table = random_input({c.vocab, c.dim}, dt, seed++);
        GpuInput grad_out = random_input({c.tokens, c.dim}, dt, seed++);
        EXPECT_TRUE(bitwise_equal(embedding_forward(ids.to(kGpu), table.gpu), embedding_forward(ids, table.cpu).to(dt)))
            << what;
        // Accumulates into an existing gradient.
        GpuInput start = random_input({c.vocab, c.dim}, dt, seed++);
        Tensor got = start.gpu.clone();
        embedding_backward(ids.to(kGpu), grad_out.gpu, got);
        Tensor want = start.cpu.clone();
        embedding_backward(ids, grad_out.cpu, want);
        EXPECT_GPU_CLOSE(got, want, dt, what + " backward");
      }
}

TEST(GpuEmbedding, BackwardIsBitIdenticalAcrossRuns) {
  FATHOM_REQUIRE_GPU();
  // 300k tokens: the frequent ids' segments span hundreds of summing chunks.
  const Tensor ids = skewed_ids(300000, 50257, 3, DType::i32).to(kGpu);
  GpuInput grad_out = random_input({300000, 64}, DType::bf16, 4);
  Tensor first = Tensor::zeros({50257, 64}, DType::f32, kGpu);
  embedding_backward(ids, grad_out.gpu, first);  // bf16 grads into an f32 table gradient
  Tensor want = Tensor::zeros({50257, 64}, DType::f32);
  embedding_backward(ids.to(Device::cpu()), grad_out.cpu, want);
  EXPECT_GPU_CLOSE(first, want, DType::f32, "bf16 -> f32 backward");
  for (int i = 0; i < 3; ++i) {
    Tensor again = Tensor::zeros({50257, 64}, DType::f32, kGpu);
    embedding_backward(ids, grad_out.gpu, again);
    EXPECT_TRUE(bitwise_equal(again, first)) << "run " << i;
  }
}

TEST(GpuEmbedding, ABadIdInBackwardIsReportedAndItsRowDropped) {
  FATHOM_REQUIRE_GPU();
  const Tensor ids = Tensor::from_vector<int32_t>({1, 40, 1}, {3}).to(kGpu);
  GpuInput g = random_input({3, 4}, DType::f32, 1);
  Tensor grad = Tensor::zeros({10, 4}, DType::f32, kGpu);
  embedding_backward(ids, g.gpu, grad);
  expect_error([&] { grad.to(Device::cpu()); }, {"token id 40", "position 1", "[0, 10)"});
  // The good ids were still summed.
  const std::vector<double> v = values(grad.to(Device::cpu()));
  const std::vector<double> gv = values(g.cpu);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(v[size_t(4 + c)], gv[size_t(c)] + gv[size_t(8 + c)], 1e-6);
}
