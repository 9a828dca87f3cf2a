// MoDA models on the GPU against the CPU reference: depth-slot copies, a tiny model's forward and
// backward for every variant, norm placement and depth key, and a 20-step loss curve. The GPU
// computes attention (sequence and depth) in bf16 with fp32 accumulation and keeps the depth
// values in bf16, so results agree within bf16 tolerance (docs/DESIGN.md section 8).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "kernels/moda/moda_attention.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/model_step.h"
#include "tests/support/test_support.h"
#include "tests/support/training_losses.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Head dim 64 (what the MoDA CUDA kernels support: 64 and 128) and G = 3 (the paper's small models).
ModelConfig tiny_moda(const std::string& variant, const std::string& norm, const std::string& depth_key) {
  ModelConfig c{
      .d_model = 384, .n_layers = 3, .n_heads = 6, .n_kv_heads = 2, .ffn_hidden = 256, .vocab_size = 96, .norm = norm};
  c.options.get<MoDAConfig>() = {.variant = parse_moda_variant(variant), .depth_key = parse_depth_key(depth_key)};
  return c;
}

std::string test_name(std::string s) {
  std::replace(s.begin(), s.end(), '+', '_');
  return s;
}

}  // namespace

// Slot copies on the GPU equal the CPU's bit for bit: a bf16 buffer filled from f32 activations
// (rounded on the way) and from bf16 ones, an f32 buffer (the gradient side buffers, also read out
// converted to bf16), and slots that were not written stay zero. Odd sizes, where no row is a
// multiple of a pack, and head dim 64, where the copies run 8 elements per thread.
TEST(GpuModaModel, DepthSlotWriteAndReadMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 2, T = 37, S = 5, Hk = 3;
  for (int64_t d : {6, 64})
    for (DType buffer_dtype : {DType::bf16, DType::f32}) {
      const std::string what = std::string(dtype_name(buffer_dtype)) + " buffer, d " + std::to_string(d);
      Tensor cpu = Tensor::zeros({B, T, S, Hk, d}, buffer_dtype);
      Tensor gpu = Tensor::zeros({B, T, S, Hk, d}, buffer_dtype, kGpu);
      const Tensor f32_slot = random_tensor({B, T, Hk, d}, DType::f32, 3);
      const Tensor own_slot = random_tensor({B, T, Hk, d}, buffer_dtype, 4);
      write_depth_slot(cpu, 1, f32_slot);
      write_depth_slot(gpu, 1, f32_slot.to(kGpu));
      write_depth_slot(cpu, 4, own_slot);
      write_depth_slot(gpu, 4, own_slot.to(kGpu));
      EXPECT_TRUE(bitwise_equal(gpu, cpu)) << what;
      for (int64_t slot = 0; slot < S; ++slot) {
        const Tensor got = read_depth_slot(gpu, slot);
        EXPECT_EQ(got.dtype(), buffer_dtype);
        EXPECT_TRUE(got.device() == kGpu);
        EXPECT_TRUE(bitwise_equal(got, read_depth_slot(cpu, slot))) << what << ", slot " << slot;
        const Tensor as_bf16 = read_depth_slot(gpu, slot, DType::bf16);
        EXPECT_EQ(as_bf16.dtype(), DType::bf16);
        EXPECT_TRUE(bitwise_equal(as_bf16, read_depth_slot(cpu, slot, DType::bf16))) << what << ", slot " << slot;
      }
      EXPECT_TRUE(bitwise_equal(read_depth_slot(gpu, 1), f32_slot.to(buffer_dtype))) << what;
      EXPECT_EQ(values(read_depth_slot(gpu, 2)), std::vector<double>(size_t(B * T * Hk * d), 0.0)) << what;
    }
  const int64_t d = 6;
  // Only F32 converts, and only into BF16.
  Tensor bf16_buffer = Tensor::zeros({B, T, S, Hk, d}, DType::bf16, kGpu);
  fathom::testing::expect_error(
      [&] {
        write_depth_slot(bf16_buffer, 0, random_tensor({B, T, Hk, d}, DType::f16, 5).to(kGpu));
      },
      {"write_depth_slot", "F16"});
}

