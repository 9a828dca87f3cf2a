// The CUDA decode prologue against the CPU's separate ops: the 1B OLMo2's and the Llama 3.2 1B's heads
// (16/16 and 32/8 of 64, 128) and odd ones (6/2 of 8, 3/1 of 130), batches of 1 to 32 at ragged positions
// or at one shared count, with and without QK-norm, BF16 and F32; positions past the capacity write
// nothing; the fused kernel rounds where the separate CUDA ops round; and attention's decoding steps give
// the same logits with it as without. decode_prologue_attention, the prologue inside attention's split
// kernel, gives the prologue's and attention's bits on the shapes it takes and falls back on the others.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_prologue.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/kernel_choice_scope.h"
#include "train/generate/decode_step.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct Heads {
  int64_t q, kv, d;
};

std::vector<int32_t> ragged_positions(int64_t B, int64_t capacity) {
  std::vector<int32_t> p;
  for (int64_t b = 0; b < B; ++b) p.push_back(int32_t((b * 7919 + 3) % (capacity - 1)));
  return p;
}

}  // namespace

TEST(GpuDecodePrologue, MatchesTheCpuOnAwkwardShapes) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const Heads h : {Heads{16, 16, 128}, Heads{32, 8, 64}, Heads{6, 2, 8}, Heads{3, 1, 130}})
    for (const int64_t B : {1, 3, 32})
      for (const bool shared_count : {false, true})
        for (const bool qk_norm : {true, false})
          for (const DType dt : {DType::bf16, DType::f32}) {
            const std::string what = std::to_string(h.q) + "/" + std::to_string(h.kv) + " heads of " +
                                     std::to_string(h.d) + ", B " + std::to_string(B) +
                                     (shared_count ? " one count" : " ragged") + (qk_norm ? " QK-norm " : " ") +
                                     dtype_name(dt);
            const int64_t capacity = 300;
            const GpuInput q = random_input({B, 1, h.q, h.d}, dt, seed++),
                           k = random_input({B, 1, h.kv, h.d}, dt, seed++),
                           v = random_input({B, 1, h.kv, h.d}, dt, seed++);
            const GpuInput qn = random_input({h.q * h.d}, dt, seed++), kn = random_input({h.kv * h.d}, dt, seed++);
            const Tensor past = shared_count ? Tensor::from_vector<int32_t>({41}, {1})
                                             : Tensor::from_vector(ragged_positions(B, capacity), {B});
            const Tensor angles_cpu = rope_angles(positions_after(past, 1), h.d, 500000.0);
            const Tensor angles_gpu = rope_angles(positions_after(past.to(kGpu), 1), h.d, 500000.0);
            // Zero caches: the comparison weighs only the rows written, and any stray write shows.
            Tensor ck_cpu = Tensor::zeros({B, h.kv, capacity, h.d}, DType::f32), cv_cpu = ck_cpu.clone();
            Tensor ck_gpu = Tensor::zeros({B, h.kv, capacity, h.d}, dt, kGpu), cv_gpu = ck_gpu.clone();
            const QkNorm norm_cpu = qk_norm ? QkNorm{qn.cpu, kn.cpu, 1e-6, 1e-5} : QkNorm{};
            const QkNorm norm_gpu = qk_norm ? QkNorm{qn.gpu, kn.gpu, 1e-6, 1e-5} : QkNorm{};
            const Tensor want = decode_prologue(q.cpu, k.cpu, v.cpu, norm_cpu, angles_cpu, ck_cpu, cv_cpu, past);
            const Tensor got =
                decode_prologue(q.gpu, k.gpu, v.gpu, norm_gpu, angles_gpu, ck_gpu, cv_gpu, past.to(kGpu));
            EXPECT_GPU_CLOSE(got, want, dt, what + ": q");
            EXPECT_GPU_CLOSE(ck_gpu, ck_cpu, dt, what + ": k cache");
            EXPECT_TRUE(bitwise_equal(cv_gpu, cv_cpu.to(dt).to(kGpu))) << what << ": v cache";
          }
}

