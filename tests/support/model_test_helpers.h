// Helpers for the decoder model tests: a model with seeded parameters on the CPU, and training it
// on one fixed batch until it memorises it, the smallest end-to-end check that forward, backward
// and AdamW fit together.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"

namespace fathom::testing {

// A model small enough for the many decoding tests, over the bytes tokenizer's 257 ids (EOS 256), so every
// generated id decodes: d 24, 6 query heads of dim 4 over 2 KV heads (G = 3), FFN 40. norm "post" with
// QK-norm is OLMo2's block, "pre" without it Llama's.
inline ModelConfig byte_vocab_model(const std::string& norm, bool qk_norm, int64_t n_layers) {
  return {.d_model = 24,
          .n_layers = n_layers,
          .n_heads = 6,
          .n_kv_heads = 2,
          .ffn_hidden = 40,
          .vocab_size = 257,
          .norm = norm,
          .qk_norm = qk_norm};
}

// A Decoder and the arena of its parameters, initialised from `seed`.
struct SeededModel {
  SeededModel(const ModelConfig& config, uint64_t seed) : model(config), arena(model, Device::cpu()) {
    arena.initialise(seed);
  }
  SeededModel(const SeededModel&) = delete;  // the arena refers to the model
  SeededModel& operator=(const SeededModel&) = delete;

  Decoder model;
  ParameterArena arena;
};

// The cross-entropy at the first and at the last step of an overfit run.
struct OverfitLosses {
  double first = 0;
  double last = 0;
};

// `steps` AdamW steps (lr 1e-2, no weight decay) of `m` on the one batch inputs [B, T] ->
// targets [B * T]. The gradients of the last step stay in the arena.
inline OverfitLosses overfit_one_batch(SeededModel& m, const Tensor& inputs, const Tensor& targets, int steps) {
  const Decoder& model = m.model;
  ParameterArena& arena = m.arena;
  AdamW optimizer(arena, AdamWConfig{0.9, 0.95, 1e-8, 0.0});
  const int64_t tokens = targets.numel();
  OverfitLosses losses;
  for (int step = 0; step < steps; ++step) {
    arena.zero_grad();
    LossParts loss = cross_entropy(reshape(model.logits(inputs), {tokens, model.config().vocab_size}), targets, 1e-5);
    if (step == 0) losses.first = loss.ce;
    losses.last = loss.ce;
    backward(loss.loss);
    optimizer.step(1e-2);
  }
  return losses;
}

// The gradient a backward left in parameter p (F64, no arena) against central differences of `loss`
// (the same objective, evaluated without recording) at the given elements.
inline void expect_gradient_matches_differences(const Parameter& p, const std::function<double()>& loss,
                                                const std::vector<int64_t>& elements, double rtol,
                                                const std::string& what) {
  ASSERT_TRUE(p.var.grad().defined()) << what << " " << p.name << " has no gradient";
  const Tensor grad = p.var.grad().to(DType::f64);
  const double* analytic = grad.data<double>();
  double* values = p.var.impl()->value.data<double>();
  for (int64_t e : elements) {
    const double saved = values[e], eps = 1e-6;
    values[e] = saved + eps;
    const double up = loss();
    values[e] = saved - eps;
    const double down = loss();
    values[e] = saved;
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic[e], numeric, 1e-6 + rtol * std::abs(numeric)) << what << " " << p.name << "[" << e << "]";
  }
}

}  // namespace fathom::testing
