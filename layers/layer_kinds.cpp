#include "layers/layer_kinds.h"

#include <algorithm>

#include "core/error.h"
#include "core/suggest.h"
#include "layers/attention.h"
#include "layers/dsla.h"

namespace fathom {

namespace {

struct LayerKind {
  std::string name;
  std::unique_ptr<TokenMixer> (*make)(const ModelConfig& config, int64_t layer);
};

const std::vector<LayerKind>& layer_kinds() {
  static const std::vector<LayerKind> kinds{
      {"attention", [](const ModelConfig& c, int64_t) -> std::unique_ptr<TokenMixer> {
         return std::make_unique<Attention>(c);
       }},
      {"dsla", [](const ModelConfig& c, int64_t) -> std::unique_ptr<TokenMixer> { return std::make_unique<Dsla>(c); }},
  };
  return kinds;
}

}  // namespace

const std::vector<std::string>& layer_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const LayerKind& kind : layer_kinds()) out.push_back(kind.name);
    return out;
  }();
  return names;
}

std::unique_ptr<TokenMixer> make_token_mixer(const ModelConfig& config, int64_t layer) {
  const std::string& name = config.layer_kind(layer);
  for (const LayerKind& kind : layer_kinds())
    if (kind.name == name) return kind.make(config, layer);
  const auto closest = closest_name(name, layer_kind_names());
  FATHOM_FAIL("model.layers: layer ", layer, " has unknown kind '", name, "'",
              closest ? " (did you mean '" + *closest + "'?)" : std::string(), "; the kinds are ",
              join_names(layer_kind_names()));
}

}  // namespace fathom
