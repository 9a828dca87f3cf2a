// `fathom distill` (DESIGN.md 4.4): the chain. The layers are ranked (train/distill/distill_order.h); then for
// k = 1..K the k-th layer in that order becomes a dsla layer initialised from the teacher's q, k, v, o
// (train/distill/distill_init.h) and trains alone, everything else frozen, against the teacher
// (train/distill/distill_objective.h). Each step k is an ordinary training run (train/run/run.h) in the folder
// <log.dir>/M_k, driven by the loop `fathom train` runs (train/run/run_loop.h: its logging interval,
// checkpoints, stop signal and --max-steps), whose checkpoint is the nested model M_k that fathom eval
// and fathom generate take; the next layer starts from it. Every M_k is evaluated on each validation
// domain and measured (train/distill/distill_report.h).
//
// Data parallel (launched by mpirun, as `fathom train`): every rank runs the chain and trains its part
// of each layer's global batch; rank 0 alone writes the chain's files and console lines. A stop signal
// to any rank stops every rank after the same step, with the checkpoint of that step.
//
// Crash safety: a layer's run saves checkpoints as checkpoint.every says (and when stopped); --resume
// skips the layers whose run finished, resumes the one that did not from its latest checkpoint, and,
// since each run resumes bit for bit and every input of the next is a finished run's checkpoint, ends
// with the weights of the uninterrupted chain. A finished M_k's measures (validation per domain,
// decoding) are recorded in M_k/measures.json, the teacher's in teacher_measures.json: a resumed
// chain reads them back and neither evaluates nor rebuilds a finished model.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

#include "train/distill/distill_report.h"
#include "train/recipe/recipe.h"

namespace fathom {

struct DistillOptions {
  bool resume = false;
  bool quiet = false;
  // Stop (with a checkpoint) after this many training steps of this invocation, over all layers; 0: no
  // limit. A stop request (SIGINT/SIGTERM to any rank) stops the same way.
  int64_t max_steps = 0;
  std::filesystem::path recipe_file;
};

struct DistillResult {
  std::filesystem::path folder;
  std::vector<int64_t> order;          // the K layers converted, first first
  std::vector<DistilledModel> models;  // M_1..M_k of the layers finished
  ModelMeasures teacher;
  bool stopped = false;    // stopped before the chain's end (resume continues it)
  int64_t steps_done = 0;  // training steps of this invocation
  // What this invocation measured; a resumed chain reads the earlier results back (measures.json).
  int64_t models_measured = 0;
  bool teacher_measured = false;
};

DistillResult run_distillation(const Recipe& recipe, const DistillOptions& options);

// The recipe of M_k's run: the teacher's model with `converted` as dsla layers, training only the
// last of them (its projections, gates and gamma) for distill.steps_per_layer steps on distill.loss,
// in `folder`. It has no distill section: M_k is an ordinary fathom run.
Recipe converted_layer_recipe(const Recipe& recipe, const std::vector<int64_t>& converted,
                              const std::filesystem::path& folder);

}  // namespace fathom
