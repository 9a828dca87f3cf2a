// A decoder block in one of two norm placements:
//   post (OLMo2 "reordered norm"): h = x + norm_attn(attn(x));  out = h + norm_ffn(mlp(h))
//   pre  (classic / Llama):        h = x + attn(norm_attn(x));  out = h + mlp(norm_ffn(h))
// Norm names follow HF: OLMo2 uses post_attention_layernorm / post_feedforward_layernorm on the
// sublayer outputs; Llama uses input_layernorm and a post_attention_layernorm that is its PRE-MLP norm.
#pragma once
#include "layers/attention.h"
#include "layers/mlp.h"

namespace fathom {

class Block : public Module {
 public:
  explicit Block(const ModelConfig& config);
  Variable forward(const Variable& x, const Tensor& positions) const;

 private:
  bool pre_norm_;
  Attention self_attn_;
  MLP mlp_;
  RMSNorm attn_norm_, ffn_norm_;
};

}  // namespace fathom
