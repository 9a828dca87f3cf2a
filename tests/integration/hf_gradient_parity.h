// HF gradient parity, shared by the CPU test (tests/integration) and the GPU test (tests/train): the olmo2
// fixture of scripts/make_hf_fixtures.py holds HF's fp32 training loss for labels = input_ids and the
// gradient of every parameter; fathom computes both with the trainer's own forward/loss/backward
// (train/run/train_step.h) and they are compared by relative L2.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "layers/decoder.h"
#include "layers/hf_import.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_test_util.h"  // relative_l2 (any dtype and device)
#include "tests/support/op_test_util.h"
#include "train/run/train_step.h"

namespace fathom::test {

struct HfGradientFixture {
  HfModel model;
  Tensor ids;       // I64 [B, T]
  double loss = 0;  // HF's mean next-token cross-entropy (no z-loss)
  TensorMap grads;  // d loss / d parameter, F32, by HF name
};

inline HfGradientFixture load_hf_gradient_fixture(const std::string& name) {
  const std::string dir = std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/hf/" + name;
  const SafetensorsFile io = read_safetensors(dir + "/io.safetensors");
  return {load_hf_model(dir), io.load("input_ids"), io.load("loss").to_vector<float>().at(0),
          load_all(dir + "/grads.safetensors")};
}

// HF's labels = input_ids, shifted inside the model: position t predicts ids[t + 1] and the last
// position predicts nothing (-100, which fathom's cross-entropy ignores as HF's does). I32, as the
// trainer's loader hands batches out.
inline TokenBatch hf_shifted_batch(const Tensor& ids) {
  const int64_t B = ids.dim(0), T = ids.dim(1);
  const std::vector<int32_t> v = ids.to(DType::i32).to_vector<int32_t>();
  std::vector<int32_t> targets(v.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) targets[size_t(b * T + t)] = t + 1 < T ? v[size_t(b * T + t + 1)] : -100;
  return {ids.to(DType::i32), Tensor::from_vector(targets, ids.shape())};
}

struct FathomGradients {
  double loss = 0;
  TensorMap grads;  // on the CPU, in the dtype the arena keeps gradients in
};

// Loss and gradients of one micro-batch through the trainer's accumulate_gradients on `device`, with
// z-loss weight 0: HF's loss has no z-loss term.
inline FathomGradients fathom_loss_and_gradients(const HfGradientFixture& f, const TokenBatch& batch, Device device) {
  Decoder model(f.model.config);
  ParameterArena arena(model, device);
  arena.load(f.model.weights, "HF fixture");
  arena.zero_grad();
  FathomGradients out;
  out.loss = accumulate_gradients(model, batch, device, Objective::language_model(0.0), /*grad_scale=*/1.0).ce;
  for (const ArenaEntry& entry : arena.entries())
    out.grads.emplace_back(entry.name, entry.var.grad().to(Device::cpu()));
  return out;
}

// The loss and every parameter's gradient within `tolerance` (relative); prints the loss difference and
// the worst gradient so the log records how close the match is.
inline void expect_gradients_match(const FathomGradients& got, const HfGradientFixture& want, double tolerance) {
  const double loss_rel = std::abs(got.loss - want.loss) / std::abs(want.loss);
  std::printf("    loss: fathom %.7f, transformers %.7f, relative %.3e\n", got.loss, want.loss, loss_rel);
  EXPECT_LE(loss_rel, tolerance) << "loss";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << "fathom and the fixture differ in their parameters";
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, grad] : got.grads) {
    const auto it =
        std::find_if(want.grads.begin(), want.grads.end(), [&](const auto& kv) { return kv.first == name; });
    ASSERT_NE(it, want.grads.end()) << name << " has no gradient in the fixture";
    ASSERT_EQ(grad.shape(), it->second.shape()) << name;
    const double rel = relative_l2(grad, it->second);
    EXPECT_LE(rel, tolerance) << "gradient of " << name;
    if (rel >= worst) worst = rel, worst_name = name;
  }
  std::printf("    %zu gradients, worst relative L2 %.3e (%s)\n", got.grads.size(), worst, worst_name.c_str());
}

}  // namespace fathom::test
