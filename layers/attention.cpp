#include "layers/attention.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"

namespace fathom {

namespace {
ParameterInit linear_init(const ModelConfig& c) { return ParameterInit::normal(c.init_std, c.init_cutoff); }
}  // namespace

Attention::Attention(const ModelConfig& c)
    : n_heads_(c.n_heads),
      n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim()),
      rope_theta_(c.rope_theta),
      rope_scaling_(c.rope_scaling),
      max_slots_(c.moda_max_slots),
      reader_depth_keys_(c.moda_depth_key == "reader"),
      q_proj_(c.d_model, c.n_heads * c.head_dim(), linear_init(c)),
      k_proj_(c.d_model, c.n_kv_heads * c.head_dim(), linear_init(c)),
      v_proj_(c.d_model, c.n_kv_heads * c.head_dim(), linear_init(c)),
      o_proj_(c.n_heads * c.head_dim(), c.d_model, linear_init(c)) {
  add_child("q_proj", q_proj_);
  add_child("k_proj", k_proj_);
  add_child("v_proj", v_proj_);
  add_child("o_proj", o_proj_);
  if (c.qk_norm) {
    q_norm_ = std::make_unique<RMSNorm>(c.n_heads * c.head_dim(), c.norm_eps);
    k_norm_ = std::make_unique<RMSNorm>(c.n_kv_heads * c.head_dim(), c.norm_eps);
    add_child("q_norm", *q_norm_);
    add_child("k_norm", *k_norm_);
  }
}

Variable Attention::forward(const Variable& x, const Tensor& positions, DepthStream* depth, bool write_kv) const {
  const int64_t B = x.dim(0), T = x.dim(1);
  Variable q = q_proj_.forward(x);
  Variable k = k_proj_.forward(x);
  Variable v = v_proj_.forward(x);
  // With reader depth keys this layer's slot holds its raw K, before the k-norm and RoPE.
  const Variable raw_k = reshape(k, {B, T, n_kv_heads_, head_dim_});
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = rope(reshape(q, {B, T, n_heads_, head_dim_}), positions, rope_theta_, rope_scaling_);
  k = rope(reshape(k, {B, T, n_kv_heads_, head_dim_}), positions, rope_theta_, rope_scaling_);
  v = reshape(v, {B, T, n_kv_heads_, head_dim_});
  const double scale = 1.0 / std::sqrt(double(head_dim_));
  Variable o;
  if (depth) {
    const int64_t end = depth->slots_written();
    const int64_t begin = moda_first_read_slot(end, max_slots_);
    DepthKeyNorm key_norm;
    if (reader_depth_keys_ && k_norm_) key_norm = {k_norm_->weight(), k_norm_->eps()};
    o = depth->attend(q, k, v, begin, end, scale, key_norm);
    if (write_kv) depth->write(end, reader_depth_keys_ ? raw_k : k, v);
  } else {
    o = attention(q, k, v, scale);
  }
  return o_proj_.forward(reshape(o, {B, T, n_heads_ * head_dim_}));
}

}  // namespace fathom
