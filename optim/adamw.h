// AdamW over the flat parameter arena: fp32 moments in two flat buffers, one fused update over every
// weight-decay range (embeddings are not decayed; one launch on CUDA), decoupled weight decay. When
// the arena has a compute copy (mixed precision) the same pass writes the updated bf16 weights.
#pragma once
#include "core/safetensors.h"
#include "layers/parameter_arena.h"

namespace fathom {

// The trainable elements [begin, begin + length) whose moments this optimizer holds and updates
// (ZeRO-1's share of one rank, distributed/data_parallel.h); length -1: the whole arena.
struct OptimizerShard {
  int64_t begin = 0;
  int64_t length = -1;
};

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(ParameterArena& arena, AdamWConfig config, OptimizerShard shard = {});
  // One update with learning rate lr from the gradients in the arena, each multiplied by grad_scale
  // (global-norm clipping's coefficient) as it is read; the arena's gradients are left as they are.
  void step(double lr, double grad_scale = 1.0);
  // The same for the shard only, from its gradients (shard().length elements). The compute copy is
  // not touched: the caller refreshes it once every shard's values are in place.
  void step_shard(double lr, double grad_scale, const Tensor& shard_grads);
  int64_t steps_taken() const { return step_; }
  const OptimizerShard& shard() const { return shard_; }
  bool sharded() const { return shard_.length != arena_.trainable_numel(); }
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }

  // Moments by parameter name ("exp_avg.<name>", "exp_avg_sq.<name>") plus the step count, so a
  // checkpoint never depends on arena positions. A sharded optimizer has no whole state of its own:
  // state_of names whole moments gathered from every shard.
  TensorMap state() const;
  TensorMap state_of(const Tensor& whole_m, const Tensor& whole_v) const;
  // Whole moments (any world size saved them); a sharded optimizer keeps its shard of them.
  void load_state(const TensorMap& state, const std::string& source);

 private:
  void update(double lr, double grad_scale, const Tensor& grads, bool write_compute_copy);

  ParameterArena& arena_;
  AdamWConfig config_;
  OptimizerShard shard_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

}  // namespace fathom
