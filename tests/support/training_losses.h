// Short training runs for the GPU-vs-CPU loss-curve tests: a tiny model trained on the shipped
// corpus with the byte tokenizer, the per-step losses read back from the run's metrics.jsonl.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/recipe/recipe.h"
#include "train/run/trainer.h"

namespace fathom::test {

// Trains `steps` steps (batch 4 x 64 tokens, lr 3e-3, logging every step into run_dir) on `device`
// ("cpu" or "cuda") and returns the training loss of every step. `model_sections` is the recipe's
// model section plus any other model-side section (e.g. "moda: {...}"), each ending in a newline;
// the model's vocab_size must cover the byte tokenizer's 264 ids. `precision` is train.precision
// (bf16: mixed precision on the GPU; the CPU always computes in fp32).
inline std::vector<double> tiny_training_losses(const std::filesystem::path& run_dir, const std::string& device,
                                                const std::string& model_sections, int steps = 20,
                                                const std::string& precision = "bf16") {
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";
  const Recipe recipe = parse_recipe(
      "name: gpu-vs-cpu\n" + model_sections + "data: {tokenizer: bytes, train: [" + corpus +
          "/train/sotu_2009-2019.txt]}\n"
          "train: {device: " +
          device + ", precision: " + precision + ", batch_size: 4, seq_len: 64, steps: " + std::to_string(steps) +
          ", optimizer: {lr: 3.0e-3}}\n"
          "log: {every: 1, dir: " +
          run_dir.string() + "}\n",
      "gpu-vs-cpu.yaml");
  RunOptions options;
  options.quiet = true;
  run_training(recipe, options);
  std::vector<double> losses;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const YAML::Node node = parse_json(line, "metrics.jsonl");
    if (node["kind"].as<std::string>() == "train") losses.push_back(node["loss"].as<double>());
  }
  return losses;
}

}  // namespace fathom::test
