// HF checkpoint import: config mapping (OLMo2 / Llama, RoPE formats, tied embeddings), single and
// sharded safetensors, F32/BF16/F16, and a clear error for every bad input.
#include <gtest/gtest.h>

#include "core/json.h"
#include "layers/hf_import.h"
#include "tests/support/hf_test_helpers.h"
#include "tests/support/test_support.h"

using namespace fathom;
using namespace fathom::test;
using fathom::testing::ScratchFolder;
namespace fs = std::filesystem;

namespace {

HfConfig config_of(const JsonFields& fields) {
  return hf_config_from_json(parse_json(fields.text(), "config.json"), "config.json");
}

void expect_same_tensors(const TensorMap& got, const TensorMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.dtype(), DType::f32) << got[i].first;
    EXPECT_EQ(got[i].second.shape(), want[i].second.shape()) << got[i].first;
    EXPECT_EQ(got[i].second.to_vector<float>(), want[i].second.to(DType::f32).to_vector<float>()) << got[i].first;
  }
}

// Writes an OLMo2 / Llama folder with random weights and returns the weights.
TensorMap write_random_folder(const fs::path& dir, const JsonFields& fields, DType dtype = DType::f32,
                              uint64_t seed = 10) {
  const TensorMap weights = random_weights(config_of(fields).config, seed, dtype);
  write_hf_folder(dir, fields.text(), weights);
  return weights;
}

}  // namespace

// ---- config mapping ----

TEST(HfImportConfig, Olmo2IsPostNormWithFullWidthQkNorm) {
  const HfConfig hf = config_of(tiny_hf_config("Olmo2ForCausalLM"));
  EXPECT_EQ(hf.architecture, "Olmo2ForCausalLM");
  const ModelConfig& c = hf.config;
  EXPECT_EQ(c.norm, "post");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.d_model, 24);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 6);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.ffn_hidden, 40);
  EXPECT_EQ(c.vocab_size, 50);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_FALSE(c.tie_embeddings);
  const ModelConfig defaults;  // a named object: GCC 12 warns (falsely) on destroying the temporary
  EXPECT_EQ(c.init_std, defaults.init_std);
}

TEST(HfImportConfig, LlamaIsPreNormWithoutQkNorm) {
  const HfConfig hf = config_of(tiny_hf_config("LlamaForCausalLM").set("tie_word_embeddings", "true"));
  EXPECT_EQ(hf.architecture, "LlamaForCausalLM");
  EXPECT_EQ(hf.config.norm, "pre");
  EXPECT_FALSE(hf.config.qk_norm);
  EXPECT_TRUE(hf.config.tie_embeddings);
}

TEST(HfImportConfig, ArchitectureFromModelTypeAndDefaults) {
  // No architectures list: model_type decides; no num_key_value_heads: no GQA; no RoPE keys: 10000.
  const HfConfig hf = config_of(
      tiny_hf_config("LlamaForCausalLM").erase("architectures").erase("num_key_value_heads").erase("rope_parameters"));
  EXPECT_EQ(hf.architecture, "LlamaForCausalLM");
  EXPECT_EQ(hf.config.n_kv_heads, 6);
  EXPECT_EQ(hf.config.rope_theta, 10000.0);
}

TEST(HfImportConfig, RopeFormats) {
  const std::string llama3 =
      "\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
      "\"original_max_position_embeddings\": 8192";
  const RopeScaling want{"llama3", 8.0, 1.0, 4.0, 8192};
  // transformers 5: everything in rope_parameters.
  HfConfig modern = config_of(
      tiny_hf_config("LlamaForCausalLM").set("rope_parameters", "{\"rope_theta\": 500000.0, " + llama3 + "}"));
  EXPECT_EQ(modern.config.rope_theta, 500000.0);
  EXPECT_EQ(modern.config.rope_scaling, want);
  // Earlier versions: rope_theta at the top, rope_scaling beside it ("rope_type", or "type").
  HfConfig legacy = config_of(tiny_hf_config("LlamaForCausalLM")
                                  .erase("rope_parameters")
                                  .set("rope_theta", "500000.0")
                                  .set("rope_scaling", "{" + llama3 + "}"));
  EXPECT_EQ(legacy.config.rope_theta, 500000.0);
  EXPECT_EQ(legacy.config.rope_scaling, want);
  std::string old_spelling = llama3;
  old_spelling.replace(old_spelling.find("rope_type"), 9, "type");
  EXPECT_EQ(
      config_of(
          tiny_hf_config("LlamaForCausalLM").erase("rope_parameters").set("rope_scaling", "{" + old_spelling + "}"))
          .config.rope_scaling,
      want);
  HfConfig plain = config_of(tiny_hf_config("Olmo2ForCausalLM")
                                 .erase("rope_parameters")
                                 .set("rope_theta", "123.5")
                                 .set("rope_scaling", "null"));
  EXPECT_EQ(plain.config.rope_theta, 123.5);
  EXPECT_EQ(plain.config.rope_scaling.type, "none");
}