// The Tensor-level dispatch (kernels/moda/moda_attention.cpp -> kernels/moda/moda_tensor_cuda.cpp, group
// kernel) against the CPU reference: o, lse, dq, dk, dv, and the depth gradients ADDED into
// pre-filled f32 buffers, with slots outside the read range left exactly as they were.
TEST(GpuModaModel, TensorDispatchMatchesTheCpuAndAddsDepthGradients) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 2, T = 45, Hq = 6, Hk = 2, d = 64, S = 5, begin = 1, end = 4;
  const double scale = 0.125;
  const GpuInput q = random_input({B, T, Hq, d}, DType::bf16, 1), k = random_input({B, T, Hk, d}, DType::bf16, 2),
                 v = random_input({B, T, Hk, d}, DType::bf16, 3), dk = random_input({B, T, S, Hk, d}, DType::bf16, 4),
                 dv = random_input({B, T, S, Hk, d}, DType::bf16, 5),
                 grad_o = random_input({B, T, Hq, d}, DType::bf16, 6);
  const AttentionOutput cpu =
      moda_attention_forward(q.cpu, k.cpu, v.cpu, DepthSlots{dk.cpu, dv.cpu, begin, end}, scale);
  const AttentionOutput gpu =
      moda_attention_forward(q.gpu, k.gpu, v.gpu, DepthSlots{dk.gpu, dv.gpu, begin, end}, scale);
  EXPECT_EQ(gpu.o.dtype(), DType::bf16);
  EXPECT_EQ(gpu.lse.dtype(), DType::f32);
  EXPECT_GPU_CLOSE(gpu.o, cpu.o, DType::bf16, "o");
  EXPECT_LE(relative_l2(gpu.lse, cpu.lse), 1e-3) << "lse";

  const Tensor prefill_k = random_tensor({B, T, S, Hk, d}, DType::f32, 7),
               prefill_v = random_tensor({B, T, S, Hk, d}, DType::f32, 8);
  Tensor cpu_ddk = prefill_k.clone(), cpu_ddv = prefill_v.clone();
  Tensor gpu_ddk = prefill_k.to(kGpu), gpu_ddv = prefill_v.to(kGpu);
  const AttentionGrads cg = moda_attention_backward(
      grad_o.cpu, q.cpu, k.cpu, v.cpu, DepthSlots{dk.cpu, dv.cpu, begin, end}, cpu.o, cpu.lse, scale, cpu_ddk, cpu_ddv);
  const AttentionGrads gg = moda_attention_backward(
      grad_o.gpu, q.gpu, k.gpu, v.gpu, DepthSlots{dk.gpu, dv.gpu, begin, end}, gpu.o, gpu.lse, scale, gpu_ddk, gpu_ddv);
  EXPECT_GPU_CLOSE(gg.dq, cg.dq, DType::bf16, "dq");
  EXPECT_GPU_CLOSE(gg.dk, cg.dk, DType::bf16, "dk");
  EXPECT_GPU_CLOSE(gg.dv, cg.dv, DType::bf16, "dv");
  for (int64_t slot = 0; slot < S; ++slot) {
    const std::string what = "slot " + std::to_string(slot);
    if (slot >= begin && slot < end) {
      // Compare the added gradients alone, so the prefill does not hide an error.
      Tensor want_k = read_depth_slot(cpu_ddk, slot), want_v = read_depth_slot(cpu_ddv, slot);
      Tensor got_k = read_depth_slot(gpu_ddk, slot).to(Device::cpu()),
             got_v = read_depth_slot(gpu_ddv, slot).to(Device::cpu());
      const std::vector<double> base_k = values(read_depth_slot(prefill_k, slot)),
                                base_v = values(read_depth_slot(prefill_v, slot));
      std::vector<double> wk = values(want_k), wv = values(want_v), gk = values(got_k), gv = values(got_v);
      for (size_t i = 0; i < wk.size(); ++i) {
        wk[i] -= base_k[i];
        gk[i] -= base_k[i];
        wv[i] -= base_v[i];
        gv[i] -= base_v[i];
      }
      const Shape shape = want_k.shape();
      EXPECT_GPU_CLOSE(Tensor::from_vector(gk, shape), Tensor::from_vector(wk, shape), DType::bf16, what + " depth dk");
      EXPECT_GPU_CLOSE(Tensor::from_vector(gv, shape), Tensor::from_vector(wv, shape), DType::bf16, what + " depth dv");
    } else {
      EXPECT_TRUE(bitwise_equal(read_depth_slot(gpu_ddk, slot), read_depth_slot(prefill_k, slot))) << what;
      EXPECT_TRUE(bitwise_equal(read_depth_slot(gpu_ddv, slot), read_depth_slot(prefill_v, slot))) << what;
    }
  }
  // The CUDA kernels take bf16 values and f32 depth gradients; anything else is a clear error.
  const Tensor q32 = q.cpu.to(kGpu), k32 = k.cpu.to(kGpu), v32 = v.cpu.to(kGpu), dk32 = dk.cpu.to(kGpu),
               dv32 = dv.cpu.to(kGpu);
  fathom::testing::expect_error(
      [&] {
        moda_attention_forward(q32, k32, v32, DepthSlots{dk32, dv32, begin, end}, scale);
      },
      {"q", "must be BF16"});
  Tensor bf16_ddk = gpu_ddk.to(DType::bf16), bf16_ddv = gpu_ddv.to(DType::bf16);
  fathom::testing::expect_error(
      [&] {
        moda_attention_backward(grad_o.gpu, q.gpu, k.gpu, v.gpu, DepthSlots{dk.gpu, dv.gpu, begin, end}, gpu.o, gpu.lse,
                                scale, bf16_ddk, bf16_ddv);
      },
      {"depth gradient buffers", "must be F32"});
}