// The separate CUDA ops, in turn, give what the fused kernel gives: the roundings are the same, so only
// the order of the f32 sums of squares can move a value, by one bf16 step at rare elements (a relative L2
// under 5e-4; leaving out one rounding would move every element, about 1e-3).
TEST(GpuDecodePrologue, RoundsWhereTheSeparateCudaOpsRound) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 8, Hq = 32, Hk = 8, d = 64, capacity = 64;
  const GpuInput q = random_input({B, 1, Hq, d}, DType::bf16, 50), k = random_input({B, 1, Hk, d}, DType::bf16, 51),
                 v = random_input({B, 1, Hk, d}, DType::bf16, 52);
  const GpuInput qn = random_input({Hq * d}, DType::bf16, 53), kn = random_input({Hk * d}, DType::bf16, 54);
  const Tensor past = Tensor::from_vector(ragged_positions(B, capacity), {B}).to(kGpu);
  const Tensor angles = rope_angles(positions_after(past, 1), d, 500000.0);
  Tensor fused_k = Tensor::zeros({B, Hk, capacity, d}, DType::bf16, kGpu), fused_v = fused_k.clone();
  Tensor separate_k = fused_k.clone(), separate_v = fused_k.clone();
  const Tensor fused =
      decode_prologue(q.gpu, k.gpu, v.gpu, QkNorm{qn.gpu, kn.gpu, 1e-6, 1e-6}, angles, fused_k, fused_v, past);
  const Tensor q_normed = rms_norm_forward(q.gpu.view({B, Hq * d}), qn.gpu, 1e-6).y.view(q.gpu.shape());
  const Tensor k_normed = rms_norm_forward(k.gpu.view({B, Hk * d}), kn.gpu, 1e-6).y.view(k.gpu.shape());
  kv_cache_write(separate_k, rope_forward(k_normed, angles), past);
  kv_cache_write(separate_v, v.gpu, past);
  EXPECT_LE(relative_l2(fused, rope_forward(q_normed, angles)), 5e-4) << "q";
  EXPECT_LE(relative_l2(fused_k, separate_k), 5e-4) << "k cache";
  EXPECT_TRUE(bitwise_equal(fused_v, separate_v)) << "v cache";
}

TEST(GpuDecodePrologue, APositionPastTheCacheWritesNothing) {
  FATHOM_REQUIRE_GPU();
  const GpuInput q = random_input({2, 1, 2, 8}, DType::bf16, 60), k = random_input({2, 1, 1, 8}, DType::bf16, 61);
  const Tensor past = Tensor::from_vector<int32_t>({1, 4}, {2}).to(kGpu);  // row 1 past the capacity of 4
  Tensor cache_k = Tensor::zeros({2, 1, 4, 8}, DType::bf16, kGpu), cache_v = cache_k.clone();
  decode_prologue(q.gpu, k.gpu, k.gpu, QkNorm{}, rope_angles(positions_after(past, 1), 8, 1e4), cache_k, cache_v, past);
  for (float x : cache_v.narrow(1, 1).to(Device::cpu()).to(DType::f32).to_vector<float>()) EXPECT_EQ(x, 0.f);
  EXPECT_NE(cache_v.narrow(0, 1).to(Device::cpu()).to(DType::f32).to_vector<float>(), std::vector<float>(32, 0.f));
}

