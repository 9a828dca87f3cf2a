// Recipes: the YAML file that describes one run (docs/DESIGN.md section 6), parsed and validated into a
// Recipe with every field resolved.
//
// Every key, its type, range or choices, and whether it is required lives in one table,
// train/recipe/recipe_schema.cpp; defaults are the member initializers below. A key path names the member
// it sets (`train.optimizer.lr` -> Recipe::train.optimizer.lr), except `model.size`, which sets
// Recipe::model_size, and `model.init_from`, which sets Recipe::model_init_from.
//
// `model.init_from: hf:DIR | checkpoint:DIR` (train/run/model_source.h) starts the model from existing
// weights: the model config comes from the source (explicit model.* keys must agree with it; a
// disagreement is an error naming both values) and the trainer loads the source's weights instead
// of a random init.
//
// Paths (data.train, data.validation, log.dir) are kept exactly as written. Relative paths are
// relative to the current working directory of the `fathom` process, NOT to the recipe's folder,
// so a recipe behaves the same wherever it is stored and whatever copy a run saved.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "layers/model_config.h"

namespace fathom {

struct Recipe {
  struct Data {
    std::string tokenizer = "bytes";                             // "bytes" or a tokenizer file
    std::vector<std::string> train;                              // required, non-empty
    std::map<std::string, std::vector<std::string>> validation;  // domain -> files (sorted by domain); may be empty
    std::string documents = "lines";  // "lines" | "files": how a text file splits into documents
    std::string verify = "auto";      // "auto" | "always" | "never": shard SHA-256 checks (data/manifest_verify.h)
    bool operator==(const Data&) const = default;
  };
  struct Optimizer {  // AdamW
    double lr = 0;    // required, > 0
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
    double clip = 1.0;  // max global grad norm; 0 disables clipping
    bool operator==(const Optimizer&) const = default;
  };
  struct Schedule {
    std::string type = "cosine";  // "cosine" | "linear" | "constant"
    int64_t warmup_steps = 0;
    double final_lr_fraction = 0.1;  // the lr at the last step, as a fraction of optimizer.lr
    bool operator==(const Schedule&) const = default;
  };
  struct Train {
    std::string device = "auto";  // "auto" | "cpu" | "cuda"
    uint64_t seed = 1234;
    int64_t batch_size = 0;          // sequences per micro-batch; required
    int64_t grad_accum = 1;          // micro-batches per optimizer step
    int64_t seq_len = 0;             // required, > 1
    int64_t steps = 0;               // optimizer steps; always resolved (given, or derived from tokens)
    int64_t tokens = 0;              // the token budget when the recipe gave `tokens` instead of `steps`; else 0
    std::string precision = "bf16";  // "fp32" | "bf16" | "fp8" (bf16 + FP8 linears; the CPU emulates them)
    int64_t threads = 0;             // CPU threads; 0 = all cores, else 1..kMaxThreads
    // The objective's terms and weights (train/run/objective.h); a given map replaces this one whole.
    std::map<std::string, double> loss{{"ce", 1.0}, {"z_loss", 1e-5}};
    // Parameter-name globs (train/run/parameter_selection.h): train only these / freeze these.
    std::vector<std::string> trainable;
    std::vector<std::string> frozen;
    std::string recompute = "none";  // "none" | "selective" | "block" (layers/recompute.h)
    // Data parallel (distributed/): the precision gradients travel in between ranks, and ZeRO stage
    // (0: every rank holds the whole optimizer state; 1: AdamW moments and updates sharded over ranks).
    std::string grad_reduce = "fp32";  // "fp32" | "bf16"
    int64_t grad_bucket_kib = 16384;   // fp32 gradients per all-reduce bucket (16 MiB)
    int64_t zero = 0;                  // 0 | 1
    Optimizer optimizer;
    Schedule schedule;

