#include "layers/depth_kv.h"

#include "autograd/ops.h"

namespace fathom {

DepthKVProjection::DepthKVProjection(const ModelConfig& c)
    : n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim()),
      rope_theta_(c.rope_theta),
      rope_scaling_(c.rope_scaling),
      k_proj_(c.d_model, c.n_kv_heads * c.head_dim(), ParameterInit::normal(c.init_std, c.init_cutoff)),
      v_proj_(c.d_model, c.n_kv_heads * c.head_dim(), ParameterInit::normal(c.init_std, c.init_cutoff)) {
  add_child("k_proj", k_proj_);
  add_child("v_proj", v_proj_);
  if (c.options.get<MoDAConfig>().depth_key == DepthKey::writer) {
    k_norm_ = std::make_unique<RMSNorm>(c.n_kv_heads * c.head_dim(), c.norm_eps);
    add_child("k_norm", *k_norm_);
  }
}

void DepthKVProjection::write(DepthStream& stream, const Variable& x, const MixerInputs& inputs) const {
  const int64_t B = x.dim(0), T = x.dim(1);
  const Variable raw_k = k_proj_.forward(x);
  const Variable k = k_norm_ ? rope(reshape(k_norm_->forward(raw_k), {B, T, n_kv_heads_, head_dim_}),
                                    inputs.rope_angles->angles(inputs.positions, head_dim_, rope_theta_, rope_scaling_))
                             : reshape(raw_k, {B, T, n_kv_heads_, head_dim_});
  const Variable v = reshape(v_proj_.forward(x), {B, T, n_kv_heads_, head_dim_});
  stream.write(stream.slots_written(), k, v);
}

}  // namespace fathom
