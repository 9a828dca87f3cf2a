// A depth K/V writer for MoDA's FFN side (and the extra attention-side variant): k and v
// projections of the sublayer input. With moda.depth_key: writer the k goes through its own RMSNorm
// and the same RoPE rotation at position t as attention keys, so all depth keys live in one space
// (DESIGN.md 4.2); with reader it is written raw (the readers normalise) and there is no k-norm.
#pragma once
#include <memory>

#include "autograd/depth_stream.h"
#include "layers/linear.h"
#include "layers/moda_config.h"
#include "layers/model_config.h"
#include "layers/rms_norm.h"
#include "layers/token_mixer.h"

namespace fathom {

class DepthKVProjection : public Module {
 public:
  explicit DepthKVProjection(const ModelConfig& config);
  // Projects x [B, T, d_model] and writes the next slot of `stream`; writer keys rotate by the angles of
  // inputs.positions, with the model's RoPE scaling, as attention's keys do.
  void write(DepthStream& stream, const Variable& x, const MixerInputs& inputs) const;

 private:
  int64_t n_kv_heads_, head_dim_;
  double rope_theta_;
  RopeScaling rope_scaling_;
  Linear k_proj_, v_proj_;
  std::unique_ptr<RMSNorm> k_norm_;  // writer keys only
};

}  // namespace fathom