    int64_t tokens_per_step() const { return batch_size * grad_accum * seq_len; }
    bool operator==(const Train&) const = default;
  };
  struct Eval {
    int64_t every = 0;    // steps between evaluations; 0 = only at the end
    int64_t batches = 8;  // batches per validation domain
    bool operator==(const Eval&) const = default;
  };
  struct Checkpoint {
    int64_t every = 0;      // steps between checkpoints; 0 = only at the end
    int64_t keep_last = 3;  // step folders kept; 0 keeps all
    bool operator==(const Checkpoint&) const = default;
  };
  // `fathom distill` (DESIGN.md 4.4, train/distill/distill_config.h): the section exists when teacher is set.
  // The recipe's model is the teacher's (distill.teacher stands for model.init_from); train.steps or
  // train.tokens, or steps_per_layer, is the length of each converted layer's training.
  struct Distill {
    std::string teacher;                        // "checkpoint:DIR" | "hf:DIR"
    std::vector<std::string> order{"entropy"};  // entropy | sensitivity | layer indices, first converted first
    std::vector<std::string> layers;            // a count ("2") or fractions of the layers ("0.25", "0.5")
    int64_t steps_per_layer = 0;                // resolved: train.steps when not given
    std::map<std::string, double> loss{{"layer_align", 1.0}};  // ce, logit_kl, layer_align, gate_cos
    double temperature = 1.0;                                  // logit_kl's softmax temperature
    std::string align = "mse";                                 // layer_align: mse | kl (over the hidden dimension)
    int64_t calibration_batches = 1;                           // order entropy: batches of training data it averages
    bool operator==(const Distill&) const = default;
  };
  struct Log {
    int64_t every = 10;  // steps between progress lines
    std::string dir;     // the run folder; defaults to "runs/<name>"
    bool operator==(const Log&) const = default;
  };

  std::string name = "run";     // letters, digits, '.', '_', '-', '+'
  std::string model_size;       // the `model.size` the model started from ("" if none)
  std::string model_init_from;  // `model.init_from`: "hf:DIR" or "checkpoint:DIR" ("" for a random init)
  ModelConfig model;
  Data data;
  Train train;
  Eval eval;
  Checkpoint checkpoint;
  Log log;
  Distill distill;

  bool operator==(const Recipe&) const = default;
};

// Where the model config of a recipe with model.init_from comes from. A new run reads init_from's
// source. A run that already has weights takes the model they were saved with, so the source may
// be gone by then: `train --resume` reads the latest checkpoint of the recipe's own run folder
// (log.dir), `eval --checkpoint` the checkpoint it evaluates. Explicit model keys must agree with
// whichever gives the model. Recipes without init_from ignore this.
struct ModelOrigin {
  enum class Kind { init_source, own_run, checkpoint };
  Kind kind = Kind::init_source;
  std::string checkpoint;  // Kind::checkpoint: a checkpoint folder, or a run folder (its latest)
};

// Reads and validates a recipe file. `overrides` are command-line `--set` strings "a.b=value"
// (value: a YAML scalar, flow list or flow mapping), applied over the file's values before
// validation; the last one for a key wins, and overriding train.steps drops the file's
// train.tokens (and the other way round). Every problem throws fathom::Error whose message()
// names the place ("recipe.yaml:12:3" or "--set a.b=value"), the full key path and what is wrong,
// with a "did you mean" suggestion for unknown keys.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {},
                   const ModelOrigin& origin = {});

// The same from YAML text; `source_name` stands for the file in messages.
Recipe parse_recipe(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {}, const ModelOrigin& origin = {});

// A saved, fully resolved recipe (a run's or a checkpoint's recipe.yaml). It already spells every
// model key, so its model.init_from is kept as written but not followed: the source may be gone.
Recipe parse_saved_recipe(const std::string& yaml_text, const std::string& source_name);

// The fully resolved recipe, every field explicit, in schema order; parse_recipe() of it gives back
// an equal Recipe. Saved with every run.
std::string recipe_to_yaml(const Recipe& recipe);

}  // namespace fathom
