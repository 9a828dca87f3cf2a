// Importing HuggingFace checkpoints: a folder with config.json and model.safetensors (or shards
// listed by model.safetensors.index.json) of an Olmo2ForCausalLM or a LlamaForCausalLM.
//
// fathom's Decoder already uses HF's tensor names, so import is a config mapping plus checks:
//   Olmo2ForCausalLM -> norm: post, qk_norm: true  (post_attention_layernorm is on the attention OUTPUT,
//                       q_norm / k_norm over the full projected width)
//   LlamaForCausalLM -> norm: pre,  qk_norm: false (input_layernorm before attention; its
//                       post_attention_layernorm is the PRE-MLP norm)
// RoPE comes from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (earlier
// versions); types default and llama3 are supported. tie_word_embeddings gives tie_embeddings (a
// stored lm_head.weight is then ignored). Tensors stored as F32, BF16 or F16 become F32.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "layers/model_config.h"

namespace fathom {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfWeightsIndexFile = "model.safetensors.index.json";

// The architectures fathom reads and writes.
const std::vector<std::string>& hf_supported_architectures();

struct HfConfig {
  ModelConfig config;        // init_std / init_cutoff keep their defaults (HF weights need no init)
  std::string architecture;  // "Olmo2ForCausalLM" or "LlamaForCausalLM"
};

struct HfModel {
  ModelConfig config;
  TensorMap weights;  // fathom names (= HF names), F32 on the CPU, in the Decoder's parameter order
  std::string architecture;
};

// A parsed config.json -> fathom's model config. `source` names the file in messages. Every problem
// is a fathom::Error naming the key: a missing or mistyped field, an unsupported architecture,
// rope type, activation or bias, a head_dim other than hidden_size / num_attention_heads.
HfConfig hf_config_from_json(const YAML::Node& root, const std::string& source);

// Reads DIR/config.json only (a recipe's model.init_from resolves its model from this).
HfConfig read_hf_config(const std::string& dir);

// Reads config.json and every weight. Errors name the folder or file: missing config.json,
// malformed JSON, unsupported architecture, no weights file, an index naming a missing shard or a
// tensor its shard lacks, missing tensors (all of them named), unexpected tensors, shape mismatches
// (expected vs got) and dtypes other than F32/BF16/F16.
HfModel load_hf_model(const std::string& dir);

}  // namespace fathom
