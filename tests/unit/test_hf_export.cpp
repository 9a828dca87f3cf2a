// HF export: config.json that import reads back to the same config, model.safetensors with the
// same tensors (F32 exactly, BF16 rounded), atomic output folders, refused inputs.
#include <gtest/gtest.h>

#include "core/json.h"
#include "layers/hf_export.h"
#include "layers/hf_import.h"
#include "tests/unit/hf_test_helpers.h"
#include "tests/unit/test_support.h"

using namespace fathom;
using namespace fathom::test;
using fathom::testing::ScratchFolder;
namespace fs = std::filesystem;

namespace {

ModelConfig olmo2_config() {
  return {.d_model = 24, .n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .ffn_hidden = 40, .vocab_size = 50,
          .rope_theta = 10000, .norm_eps = 1e-5};
}

ModelConfig llama_config() {
  ModelConfig c = olmo2_config();
  c.norm = "pre";
  c.qk_norm = false;
  c.tie_embeddings = true;
  c.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
  c.rope_theta = 500000;
  return c;
}

HfConfig parse_config(const std::string& json) {
  return hf_config_from_json(parse_json(json, "config.json"), "config.json");
}

std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST(HfExportConfig, ReadsBackAsTheSameConfig) {
  for (const ModelConfig& c : {olmo2_config(), llama_config()}) {
    const std::string json = hf_config_json(c, HfExportOptions{});
    const HfConfig back = parse_config(json);
    EXPECT_EQ(back.architecture, hf_architecture_for(c));
    EXPECT_EQ(back.config, c) << json;
  }
}

TEST(HfExportConfig, FieldsTransformersNeeds) {
  HfExportOptions options;
  options.max_position_embeddings = 512;
  options.eos_token_id = 49;
  options.dtype = DType::bf16;
  const YAML::Node olmo = parse_json(hf_config_json(olmo2_config(), options), "olmo");
  EXPECT_EQ(olmo["architectures"][0].Scalar(), "Olmo2ForCausalLM");
  EXPECT_EQ(olmo["model_type"].Scalar(), "olmo2");
  EXPECT_EQ(olmo["max_position_embeddings"].Scalar(), "512");
  EXPECT_EQ(olmo["eos_token_id"].Scalar(), "49");
  EXPECT_EQ(olmo["dtype"].Scalar(), "bfloat16");
  EXPECT_EQ(olmo["rope_parameters"]["rope_type"].Scalar(), "default");
  EXPECT_EQ(olmo["rope_parameters"]["rope_theta"].Scalar(), "10000.0");
  EXPECT_EQ(olmo["hidden_act"].Scalar(), "silu");
  EXPECT_FALSE(olmo["head_dim"]);  // Olmo2Config has no head_dim field

  const YAML::Node llama = parse_json(hf_config_json(llama_config(), HfExportOptions{}), "llama");
  EXPECT_EQ(llama["architectures"][0].Scalar(), "LlamaForCausalLM");
  EXPECT_EQ(llama["model_type"].Scalar(), "llama");
  EXPECT_EQ(llama["head_dim"].Scalar(), "4");
  EXPECT_EQ(llama["tie_word_embeddings"].Scalar(), "true");
  EXPECT_EQ(llama["rope_parameters"]["rope_type"].Scalar(), "llama3");
  EXPECT_EQ(llama["rope_parameters"]["original_max_position_embeddings"].Scalar(), "8192");
  EXPECT_TRUE(llama["eos_token_id"].IsNull());
  EXPECT_EQ(llama["dtype"].Scalar(), "float32");
}

TEST(HfExportConfig, CombinationsWithoutATransformersClassAreRefused) {
  ModelConfig post_without_qk = olmo2_config();
  post_without_qk.qk_norm = false;
  expect_error([&] { hf_architecture_for(post_without_qk); }, {"norm: post with qk_norm: false"});
  ModelConfig pre_with_qk = llama_config();
  pre_with_qk.qk_norm = true;
  expect_error([&] { hf_config_json(pre_with_qk, {}); }, {"norm: pre with qk_norm: true"});
  HfExportOptions f16;
  f16.dtype = DType::f16;
  expect_error([&] { hf_config_json(olmo2_config(), f16); }, {"F16 is not offered"});
}

TEST(HfExport, RoundTripGivesIdenticalTensorsAndConfig) {
  for (const ModelConfig& c : {olmo2_config(), llama_config()}) {
    ScratchFolder dir;
    const TensorMap weights = random_weights(c, 20);
    export_hf_model(c, weights, (dir / "hf").string(), {});
    EXPECT_EQ(entries_of(dir.path()), std::vector<std::string>{"hf"});  // no temporary folder left
    EXPECT_EQ(entries_of(dir / "hf"), (std::vector<std::string>{"config.json", "model.safetensors"}));
    EXPECT_EQ(read_safetensors((dir / "hf" / "model.safetensors").string()).metadata().at("format"), "pt");
    const HfModel back = load_hf_model((dir / "hf").string());
    EXPECT_EQ(back.config, c);
    ASSERT_EQ(back.weights.size(), weights.size());
    for (size_t i = 0; i < weights.size(); ++i) {
      EXPECT_EQ(back.weights[i].first, weights[i].first);
      EXPECT_EQ(back.weights[i].second.to_vector<float>(), weights[i].second.to_vector<float>()) << weights[i].first;
    }
  }
}

TEST(HfExport, Bf16ExportStoresRoundedWeights) {
  ScratchFolder dir;
  const TensorMap weights = random_weights(olmo2_config(), 21);
  HfExportOptions options;
  options.dtype = DType::bf16;
  export_hf_model(olmo2_config(), weights, (dir / "hf").string(), options);
  const SafetensorsFile file = read_safetensors((dir / "hf" / "model.safetensors").string());
  for (const SafetensorsEntry& e : file.entries()) EXPECT_EQ(e.dtype, DType::bf16) << e.name;
  const HfModel back = load_hf_model((dir / "hf").string());
  for (size_t i = 0; i < weights.size(); ++i)
    EXPECT_EQ(back.weights[i].second.to_vector<float>(),
              weights[i].second.to(DType::bf16).to(DType::f32).to_vector<float>());
}

TEST(HfExport, WeightsInAnyOrderAreWrittenInModelOrder) {
  ScratchFolder dir;
  TensorMap weights = random_weights(olmo2_config(), 22);
  TensorMap shuffled(weights.rbegin(), weights.rend());
  export_hf_model(olmo2_config(), shuffled, (dir / "hf").string(), {});
  EXPECT_EQ(read_safetensors((dir / "hf" / "model.safetensors").string()).names().front(), "model.embed_tokens.weight");
}

TEST(HfExport, ExistingFoldersAndBadWeightsLeaveNothingBehind) {
  ScratchFolder dir;
  const ModelConfig c = olmo2_config();
  const TensorMap weights = random_weights(c, 23);
  const std::string out = (dir / "hf").string();

  expect_error([&] { export_hf_model(c, without(weights, "model.norm.weight"), out, {}); },
               {"lack 'model.norm.weight'"});
  TensorMap misshaped = weights;
  misshaped[0].second = random_tensor({50, 25}, DType::f32, 1);
  expect_error([&] { export_hf_model(c, misshaped, out, {}); },
               {"'model.embed_tokens.weight' has shape [50, 25]", "implies [50, 24]"});
  TensorMap extra = weights;
  extra.emplace_back("model.extra.weight", random_tensor({2}, DType::f32, 2));
  expect_error([&] { export_hf_model(c, extra, out, {}); }, {"unexpected tensor 'model.extra.weight'"});
  EXPECT_TRUE(entries_of(dir.path()).empty());

  // An empty folder is fine; a non-empty one needs overwrite, which replaces it whole.
  fs::create_directory(out);
  export_hf_model(c, weights, out, {});
  const TensorMap other = random_weights(c, 24);
  expect_error([&] { export_hf_model(c, other, out, {}); }, {"already exists and is not empty", "--overwrite"});
  write_file_atomically(dir / "hf" / "stale.txt", "x");
  HfExportOptions overwrite;
  overwrite.overwrite = true;
  export_hf_model(c, other, out, overwrite);
  EXPECT_EQ(entries_of(dir / "hf"), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(load_hf_model(out).weights[0].second.to_vector<float>(), other[0].second.to_vector<float>());
  EXPECT_EQ(entries_of(dir.path()), std::vector<std::string>{"hf"});

  write_file_atomically(dir / "file", "x");
  expect_error([&] { export_hf_model(c, weights, (dir / "file").string(), overwrite); }, {"is not a folder"});
  expect_error([&] { export_hf_model(c, weights, (dir / "no" / "such").string(), {}); },
               {"parent folder", "does not exist"});
}