// Attention's token steps with FATHOM_DECODE_PROLOGUE=fused against the separate ops, on the GPU in BF16
// with a ragged batch (MoDA-free OLMo2 and Llama-style models): the logits agree to BF16's tolerance.
TEST(GpuDecodePrologue, AttentionDecodesWithItAsWithTheSeparateOps) {
  FATHOM_REQUIRE_GPU();
  NoGrad no_grad;
  for (const bool qk_norm : {true, false}) {
    ModelConfig c{.d_model = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 512, .vocab_size = 300};
    c.qk_norm = qk_norm;
    Decoder model(c);
    ParameterArena arena(model, kGpu);
    arena.initialise(9);
    arena.enable_compute_copy(DType::bf16);
    const auto logits_of = [&](DecodePrologue choice) {
      DecodePrologueScope scope(choice);
      DecodeState state = model.start_decoding(2, 16, DType::bf16, kGpu);
      const std::vector<std::vector<int32_t>> prompts{{3, 90, 17, 4, 5}, {8, 9}};
      for (size_t b = 0; b < prompts.size(); ++b) {
        DecodeState one = model.start_decoding(1, 16, DType::bf16, kGpu);
        model.decode(Tensor::from_vector(prompts[b], {1, int64_t(prompts[b].size())}).to(kGpu), one);
        state.take_sequence(int64_t(b), one);
      }
      std::vector<float> all;
      for (int32_t t : {6, 7, 8}) {
        const Tensor ids = Tensor::from_vector(std::vector<int32_t>{t, t + 1}, {2, 1}).to(kGpu);
        const std::vector<float> step =
            last_logits(model, model.decode(ids, state)).to(Device::cpu()).to(DType::f32).to_vector<float>();
        all.insert(all.end(), step.begin(), step.end());
      }
      return Tensor::from_vector(all, {int64_t(all.size())});
    };
    EXPECT_GPU_CLOSE(logits_of(DecodePrologue::fused), logits_of(DecodePrologue::separate), DType::bf16,
                     std::string("qk_norm ") + (qk_norm ? "on" : "off"));
  }
}

// The prologue inside attention's split kernel against the two launches it replaces, bit for bit (output and
// both caches, whose other rows hold random values the attention reads), and against the CPU: the 1B OLMo2's
// heads (16/16 of 128), G = 2 and 4 at 64 and 128, and shapes that fall back to the two launches (G = 8;
// head dim 8), batches of 1 to 32 at ragged positions across every split of a 300-position cache, with and
// without QK-norm.
TEST(GpuDecodePrologue, InsideAttentionGivesTheTwoLaunchesBits) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Heads h :
       {Heads{16, 16, 128}, Heads{12, 6, 64}, Heads{32, 8, 64}, Heads{8, 2, 128}, Heads{16, 2, 64}, Heads{6, 2, 8}})
    for (const int64_t B : {1, 3, 32})
      for (const bool shared_count : {false, true})
        for (const bool qk_norm : {true, false}) {
          const std::string what = std::to_string(h.q) + "/" + std::to_string(h.kv) + " heads of " +
                                   std::to_string(h.d) + ", B " + std::to_string(B) +
                                   (shared_count ? " one count" : " ragged") + (qk_norm ? " QK-norm" : "");
          const int64_t capacity = 300;
          const GpuInput q = random_input({B, 1, h.q, h.d}, DType::bf16, seed++),
                         k = random_input({B, 1, h.kv, h.d}, DType::bf16, seed++),
                         v = random_input({B, 1, h.kv, h.d}, DType::bf16, seed++);
          const GpuInput qn = random_input({h.q * h.d}, DType::bf16, seed++),
                         kn = random_input({h.kv * h.d}, DType::bf16, seed++);
          const GpuInput cache = random_input({B, h.kv, capacity, h.d}, DType::bf16, seed++);
          const Tensor past = shared_count ? Tensor::from_vector<int32_t>({229}, {1})
                                           : Tensor::from_vector(ragged_positions(B, capacity), {B});
          const Tensor past_gpu = past.to(kGpu);
          const Tensor angles_gpu = rope_angles(positions_after(past_gpu, 1), h.d, 500000.0);
          const QkNorm norm_gpu = qk_norm ? QkNorm{qn.gpu, kn.gpu, 1e-6, 1e-5} : QkNorm{};
          const double scale = 1.0 / std::sqrt(double(h.d));
          Tensor two_k = cache.gpu.clone(), two_v = cache.gpu.clone();
          const Tensor two =
              decode_attention(decode_prologue(q.gpu, k.gpu, v.gpu, norm_gpu, angles_gpu, two_k, two_v, past_gpu),
                               two_k, two_v, past_gpu, {}, scale);
          Tensor one_k = cache.gpu.clone(), one_v = cache.gpu.clone();
          // The first four head shapes run inside the split kernel, the last two fall back.
          EXPECT_EQ(prologue_fits_attention(q.gpu, k.gpu, v.gpu, norm_gpu, one_k, one_v), h.q / h.kv <= 4 && h.d >= 64)
              << what;
          PrologueInAttentionScope inside(Fusion::fused);
          const Tensor one =
              decode_prologue_attention(q.gpu, k.gpu, v.gpu, norm_gpu, angles_gpu, one_k, one_v, past_gpu, scale);
          EXPECT_TRUE(bitwise_equal(one, two)) << what << ": o";
          EXPECT_TRUE(bitwise_equal(one_k, two_k)) << what << ": k cache";
          EXPECT_TRUE(bitwise_equal(one_v, two_v)) << what << ": v cache";
          // And the CPU's prologue and attention, in f32 from the same values.
          Tensor cpu_k = cache.cpu.clone(), cpu_v = cache.cpu.clone();
          const QkNorm norm_cpu = qk_norm ? QkNorm{qn.cpu, kn.cpu, 1e-6, 1e-5} : QkNorm{};
          const Tensor want = decode_prologue_attention(q.cpu, k.cpu, v.cpu, norm_cpu,
                                                        rope_angles(positions_after(past, 1), h.d, 500000.0), cpu_k,
                                                        cpu_v, past, scale);
          EXPECT_GPU_CLOSE(one, want, DType::bf16, what + ": o against the CPU");
          EXPECT_GPU_CLOSE(one_k, cpu_k, DType::bf16, what + ": k cache against the CPU");
        }
}

