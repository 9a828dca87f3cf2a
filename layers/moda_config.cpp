#include "layers/moda_config.h"

#include <algorithm>

#include "core/error.h"
#include "core/suggest.h"
#include "layers/layer_kinds.h"

namespace fathom {

const std::vector<std::string>& moda_variant_names() {
  static const std::vector<std::string> names{"none", "attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"};
  return names;
}

const std::vector<std::string>& depth_key_names() {
  static const std::vector<std::string> names{"writer", "reader"};
  return names;
}

const std::string& name_of(MoDAVariant variant) { return moda_variant_names()[size_t(variant)]; }
const std::string& name_of(DepthKey key) { return depth_key_names()[size_t(key)]; }

MoDAVariant parse_moda_variant(const std::string& name) {
  return MoDAVariant(choice_index(name, moda_variant_names(), "moda.variant"));
}

DepthKey parse_depth_key(const std::string& name) {
  return DepthKey(choice_index(name, depth_key_names(), "moda.depth_key"));
}

void MoDAConfig::validate() const {
  FATHOM_CHECK(max_slots >= 0, "moda.max_slots must be >= 0 (0 reads every slot), got ", max_slots);
}

LayerKind moda_layer_kind() {
  return {
      .name = "moda",
      .validate =
          [](const ModelConfig& c) {
            const MoDAConfig& moda = c.options.get<MoDAConfig>();
            moda.validate();
            // A depth read joins one softmax over the sequence and the depth slots (DESIGN.md 4.2); a
            // mixer without one (dsla) has no softmax to join, nor per-token keys a later layer could read.
            for (const LayerKind& kind : layer_kinds())
              FATHOM_CHECK(!(moda.enabled() && kind.make_mixer && !kind.reads_depth && c.has_layer_kind(kind.name)),
                           "moda.variant '", name_of(moda.variant), "' cannot be combined with ", kind.name,
                           " layers (model.layers): MoDA's depth reads join the attention softmax and a ", kind.name,
                           " layer has none; use moda.variant: none in a model with ", kind.name, " layers");
          },
      .options = {
          kind_option("moda.variant", &MoDAConfig::variant,
                      {.choices = moda_variant_names(),
                       .aliases = {"depth_kv", "moda_variant"},
                       .doc = "MoDA's depth KV: `none` (off), `attn_kv`, `attn_kv+ffn_kv` (the paper's default) or "
                              "`extra_attn_kv+ffn_kv`."}),
          kind_option("moda.max_slots", &MoDAConfig::max_slots,
                      {.at_least = 0,
                       .aliases = {"depth_slots", "slots", "window"},
                       .doc = "Read only the most recent S depth slots (0: every earlier slot)."}),
          kind_option(
              "moda.depth_key", &MoDAConfig::depth_key,
              {.choices = depth_key_names(),
               .aliases = {"depth_keys", "key_source", "depth_key_source"},
               .doc =
                   "`writer`: a depth key is the K its writer used (after its k-norm and RoPE); `reader`: the raw K, "
                   "which each reader normalises with its own k-norm and no RoPE."})}};
}

int64_t moda_first_read_slot(int64_t written, int64_t max_slots) {
  return max_slots > 0 ? std::max<int64_t>(0, written - max_slots) : 0;
}

}  // namespace fathom
