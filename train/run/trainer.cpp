#include "train/run/trainer.h"

#include <chrono>

#include "train/checkpoint/checkpoint.h"
#include "train/measure/throughput.h"
#include "train/run/run.h"
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
  explicit ProgressReport(TrainingRun& run) : run_(run), first_step_(run.state().step) {
    // MFU needs the device's peak; the CPU has no entry and shows none.
#ifdef FATHOM_WITH_CUDA
    if (run.device().is_cuda()) peak_flops_ = dense_bf16_peak_flops(cuda::device_name(run.device().index));
#endif
    flops_per_token_ = training_flops_per_token(run.recipe().model, run.recipe().train.seq_len);
  }

  void count_step() { interval_tokens_ += run_.tokens_per_step(); }

  void write(const StepResult& step, double lr) {
    const RunState& state = run_.state();
    const int64_t total_steps = run_.recipe().train.steps;
    Progress p;
    p.step = state.step;
    p.total_steps = total_steps;
    p.loss = step.loss;
    p.lr = lr;
    p.grad_norm = step.grad_norm;
    p.tokens_per_second = double(interval_tokens_) / std::max(seconds_since(interval_start_), 1e-9);
    p.eta_seconds = seconds_since(run_start_) / double(state.step - first_step_) * double(total_steps - state.step);
    std::vector<std::pair<std::string, double>> fields{
        {"loss", p.loss}, {"z_loss", step.z_loss}, {"lr", lr}, {"grad_norm", step.grad_norm},
        {"tokens_per_second", p.tokens_per_second}, {"tokens_seen", double(state.tokens_seen)}};
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
    interval_tokens_ = 0;
  }

 private:
  TrainingRun& run_;
  const int64_t first_step_;
  double peak_flops_ = 0, flops_per_token_ = 0;
  Clock::time_point interval_start_ = Clock::now();
  const Clock::time_point run_start_ = Clock::now();
  int64_t interval_tokens_ = 0;
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
  ProgressReport progress(run);
  const int64_t total_steps = recipe.train.steps;
  // A resumed run first makes up the evaluation a kill after its checkpoint cut off (the final one too).
  if (options.resume)
    for (const auto& [domain, e] : run.evaluate_missing()) result.validation_loss[domain] = e.loss;
  while (!run.finished()) {
    const double lr = run.lr();
    const StepResult step = run.step();
    progress.count_step();
    result.last_loss = step.loss;
    const int64_t done = run.state().step;
    const bool last = done == total_steps;
    if (done % recipe.log.every == 0 || last) progress.write(step, lr);
    // Every rank stops at the same step, whichever saw the signal: the checkpoint is a collective.
    const bool stopping = run.any_rank(stop_requested()) && !last;
    if (stopping) run.log("stop requested: saving a checkpoint at step " + std::to_string(done));
    // The checkpoint comes before the evaluation: nothing after the step can lose it.
    if ((recipe.checkpoint.every > 0 && done % recipe.checkpoint.every == 0) || last || stopping) run.save();
    if (run.evaluation_due(done))
      for (const auto& [domain, e] : run.evaluate()) result.validation_loss[domain] = e.loss;
    if (stopping) {
      result.stopped_by_signal = true;
      break;
    }
  }
  if (run.device().is_cuda())
    run.log("device memory: peak " + gib(allocator_for(run.device()).stats(run.device()).peak) + " allocated, " +
            gib(run.memory_plan().total()) + " planned");
  result.steps_done = run.state().step;
  return result;
}

}  // namespace fathom
