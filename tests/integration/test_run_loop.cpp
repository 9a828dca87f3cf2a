// The run loop (train/run/run_loop.h) over a tiny run on the CPU: the steps it reports, checkpoints
// and evaluates, its step budget, a stop request, and a stop request on the last step.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"
#include "train/run/run.h"
#include "train/run/run_loop.h"
#include "train/run/stop_signal.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::ScratchFolder;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";

// Seven steps, logged and checkpointed every three.
Recipe seven_steps(const fs::path& run_dir) {
  return parse_recipe(
      "name: loop\n"
      "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, vocab_size: 264}\n"
      "data: {tokenizer: bytes, train: [" +
          kCorpus +
          "/train/sotu_2009-2019.txt]}\n"
          "train: {device: cpu, threads: 2, batch_size: 2, seq_len: 32, steps: 7, "
          "optimizer: {lr: 3.0e-3}, schedule: {warmup_steps: 2}}\n"
          "checkpoint: {every: 3, keep_last: 10}\n"
          "log: {every: 3, dir: " +
          run_dir.string() + "}\n",
      "loop.yaml");
}

RunOptions quiet(bool resume = false) {
  RunOptions o;
  o.quiet = true;
  o.resume = resume;
  return o;
}

std::vector<int64_t> checkpoint_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  for (const auto& [step, folder] : list_checkpoints(run_dir)) steps.push_back(step);
  return steps;
}

int64_t latest_step(const fs::path& run_dir) {
  const auto checkpoints = list_checkpoints(run_dir);
  return checkpoints.empty() ? 0 : checkpoints.back().first;
}

}  // namespace

TEST(RunLoop, ReportsCheckpointsAndEvaluatesAtTheirIntervalsAndAtTheLastStep) {
  ScratchFolder dir;
  TrainingRun run(seven_steps(dir / "run"), quiet());
  std::vector<int64_t> reported, evaluated;
  RunLoop loop(run, {.report =
                         [&](const LoopStep& step) {
                           reported.push_back(step.step);
                           EXPECT_EQ(step.taken, step.step);
                           EXPECT_EQ(step.last, step.step == 7);
                         },
                     .evaluation_due = [](int64_t step) { return step % 2 == 0; },
                     .evaluate =
                         [&] {
                           evaluated.push_back(run.state().step);
                           // A step's checkpoint comes before its evaluation.
                           if (run.state().step % 3 == 0) {
                             EXPECT_EQ(latest_step(dir / "run"), run.state().step);
                           }
                         }});
  const LoopOutcome outcome = loop.run();
  EXPECT_EQ(outcome.end, LoopEnd::finished);
  EXPECT_EQ(outcome.steps_taken, 7);
  EXPECT_GT(outcome.last.loss, 0.0);
  EXPECT_EQ(reported, (std::vector<int64_t>{3, 6, 7}));
  EXPECT_EQ(evaluated, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(checkpoint_steps(dir / "run"), (std::vector<int64_t>{3, 6, 7}));
}

TEST(RunLoop, AStepBudgetStopsWithACheckpointAndASpentOneTakesNoStep) {
  ScratchFolder dir;
  {
    TrainingRun run(seven_steps(dir / "run"), quiet());
    const LoopOutcome outcome = RunLoop(run, {.step_budget = 4}).run();
    EXPECT_EQ(outcome.end, LoopEnd::step_budget);
    EXPECT_EQ(outcome.steps_taken, 4);
    EXPECT_EQ(checkpoint_steps(dir / "run"), (std::vector<int64_t>{3, 4}));
  }
  {
    TrainingRun run(seven_steps(dir / "run"), quiet(true));
    const LoopOutcome outcome = RunLoop(run, {.step_budget = 0}).run();
    EXPECT_EQ(outcome.end, LoopEnd::step_budget);
    EXPECT_EQ(outcome.steps_taken, 0);
    EXPECT_EQ(run.state().step, 4);
    EXPECT_EQ(latest_step(dir / "run"), 4);
  }
  TrainingRun run(seven_steps(dir / "run"), quiet(true));
  const LoopOutcome outcome = RunLoop(run, {}).run();
  EXPECT_EQ(outcome.end, LoopEnd::finished);
  EXPECT_EQ(outcome.steps_taken, 3);
  EXPECT_EQ(checkpoint_steps(dir / "run"), (std::vector<int64_t>{3, 4, 6, 7}));
}

TEST(RunLoop, AStopRequestSavesItsStepExceptAtTheLastStepWhichEndsTheRunAnyway) {
  ScratchFolder dir;
  {
    TrainingRun run(seven_steps(dir / "run"), quiet());
    std::vector<int64_t> stops;
    request_stop();  // as SIGINT or SIGTERM to any rank would
    const LoopOutcome outcome =
        RunLoop(run, {.on_stop =
                          [&](LoopEnd why, int64_t step) {
                            EXPECT_EQ(why, LoopEnd::stop_requested);
                            EXPECT_EQ(latest_step(dir / "run"), 0);  // told before the checkpoint
                            stops.push_back(step);
                          }})
            .run();
    clear_stop_request();
    EXPECT_EQ(outcome.end, LoopEnd::stop_requested);
    EXPECT_EQ(outcome.steps_taken, 1);
    EXPECT_EQ(stops, (std::vector<int64_t>{1}));
    EXPECT_EQ(checkpoint_steps(dir / "run"), (std::vector<int64_t>{1}));
  }
  // Requested during the last step: the run finishes as it would have.
  TrainingRun run(seven_steps(dir / "run"), quiet(true));
  const LoopOutcome outcome = RunLoop(run, {.step =
                                                [&run] {
                                                  const StepResult result = run.step();
                                                  if (run.finished()) request_stop();
                                                  return result;
                                                },
                                            .on_stop = [](LoopEnd, int64_t) { ADD_FAILURE() << "stopped early"; }})
                                  .run();
  clear_stop_request();
  EXPECT_EQ(outcome.end, LoopEnd::finished);
  EXPECT_EQ(outcome.steps_taken, 6);
  EXPECT_EQ(checkpoint_steps(dir / "run"), (std::vector<int64_t>{1, 3, 6, 7}));
}
