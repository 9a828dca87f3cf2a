#include "layers/model_config.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/suggest.h"

namespace fathom {

namespace {

struct LadderRung {
  const char* name;
  int64_t d_model, n_layers, n_heads, ffn_hidden;
};

// OLMo-core's OLMo2 ladder; every rung uses the padded dolma2 vocabulary.
constexpr std::array<LadderRung, 7> kLadder = {{
    {"olmo2_14M", 128, 4, 8, 512},
    {"olmo2_30M", 256, 4, 8, 768},
    {"olmo2_60M", 384, 8, 8, 1536},
    {"olmo2_100M", 512, 12, 8, 2048},
    {"olmo2_190M", 768, 12, 12, 3072},
    {"olmo2_370M", 1024, 16, 16, 4096},
    {"olmo2_1B", 2048, 16, 16, 8192},
}};
constexpr int64_t kDolma2PaddedVocab = 100352;

}  // namespace

void ModelConfig::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"d_model", d_model},       {"n_layers", n_layers},
                                                  {"n_heads", n_heads},       {"n_kv_heads", n_kv_heads},
                                                  {"ffn_hidden", ffn_hidden}, {"vocab_size", vocab_size}};
  for (const auto& [field, value] : sizes) FATHOM_CHECK(value > 0, field, " must be positive, got ", value);
  FATHOM_CHECK(d_model % n_heads == 0, "d_model (", d_model, ") must be divisible by n_heads (", n_heads, ")");
  FATHOM_CHECK(n_heads % n_kv_heads == 0, "n_heads (", n_heads, ") must be divisible by n_kv_heads (", n_kv_heads,
               ")");
  FATHOM_CHECK(head_dim() % 2 == 0, "head_dim = d_model / n_heads = ", d_model, " / ", n_heads, " = ", head_dim(),
               " must be even (RoPE rotates pairs of dimensions)");
  FATHOM_CHECK(norm == "post" || norm == "pre", "norm must be one of post, pre; got '", norm, "'");
  const std::pair<const char*, double> positives[] = {
      {"rope_theta", rope_theta}, {"norm_eps", norm_eps}, {"init_std", init_std}, {"init_cutoff", init_cutoff}};
  for (const auto& [field, value] : positives) FATHOM_CHECK(value > 0, field, " must be positive, got ", value);
  validate_rope_scaling(rope_scaling);
  const auto& variants = moda_variants();
  FATHOM_CHECK(std::find(variants.begin(), variants.end(), moda_variant) != variants.end(),
               "moda.variant must be one of ", join_names(variants), "; got '", moda_variant, "'");
  const auto& keys = moda_depth_keys();
  FATHOM_CHECK(std::find(keys.begin(), keys.end(), moda_depth_key) != keys.end(), "moda.depth_key must be one of ",
               join_names(keys), "; got '", moda_depth_key, "'");
  FATHOM_CHECK(moda_max_slots >= 0, "moda.max_slots must be >= 0 (0 reads every slot), got ", moda_max_slots);
}

const std::vector<std::string>& moda_variants() {
  static const std::vector<std::string> variants{"none", "attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"};
  return variants;
}

const std::vector<std::string>& moda_depth_keys() {
  static const std::vector<std::string> keys{"writer", "reader"};
  return keys;
}

int64_t ModelConfig::moda_slots_per_block() const {
  if (!moda()) return 0;
  return moda_variant == "attn_kv" ? 1 : 2;
}

int64_t moda_first_read_slot(int64_t written, int64_t max_slots) {
  return max_slots > 0 ? std::max<int64_t>(0, written - max_slots) : 0;
}

std::vector<std::string> model_size_names() {
  std::vector<std::string> names;
  for (const LadderRung& rung : kLadder) names.emplace_back(rung.name);
  return names;
}

ModelConfig named_model_size(const std::string& name) {
  for (const LadderRung& rung : kLadder) {
    if (name != rung.name) continue;
    ModelConfig config;
    config.d_model = rung.d_model;
    config.n_layers = rung.n_layers;
    config.n_heads = rung.n_heads;
    config.n_kv_heads = rung.n_heads;
    config.ffn_hidden = rung.ffn_hidden;
    config.vocab_size = kDolma2PaddedVocab;
    return config;
  }
  const std::vector<std::string> names = model_size_names();
  const auto closest = closest_name(name, names);
  FATHOM_FAIL("unknown model size '", name, "'", closest ? "; did you mean '" + *closest + "'?" : std::string(),
              " (known sizes: ", join_names(names), ")");
}

int64_t parameter_count(const ModelConfig& c) {
  const int64_t kv_width = c.n_kv_heads * c.head_dim();
  const int64_t attention = c.d_model * c.d_model * 2 + c.d_model * kv_width * 2;  // q, o and k, v
  const int64_t qk_norms = c.qk_norm ? c.d_model + kv_width : 0;
  const int64_t block_norms = 2 * c.d_model;
  const int64_t swiglu = 3 * c.d_model * c.ffn_hidden;
  // A depth K/V projection: k and v (d -> kv_width each) and, with writer keys, the k-norm.
  const int64_t depth_projection = 2 * c.d_model * kv_width + (c.moda_depth_key == "writer" ? kv_width : 0);
  const int64_t depth_projections = (c.moda_variant == "attn_kv+ffn_kv" ? 1 : 0) +
                                    (c.moda_variant == "extra_attn_kv+ffn_kv" ? 2 : 0);
  const int64_t per_layer = attention + qk_norms + block_norms + swiglu + depth_projections * depth_projection;
  const int64_t embeddings = c.vocab_size * c.d_model;
  const int64_t lm_head = c.tie_embeddings ? 0 : c.vocab_size * c.d_model;
  return embeddings + c.n_layers * per_layer + c.d_model /* final norm */ + lm_head;
}

}  // namespace fathom
