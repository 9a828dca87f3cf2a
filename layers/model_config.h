// The shape and numerics of an OLMo2-style decoder (DESIGN.md section 3.1), and OLMo-core's ladder of
// named sizes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rope.h"

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

  // MoDA (DESIGN.md 3.2): which depth KV the blocks write, and how many recent slots a reader sees.
  //   "none" (plain OLMo2), "attn_kv" (each attention's own K/V), "attn_kv+ffn_kv" (plus a K/V
  //   projection of each FFN input), "extra_attn_kv+ffn_kv" (a separate attention-side projection).
  std::string moda_variant = "none";
  int64_t moda_max_slots = 0;  // 0: every earlier slot; S > 0: only the S most recent (bounded span)
  // Which key a depth slot holds: "writer" (the K its writer used, after the writer's k-norm and
  // RoPE at the slot's token) or "reader" (the raw projected K; every reader applies its own k-norm
  // and no RoPE, as the MoDA authors' LM code does).
  std::string moda_depth_key = "writer";

  int64_t head_dim() const { return n_heads > 0 ? d_model / n_heads : 0; }
  bool moda() const { return moda_variant != "none"; }
  // Depth slots one block writes: 1 (attn_kv) or 2 (with ffn_kv); 0 without MoDA.
  int64_t moda_slots_per_block() const;

  // Throws fathom::Error naming the offending fields and values: every size positive, d_model
  // divisible by n_heads, n_heads divisible by n_kv_heads, an even head_dim (RoPE rotates pairs),
  // norm "post" or "pre", positive rope_theta, norm_eps, init_std and init_cutoff, a valid
  // rope_scaling, a known MoDA variant and depth key, and moda_max_slots >= 0.
  void validate() const;

  bool operator==(const ModelConfig&) const = default;
};

// OLMo-core's ladder: olmo2_14M, olmo2_30M, olmo2_60M, olmo2_100M, olmo2_190M, olmo2_370M, olmo2_1B
// (vocab 100352, n_kv_heads = n_heads, other fields at their defaults). An unknown name throws
// fathom::Error listing the known names and the closest one.
ModelConfig named_model_size(const std::string& name);
// The ladder's names, smallest first.
std::vector<std::string> model_size_names();

// The MoDA variants, in the order of the paper's Table 3.
const std::vector<std::string>& moda_variants();
// The values of moda.depth_key: "writer", "reader".
const std::vector<std::string>& moda_depth_keys();
// The first depth slot a reader sees when `written` slots exist: 0, or with moda.max_slots = S > 0
// the start of the window of the S most recent ones.
int64_t moda_first_read_slot(int64_t written, int64_t max_slots);

// Trainable parameters: embeddings, per layer q/k/v/o, the q/k norm weights (when qk_norm), two
// norms and gate/up/down, MoDA's depth K/V projections and their k-norms; the final norm and the
// lm_head (none of its own when tie_embeddings). With reader depth keys the depth projections have
// no k-norm (the readers normalise).
int64_t parameter_count(const ModelConfig& config);

}  // namespace fathom
