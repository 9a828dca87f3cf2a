// Exporting a fathom model as a HuggingFace checkpoint folder that transformers loads with
// from_pretrained: config.json + model.safetensors (the inverse of layers/hf_import.h).
//   norm: post with qk_norm   -> Olmo2ForCausalLM
//   norm: pre without qk_norm -> LlamaForCausalLM
// Other combinations have no transformers class and are refused.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/safetensors.h"
#include "layers/model_config.h"

namespace fathom {

struct HfExportOptions {
  DType dtype = DType::f32;                // F32 or BF16 in model.safetensors (and config's dtype)
  int64_t max_position_embeddings = 4096;  // the context the model was trained for
  std::optional<int64_t> eos_token_id;     // the tokenizer's end-of-sequence id, if known
  bool overwrite = false;                  // replace an existing, non-empty output folder
};

// The transformers class for `config`; throws naming norm and qk_norm when there is none.
std::string hf_architecture_for(const ModelConfig& config);

// The config.json text transformers 5 reads for `config` (RoPE as `rope_parameters`).
std::string hf_config_json(const ModelConfig& config, const HfExportOptions& options);

// Writes out_dir/config.json and out_dir/model.safetensors (metadata format=pt) atomically: into a
// temporary sibling folder, fsynced, then renamed to out_dir, so a failure leaves nothing behind.
// `weights` must hold exactly the model's parameters (names and shapes, any float dtype); they are
// written in the Decoder's order. Refuses an existing non-empty out_dir unless options.overwrite.
void export_hf_model(const ModelConfig& config, const TensorMap& weights, const std::string& out_dir,
                     const HfExportOptions& options);

}  // namespace fathom
