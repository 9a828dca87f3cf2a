#include "layers/layer_kinds.h"

#include <algorithm>

#include "core/error.h"
#include "core/suggest.h"
#include "layers/attention.h"
#include "layers/dsla.h"
#include "layers/moda_config.h"
#include "layers/routed_block.h"

namespace fathom {

namespace {

// The built-in kinds, each registered by its own files; "attention" first (the default mixer).
std::vector<LayerKind>& kinds() {
  static std::vector<LayerKind> table{attention_layer_kind(), moda_layer_kind(), mod_layer_kind(),
                                      dsla_layer_kind()};  // kBuiltInKinds
  return table;
}

constexpr size_t kBuiltInKinds = 4;
uint64_t version = 0;

// Every name a kind claims: its own, its loss terms' and its taps'.
std::vector<std::string> claimed_names(const LayerKind& kind) {
  std::vector<std::string> names{kind.name};
  for (const KindOption& option : kind.options) names.push_back(option.path);
  for (const KindLossTerm& term : kind.loss_terms) names.push_back(term.name);
  for (const std::string& tap : kind.taps) names.push_back(tap);
  return names;
}

}  // namespace

const std::vector<LayerKind>& layer_kinds() { return kinds(); }

void register_layer_kind(LayerKind kind) {
  FATHOM_CHECK(!kind.name.empty(), "a layer kind needs a name");
  for (const KindOption& option : kind.options)
    FATHOM_CHECK(option.path.starts_with(kind.name + ".") && option.get && option.set, "layer kind '", kind.name,
                 "': its option '", option.path, "' must be in its section '", kind.name,
                 ".' and have an accessor (kind_option)");
  for (const LayerKind& other : kinds())
    for (const std::string& name : claimed_names(kind)) {
      const std::vector<std::string> taken = claimed_names(other);
      FATHOM_CHECK(std::find(taken.begin(), taken.end(), name) == taken.end(), "layer kind '", kind.name,
                   "': the name '", name, "' is already the layer kind '", other.name, "''s");
    }
  kinds().push_back(std::move(kind));
  ++version;
}

void unregister_layer_kind(const std::string& name) {
  std::vector<LayerKind>& table = kinds();
  const auto it = std::find_if(table.begin(), table.end(), [&](const LayerKind& kind) { return kind.name == name; });
  FATHOM_CHECK(it != table.end(), "no layer kind '", name, "' is registered");
  FATHOM_CHECK(it - table.begin() >= ptrdiff_t(kBuiltInKinds), "the layer kind '", name, "' is built in");
  table.erase(it);
  ++version;
}

uint64_t layer_kinds_version() {
  kinds();  // the built-in table exists before the first version is read
  return version;
}

std::vector<std::string> layer_kind_names() {
  std::vector<std::string> names;
  for (const LayerKind& kind : kinds())
    if (kind.make_mixer) names.push_back(kind.name);
  return names;
}

std::unique_ptr<TokenMixer> make_token_mixer(const ModelConfig& config, int64_t layer) {
  const std::string& name = config.layer_kind(layer);
  for (const LayerKind& kind : kinds())
    if (kind.make_mixer && kind.name == name) return kind.make_mixer(config, layer);
  const std::vector<std::string> names = layer_kind_names();
  const auto closest = closest_name(name, names);
  FATHOM_FAIL("model.layers: layer ", layer, " has unknown kind '", name, "'",
              closest ? " (did you mean '" + *closest + "'?)" : std::string(), "; the kinds are ", join_names(names));
}

}  // namespace fathom
