#include "layers/block.h"

#include "autograd/ops.h"

namespace fathom {

Block::Block(const ModelConfig& c)
    : pre_norm_(c.norm == "pre"),
      self_attn_(c),
      mlp_(c),
      attn_norm_(c.d_model, c.norm_eps),
      ffn_norm_(c.d_model, c.norm_eps) {
  add_child("self_attn", self_attn_);
  add_child("mlp", mlp_);
  if (pre_norm_) {
    add_child("input_layernorm", attn_norm_);
    add_child("post_attention_layernorm", ffn_norm_);
  } else {
    add_child("post_attention_layernorm", attn_norm_);
    add_child("post_feedforward_layernorm", ffn_norm_);
  }
}

Variable Block::forward(const Variable& x, const Tensor& positions) const {
  if (pre_norm_) {
    Variable h = add(x, self_attn_.forward(attn_norm_.forward(x), positions));
    return add(h, mlp_.forward(ffn_norm_.forward(h)));
  }
  Variable h = add(x, attn_norm_.forward(self_attn_.forward(x, positions)));
  return add(h, ffn_norm_.forward(mlp_.forward(h)));
}

}  // namespace fathom
