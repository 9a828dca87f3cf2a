// End-to-end runs of the trainer on the shipped corpus: loss falls, resume is bit-exact, a stop
// request checkpoints, NaN stops the run, run folders are protected.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/safetensors.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/measure/evaluator.h"
#include "train/recipe/recipe.h"
#include "train/run/stop_signal.h"
#include "train/run/trainer.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::error_of;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";

std::string tiny_recipe(const fs::path& run_dir, int steps) {
  return "name: tiny\n"
         "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, vocab_size: 264}\n"
         "data:\n"
         "  tokenizer: bytes\n"
         "  train: [" +
         kCorpus +
         "/train/sotu_2009-2019.txt]\n"
         "  validation: {moby_dick: [" +
         kCorpus +
         "/validation/moby_dick.txt]}\n"
         "train: {device: cpu, threads: 2, batch_size: 4, seq_len: 32, steps: " +
         std::to_string(steps) +
         ", optimizer: {lr: 3.0e-3}, schedule: {warmup_steps: 2}}\n"
         "eval: {every: 0, batches: 2}\n"
         "checkpoint: {every: 3, keep_last: 10}\n"
         "log: {every: 1, dir: " +
         run_dir.string() + "}\n";
}

Recipe recipe_for(const fs::path& run_dir, int steps, const std::vector<std::string>& overrides = {}) {
  return parse_recipe(tiny_recipe(run_dir, steps), "tiny.yaml", overrides);
}

RunOptions quiet() {
  RunOptions o;
  o.quiet = true;
  return o;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void expect_same_weights(const fs::path& a, const fs::path& b) {
  const TensorMap wa = load_checkpoint(a).model, wb = load_checkpoint(b).model;
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    ASSERT_EQ(wa[i].first, wb[i].first);
    ASSERT_EQ(wa[i].second.to_vector<float>(), wb[i].second.to_vector<float>()) << wa[i].first;
  }
}

}  // namespace

TEST(Train, LossFallsAndRunFolderIsComplete) {
  fathom::testing::ScratchFolder dir;
  const TrainResult r = run_training(recipe_for(dir / "run", 30, {"checkpoint.keep_last=2"}), quiet());
  EXPECT_EQ(r.steps_done, 30);
  EXPECT_FALSE(r.stopped_by_signal);
  EXPECT_LT(r.last_loss, 4.0);  // from ln(264) = 5.58
  ASSERT_TRUE(r.validation_loss.count("moby_dick"));
  EXPECT_LT(r.validation_loss.at("moby_dick"), 4.5);
  EXPECT_TRUE(fs::exists(dir / "run" / "recipe.yaml"));
  const std::vector<std::string> metrics = lines_of(dir / "run" / "metrics.jsonl");
  EXPECT_EQ(metrics.size(), 31u);  // 30 train lines + 1 eval
  EXPECT_NE(metrics.front().find("\"step\":1"), std::string::npos) << metrics.front();
  // keep_last = 2 of the checkpoints at 3, 6, ..., 30.
  int folders = 0;
  for (const auto& e : fs::directory_iterator(dir / "run" / "checkpoints")) folders += e.is_directory();
  EXPECT_EQ(folders, 2);
  EXPECT_EQ(latest_checkpoint(dir / "run")->filename(), "step_00000030");
}

TEST(Train, StopThenResumeEqualsUninterruptedRunBitForBit) {
  fathom::testing::ScratchFolder dir;
  run_training(recipe_for(dir / "straight", 7), quiet());

  request_stop();  // as SIGINT would: the run finishes step 1, checkpoints and returns
  const TrainResult stopped = run_training(recipe_for(dir / "resumed", 7), quiet());
  clear_stop_request();
  EXPECT_TRUE(stopped.stopped_by_signal);
  EXPECT_EQ(stopped.steps_done, 1);
  RunOptions resume = quiet();
  resume.resume = true;
  const TrainResult finished = run_training(recipe_for(dir / "resumed", 7), resume);
  EXPECT_EQ(finished.steps_done, 7);
  expect_same_weights(dir / "straight", dir / "resumed");
  EXPECT_EQ(lines_of(dir / "straight" / "metrics.jsonl").size(), lines_of(dir / "resumed" / "metrics.jsonl").size());
}