// A sequence whose position is past the cache writes nothing there, inside attention as in the prologue
// kernel, and the other sequences are unaffected.
TEST(GpuDecodePrologue, InsideAttentionAPositionPastTheCacheWritesNothing) {
  FATHOM_REQUIRE_GPU();
  const int64_t capacity = 70;
  const GpuInput q = random_input({2, 1, 4, 64}, DType::bf16, 70), k = random_input({2, 1, 2, 64}, DType::bf16, 71);
  const GpuInput cache = random_input({2, 2, capacity, 64}, DType::bf16, 72);
  const Tensor past = Tensor::from_vector<int32_t>({65, 70}, {2}).to(kGpu);  // row 1 past the capacity
  const Tensor angles = rope_angles(positions_after(past, 1), 64, 1e4);
  Tensor two_k = cache.gpu.clone(), two_v = cache.gpu.clone(), one_k = cache.gpu.clone(), one_v = cache.gpu.clone();
  const Tensor two = decode_attention(decode_prologue(q.gpu, k.gpu, k.gpu, QkNorm{}, angles, two_k, two_v, past), two_k,
                                      two_v, past, {}, 0.125);
  PrologueInAttentionScope inside(Fusion::fused);
  ASSERT_TRUE(prologue_fits_attention(q.gpu, k.gpu, k.gpu, QkNorm{}, one_k, one_v));
  const Tensor one = decode_prologue_attention(q.gpu, k.gpu, k.gpu, QkNorm{}, angles, one_k, one_v, past, 0.125);
  EXPECT_TRUE(bitwise_equal(one, two));
  EXPECT_TRUE(bitwise_equal(one_k, two_k));
  EXPECT_TRUE(bitwise_equal(one_v.narrow(1, 1), cache.gpu.narrow(1, 1))) << "row 1 is past the cache";
  EXPECT_FALSE(bitwise_equal(one_v.narrow(0, 1), cache.gpu.narrow(0, 1))) << "row 0 writes its value";
}
