#include "layers/projected_mixer.h"

namespace fathom {

namespace {
ParameterInit linear_init(const ModelConfig& c) { return ParameterInit::normal(c.init_std, c.init_cutoff); }
}  // namespace

ProjectedMixer::ProjectedMixer(const ModelConfig& c)
    : n_heads_(c.n_heads),
      n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim()),
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

}  // namespace fathom
