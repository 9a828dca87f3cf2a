// HF export: config.json that import reads back to the same config, model.safetensors with the
// same tensors (F32 exactly, BF16 rounded), atomic output folders, refused inputs; models without a
// transformers class as remote code (config, modeling files, every parameter).
#include <gtest/gtest.h>

#include "core/json.h"
#include "layers/dsla_config.h"
#include "layers/hf_export.h"
#include "layers/hf_import.h"
#include "layers/hf_remote_code.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"
#include "tests/support/hf_test_helpers.h"
#include "tests/support/test_support.h"

using namespace fathom;
using namespace fathom::test;
using fathom::testing::ScratchFolder;
namespace fs = std::filesystem;

namespace {

ModelConfig olmo2_config() {
  return {.d_model = 24,
          .n_layers = 2,
          .n_heads = 6,
          .n_kv_heads = 2,
          .ffn_hidden = 40,
          .vocab_size = 50,
          .rope_theta = 10000,
          .norm_eps = 1e-5};
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

ModelConfig moda_config() {
  ModelConfig c = olmo2_config();
  c.options.get<MoDAConfig>().variant = MoDAVariant::attn_kv_ffn_kv;
  return c;
}

ModelConfig mod_config() {
  ModelConfig c = olmo2_config();
  c.options.get<ModConfig>().capacity = 0.5;
  c.options.get<ModConfig>().router_weight = ModRouterWeight::sigmoid;
  return c;
}

ModelConfig dsla_config() {
  ModelConfig c = olmo2_config();
  c.layers = {"attention", "dsla"};
  c.options.get<DslaConfig>().gamma = DslaGamma::head;
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

// No transformers class computes these: the native path refuses them, saying why, and the export
// writes them as remote code instead.
TEST(HfExportConfig, ModelsWithoutANativeClassExportAsRemoteCode) {
  const std::vector<std::pair<ModelConfig, std::vector<std::string>>> cases = {
      {moda_config(), {"moda.variant attn_kv+ffn_kv", "depth", "another function"}},
      {mod_config(), {"MoD (mod.capacity 0.5", "another function"}},
      {dsla_config(), {"layer 1 is a 'dsla' layer"}},
      {[] {
         ModelConfig c = olmo2_config();
         c.qk_norm = false;
         return c;
       }(),
       {"norm: post with qk_norm: false"}},
      {[] {
         ModelConfig c = llama_config();
         c.qk_norm = true;
         return c;
       }(),
       {"norm: pre with qk_norm: true"}},
  };
  for (const auto& [config, why] : cases) {
    expect_error([&] { hf_architecture_for(config); }, why);
    EXPECT_TRUE(hf_needs_remote_code(config));
    EXPECT_EQ(hf_export_class(config), "FathomForCausalLM");
    EXPECT_EQ(parse_json(hf_config_json(config, {}), "remote")["model_type"].Scalar(), "fathom");
  }
  for (const ModelConfig& native : {olmo2_config(), llama_config()}) {
    EXPECT_FALSE(hf_needs_remote_code(native));
    EXPECT_EQ(hf_export_class(native), hf_architecture_for(native));
  }
}

TEST(HfExportConfig, RefusedInputs) {
  // MoD's random router draws its routing afresh each forward: nothing exported can repeat it.
  ModelConfig random_router = mod_config();
  random_router.options.get<ModConfig>().router = ModRouter::random;
  expect_error([&] { hf_config_json(random_router, {}); }, {"mod.router: random", "learned router"});
  ScratchFolder dir;
  expect_error([&] { export_hf_model(random_router, random_weights(random_router, 3), (dir / "hf").string(), {}); },
               {"mod.router: random"});
  EXPECT_TRUE(entries_of(dir.path()).empty());
  HfExportOptions f16;
  f16.dtype = DType::f16;
  expect_error([&] { hf_config_json(olmo2_config(), f16); }, {"F16 is not offered"});
  expect_error([&] { hf_config_json(moda_config(), f16); }, {"F16 is not offered"});
  HfExportOptions no_context;
  no_context.max_position_embeddings = 0;
  expect_error([&] { hf_config_json(dsla_config(), no_context); }, {"max_position_embeddings must be positive"});
}

TEST(HfExportConfig, RemoteCodeConfigCarriesEveryOption) {
  ModelConfig c = moda_config();
  c.options.get<MoDAConfig>() = {MoDAVariant::extra_attn_kv_ffn_kv, 3, DepthKey::reader};
  c.norm = "pre";
  c.tie_embeddings = true;
  c.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
  HfExportOptions options;
  options.max_position_embeddings = 256;
  options.eos_token_id = 49;
  const YAML::Node j = parse_json(hf_config_json(c, options), "remote");
  EXPECT_EQ(j["architectures"][0].Scalar(), "FathomForCausalLM");
  EXPECT_EQ(j["auto_map"]["AutoConfig"].Scalar(), "modeling_fathom.FathomConfig");
  EXPECT_EQ(j["auto_map"]["AutoModelForCausalLM"].Scalar(), "modeling_fathom.FathomForCausalLM");
  EXPECT_EQ(j["hidden_size"].Scalar(), "24");
  EXPECT_EQ(j["num_key_value_heads"].Scalar(), "2");
  EXPECT_EQ(j["max_position_embeddings"].Scalar(), "256");
  EXPECT_EQ(j["eos_token_id"].Scalar(), "49");
  EXPECT_EQ(j["mod_routing"].Scalar(), "topk");
  EXPECT_EQ(j["tie_word_embeddings"].Scalar(), "false");  // the model ties its head itself
  const YAML::Node f = j["fathom"];
  EXPECT_EQ(f["norm"].Scalar(), "pre");
  EXPECT_EQ(f["qk_norm"].Scalar(), "true");
  EXPECT_EQ(f["tie_embeddings"].Scalar(), "true");
  EXPECT_EQ(f["rope"]["theta"].Scalar(), "10000.0");
  EXPECT_EQ(f["rope"]["scaling"]["type"].Scalar(), "llama3");
  EXPECT_EQ(f["rope"]["scaling"]["original_max_position"].Scalar(), "8192");
  EXPECT_EQ(f["layers"].size(), 2u);
  EXPECT_EQ(f["layers"][1].Scalar(), "attention");
  EXPECT_EQ(f["moda"]["variant"].Scalar(), "extra_attn_kv+ffn_kv");
  EXPECT_EQ(f["moda"]["max_slots"].Scalar(), "3");
  EXPECT_EQ(f["moda"]["depth_key"].Scalar(), "reader");

  const YAML::Node mod = parse_json(hf_config_json(mod_config(), {}), "mod")["fathom"];
  EXPECT_EQ(mod["mod"]["capacity"].Scalar(), "0.5");
  EXPECT_EQ(mod["mod"]["every"].Scalar(), "2");
  EXPECT_EQ(mod["mod"]["router_weight"].Scalar(), "sigmoid");
  EXPECT_EQ(mod["mod"]["causal"].Scalar(), "predictor");
  const YAML::Node dsla = parse_json(hf_config_json(dsla_config(), {}), "dsla")["fathom"];
  EXPECT_EQ(dsla["layers"][0].Scalar(), "attention");
  EXPECT_EQ(dsla["layers"][1].Scalar(), "dsla");
  EXPECT_EQ(dsla["dsla"]["states"].Scalar(), "2");
  EXPECT_EQ(dsla["dsla"]["gamma"].Scalar(), "head");
}

TEST(HfExport, RemoteCodeFolderHoldsTheModelingFilesAndEveryParameter) {
  for (const ModelConfig& c : {moda_config(), mod_config(), dsla_config()}) {
    ScratchFolder dir;
    const TensorMap weights = random_weights(c, 30);
    export_hf_model(c, weights, (dir / "hf").string(), {});
    EXPECT_EQ(entries_of(dir / "hf"),
              (std::vector<std::string>{"config.json", "fathom_core.py", "model.safetensors", "modeling_fathom.py"}));
    for (const HfRemoteFile& file : hf_remote_code_files()) {
      EXPECT_GT(file.contents.size(), 1000u) << file.name;
      EXPECT_EQ(read_file((dir / "hf" / file.name).string()), file.contents) << file.name;
    }
    const SafetensorsFile saved = read_safetensors((dir / "hf" / "model.safetensors").string());
    ASSERT_EQ(saved.names().size(), weights.size());
    for (size_t i = 0; i < weights.size(); ++i) {
      EXPECT_EQ(saved.names()[i], weights[i].first);
      EXPECT_EQ(saved.load(weights[i].first).to_vector<float>(), weights[i].second.to_vector<float>());
    }
    // fathom's own hf: import reads native classes only, and says so.
    expect_error([&] { load_hf_model((dir / "hf").string()); }, {"'FathomForCausalLM' is not supported"});
  }
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
