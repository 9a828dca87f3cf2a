// HF interop end to end: a trained checkpoint goes through `fathom export --format hf` and comes
// back through the importer unchanged; recipes start from HF folders and fathom checkpoints
// (model.init_from). With FATHOM_HF_EXPORT_DIR set, the exports and fathom's logits on them are
// also written there, for scripts/make_hf_fixtures.py check to load them in transformers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "autograd/grad_mode.h"
#include "core/safetensors.h"
#include "layers/decoder.h"
#include "layers/hf_import.h"
#include "layers/parameter_arena.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"
#include "train/run/trainer.h"

using namespace fathom;
namespace fs = std::filesystem;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";

// OLMo2 (post-norm, QK-norm) or Llama style (pre-norm, tied embeddings, llama3 RoPE scaling whose
// original context of 16 is shorter than the 32 trained, so the scaling changes the model).
std::string recipe_text(const fs::path& run_dir, const std::string& model, int steps, const std::string& extra = "") {
  return "name: hf\n"
         "model: " +
         model +
         "\n"
         "data: {tokenizer: bytes, train: [" +
         kCorpus +
         "]}\n"
         "train: {device: cpu, threads: 2, batch_size: 2, seq_len: 32, steps: " +
         std::to_string(steps) + ", optimizer: {lr: 3.0e-3" + extra +
         "}}\n"
         "log: {every: 1, dir: " +
         run_dir.string() + "}\n";
}

const std::string kOlmo2 = "{d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 48, vocab_size: 264}";
const std::string kLlama =
    "{d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 48, vocab_size: 264, norm: pre, qk_norm: false, "
    "tie_embeddings: true, rope_theta: 10000, rope_scaling: {type: llama3, factor: 4, low_freq_factor: 1, "
    "high_freq_factor: 4, original_max_position: 16}}";

RunOptions quiet() {
  RunOptions o;
  o.quiet = true;
  return o;
}

fs::path train(const fs::path& run_dir, const std::string& model, int steps) {
  run_training(parse_recipe(recipe_text(run_dir, model, steps), "hf.yaml"), quiet());
  return *latest_checkpoint(run_dir);
}

int run_cli(const std::string& args, const fs::path& err) {
  return std::system((std::string(FATHOM_BINARY) + " " + args + " > /dev/null 2> " + err.string()).c_str());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Tensor logits_of(const ModelConfig& config, const TensorMap& weights, const Tensor& ids) {
  NoGrad no_grad;
  Decoder model(config);
  ParameterArena arena(model, Device::cpu());
  arena.load(weights, "test");
  return model.logits(ids).value();
}

Tensor random_ids(int64_t B, int64_t T, int64_t vocab) {
  std::vector<int64_t> ids(size_t(B * T));
  uint64_t x = 12345;
  for (int64_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int64_t((x >> 33) % uint64_t(vocab));
  }
  return Tensor::from_vector(ids, {B, T});
}

// For the transformers check on the GPU machine: the export plus fathom's logits beside it.
void keep_for_transformers(const fs::path& exported, const std::string& name, const Tensor& ids, const Tensor& logits) {
  const char* keep = std::getenv("FATHOM_HF_EXPORT_DIR");
  if (!keep) return;
  const fs::path dest = fs::path(keep) / name;
  fs::remove_all(dest);
  fs::create_directories(dest.parent_path());
  fs::copy(exported, dest, fs::copy_options::recursive);
  write_safetensors((dest / "fathom_io.safetensors").string(), {{"input_ids", ids}, {"logits", logits}});
}

}  // namespace

TEST(HfInterop, ExportedCheckpointsImportUnchanged) {
  struct Case {
    std::string name, model, dtype;
  };
  for (const Case& c : {Case{"olmo2_f32", kOlmo2, "f32"}, Case{"llama_tied_llama3_bf16", kLlama, "bf16"}}) {
    SCOPED_TRACE(c.name);
    fathom::testing::ScratchFolder dir;
    const fs::path checkpoint = train(dir / "run", c.model, 2);
    const fs::path out = dir / "hf";
    ASSERT_EQ(run_cli("export --format hf --checkpoint " + (dir / "run").string() + " --out " + out.string() +
                          " --dtype " + c.dtype,
                      dir / "err"),
              0)
        << read_text(dir / "err");
    const CheckpointData saved = load_checkpoint(checkpoint);
    const Recipe recipe = parse_saved_recipe(saved.recipe_yaml, "recipe.yaml");
    const HfModel imported = load_hf_model(out.string());
    EXPECT_EQ(imported.config, recipe.model);
    EXPECT_EQ(imported.architecture, c.model == kOlmo2 ? "Olmo2ForCausalLM" : "LlamaForCausalLM");
    ASSERT_EQ(imported.weights.size(), saved.model.size());
    const DType stored = c.dtype == "bf16" ? DType::bf16 : DType::f32;
    for (size_t i = 0; i < saved.model.size(); ++i) {
      EXPECT_EQ(imported.weights[i].first, saved.model[i].first);
      EXPECT_EQ(imported.weights[i].second.to_vector<float>(),
                saved.model[i].second.to(stored).to(DType::f32).to_vector<float>())
          << saved.model[i].first;
    }
    const Tensor ids = random_ids(2, 32, recipe.model.vocab_size);
    const Tensor logits = logits_of(imported.config, imported.weights, ids);
    if (stored == DType::f32) {
      EXPECT_EQ(logits.to_vector<float>(), logits_of(recipe.model, saved.model, ids).to_vector<float>());
    }
    keep_for_transformers(out, c.name, ids, logits);
  }
}

