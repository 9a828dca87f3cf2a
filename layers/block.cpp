#include "layers/block.h"

#include "autograd/ops.h"

namespace fathom {

Block::Block(const ModelConfig& c)
    : pre_norm_(c.norm == "pre"),
      moda_variant_(c.moda_variant),
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
  if (moda_variant_ == "extra_attn_kv+ffn_kv") {
    attn_depth_kv_ = std::make_unique<DepthKVProjection>(c);
    add_child("self_attn.depth_kv", *attn_depth_kv_);
  }
  if (moda_variant_ == "attn_kv+ffn_kv" || moda_variant_ == "extra_attn_kv+ffn_kv") {
    ffn_depth_kv_ = std::make_unique<DepthKVProjection>(c);
    add_child("mlp.depth_kv", *ffn_depth_kv_);
  }
}

Variable Block::forward(const Variable& x, const Tensor& positions, DepthStream* depth, bool write_depth) const {
  const bool write = depth && write_depth;
  // Sublayer inputs: the normalised stream in pre-norm, the stream itself in post-norm.
  const Variable attn_in = pre_norm_ ? attn_norm_.forward(x) : x;
  const Variable attn_out = self_attn_.forward(attn_in, positions, depth, write && !attn_depth_kv_);
  if (write && attn_depth_kv_) attn_depth_kv_->write(*depth, attn_in, positions);
  // Post-norm: the attention's projections keep x and the norm keeps attn_out, so selective
  // recompute rebuilds h from them rather than keeping it for the FFN's projections.
  const Variable h = pre_norm_ ? add(x, attn_out) : attn_norm_.forward_onto(x, attn_out, true);
  const Variable ffn_in = pre_norm_ ? ffn_norm_.forward(h) : h;
  if (write && ffn_depth_kv_) ffn_depth_kv_->write(*depth, ffn_in, positions);
  const Variable ffn_out = mlp_.forward(ffn_in);
  return pre_norm_ ? add(h, ffn_out) : ffn_norm_.forward_onto(h, ffn_out);
}

}  // namespace fathom