// Depth weights from the group kernel's dQ walk (kernels/moda/moda_attention.h, DepthWeights) against the
// CPU reference's, for every G it supports; dq as in the gradient mode; and the slot gradients that
// depth_slot_grads forms from two readers' weights against the gradients those readers add into
// fp32 buffers (the two differ only by rounding: the added ones come from bf16 P and dS products).
TEST(GpuModaModel, DepthWeightsMatchTheCpuAndFormTheAddedGradients) {
  FATHOM_REQUIRE_GPU();
  const double scale = 0.125;
  for (const int64_t d : {64, 128})
    for (const int64_t G : {1, 2, 3, 4, 8, 16})
      for (const auto& [T, S] : std::vector<std::pair<int64_t, int64_t>>{{7, 5}, {65, 3}, {33, 64}}) {
        const int64_t B = 2, Hk = G >= 8 ? 1 : 2, Hq = G * Hk;
        const std::string what = "d " + std::to_string(d) + " G " + std::to_string(G) + " T " + std::to_string(T) +
                                 " S " + std::to_string(S);
        const GpuInput k = random_input({B, T, Hk, d}, DType::bf16, 2), v = random_input({B, T, Hk, d}, DType::bf16, 3),
                       dk = random_input({B, T, S, Hk, d}, DType::bf16, 4),
                       dv = random_input({B, T, S, Hk, d}, DType::bf16, 5);
        Tensor added_k = Tensor::zeros({B, T, S, Hk, d}, DType::f32, kGpu), added_v = added_k.clone();
        std::vector<DepthReader> readers, cpu_readers;
        for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, S}, {S / 2, S}}) {
          const uint64_t seed = uint64_t(10 + begin);
          const GpuInput q = random_input({B, T, Hq, d}, DType::bf16, seed),
                         grad_o = random_input({B, T, Hq, d}, DType::bf16, seed + 1);
          const DepthSlots gpu_depth{dk.gpu, dv.gpu, begin, end}, cpu_depth{dk.cpu, dv.cpu, begin, end};
          const AttentionOutput gpu = moda_attention_forward(q.gpu, k.gpu, v.gpu, gpu_depth, scale);
          const AttentionOutput cpu = moda_attention_forward(q.cpu, k.cpu, v.cpu, cpu_depth, scale);
          ASSERT_TRUE(moda_depth_weights_supported(q.gpu, k.gpu)) << what;
          DepthReader r{q.gpu, grad_o.gpu, {}, begin, end}, c{q.cpu, grad_o.cpu, {}, begin, end};
          const AttentionGrads wg =
              moda_attention_backward(grad_o.gpu, q.gpu, k.gpu, v.gpu, gpu_depth, gpu.o, gpu.lse, scale, r.weights);
          moda_attention_backward(grad_o.cpu, q.cpu, k.cpu, v.cpu, cpu_depth, gpu.o.to(Device::cpu()).to(DType::f32),
                                  gpu.lse.to(Device::cpu()), scale, c.weights);
          const AttentionGrads ag = moda_attention_backward(grad_o.gpu, q.gpu, k.gpu, v.gpu, gpu_depth, gpu.o, gpu.lse,
                                                            scale, added_k, added_v);
          EXPECT_GPU_CLOSE(r.weights.p, c.weights.p, DType::bf16, what + " weights p");
          EXPECT_GPU_CLOSE(r.weights.ds, c.weights.ds, DType::bf16, what + " weights ds");
          EXPECT_TRUE(bitwise_equal(wg.dq, ag.dq)) << what << " dq";
          EXPECT_TRUE(bitwise_equal(wg.dk, ag.dk)) << what << " dk";
          readers.push_back(r);
          cpu_readers.push_back(c);
        }
        const std::vector<SlotGrads> formed = depth_slot_grads({&readers[0], &readers[1]}, 0, S, Hk, DType::f32);
        const std::vector<SlotGrads> want = depth_slot_grads({&cpu_readers[0], &cpu_readers[1]}, 0, S, Hk, DType::f32);
        for (int64_t s = 0; s < S; ++s) {
          const std::string slot = what + " slot " + std::to_string(s);
          EXPECT_LE(relative_l2(formed[size_t(s)].k, want[size_t(s)].k), 1e-5) << slot << " dk vs the CPU";
          EXPECT_LE(relative_l2(formed[size_t(s)].v, want[size_t(s)].v), 1e-5) << slot << " dv vs the CPU";
          EXPECT_GPU_CLOSE(formed[size_t(s)].k, read_depth_slot(added_k, s), DType::bf16, slot + " dk vs added");
          EXPECT_GPU_CLOSE(formed[size_t(s)].v, read_depth_slot(added_v, s), DType::bf16, slot + " dv vs added");
        }
        const std::vector<SlotGrads> bf16 = depth_slot_grads({&readers[0], &readers[1]}, S - 1, S, Hk, DType::bf16);
        EXPECT_TRUE(bitwise_equal(bf16[0].k, formed[size_t(S - 1)].k.to(DType::bf16))) << what << " bf16 output";
      }
}

