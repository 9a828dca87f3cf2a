// How a run is started from the command line (train --resume / --overwrite; tests run quiet).
#pragma once
#include <filesystem>
#include <functional>

#include "core/safetensors.h"
#include "layers/decoder.h"
#include "train/measure/memory_plan.h"
#include "train/run/extra_losses.h"

namespace fathom {

struct RunOptions {
  bool resume = false;  // continue from the run folder's latest checkpoint
  bool overwrite =
      false;           // replace an existing run folder once the new run has a checkpoint (train/checkpoint/run_dir.h)
  bool quiet = false;  // no console lines (tests)
  std::filesystem::path recipe_file;  // the recipe's file, if any: --overwrite must not delete it
  // Distillation (train/distill/distill_chain.h) drives one run per converted layer through these. A new run's
  // starting weights: given the initialised values by name (a copy), the caller replaces those it has.
  std::function<void(TensorMap& weights)> start_weights = nullptr;
  // What each step's forward also reports, and losses added to its output before the objective.
  ForwardOptions forward{};
  ExtraLosses extra_losses = nullptr;
  // The teacher those losses read: counted in the run's memory plan and its fit check.
  std::optional<TeacherMemoryInput> teacher_memory = std::nullopt;
};

}  // namespace fathom
