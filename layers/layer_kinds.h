// The layer kinds a recipe can name in model.layers, and the one place each registers its factory.
// Adding a kind: write its TokenMixer (its own files), add one row to the table in layer_kinds.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/token_mixer.h"

namespace fathom {

struct ModelConfig;

// The registered kind names, in registration order ("attention" first: the default).
const std::vector<std::string>& layer_kind_names();
// The mixer of layer `layer` of `config` (its kind is config.layer_kind(layer)). An unknown kind is
// an error naming the kinds there are.
std::unique_ptr<TokenMixer> make_token_mixer(const ModelConfig& config, int64_t layer);

}  // namespace fathom