TEST(HfImportConfig, BadConfigsAreErrors) {
  auto error = [](const JsonFields& f, const std::vector<std::string>& fragments) {
    expect_error([&] { config_of(f); }, fragments);
  };
  const JsonFields olmo = tiny_hf_config("Olmo2ForCausalLM");
  error(JsonFields(olmo).set("architectures", "[\"MistralForCausalLM\"]"),
        {"config.json", "architecture 'MistralForCausalLM' is not supported", "Olmo2ForCausalLM, LlamaForCausalLM"});
  error(JsonFields(olmo).erase("architectures").set("model_type", "\"gpt2\""), {"model_type 'gpt2' is not supported"});
  error(JsonFields(olmo).erase("architectures").erase("model_type"), {"neither 'architectures' nor 'model_type'"});
  error(JsonFields(olmo).set("architectures", "[\"A\", \"B\"]"), {"'architectures' must be a list of one"});
  error(JsonFields(olmo).erase("hidden_size"), {"config.json", "missing 'hidden_size'"});
  error(JsonFields(olmo).set("num_hidden_layers", "\"3\""), {"'num_hidden_layers' must be an integer, got \"3\""});
  error(JsonFields(olmo).set("vocab_size", "50.5"), {"'vocab_size' must be an integer, got 50.5"});
  error(JsonFields(olmo).set("rms_norm_eps", "\"tiny\""), {"'rms_norm_eps' must be a number"});
  error(JsonFields(olmo).set("tie_word_embeddings", "1"), {"'tie_word_embeddings' must be true or false"});
  error(JsonFields(olmo).set("hidden_act", "\"gelu\""), {"hidden_act 'gelu' is not supported"});
  error(JsonFields(olmo).set("attention_bias", "true"), {"'attention_bias' is true", "no biases"});
  error(tiny_hf_config("LlamaForCausalLM").set("mlp_bias", "true"), {"'mlp_bias' is true"});
  error(tiny_hf_config("LlamaForCausalLM").set("head_dim", "8"), {"head_dim 8 differs", "24 / 6 = 4"});
  error(JsonFields(olmo).set("num_key_value_heads", "4"),
        {"unsupported model shape", "n_heads (6) must be divisible by n_kv_heads (4)"});
  error(JsonFields(olmo).set("rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"yarn\", \"factor\": 4.0}"),
        {"rope type 'yarn' is not supported", "default and llama3"});
  error(JsonFields(olmo).set("rope_parameters", "{\"rope_type\": \"llama3\", \"factor\": 8.0}"),
        {"missing 'rope_parameters.low_freq_factor'"});
  error(JsonFields(olmo).set("rope_parameters",
                             "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
                             "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}"),
        {"high_freq_factor (1) must be greater than low_freq_factor (4)"});
  error(JsonFields(olmo).set("rope_parameters", "[1, 2]"), {"'rope_parameters' must be an object"});
  error(JsonFields(olmo).set("rope_parameters", "{\"rope_theta\": -1.0}"), {"RoPE theta must be positive"});
  expect_error([] { hf_config_from_json(parse_json("[1, 2]", "config.json"), "config.json"); },
               {"config.json must be a JSON object"});
}

// ---- weights ----

TEST(HfImport, SingleFileRoundTripsEveryTensor) {
  ScratchFolder dir;
  const TensorMap weights = write_random_folder(dir.path(), tiny_hf_config("Olmo2ForCausalLM"));
  const HfModel model = load_hf_model(dir.path().string());
  EXPECT_EQ(model.architecture, "Olmo2ForCausalLM");
  EXPECT_EQ(model.config, config_of(tiny_hf_config("Olmo2ForCausalLM")).config);
  expect_same_tensors(model.weights, weights);
  // OLMo2 names: norms on the sublayer outputs, full-width QK-norm.
  EXPECT_EQ(tensor_named(model.weights, "model.layers.1.self_attn.q_norm.weight").shape(), Shape({24}));
  EXPECT_EQ(tensor_named(model.weights, "model.layers.1.self_attn.k_norm.weight").shape(), Shape({8}));
  EXPECT_NO_THROW(tensor_named(model.weights, "model.layers.0.post_feedforward_layernorm.weight"));
}

