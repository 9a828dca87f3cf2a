// A tiny teacher trained once per test binary on the quickstart corpus, and distillation recipes
// around it, shared by the distillation tests.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"
#include "train/run/trainer.h"

namespace fathom::testing {

inline const std::string kDistillCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";

inline std::string tiny_data_and_train(int steps) {
  return "data:\n"
         "  tokenizer: bytes\n"
         "  train: [" +
         kDistillCorpus +
         "/train/sotu_2009-2019.txt]\n"
         "  validation: {moby_dick: [" +
         kDistillCorpus +
         "/validation/moby_dick.txt]}\n"
         "train: {device: cpu, threads: 2, batch_size: 4, seq_len: 32, steps: " +
         std::to_string(steps) +
         ", optimizer: {lr: 3.0e-3}, schedule: {warmup_steps: 5}}\n"
         "eval: {every: 0, batches: 2}\n";
}

// The teacher's run folder: a 2-layer decoder trained 200 steps (a few seconds on 2 cores).
inline const std::filesystem::path& tiny_teacher() {
  static ScratchFolder folder;
  static const std::filesystem::path run = [] {
    const std::filesystem::path dir = folder / "teacher";
    const std::string yaml =
        "name: teacher\n"
        "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, "
        "vocab_size: 264}\n" +
        tiny_data_and_train(200) + "checkpoint: {every: 0}\nlog: {every: 50, dir: " + dir.string() + "}\n";
    RunOptions options;
    options.quiet = true;
    run_training(parse_recipe(yaml, "teacher.yaml"), options);
    return dir;
  }();
  return run;
}

// A distillation of the tiny teacher into `dir`; `distill` is the section's flow mapping body.
inline std::string distill_yaml(const std::filesystem::path& dir, const std::string& distill, int steps_per_layer) {
  return "name: distilled\n"
         "distill: {teacher: 'checkpoint:" +
         tiny_teacher().string() + "', steps_per_layer: " + std::to_string(steps_per_layer) +
         (distill.empty() ? "" : ", " + distill) + "}\n" +
         "data:\n"
         "  tokenizer: bytes\n"
         "  train: [" +
         kDistillCorpus +
         "/train/sotu_2009-2019.txt]\n"
         "  validation: {moby_dick: [" +
         kDistillCorpus +
         "/validation/moby_dick.txt]}\n"
         "train: {device: cpu, threads: 2, batch_size: 4, seq_len: 32, optimizer: {lr: 3.0e-3, weight_decay: 0}, "
         "schedule: {warmup_steps: 2}}\n"
         "eval: {every: 0, batches: 2}\n"
         "checkpoint: {every: 4, keep_last: 0}\n"
         "log: {every: 5, dir: " +
         dir.string() + "}\n";
}

// A run's (or checkpoint's) weights by name, as floats.
inline std::map<std::string, std::vector<float>> weights_of(const std::filesystem::path& run) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : load_checkpoint(run, CheckpointUse::model_only).model) out[name] = t.to_vector<float>();
  return out;
}

}  // namespace fathom::testing