// More readers than one launch carries (64): the launches add into fp32 sums.
TEST(GpuModaModel, SlotGradientsOverManyReaders) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 1, T = 5, Hq = 3, Hk = 1, d = 64, n = 70;
  std::vector<DepthReader> gpu(n), cpu(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t begin = i % 3, end = begin + 2;
    const uint64_t seed = uint64_t(100 + 4 * i);
    const GpuInput q = random_input({B, T, Hq, d}, DType::bf16, seed),
                   dout = random_input({B, T, Hq, d}, DType::bf16, seed + 1),
                   p = random_input({B, T, Hq, 2}, DType::f32, seed + 2),
                   ds = random_input({B, T, Hq, 2}, DType::f32, seed + 3);
    gpu[size_t(i)] = {q.gpu, dout.gpu, {p.gpu, ds.gpu}, begin, end};
    cpu[size_t(i)] = {q.cpu, dout.cpu, {p.cpu, ds.cpu}, begin, end};
  }
  std::vector<const DepthReader*> gp, cp;
  for (int64_t i = 0; i < n; ++i) gp.push_back(&gpu[size_t(i)]), cp.push_back(&cpu[size_t(i)]);
  const std::vector<SlotGrads> got = depth_slot_grads(gp, 0, 4, Hk, DType::bf16),
                               want = depth_slot_grads(cp, 0, 4, Hk, DType::f32);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(got[s].k.dtype(), DType::bf16);
    EXPECT_GPU_CLOSE(got[s].k, want[s].k, DType::bf16, "dk of slot " + std::to_string(s));
    EXPECT_GPU_CLOSE(got[s].v, want[s].v, DType::bf16, "dv of slot " + std::to_string(s));
  }
  // Slots outside every reader's range get zeros (reader 2 reads [2, 4)).
  for (const SlotGrads& g : depth_slot_grads({&gpu[2]}, 0, 2, Hk, DType::f32))
    for (const Tensor* t : {&g.k, &g.v}) EXPECT_EQ(values(*t), std::vector<double>(size_t(B * T * Hk * d), 0.0));
}