TEST(HfImport, LlamaNamesMapToThePreNormBlock) {
  ScratchFolder dir;
  const TensorMap weights = write_random_folder(dir.path(), tiny_hf_config("LlamaForCausalLM"));
  const HfModel model = load_hf_model(dir.path().string());
  expect_same_tensors(model.weights, weights);
  // input_layernorm is the pre-attention norm, post_attention_layernorm the pre-MLP one; no QK-norm.
  std::vector<std::string> layer0;
  for (const auto& [name, t] : model.weights)
    if (name.starts_with("model.layers.0.")) layer0.push_back(name.substr(15));
  EXPECT_EQ(layer0, (std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                              "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                              "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                                              "input_layernorm.weight", "post_attention_layernorm.weight"}));
}

TEST(HfImport, NameTrapOlmo2WeightsUnderALlamaConfigAreRefused) {
  // Same post_attention_layernorm name, other meaning: an OLMo2 state dict under a Llama config
  // lacks input_layernorm and carries OLMo2-only tensors.
  ScratchFolder dir;
  const TensorMap olmo_weights = random_weights(config_of(tiny_hf_config("Olmo2ForCausalLM")).config, 3);
  write_hf_folder(dir.path(), tiny_hf_config("LlamaForCausalLM").text(), olmo_weights);
  expect_error([&] { load_hf_model(dir.path().string()); },
               {"model.safetensors", "missing 2 tensor(s)", "LlamaForCausalLM", "model.layers.0.input_layernorm.weight",
                "model.layers.1.input_layernorm.weight"});
}

TEST(HfImport, Bf16AndF16WeightsBecomeF32) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    ScratchFolder dir;
    const TensorMap stored = write_random_folder(dir.path(), tiny_hf_config("LlamaForCausalLM"), dtype);
    expect_same_tensors(load_hf_model(dir.path().string()).weights, stored);  // exact: both widen the same bits
  }
}

TEST(HfImport, MixedDtypesInOneFile) {
  ScratchFolder dir;
  const JsonFields fields = tiny_hf_config("Olmo2ForCausalLM");
  TensorMap weights = random_weights(config_of(fields).config, 4);
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i].second = weights[i].second.to(i % 3 == 0 ? DType::bf16 : i % 3 == 1 ? DType::f16 : DType::f32);
  write_hf_folder(dir.path(), fields.text(), weights);
  expect_same_tensors(load_hf_model(dir.path().string()).weights, weights);
}

TEST(HfImport, TiedEmbeddingsHaveNoHead) {
  ScratchFolder dir;
  const JsonFields fields = tiny_hf_config("LlamaForCausalLM").set("tie_word_embeddings", "true");
  const TensorMap weights = write_random_folder(dir.path(), fields);
  for (const auto& [name, t] : weights) EXPECT_NE(name, "lm_head.weight");
  const HfModel model = load_hf_model(dir.path().string());
  EXPECT_TRUE(model.config.tie_embeddings);
  expect_same_tensors(model.weights, weights);

  // A tied checkpoint that still stores the head loads the same (one parameter is kept).
  ScratchFolder with_head;
  TensorMap stored = weights;
  stored.emplace_back("lm_head.weight", tensor_named(weights, "model.embed_tokens.weight").clone());
  write_hf_folder(with_head.path(), fields.text(), stored);
  expect_same_tensors(load_hf_model(with_head.path().string()).weights, weights);

  // Untied config without a head: the head is missing.
  ScratchFolder untied;
  write_hf_folder(untied.path(), tiny_hf_config("LlamaForCausalLM").text(), weights);
  expect_error([&] { load_hf_model(untied.path().string()); }, {"missing 1 tensor(s)", "lm_head.weight"});
}

