// Exporting a fathom model as a HuggingFace checkpoint folder that transformers loads with
// from_pretrained: config.json + model.safetensors (the inverse of layers/hf_import.h).
// Plain attention models that a transformers class computes export natively:
//   norm: post with qk_norm   -> Olmo2ForCausalLM
//   norm: pre without qk_norm -> LlamaForCausalLM
// Every other model (MoDA, MoD, dsla layers, the other norm combinations) exports as remote code:
// FathomForCausalLM, with fathom_core.py and modeling_fathom.py (layers/hf_remote_code.h) in the
// folder, loaded with trust_remote_code=True. Only MoD's random router is refused: its routing is a
// random draw per forward that no exported model can repeat.
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

// The transformers class that computes `config` natively; throws saying why when none does.
std::string hf_architecture_for(const ModelConfig& config);
// Whether `config` exports as remote code (no transformers class computes it).
bool hf_needs_remote_code(const ModelConfig& config);
// The class the export's config.json names: hf_architecture_for's, or FathomForCausalLM. Throws for a
// model that cannot be exported at all (MoD's random router).
std::string hf_export_class(const ModelConfig& config);

// The config.json text transformers 5 reads for `config`: a native class's (RoPE as
// `rope_parameters`), or for remote code model_type fathom with auto_map, the standard size keys,
// mod_routing ("topk", as `fathom eval` routes by default) and a "fathom" section with the rest.
std::string hf_config_json(const ModelConfig& config, const HfExportOptions& options);

// Writes out_dir/config.json, out_dir/model.safetensors (metadata format=pt) and, for remote code,
// the embedded Python files, atomically: into a temporary sibling folder, fsynced, then renamed to
// out_dir, so a failure leaves nothing behind.
// `weights` must hold exactly the model's parameters (names and shapes, any float dtype); they are
// written in the Decoder's order. Refuses an existing non-empty out_dir unless options.overwrite.
void export_hf_model(const ModelConfig& config, const TensorMap& weights, const std::string& out_dir,
                     const HfExportOptions& options);

}  // namespace fathom
