// A training run opened from its recipe: device, data, model and its parameters (frozen ones
// included), optimizer, schedule, resumable state, run folder, metrics, checkpoints and evaluation.
// `fathom train` (train/run/trainer.cpp) and `fathom distill`, one per converted layer
// (train/distill/distill_chain.cpp), drive it through the same run loop (train/run/run_loop.h).
// Opening checks everything that can be checked before a file is written: the memory plan fits, the
// run folder may be taken, a resumed run matches its checkpoint.
//
// Data parallel (launched by mpirun, distributed/world.h): every rank opens the same run and trains
// on its part of each global batch (batch_size x grad_accum x world sequences); only rank 0 takes the
// run folder and writes logs, metrics and checkpoints, and every rank waits until a checkpoint is
// complete before it goes on.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "data/loader.h"
#include "distributed/communicator.h"
#include "distributed/data_parallel.h"
#include "layers/decoder.h"
#include "layers/linear.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/checkpoint/run_dir.h"
#include "train/checkpoint/run_state.h"
#include "train/measure/evaluator.h"
#include "train/measure/memory_plan.h"
#include "train/measure/metrics_log.h"
#include "train/recipe/recipe.h"
#include "train/recipe/run_options.h"
#include "train/run/objective.h"
#include "train/run/run_data.h"
#include "train/run/train_step.h"

namespace fathom {

class TrainingRun {
 public:
  TrainingRun(const Recipe& recipe, const RunOptions& options);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // One optimizer step on the next global batch at the schedule's learning rate; advances the state.
  StepResult step();
  bool finished() const { return state_.step >= recipe_.train.steps; }
  // Saves a checkpoint of the current step (the folder's first one lets a replaced run go).
  std::filesystem::path save();
  // Every validation domain, without gradients, its batches shared among the ranks (every rank must
  // call it); written to metrics.jsonl and the console.
  std::map<std::string, EvalResult> evaluate();
  // Whether the recipe evaluates at `step` (every eval.every steps, and at the last).
  bool evaluation_due(int64_t step) const;
  // The current step's due evaluations that metrics.jsonl lacks, for a run resumed from a checkpoint
  // whose evaluation a kill cut off (the checkpoint is written first); nothing when none is missing.
  std::map<std::string, EvalResult> evaluate_missing();
  // A console line (none when quiet, and none on ranks other than 0).
  void log(const std::string& line) const;
  // Rank 0 of the world writes the run's files and console lines; the other ranks only train.
  bool writes() const { return comm_->rank() == 0; }
  // True on every rank when `flag` is true on any (a stop signal one rank saw: all save together).
  bool any_rank(bool flag);
  const Communicator& communicator() const { return *comm_; }

  const Recipe& recipe() const { return recipe_; }
  Device device() const { return device_; }
  const Decoder& model() const { return *model_; }
  const ParameterArena& parameters() const { return *arena_; }
  const RunState& state() const { return state_; }
  MetricsLog& metrics() { return *metrics_; }
  const MemoryPlan& memory_plan() const { return memory_plan_; }
  const std::filesystem::path& folder() const { return run_dir_; }
  // Tokens of one global batch (every rank's).
  int64_t tokens_per_step() const { return tokens_per_step_; }
  double lr() const { return schedule_.lr(state_.step); }
  // What the start-up prints: parameters, device, steps, precision and the memory plan.
  std::string describe() const;

 private:
  // Opening, in order (each step reads what the ones before it set).
  void join_world();          // device, communicator, threads, tokens per step (and steps of a token budget)
  void plan_memory();         // precision, frozen set and the memory plan, checked against the device
  void check_run_folder();    // the run folder may be taken; a resumed run matches its checkpoint
  void build_model();         // model and parameters, initialised or given their starting weights
  void build_optimizer();     // data parallel, AdamW and the schedule
  void restore_checkpoint();  // --resume: weights, moments, state and the loader's position

  Recipe recipe_;
  RunOptions options_;
  // Evaluates `domains` (all of them when null), records each and returns the results.
  std::map<std::string, EvalResult> evaluate_domains(const std::set<std::string>* domains);
  Communicator* comm_ = nullptr;
  Device device_;
  std::filesystem::path run_dir_;
  int threads_ = 0;
  bool mixed_ = false;
  Fp8Linears fp8_linears_;  // train.precision fp8: which linears run as FP8 GEMMs
  std::set<std::string> frozen_;
  Objective objective_;
  MemoryPlan memory_plan_;
  std::unique_ptr<RunFolder> folder_;
  RunData data_;
  std::unique_ptr<TokenLoader> loader_;
  std::unique_ptr<Decoder> model_;
  std::unique_ptr<ParameterArena> arena_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<DataParallel> data_parallel_;
  Schedule schedule_;
  RunState state_;
  std::string recipe_yaml_;
  std::unique_ptr<MetricsLog> metrics_;
  int64_t tokens_per_step_ = 0;
};

}  // namespace fathom
