// The shape and numerics of an OLMo2-style decoder (DESIGN.md section 4.1), and OLMo-core's ladder of
// named sizes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rope/rope.h"
#include "layers/kind_options.h"

namespace fathom {

struct ModelConfig {
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (grouped-query attention: n_heads = G * n_kv_heads)
  int64_t ffn_hidden = 0;  // SwiGLU hidden width
  int64_t vocab_size = 0;
  // "post": OLMo2's reordered norm, h = x + RMSNorm(Attn(x)). "pre": the classic h = x + Attn(RMSNorm(x)).
  std::string norm = "post";
  bool qk_norm = true;  // RMSNorm on q and k over the full projected width
  double rope_theta = 500000;
  RopeScaling rope_scaling{};   // frequency scaling of RoPE (Llama 3.1+ checkpoints); none by default
  bool tie_embeddings = false;  // lm_head reuses model.embed_tokens.weight (one parameter)
  double norm_eps = 1e-6;
  double init_std = 0.02;    // truncated-normal init of every Linear and Embedding ...
  double init_cutoff = 3.0;  // ... cut at +-init_cutoff standard deviations

  // The token mixer of each layer, by kind name (layers/layer_kinds.h): empty for attention everywhere,
  // else a pattern repeated over the layers (n_layers a multiple of its length; a full list is one repeat).
  std::vector<std::string> layers{};
  // Each layer kind's options, by the kind's own struct: options.get<DslaConfig>().states. Features
  // are off and mixers at their defaults until set (MoDA's layers/moda_config.h, MoD's
  // layers/mod_config.h, DSLA's layers/dsla_config.h).
  KindOptions options{};

  int64_t head_dim() const { return n_heads > 0 ? d_model / n_heads : 0; }
  // Layer i's mixer kind: the first registered (attention) unless `layers` says otherwise.
  const std::string& layer_kind(int64_t layer) const;
  // Whether some layer is of this kind.
  bool has_layer_kind(const std::string& kind) const;

  // Throws fathom::Error naming the offending fields and values: every size positive, d_model
  // divisible by n_heads, n_heads divisible by n_kv_heads, an even head_dim (RoPE rotates pairs),
  // norm "post" or "pre", positive rope_theta, norm_eps, init_std and init_cutoff, a valid
  // rope_scaling, a layer pattern that divides n_layers, and every layer kind's own checks of its
  // options (LayerKind::validate). Unknown kind names are the layer registry's to refuse.
  void validate() const;

  bool operator==(const ModelConfig&) const = default;
};

// OLMo-core's ladder: olmo2_14M, olmo2_30M, olmo2_60M, olmo2_100M, olmo2_190M, olmo2_370M, olmo2_1B
// (vocab 100352, n_kv_heads = n_heads, other fields at their defaults). An unknown name throws
// fathom::Error listing the known names and the closest one.
ModelConfig named_model_size(const std::string& name);
// The ladder's names, smallest first.
std::vector<std::string> model_size_names();

}  // namespace fathom
