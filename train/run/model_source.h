// Where a model's starting weights come from when a recipe sets model.init_from:
//   hf:DIR          a HuggingFace Olmo2ForCausalLM / LlamaForCausalLM folder (layers/hf_import.h)
//   checkpoint:DIR  a fathom checkpoint folder, or a run folder (its latest checkpoint)
// The recipe reads the source's model config when it is resolved; the trainer loads the weights
// into the arena instead of a random init when a run starts (not when it resumes).
#pragma once
#include <string>

#include "core/safetensors.h"
#include "layers/model_config.h"

namespace fathom {

struct ModelSource {
  enum class Kind { hf, checkpoint };
  Kind kind = Kind::hf;
  std::string path;
};

// Parses "hf:DIR" or "checkpoint:DIR"; anything else is an error quoting the value.
ModelSource parse_model_source(const std::string& spec);

// The source's model config: from config.json, or from the checkpoint's saved recipe.yaml. The
// init_std and init_cutoff fields keep ModelConfig's defaults (loaded weights need no init).
ModelConfig read_model_source_config(const ModelSource& source);

// The source's weights under fathom's names, checked against `expected` (the recipe's model): a
// source whose config no longer matches is an error naming the source.
TensorMap read_model_source_weights(const ModelSource& source, const ModelConfig& expected);

}  // namespace fathom