TEST(Train, SignalHandlersComeBackAfterTheRun) {
  // A SIGTERM handler of the test's own: the run replaces it while it trains, then puts it back, and
  // SIGINT's as well.
  struct sigaction mine = {}, seen = {}, previous = {}, interrupt = {};
  mine.sa_handler = SIG_IGN;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGTERM, &mine, &previous), 0);
  ASSERT_EQ(sigaction(SIGINT, nullptr, &interrupt), 0);
  fathom::testing::ScratchFolder dir;
  run_training(recipe_for(dir / "run", 2), quiet());
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &seen), 0);
  EXPECT_EQ(seen.sa_handler, SIG_IGN);
  ASSERT_EQ(sigaction(SIGINT, nullptr, &seen), 0);
  EXPECT_EQ(seen.sa_handler, interrupt.sa_handler);
  sigaction(SIGTERM, &previous, nullptr);
  {
    const StopSignalScope scope;  // and while one is alive, they are the stop request's
    ASSERT_EQ(sigaction(SIGTERM, nullptr, &seen), 0);
    EXPECT_NE(seen.sa_handler, previous.sa_handler);
  }
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &seen), 0);
  EXPECT_EQ(seen.sa_handler, previous.sa_handler);
}

// For the OLMo2 model, a hybrid whose second layer is dsla (two states, gamma per head), and MoD with
// the random router (whose draws are named by the micro-batch, not by the process's forward count).
class ResumeFromAMidRunCheckpoint : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ResumeFromAMidRunCheckpoint, IsBitExact) {
  fathom::testing::ScratchFolder dir;
  const std::vector<std::string>& model = GetParam();
  const TrainResult first = run_training(recipe_for(dir / "a", 9, model), quiet());
  EXPECT_LT(first.last_loss, 5.3);  // from ln(264) = 5.58
  // Resume a copy of the run from its step-3 checkpoint (as if it had crashed after step 3).
  fs::copy(dir / "a", dir / "b", fs::copy_options::recursive);
  fs::remove_all(dir / "b" / "checkpoints" / "step_00000006");
  fs::remove_all(dir / "b" / "checkpoints" / "step_00000009");
  std::ofstream(dir / "b" / "checkpoints" / "latest") << "step_00000003\n";
  RunOptions resume = quiet();
  resume.resume = true;
  run_training(recipe_for(dir / "b", 9, model), resume);
  expect_same_weights(dir / "a", dir / "b");
  expect_same_weights(dir / "a" / "checkpoints" / "step_00000006", dir / "b" / "checkpoints" / "step_00000006");
}

INSTANTIATE_TEST_SUITE_P(Train, ResumeFromAMidRunCheckpoint,
                         ::testing::Values(std::vector<std::string>{},
                                           std::vector<std::string>{"model.layers=[attention, dsla]",
                                                                    "dsla.gamma=head"},
                                           std::vector<std::string>{"mod.capacity=0.25", "mod.every=2",
                                                                    "mod.router=random", "train.grad_accum=2"},
                                           std::vector<std::string>{"train.precision=fp8"}),
                         [](const auto& info) {
                           return info.param.empty()                        ? "olmo2"
                                  : info.param[0].starts_with("mod.")       ? "mod_random"
                                  : info.param[0].starts_with("train.prec") ? "fp8_emulation"
                                                                            : "dsla_hybrid";
                         });

// recipes/dsla: each hybrid (and its baseline) trains a few steps of its own model on the CPU and the
// loss falls (shorter batches than the recipe's, for the test's time).
TEST(Train, DslaRecipesTrainAndTheLossFalls) {
  for (const char* name : {"hybrid_2state", "hybrid_1state", "attention_baseline"}) {
    fathom::testing::ScratchFolder dir;
    const Recipe recipe = load_recipe(
        std::string(FATHOM_SOURCE_DIR) + "/recipes/dsla/" + std::string(name) + ".yaml",
        {"train.device=cpu", "train.threads=2", "train.batch_size=2", "train.seq_len=96", "train.steps=12",
         "train.schedule.warmup_steps=2", "data.train=[" + kCorpus + "/train/sotu_2009-2019.txt]", "data.validation={}",
         "eval.every=0", "checkpoint.every=0", "log.every=1", "log.dir=" + (dir / "run").string()});
    EXPECT_EQ(recipe.model.layers.empty(), std::string(name) == "attention_baseline") << name;
    const TrainResult r = run_training(recipe, quiet());
    const std::vector<std::string> metrics = lines_of(dir / "run" / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 12u) << name;
    const auto loss_of = [](const std::string& line) { return std::stod(line.substr(line.find("\"loss\":") + 7)); };
    EXPECT_LT(r.last_loss, loss_of(metrics.front()) - 1.0) << name;  // from about ln(264) = 5.58
  }
}

