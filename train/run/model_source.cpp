#include "train/run/model_source.h"

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "layers/hf_import.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"

namespace fathom {

namespace {

// The fields that describe the network; init_std / init_cutoff only matter for a random init.
ModelConfig without_init(ModelConfig config) {
  const ModelConfig defaults;
  config.init_std = defaults.init_std;
  config.init_cutoff = defaults.init_cutoff;
  return config;
}

std::string spec_of(const ModelSource& source) {
  return (source.kind == ModelSource::Kind::hf ? "hf:" : "checkpoint:") + source.path;
}

}  // namespace

ModelSource parse_model_source(const std::string& spec) {
  for (const auto& [prefix, kind] :
       {std::pair{"hf:", ModelSource::Kind::hf}, {"checkpoint:", ModelSource::Kind::checkpoint}}) {
    const std::string_view p(prefix);
    if (spec.starts_with(p)) {
      FATHOM_CHECK(spec.size() > p.size(), "'", spec, "' names no folder after '", prefix, "'");
      return {kind, spec.substr(p.size())};
    }
  }
  FATHOM_FAIL(
      "'", spec,
      "' must be hf:DIR (a HuggingFace checkpoint folder) or checkpoint:DIR (a fathom checkpoint or run folder)");
}

ModelConfig read_model_source_config(const ModelSource& source) {
  if (source.kind == ModelSource::Kind::hf) return without_init(read_hf_config(source.path).config);
  const std::filesystem::path recipe = resolve_checkpoint(source.path) / kCheckpointRecipeFile;
  return without_init(parse_saved_recipe(read_file(recipe), recipe.string()).model);
}

TensorMap read_model_source_weights(const ModelSource& source, const ModelConfig& expected) {
  ModelConfig found;
  TensorMap weights;
  if (source.kind == ModelSource::Kind::hf) {
    HfModel model = load_hf_model(source.path);
    found = model.config;
    weights = std::move(model.weights);
  } else {
    found = read_model_source_config(source);
    weights = load_checkpoint(source.path, CheckpointUse::model_only).model;
  }
  FATHOM_CHECK(without_init(found) == without_init(expected), "model.init_from ", spec_of(source),
               ": the source's model config changed since the recipe was read");
  return weights;
}

}  // namespace fathom