// Forward and backward of a tiny MoDA decoder on the GPU against the CPU, for every variant, both
// norm placements and both depth keys: logits, loss, and each parameter's gradient (the depth
// projections' gradients arrive only through the depth stream's side buffers and write nodes).
TEST(GpuModaModel, TinyModelForwardBackwardMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 2, T = 45;  // T not a multiple of any tile
  for (const char* variant : {"attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"}) {
    for (const char* norm : {"post", "pre"}) {
      for (const std::string& key : depth_key_names()) {
        const ModelConfig c = tiny_moda(variant, norm, key);
        const std::string what = test_name(variant) + "/" + norm + "/" + key;
        const Tensor ids = token_ids(B, T, c.vocab_size, 1), targets = token_ids(B, T, c.vocab_size, 2);
        const StepResult cpu = forward_backward(c, ids, targets, Device::cpu());
        const StepResult gpu = forward_backward(c, ids, targets, kGpu);
        EXPECT_GPU_CLOSE(gpu.logits, cpu.logits, DType::bf16, what + " logits");
        EXPECT_NEAR(gpu.loss, cpu.loss, 1e-2 * cpu.loss) << what << " loss";
        ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
        for (size_t i = 0; i < cpu.grads.size(); ++i) {
          // Per parameter, a little looser than one op's bf16 tolerance: the gradients pass through
          // every layer's bf16 attention backward.
          const double err = relative_l2(gpu.grads[i].second, cpu.grads[i].second);
          EXPECT_LE(err, 3e-2) << what << " gradient of " << cpu.grads[i].first;
        }
      }
    }
  }
}

// The depth stream on the GPU holds bf16 values (half the bytes of the CPU's f32).
TEST(GpuModaModel, DepthCacheIsBf16OnTheGpu) {
  FATHOM_REQUIRE_GPU();
  const ModelConfig c = tiny_moda("attn_kv+ffn_kv", "post", "writer");
  Decoder model(c);
  EXPECT_EQ(Decoder::depth_dtype(kGpu), DType::bf16);
  EXPECT_EQ(2 * model.depth_cache_bytes(4, 64, kGpu), model.depth_cache_bytes(4, 64, Device::cpu()));
}

// The default variant trained 20 steps on the GPU and on the CPU from the same init and data: the
// loss curves agree within bf16 tolerance, and the loss falls.
TEST(GpuModaModel, TwentyStepsMatchTheCpuLossCurve) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string model =
      "model: {d_model: 192, n_layers: 3, n_heads: 3, n_kv_heads: 1, ffn_hidden: 256, vocab_size: 264}\n"
      "moda: {variant: attn_kv+ffn_kv}\n";
  const std::vector<double> cpu = tiny_training_losses(dir / "cpu", "cpu", model);
  const std::vector<double> gpu = tiny_training_losses(dir / "gpu", "cuda", model);
  ASSERT_EQ(cpu.size(), 20u);
  ASSERT_EQ(gpu.size(), 20u);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 * cpu[i]) << "step " << i + 1;
  EXPECT_LT(gpu.back(), gpu.front() - 0.5);
}