// Frozen parameters: the run trains only the unfrozen ones, its checkpoints hold moments for those
// only, and a resume from a mid-run checkpoint is bit-exact.
TEST(Train, FrozenParametersStayPutAndResumeBitExact) {
  fathom::testing::ScratchFolder dir;
  const std::vector<std::string> frozen{"train.frozen=[model.embed_tokens.*, 'model.layers.0.*']"};
  run_training(recipe_for(dir / "a", 6, frozen), quiet());
  const TensorMap first = load_checkpoint(dir / "a" / "checkpoints" / "step_00000003").model;
  const CheckpointData last = load_checkpoint(dir / "a");
  for (size_t i = 0; i < first.size(); ++i) {
    const bool is_frozen =
        first[i].first.starts_with("model.embed_tokens.") || first[i].first.starts_with("model.layers.0.");
    EXPECT_EQ(first[i].second.to_vector<float>() == last.model[i].second.to_vector<float>(), is_frozen)
        << first[i].first;
  }
  for (const auto& [name, t] : last.optimizer)
    EXPECT_TRUE(name == "step" ||
                (name.find("embed_tokens") == std::string::npos && name.find(".layers.0.") == std::string::npos))
        << name;
  fs::copy(dir / "a", dir / "b", fs::copy_options::recursive);
  fs::remove_all(dir / "b" / "checkpoints" / "step_00000006");
  std::ofstream(dir / "b" / "checkpoints" / "latest") << "step_00000003\n";
  RunOptions resume = quiet();
  resume.resume = true;
  run_training(recipe_for(dir / "b", 6, frozen), resume);
  expect_same_weights(dir / "a", dir / "b");
}

// Two micro-batches of 2 sequences see the same windows as one batch of 4: same update up to rounding.
TEST(Train, GradientAccumulationMatchesTheLargerBatch) {
  fathom::testing::ScratchFolder dir;
  run_training(recipe_for(dir / "big", 3), quiet());
  run_training(recipe_for(dir / "accum", 3, {"train.batch_size=2", "train.grad_accum=2"}), quiet());
  const TensorMap big = load_checkpoint(dir / "big").model, accum = load_checkpoint(dir / "accum").model;
  ASSERT_EQ(big.size(), accum.size());
  for (size_t i = 0; i < big.size(); ++i) {
    const std::vector<float> a = big[i].second.to_vector<float>(), b = accum[i].second.to_vector<float>();
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], 1e-5) << big[i].first << "[" << j << "]";
  }
  const std::vector<std::string> a = lines_of(dir / "big" / "metrics.jsonl"),
                                 b = lines_of(dir / "accum" / "metrics.jsonl");
  EXPECT_EQ(a.size(), b.size());
}

TEST(Train, CpuComputesInFp32WhateverThePrecisionKey) {
  // train.precision is a GPU setting: on the CPU bf16 and fp32 recipes train the same bits.
  fathom::testing::ScratchFolder dir;
  const TrainResult bf16 = run_training(recipe_for(dir / "bf16", 4, {"train.precision=bf16"}), quiet());
  const TrainResult fp32 = run_training(recipe_for(dir / "fp32", 4, {"train.precision=fp32"}), quiet());
  EXPECT_EQ(bf16.last_loss, fp32.last_loss);
  expect_same_weights(dir / "bf16" / "checkpoints" / "step_00000004", dir / "fp32" / "checkpoints" / "step_00000004");
}

TEST(Train, RecomputeTrainsTheSameBits) {
  // Recompute changes what is kept between forward and backward, never the numbers.
  fathom::testing::ScratchFolder dir;
  const TrainResult plain = run_training(recipe_for(dir / "plain", 4, {"train.grad_accum=2"}), quiet());
  const TrainResult recomputed =
      run_training(recipe_for(dir / "recompute", 4, {"train.grad_accum=2", "train.recompute=block"}), quiet());
  EXPECT_EQ(plain.last_loss, recomputed.last_loss);
  expect_same_weights(dir / "plain" / "checkpoints" / "step_00000004",
                      dir / "recompute" / "checkpoints" / "step_00000004");
  const TrainResult selective =
      run_training(recipe_for(dir / "selective", 4, {"train.grad_accum=2", "train.recompute=selective"}), quiet());
  EXPECT_EQ(plain.last_loss, selective.last_loss);
  expect_same_weights(dir / "plain" / "checkpoints" / "step_00000004",
                      dir / "selective" / "checkpoints" / "step_00000004");
}

TEST(Train, NonFiniteLossStopsWithTheStep) {
  fathom::testing::ScratchFolder dir;
  const std::string message = error_of([&] {
    run_training(recipe_for(dir / "run", 20,
                            {"train.optimizer.lr=1.0e30", "train.optimizer.clip=0", "train.schedule.warmup_steps=0"}),
                 quiet());
  });
  EXPECT_NE(message.find("not finite at step"), std::string::npos) << message;
}

