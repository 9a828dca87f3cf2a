// Helpers for the HF import/export tests: config.json text built field by field (so a test can
// drop or change one field), random weights for a model config, and HF folders written from them.
#pragma once
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/file_io.h"
#include "core/safetensors.h"
#include "layers/decoder.h"
#include "layers/hf_import.h"
#include "tests/support/op_test_util.h"

namespace fathom::test {

// config.json as (key, raw JSON value) pairs, in order.
struct JsonFields {
  std::vector<std::pair<std::string, std::string>> fields;

  JsonFields& set(const std::string& key, const std::string& raw_value) {
    for (auto& [k, v] : fields)
      if (k == key) {
        v = raw_value;
        return *this;
      }
    fields.emplace_back(key, raw_value);
    return *this;
  }
  JsonFields& erase(const std::string& key) {
    std::erase_if(fields, [&](const auto& kv) { return kv.first == key; });
    return *this;
  }
  std::string text() const {
    std::string out = "{\n";
    for (size_t i = 0; i < fields.size(); ++i)
      out += "  \"" + fields[i].first + "\": " + fields[i].second + (i + 1 < fields.size() ? ",\n" : "\n");
    return out + "}\n";
  }
};

// A small GQA model with odd sizes: d 24, 2 layers, 6 heads (head dim 4), 2 KV heads, FFN 40, vocab 50.
inline JsonFields tiny_hf_config(const std::string& architecture) {
  const bool llama = architecture == "LlamaForCausalLM";
  JsonFields f;
  f.set("architectures", "[\"" + architecture + "\"]")
      .set("model_type", llama ? "\"llama\"" : "\"olmo2\"")
      .set("hidden_size", "24")
      .set("num_hidden_layers", "2")
      .set("num_attention_heads", "6")
      .set("num_key_value_heads", "2")
      .set("intermediate_size", "40")
      .set("vocab_size", "50")
      .set("rms_norm_eps", "1e-05")
      .set("hidden_act", "\"silu\"")
      .set("max_position_embeddings", "128")
      .set("attention_bias", "false")
      .set("tie_word_embeddings", "false")
      .set("rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"default\"}")
      .set("dtype", "\"float32\"");
  if (llama) f.set("head_dim", "4").set("mlp_bias", "false");
  return f;
}

// Random values (never zeros) for every parameter of `config`, named as the Decoder names them.
inline TensorMap random_weights(const ModelConfig& config, uint64_t seed, DType dtype = DType::f32) {
  TensorMap weights;
  for (const auto& [name, shape] : decoder_parameter_shapes(config))
    weights.emplace_back(name, random_tensor(shape, DType::f32, seed++, -0.5, 0.5).to(dtype));
  return weights;
}

inline const Tensor& tensor_named(const TensorMap& map, const std::string& name) {
  for (const auto& [n, t] : map)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

inline TensorMap without(TensorMap map, const std::string& name) {
  std::erase_if(map, [&](const auto& kv) { return kv.first == name; });
  return map;
}

inline void write_hf_folder(const std::filesystem::path& dir, const std::string& config_json,
                            const TensorMap& weights) {
  std::filesystem::create_directories(dir);
  write_file_atomically(dir / kHfConfigFile, config_json);
  write_safetensors((dir / kHfWeightsFile).string(), weights, {{"format", "pt"}});
}

}  // namespace fathom::test
