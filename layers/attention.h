// OLMo2 self-attention: q/k/v projections, QK-norm over the FULL projected width (not per head),
// RoPE, causal GQA softmax attention, output projection.
#pragma once
#include <memory>

#include "autograd/depth_stream.h"
#include "layers/linear.h"
#include "layers/model_config.h"
#include "layers/rms_norm.h"

namespace fathom {

class Attention : public Module {
 public:
  explicit Attention(const ModelConfig& config);
  // x [B, T, d_model]; positions (I32) [T] or [B, T]. With a depth stream (MoDA) the softmax also
  // reads the most recent written slots (all, or moda.max_slots of them), and when `write_kv` is
  // set this layer's own K and V go into the next slot. The K is the one this layer used (after
  // QK-norm and RoPE) with moda.depth_key: writer; with reader it is the raw projection, and this
  // layer reads every depth key through its own k-norm (no RoPE).
  Variable forward(const Variable& x, const Tensor& positions, DepthStream* depth = nullptr,
                   bool write_kv = false) const;

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  double rope_theta_;
  RopeScaling rope_scaling_;
  int64_t max_slots_;
  bool reader_depth_keys_;
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  std::unique_ptr<RMSNorm> q_norm_, k_norm_;  // absent when qk_norm is off (Llama)
};

}  // namespace fathom
