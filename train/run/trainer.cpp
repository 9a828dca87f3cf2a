#include "train/run/trainer.h"

#include <chrono>

#include "train/checkpoint/checkpoint.h"
#include "train/measure/throughput.h"
#include "train/run/run.h"
#include "train/run/run_loop.h"
#include "train/run/stop_signal.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/runtime/backend.h"
#endif

namespace fathom {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The progress line and metrics of the steps since the last one.
class ProgressReport {
 public:
  explicit ProgressReport(TrainingRun& run)
      : run_(run), first_step_(run.state().step), interval_first_step_(run.state().step) {
    // MFU needs the device's peak; the CPU has no entry and shows none.
#ifdef FATHOM_WITH_CUDA
    if (run.device().is_cuda()) peak_flops_ = dense_bf16_peak_flops(cuda::device_name(run.device().index));
#endif
    flops_per_token_ = training_flops_per_token(run.recipe().model, run.recipe().train.seq_len);
  }

  void write(const StepResult& step, double lr) {
    const RunState& state = run_.state();
    const int64_t total_steps = run_.recipe().train.steps;
    Progress p;
    p.step = state.step;
    p.total_steps = total_steps;
    p.loss = step.loss;
    p.lr = lr;
    p.grad_norm = step.grad_norm;
    const int64_t interval_tokens = (state.step - interval_first_step_) * run_.tokens_per_step();
    p.tokens_per_second = double(interval_tokens) / std::max(seconds_since(interval_start_), 1e-9);
    p.eta_seconds = seconds_since(run_start_) / double(state.step - first_step_) * double(total_steps - state.step);
    std::vector<std::pair<std::string, double>> fields{{"loss", p.loss},
                                                       {"z_loss", step.z_loss},
                                                       {"lr", lr},
                                                       {"grad_norm", step.grad_norm},
                                                       {"tokens_per_second", p.tokens_per_second},
                                                       {"tokens_seen", double(state.tokens_seen)}};
    // Layer terms of the objective (ce and z_loss are logged above).
    for (const auto& [name, term] : step.terms)
      if (name != "ce" && name != "z_loss") fields.emplace_back("loss/" + name, term);
    if (peak_flops_ > 0) {
      p.mfu = p.tokens_per_second * flops_per_token_ / peak_flops_;
      fields.emplace_back("mfu", p.mfu);
    }
    if (run_.device().is_cuda()) {
      const MemoryStats memory = allocator_for(run_.device()).stats(run_.device());
      p.memory_gib = double(memory.current) / double(1 << 30);
      p.peak_memory_gib = double(memory.peak) / double(1 << 30);
      fields.emplace_back("memory_peak_bytes", double(memory.peak));
    }
    run_.log(format_progress(p));
    if (run_.writes()) run_.metrics().write("train", state.step, fields);
    interval_start_ = Clock::now();
    interval_first_step_ = state.step;
  }

 private:
  TrainingRun& run_;
  const int64_t first_step_;
  double peak_flops_ = 0, flops_per_token_ = 0;
  Clock::time_point interval_start_ = Clock::now();
  const Clock::time_point run_start_ = Clock::now();
  int64_t interval_first_step_;  // the step the current interval's steps came after
};

}  // namespace

TrainResult run_training(const Recipe& recipe, const RunOptions& options) {
  // First: a signal during start-up stops the run after its first step too, with a checkpoint.
  const StopSignalScope stop_signals;
  TrainingRun run(recipe, options);
  run.log(run.describe());
  TrainResult result;
  result.run_dir = run.folder();
  result.reports = run.writes();
  const auto keep_losses = [&result](const std::map<std::string, EvalResult>& evaluations) {
    for (const auto& [domain, e] : evaluations) result.validation_loss[domain] = e.loss;
  };
  ProgressReport progress(run);
  // A resumed run first makes up the evaluation a kill after its checkpoint cut off (the final one too).
  if (options.resume) keep_losses(run.evaluate_missing());
  RunLoop loop(run, {.report = [&progress](const LoopStep& step) { progress.write(step.result, step.lr); },
                     .evaluation_due = [&run](int64_t step) { return run.evaluation_due(step); },
                     .evaluate = [&] { keep_losses(run.evaluate()); },
                     .on_stop =
                         [&run](LoopEnd, int64_t step) {
                           run.log("stop requested: saving a checkpoint at step " + std::to_string(step));
                         }});
  const LoopOutcome outcome = loop.run();
  result.last_loss = outcome.last.loss;
  result.stopped_by_signal = outcome.end == LoopEnd::stop_requested;
  if (run.device().is_cuda())
    run.log("device memory: peak " + gib(allocator_for(run.device()).stats(run.device()).peak) + " allocated, " +
            gib(run.memory_plan().total()) + " planned");
  result.steps_done = run.state().step;
  return result;
}

}  // namespace fathom