TEST(HfInterop, ExportCliErrors) {
  fathom::testing::ScratchFolder dir;
  train(dir / "run", kOlmo2, 1);
  EXPECT_NE(run_cli("export --format onnx --checkpoint " + (dir / "run").string() + " --out " + (dir / "x").string(),
                    dir / "err"),
            0);
  EXPECT_NE(read_text(dir / "err").find("onnx"), std::string::npos) << read_text(dir / "err");
  EXPECT_NE(run_cli("export --format hf --checkpoint " + (dir / "nothing").string() + " --out " + (dir / "x").string(),
                    dir / "err"),
            0);
  EXPECT_NE(read_text(dir / "err").find("nothing"), std::string::npos) << read_text(dir / "err");
  fs::create_directories(dir / "full");
  std::ofstream(dir / "full" / "keep.txt") << "x";
  EXPECT_NE(run_cli("export --format hf --checkpoint " + (dir / "run").string() + " --out " + (dir / "full").string(),
                    dir / "err"),
            0);
  EXPECT_NE(read_text(dir / "err").find("--overwrite"), std::string::npos) << read_text(dir / "err");
  EXPECT_TRUE(fs::exists(dir / "full" / "keep.txt"));
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(HfInterop, RecipesStartFromHfFoldersAndCheckpoints) {
  fathom::testing::ScratchFolder dir;
  const fs::path source_checkpoint = train(dir / "source", kLlama, 2);
  const TensorMap source = load_checkpoint(source_checkpoint).model;
  ASSERT_EQ(run_cli("export --format hf --checkpoint " + (dir / "source").string() + " --out " + (dir / "hf").string(),
                    dir / "err"),
            0)
      << read_text(dir / "err");

  // One step at a negligible learning rate: the run's weights are the source's, not a random init.
  for (const std::string& from : {"hf:" + (dir / "hf").string(), "checkpoint:" + (dir / "source").string()}) {
    SCOPED_TRACE(from);
    const fs::path run = dir / ("from_" + from.substr(0, from.find(':')));
    const Recipe recipe =
        parse_recipe(recipe_text(run, "{init_from: '" + from + "', norm: pre}", 1, ", weight_decay: 0"), "hf.yaml",
                     {"train.optimizer.lr=1e-12"});
    EXPECT_EQ(recipe.model, parse_saved_recipe(load_checkpoint(source_checkpoint).recipe_yaml, "r").model);
    run_training(recipe, quiet());
    const CheckpointData trained = load_checkpoint(run);
    ASSERT_EQ(trained.model.size(), source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      const std::vector<float> a = trained.model[i].second.to_vector<float>(), b = source[i].second.to_vector<float>();
      for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], 1e-7) << source[i].first << "[" << j << "]";
    }
    // The saved recipe names the source and reads back without it.
    EXPECT_NE(trained.recipe_yaml.find("init_from:"), std::string::npos);
    EXPECT_EQ(parse_saved_recipe(trained.recipe_yaml, "saved").model_init_from, from);
  }

  // A source whose config changed between reading the recipe and starting the run.
  const Recipe stale =
      parse_recipe(recipe_text(dir / "stale", "{init_from: 'hf:" + (dir / "hf").string() + "'}", 1), "hf.yaml");
  std::string config = read_text(dir / "hf" / "config.json");
  config.replace(config.find("\"rms_norm_eps\""), 14, "\"rms_norm_eps\": 0.001, \"unused\"");
  std::ofstream(dir / "hf" / "config.json") << config;
  try {
    run_training(stale, quiet());
    ADD_FAILURE() << "a changed source was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("changed since the recipe was read"), std::string::npos) << e.message();
  }
}
