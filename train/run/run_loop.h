// The one training loop over a TrainingRun (train/run/run.h). `fathom train` (train/run/trainer.cpp)
// and each layer of a chained distillation (train/distill/distill_chain.cpp) run it; they differ only
// in what they hand it: their progress report, their evaluation, their checkpoint writer and their
// step budget. The loop is the policy they share, step after step:
//   1. the step function (TrainingRun::step unless the caller gives one; its train_step refuses a
//      non-finite loss or gradient norm before the update, naming the step and the last checkpoint);
//   2. the progress report, every log.every steps and at the run's last step;
//   3. whether to stop early: a SIGINT/SIGTERM that ANY rank saw (train/run/stop_signal.h; every rank
//      learns it, so all stop after the same step and save together), or the step budget spent.
//      The last step is never an early stop: the run ends there anyway;
//   4. a checkpoint every checkpoint.every steps, at the last step and when stopping early;
//   5. the evaluation where the caller's rule has one due, after the checkpoint, so that nothing
//      after a step can lose the step.
// A budget that is spent before the loop's first step stops it at once, with nothing to save.
// Every rank runs the loop (the step, the stop decision, the checkpoint and the evaluation are
// collectives), and every rank ends it at the same step.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "train/run/run.h"

namespace fathom {

// How a loop ended.
enum class LoopEnd {
  finished,        // the run's last step is done (perhaps before the loop started: a finished run)
  stop_requested,  // SIGINT/SIGTERM on some rank: stopped with a checkpoint
  step_budget,     // the caller's budget is spent: stopped with a checkpoint, or before any step
};

// A step the loop has just taken, as its report sees it.
struct LoopStep {
  const StepResult& result;
  double lr = 0;      // the step's learning rate
  int64_t step = 0;   // the run's steps after it: the step's own 1-based number
  int64_t taken = 0;  // steps this loop has taken, this one included
  bool last = false;  // the run's last step
};

struct RunLoopConfig {
  // One optimizer step; TrainingRun::step when empty.
  std::function<StepResult()> step = nullptr;
  // The progress line and metrics record of a logged step; none when empty.
  std::function<void(const LoopStep&)> report = nullptr;
  // Whether an evaluation is due after a step (by its number), and the evaluation itself; every rank
  // calls both, since the ranks share the validation batches. No evaluation when either is empty.
  std::function<bool(int64_t step)> evaluation_due = nullptr;
  std::function<void()> evaluate = nullptr;
  // The checkpoint writer (every rank calls it: saving is a collective); TrainingRun::save when empty.
  std::function<void()> save = nullptr;
  // The stopping rule besides the stop signal: how many steps this loop may take; none: no limit.
  std::optional<int64_t> step_budget = std::nullopt;
  // Told of an early stop after its step, before its checkpoint (a console line, say).
  std::function<void(LoopEnd why, int64_t step)> on_stop = nullptr;
};

struct LoopOutcome {
  LoopEnd end = LoopEnd::finished;
  int64_t steps_taken = 0;
  StepResult last;  // the last step this loop took; zeros when it took none
};

class RunLoop {
 public:
  RunLoop(TrainingRun& run, RunLoopConfig config);
  // Steps the run until it finishes or stops early.
  LoopOutcome run();

 private:
  bool budget_spent() const;
  // Report, stop decision, checkpoint and evaluation after a step; the early stop, if any.
  std::optional<LoopEnd> after_step(const LoopStep& step);
  // Why the loop stops after the step just taken; nullopt: it goes on.
  std::optional<LoopEnd> stop_after(bool last);
  bool logging_due(const LoopStep& step) const;
  bool checkpoint_due(const LoopStep& step) const;

  TrainingRun& run_;
  RunLoopConfig config_;
  int64_t taken_ = 0;
};

}  // namespace fathom
