#include "train/run/run_loop.h"

#include <utility>

#include "train/run/stop_signal.h"

namespace fathom {

RunLoop::RunLoop(TrainingRun& run, RunLoopConfig config) : run_(run), config_(std::move(config)) {
  if (!config_.step) config_.step = [r = &run] { return r->step(); };
  if (!config_.save) config_.save = [r = &run] { r->save(); };
}

LoopOutcome RunLoop::run() {
  LoopOutcome outcome;
  while (!run_.finished()) {
    if (budget_spent()) {  // spent before this loop's first step: nothing to save
      outcome.end = LoopEnd::step_budget;
      break;
    }
    const double lr = run_.lr();
    outcome.last = config_.step();
    outcome.steps_taken = ++taken_;
    const std::optional<LoopEnd> stop =
        after_step(LoopStep{outcome.last, lr, run_.state().step, taken_, run_.finished()});
    if (stop) {
      outcome.end = *stop;
      break;
    }
  }
  return outcome;
}

bool RunLoop::budget_spent() const { return config_.step_budget && taken_ >= *config_.step_budget; }

std::optional<LoopEnd> RunLoop::after_step(const LoopStep& step) {
  if (config_.report && logging_due(step)) config_.report(step);
  const std::optional<LoopEnd> stop = stop_after(step.last);
  if (stop && config_.on_stop) config_.on_stop(*stop, step.step);
  // The checkpoint comes before the evaluation: nothing after the step can lose it.
  if (checkpoint_due(step) || stop) config_.save();
  if (config_.evaluation_due && config_.evaluate && config_.evaluation_due(step.step)) config_.evaluate();
  return stop;
}

std::optional<LoopEnd> RunLoop::stop_after(bool last) {
  // Every rank asks every step (a collective), and every rank gets the same answer: whichever rank
  // saw the signal, all stop after this step and save it together.
  const bool signalled = run_.any_rank(stop_requested());
  if (last) return std::nullopt;
  if (signalled) return LoopEnd::stop_requested;
  if (budget_spent()) return LoopEnd::step_budget;
  return std::nullopt;
}

bool RunLoop::logging_due(const LoopStep& step) const { return step.step % run_.recipe().log.every == 0 || step.last; }

bool RunLoop::checkpoint_due(const LoopStep& step) const {
  const int64_t every = run_.recipe().checkpoint.every;
  return (every > 0 && step.step % every == 0) || step.last;
}

}  // namespace fathom
