// One forward and backward of a freshly initialised decoder, read back to the host: the model-level
// GPU-vs-CPU comparisons (logits, loss, each parameter's gradient) share it.
#pragma once
#include <cstdint>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/support/op_test_util.h"

namespace fathom::test {

inline Tensor token_ids(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  return random_ints({B, T}, vocab, seed, DType::i32);
}

struct StepResult {
  Tensor logits;  // F32, on the host
  double loss = 0;
  TensorMap grads;  // per parameter, on the host
};

// One forward and backward of `config` with the arena initialised from seed 17 on `device`, in the
// arena's F32 (no bf16 compute copy): the cross-entropy of `targets` with z-loss 1e-5.
inline StepResult forward_backward(const ModelConfig& config, const Tensor& ids, const Tensor& targets, Device device) {
  Decoder model(config);
  ParameterArena arena(model, device);
  arena.initialise(17);
  arena.zero_grad();
  const Variable logits = model.logits(ids.to(device));
  const int64_t rows = ids.numel();
  LossParts loss = cross_entropy(reshape(logits, {rows, config.vocab_size}), targets.to(device).view({rows}), 1e-5);
  backward(loss.loss);
  StepResult r{logits.value().to(DType::f32).to(Device::cpu()), loss.ce, {}};
  for (const ArenaEntry& e : arena.entries()) r.grads.emplace_back(e.name, e.var.grad().to(Device::cpu()));
  return r;
}

}  // namespace fathom::test
