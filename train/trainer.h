// The training loop: recipe -> model, data, optimizer; progress lines, metrics.jsonl, periodic
// evaluation and checkpoints, bit-exact resume, clean stop on SIGINT/SIGTERM, NaN detection.
#pragma once
#include <filesystem>
#include <map>
#include <string>

#include "train/recipe.h"

namespace fathom {

struct TrainOptions {
  bool resume = false;     // continue from the run folder's latest checkpoint
  bool overwrite = false;  // replace an existing run folder once the new run has a checkpoint (train/run_dir.h)
  bool quiet = false;      // no progress lines (tests)
  std::filesystem::path recipe_file;  // the recipe's file, if any: --overwrite must not delete it
};

struct TrainResult {
  std::filesystem::path run_dir;
  int64_t steps_done = 0;  // optimizer steps in the run, including resumed ones
  double last_loss = 0;    // training loss of the last step (mean over its micro-batches)
  bool stopped_by_signal = false;
  std::map<std::string, double> validation_loss;  // per domain, from the last evaluation
};

TrainResult run_training(const Recipe& recipe, const TrainOptions& options);

}  // namespace fathom
