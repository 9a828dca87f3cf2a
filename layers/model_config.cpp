#include "layers/model_config.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/suggest.h"
#include "layers/layer_kinds.h"

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
  FATHOM_CHECK(n_heads % n_kv_heads == 0, "n_heads (", n_heads, ") must be divisible by n_kv_heads (", n_kv_heads, ")");
  FATHOM_CHECK(head_dim() % 2 == 0, "head_dim = d_model / n_heads = ", d_model, " / ", n_heads, " = ", head_dim(),
               " must be even (RoPE rotates pairs of dimensions)");
  FATHOM_CHECK(norm == "post" || norm == "pre", "norm must be one of post, pre; got '", norm, "'");
  const std::pair<const char*, double> positives[] = {
      {"rope_theta", rope_theta}, {"norm_eps", norm_eps}, {"init_std", init_std}, {"init_cutoff", init_cutoff}};
  for (const auto& [field, value] : positives) FATHOM_CHECK(value > 0, field, " must be positive, got ", value);
  validate_rope_scaling(rope_scaling);
  FATHOM_CHECK(layers.empty() || n_layers % int64_t(layers.size()) == 0, "layers lists ", layers.size(),
               " kinds, which does not divide n_layers (", n_layers,
               "): give one kind per layer, or a pattern whose length divides n_layers");
  for (const LayerKind& kind : layer_kinds())
    if (kind.validate) kind.validate(*this);
}

bool ModelConfig::has_layer_kind(const std::string& kind) const {
  if (layers.empty()) return kind == layer_kind(0);
  return std::find(layers.begin(), layers.end(), kind) != layers.end();
}

const std::string& ModelConfig::layer_kind(int64_t layer) const {
  // Without model.layers every layer is of the first registered mixer kind (attention).
  return layers.empty() ? layer_kinds().front().name : layers[size_t(layer) % layers.size()];
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

}  // namespace fathom