TEST(Train, ProtectsExistingRunsAndRejectsBadRequests) {
  fathom::testing::ScratchFolder dir;
  run_training(recipe_for(dir / "run", 3), quiet());
  EXPECT_NE(error_of([&] { run_training(recipe_for(dir / "run", 3), quiet()); }).find("--resume"), std::string::npos);
  RunOptions overwrite = quiet();
  overwrite.overwrite = true;
  EXPECT_EQ(run_training(recipe_for(dir / "run", 3), overwrite).steps_done, 3);

  RunOptions resume = quiet();
  resume.resume = true;
  EXPECT_NE(error_of([&] { run_training(recipe_for(dir / "fresh", 3), resume); }).find("no checkpoint"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "fresh" / "checkpoints"));

  const std::string small_vocab =
      error_of([&] { run_training(recipe_for(dir / "v", 3, {"model.vocab_size=200"}), quiet()); });
  EXPECT_NE(small_vocab.find("model.vocab_size"), std::string::npos) << small_vocab;

#ifndef FATHOM_WITH_CUDA
  const std::string cuda = error_of([&] { run_training(recipe_for(dir / "c", 3, {"train.device=cuda"}), quiet()); });
  EXPECT_NE(cuda.find("no GPU"), std::string::npos) << cuda;
#endif
}

TEST(Train, EvalCommandReadsTheCheckpoint) {
  fathom::testing::ScratchFolder dir;
  const TrainResult r = run_training(recipe_for(dir / "run", 3), quiet());
  std::ostringstream out;
  run_evaluation(recipe_for(dir / "run", 3), (dir / "run").string(), out);
  EXPECT_NE(out.str().find("moby_dick"), std::string::npos) << out.str();
  char expected[32];
  std::snprintf(expected, sizeof expected, "loss %.4f", r.validation_loss.at("moby_dick"));
  EXPECT_NE(out.str().find(expected), std::string::npos) << out.str();
}

// The real binary: SIGINT mid-run writes a checkpoint and exits with status 0.
TEST(TrainCli, SigintCheckpointsAndExitsCleanly) {
  fathom::testing::ScratchFolder dir;
  const fs::path recipe = dir / "tiny.yaml";
  std::ofstream(recipe) << tiny_recipe(dir / "run", 100000);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execl(FATHOM_BINARY, FATHOM_BINARY, "train", recipe.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until it has logged a few steps, then interrupt it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lines_of(dir / "run" / "metrics.jsonl").size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(child, SIGINT);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto latest = latest_checkpoint(dir / "run");
  ASSERT_TRUE(latest.has_value());
  EXPECT_GE(load_checkpoint(*latest).model.size(), 10u);
}

TEST(TrainCli, BadRecipeFailsWithTheKeyAndNoRunFolder) {
  fathom::testing::ScratchFolder dir;
  const fs::path recipe = dir / "bad.yaml";
  std::ofstream(recipe) << tiny_recipe(dir / "run", 3) << "trian: {}\n";
  const std::string command =
      std::string(FATHOM_BINARY) + " train " + recipe.string() + " 2> " + (dir / "err").string();
  const int status = std::system(command.c_str());
  EXPECT_NE(status, 0);
  std::ifstream err(dir / "err");
  const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("trian"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// model.init_from is read when a run starts. `train --resume` and `eval` take the model from the
// run's checkpoint instead, so they work after the source is gone.
TEST(TrainCli, ResumeAndEvalDoNotNeedTheInitSourceAnyMore) {
  fathom::testing::ScratchFolder dir;
  run_training(recipe_for(dir / "source", 2), quiet());
  std::string text = tiny_recipe(dir / "run", 4);
  const size_t model_line = text.find("model: ");
  text.replace(model_line, text.find('\n', model_line) - model_line,
               "model: {init_from: 'checkpoint:" + (dir / "source").string() + "'}");
  const fs::path recipe = dir / "from_source.yaml";
  std::ofstream(recipe) << text;
  const auto run_fathom = [&](const std::string& args) {
    const std::string command = std::string(FATHOM_BINARY) + " " + args + " > /dev/null 2> " + (dir / "err").string();
    return std::system(command.c_str());
  };
  const auto errors = [&] {
    std::ifstream in(dir / "err");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  ASSERT_EQ(run_fathom("train " + recipe.string() + " --set train.steps=2"), 0) << errors();
  fs::remove_all(dir / "source");

  ASSERT_EQ(run_fathom("train " + recipe.string() + " --resume"), 0) << errors();
  EXPECT_EQ(latest_checkpoint(dir / "run")->filename(), "step_00000004");
  EXPECT_EQ(run_fathom("eval " + recipe.string() + " --checkpoint " + (dir / "run").string()), 0) << errors();
  // Starting the run again does need the source.
  EXPECT_NE(run_fathom("train " + recipe.string() + " --overwrite"), 0);
  EXPECT_NE(errors().find("model.init_from: "), std::string::npos) << errors();
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints"));  // a refused start leaves the run as it was
}
