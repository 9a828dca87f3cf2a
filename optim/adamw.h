// AdamW over the flat parameter arena: fp32 moments in two flat buffers, one fused update over every
// weight-decay range (embeddings are not decayed; one launch on CUDA), decoupled weight decay. When
// the arena has a compute copy (mixed precision) the same pass writes the updated bf16 weights.
#pragma once
#include "core/safetensors.h"
#include "layers/parameter_arena.h"

namespace fathom {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(ParameterArena& arena, AdamWConfig config);
  // One update with learning rate lr from the gradients in the arena, each multiplied by grad_scale
  // (global-norm clipping's coefficient) as it is read; the arena's gradients are left as they are.
  void step(double lr, double grad_scale = 1.0);
  int64_t steps_taken() const { return step_; }

  // Moments by parameter name ("exp_avg.<name>", "exp_avg_sq.<name>") plus the step count, so a
  // checkpoint never depends on arena positions.
  TensorMap state() const;
  void load_state(const TensorMap& state, const std::string& source);

 private:
  ParameterArena& arena_;
  AdamWConfig config_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

}  // namespace fathom
