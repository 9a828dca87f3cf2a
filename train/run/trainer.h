// `fathom train`: a TrainingRun (train/run/run.h) through the run loop (train/run/run_loop.h), with
// the training progress line and metrics at log.every, checkpoints at checkpoint.every, evaluation at
// eval.every, both after the last step, and a clean stop with a checkpoint on SIGINT/SIGTERM to any
// rank.
#pragma once
#include <filesystem>
#include <map>
#include <string>

#include "train/recipe/recipe.h"
#include "train/recipe/run_options.h"

namespace fathom {

struct TrainResult {
  std::filesystem::path run_dir;
  int64_t steps_done = 0;  // optimizer steps in the run, including resumed ones
  double last_loss = 0;    // training loss of the last step (mean over its micro-batches)
  bool stopped_by_signal = false;
  std::map<std::string, double> validation_loss;  // per domain, from the last evaluation (rank 0's)
  bool reports = true;                            // this process speaks for the run (rank 0 of a data-parallel job)
};

TrainResult run_training(const Recipe& recipe, const RunOptions& options);

}  // namespace fathom
