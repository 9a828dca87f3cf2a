// A decoder block in one of two norm placements:
//   post (OLMo2 "reordered norm"): h = x + norm_attn(attn(x));  out = h + norm_ffn(mlp(h))
//   pre  (classic / Llama):        h = x + attn(norm_attn(x));  out = h + mlp(norm_ffn(h))
// Norm names follow HF: OLMo2 uses post_attention_layernorm / post_feedforward_layernorm on the
// sublayer outputs; Llama uses input_layernorm and a post_attention_layernorm that is its PRE-MLP norm.
#pragma once
#include <memory>

#include "layers/attention.h"
#include "layers/depth_kv.h"
#include "layers/mlp.h"

namespace fathom {

class Block : public Module {
 public:
  explicit Block(const ModelConfig& config);
  // With a depth stream (MoDA), attention reads the slots of earlier blocks; when write_depth is
  // set the block then writes its own slots (the last block's would never be read).
  Variable forward(const Variable& x, const Tensor& positions, DepthStream* depth = nullptr,
                   bool write_depth = false) const;

 private:
  bool pre_norm_;
  std::string moda_variant_;
  Attention self_attn_;
  MLP mlp_;
  RMSNorm attn_norm_, ffn_norm_;
  std::unique_ptr<DepthKVProjection> attn_depth_kv_, ffn_depth_kv_;  // MoDA writers, by variant
};

}  // namespace fathom
