#include "train/generate/inference_model.h"

#include <filesystem>

#include "layers/hf_import.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"

namespace fathom {

ModelFiles read_model_files(const std::string& spec) {
  namespace fs = std::filesystem;
  if (spec.starts_with("hf:")) {
    const std::string dir = spec.substr(3);
    HfModel hf = load_hf_model(dir);
    const fs::path tokenizer = fs::path(dir) / "tokenizer.json";
    return {hf.config, std::move(hf.weights), fs::exists(tokenizer) ? tokenizer.string() : "", spec};
  }
  const fs::path folder = resolve_checkpoint(spec);
  CheckpointData checkpoint = load_checkpoint(folder, CheckpointUse::model_only);
  const Recipe recipe = parse_saved_recipe(checkpoint.recipe_yaml, (folder / kCheckpointRecipeFile).string());
  return {recipe.model, std::move(checkpoint.model), recipe.data.tokenizer, folder.string()};
}

InferenceModel::InferenceModel(const ModelConfig& config, const TensorMap& weights, const std::string& origin,
                               Device device, bool bf16)
    : device_(device), model_(config), arena_(model_, device) {
  if (bf16) arena_.enable_compute_copy(DType::bf16);
  arena_.load(weights, origin);
}

}  // namespace fathom