TEST(HfImport, ShardedCheckpointWithIndex) {
  ScratchFolder dir;
  const JsonFields fields = tiny_hf_config("Olmo2ForCausalLM");
  const TensorMap weights = random_weights(config_of(fields).config, 5);
  // Two shards, tensors interleaved between them (as transformers fills shards by size).
  TensorMap shard[2];
  std::string weight_map;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int s = int(i % 2);
    shard[s].push_back(weights[i]);
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    weight_map += std::string(weight_map.empty() ? "" : ",\n") + "    \"" + weights[i].first + "\": \"" + file + "\"";
  }
  write_file_atomically(dir / kHfConfigFile, fields.text());
  write_safetensors((dir / "model-00001-of-00002.safetensors").string(), shard[0]);
  write_safetensors((dir / "model-00002-of-00002.safetensors").string(), shard[1]);
  const std::string index =
      "{\n  \"metadata\": {\"total_size\": 1234},\n  \"weight_map\": {\n" + weight_map + "\n  }\n}\n";
  write_file_atomically(dir / kHfWeightsIndexFile, index);
  expect_same_tensors(load_hf_model(dir.path().string()).weights, weights);

  // The index names a shard that is not there.
  fs::rename(dir / "model-00002-of-00002.safetensors", dir / "elsewhere.safetensors");
  expect_error([&] { load_hf_model(dir.path().string()); },
               {"model.safetensors.index.json", "shard 'model-00002-of-00002.safetensors'", "does not exist"});
  fs::rename(dir / "elsewhere.safetensors", dir / "model-00002-of-00002.safetensors");

  // The index sends a tensor to the wrong shard.
  std::string wrong = index;
  const std::string entry = "\"model.embed_tokens.weight\": \"model-00001-of-00002";
  ASSERT_NE(wrong.find(entry), std::string::npos);
  wrong.replace(wrong.find(entry), entry.size(), "\"model.embed_tokens.weight\": \"model-00002-of-00002");
  write_file_atomically(dir / kHfWeightsIndexFile, wrong);
  expect_error(
      [&] { load_hf_model(dir.path().string()); },
      {"names shard 'model-00002-of-00002.safetensors' for tensor 'model.embed_tokens.weight'", "has no such tensor"});

  // A shard path that leaves the folder, and a malformed index.
  write_file_atomically(dir / kHfWeightsIndexFile, "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
  expect_error([&] { load_hf_model(dir.path().string()); },
               {"'../x.safetensors'", "not a file name inside the folder"});
  write_file_atomically(dir / kHfWeightsIndexFile, "{\"metadata\": {}}");
  expect_error([&] { load_hf_model(dir.path().string()); }, {"'weight_map' object"});
}

TEST(HfImport, MissingFilesAreErrors) {
  ScratchFolder dir;
  expect_error([&] { load_hf_model((dir / "nope").string()); }, {"nope", "does not exist"});
  expect_error([&] { load_hf_model(dir.path().string()); }, {"has no config.json"});
  write_file_atomically(dir / kHfConfigFile, "{\"hidden_size\": 24,\n \"vocab_size\": [1, 2\n");
  expect_error([&] { load_hf_model(dir.path().string()); }, {"config.json", "invalid JSON"});
  write_file_atomically(dir / kHfConfigFile, tiny_hf_config("Olmo2ForCausalLM").text());
  expect_error([&] { load_hf_model(dir.path().string()); },
               {"neither model.safetensors nor model.safetensors.index.json"});
}

TEST(HfImport, BadTensorsAreErrorsNamingTensorAndFile) {
  const JsonFields fields = tiny_hf_config("Olmo2ForCausalLM");
  const TensorMap weights = random_weights(config_of(fields).config, 6);
  auto error_for = [&](const TensorMap& stored, const std::vector<std::string>& fragments) {
    ScratchFolder dir;
    write_hf_folder(dir.path(), fields.text(), stored);
    expect_error([&] { load_hf_model(dir.path().string()); }, fragments);
  };
  error_for(without(without(weights, "model.norm.weight"), "model.layers.1.mlp.up_proj.weight"),
            {"model.safetensors", "missing 2 tensor(s)", "model.layers.1.mlp.up_proj.weight", "model.norm.weight"});

  TensorMap misshaped = weights;
  for (auto& [name, t] : misshaped)
    if (name == "model.layers.0.self_attn.k_proj.weight") t = random_tensor({16, 24}, DType::f32, 1);
  error_for(misshaped,
            {"model.safetensors", "'model.layers.0.self_attn.k_proj.weight' has shape [16, 24]", "implies [8, 24]"});

  for (const Tensor& bad : {random_tensor({24}, DType::f64, 3), random_ints({24}, 5, 2, DType::i32)}) {
    TensorMap typed = weights;
    for (auto& [name, t] : typed)
      if (name == "model.norm.weight") t = bad;
    error_for(typed, {"'model.norm.weight' is " + std::string(dtype_name(bad.dtype())), "F32, BF16 or F16"});
  }

  TensorMap extra = weights;
  extra.emplace_back("model.layers.0.self_attn.q_proj.bias", random_tensor({24}, DType::f32, 4));
  error_for(extra, {"unexpected tensor 'model.layers.0.self_attn.q_proj.bias'", "Olmo2ForCausalLM"});

  // Rotary tables some older checkpoints saved are buffers, not weights: ignored.
  ScratchFolder dir;
  TensorMap buffers = weights;
  buffers.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", random_tensor({2}, DType::f32, 5));
  write_hf_folder(dir.path(), fields.text(), buffers);
  expect_same_tensors(load_hf_model(dir.path().string()).weights, weights);
}

TEST(HfImport, ReadConfigAloneNeedsNoWeights) {
  ScratchFolder dir;
  write_file_atomically(dir / kHfConfigFile, tiny_hf_config("LlamaForCausalLM").text());
  EXPECT_EQ(read_hf_config(dir.path().string()).config.norm, "pre");
}
