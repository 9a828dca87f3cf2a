// Data-parallel training on the CPU: `fathom train` under `mpirun --oversubscribe -np N`, compared
// with one process reading the same global batch (batch_size x grad_accum x world). Two ranks match
// one process bit for bit: each rank's loss is seeded with 1/2, an exact scale, and the sum of two
// partial gradients has one order. With three ranks MPI's all-reduce may group the three partial sums
// otherwise than one process's accumulation ((a + b) + c), so losses agree to 1e-6 relative and
// weights to 1e-5 absolute, a few fp32 roundings per step.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "mpi_test_helpers.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::find_rank;
using fathom::testing::kMpiexec;
using fathom::testing::ScratchFolder;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";

// validation: with a Moby Dick domain evaluated every 3 steps on 5 batches.
std::string recipe_text(int steps, bool validation = false) {
  const std::string eval = validation ? ", validation: {moby: [" + kCorpus +
                                            "/validation/moby_dick.txt]}}\n"
                                            "eval: {every: 3, batches: 5}\n"
                                      : "}\n";
  return "name: dp\n"
         "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, vocab_size: 264}\n"
         "data: {tokenizer: bytes, train: [" +
         kCorpus + "/train/sotu_2009-2019.txt]" + eval +
         "train: {device: cpu, threads: 1, batch_size: 2, seq_len: 32, steps: " + std::to_string(steps) +
         ", optimizer: {lr: 3.0e-3, clip: 1.0}, schedule: {warmup_steps: 2}}\n"
         "checkpoint: {every: 3, keep_last: 10}\n"
         "log: {every: 1, dir: run}\n";
}

// Runs `fathom train recipe.yaml <args>` in `dir` under mpirun with `ranks` processes (0: no mpirun),
// output in dir/out.txt and dir/err.txt; returns the exit status.
int train(const fs::path& dir, int ranks, const std::string& args) {
  std::string launcher;
  if (ranks > 0) launcher = fathom::testing::mpirun_prefix(ranks);
  const std::string command = "cd '" + dir.string() + "' && " + launcher + FATHOM_BINARY + " train recipe.yaml " +
                              args + " > out.txt 2> err.txt";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kMpiexec == nullptr) GTEST_SKIP() << "built without MPI or no mpirun found";
    std::ofstream(dir_ / "recipe.yaml") << recipe_text(6);
  }
  // Trains in a folder of its own; the run's folder.
  fs::path run(const std::string& name, int ranks, const std::string& args) {
    const fs::path folder = dir_ / name;
    fs::create_directories(folder);
    fs::copy_file(dir_ / "recipe.yaml", folder / "recipe.yaml");
    const int status = train(folder, ranks, args);
    EXPECT_EQ(status, 0) << name << ": " << read_text(folder / "err.txt");
    return folder / "run";
  }
  ScratchFolder dir_;
};

std::vector<double> losses(const fs::path& run_dir) {
  std::vector<double> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  const std::regex loss("\"kind\":\"train\".*\"loss\":([-0-9.e+]+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, loss)) out.push_back(std::stod(m[1]));
  }
  return out;
}

std::vector<float> flat(const TensorMap& tensors) {
  std::vector<float> out;
  for (const auto& [name, t] : tensors) {
    if (t.dtype() != DType::f32) continue;
    const std::vector<float> v = t.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Same loss curve and final weights and moments; tolerance 0: bit for bit.
void expect_same_training(const fs::path& a, const fs::path& b, double loss_rel, double weight_abs) {
  const std::vector<double> la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), 6u) << a;
  ASSERT_EQ(lb.size(), la.size()) << b;
  for (size_t i = 0; i < la.size(); ++i) {
    if (loss_rel == 0)
      EXPECT_EQ(la[i], lb[i]) << "step " << i + 1;
    else
      EXPECT_NEAR(la[i], lb[i], loss_rel * std::abs(la[i])) << "step " << i + 1;
  }
  const CheckpointData ca = load_checkpoint(a), cb = load_checkpoint(b);
  for (const auto& [what, wa, wb] : {std::tuple{"model", flat(ca.model), flat(cb.model)},
                                     std::tuple{"optimizer", flat(ca.optimizer), flat(cb.optimizer)}}) {
    ASSERT_EQ(wa.size(), wb.size()) << what;
    ASSERT_GT(wa.size(), 0u) << what;
    double worst = 0;
    for (size_t i = 0; i < wa.size(); ++i) worst = std::max(worst, double(std::abs(wa[i] - wb[i])));
    if (weight_abs == 0)
      EXPECT_EQ(worst, 0.0) << what << " differs";
    else
      EXPECT_LE(worst, weight_abs) << what;
  }
}

}  // namespace

TEST_F(DataParallel, TwoRanksTrainBitForBitAsOneProcessWithTheSameGlobalBatch) {
  const fs::path one = run("one", 0, "--set train.grad_accum=2");
  const fs::path two = run("two", 2, "");
  expect_same_training(one, two, 0, 0);
  const std::string out = read_text(dir_ / "two" / "out.txt");
  EXPECT_NE(out.find("data parallel over 2 ranks (mpi): global batch 4 sequences"), std::string::npos) << out;
  // Only rank 0 speaks: one closing line.
  EXPECT_NE(out.find("done at step 6"), std::string::npos) << out;
  EXPECT_EQ(out.find("done at step 6"), out.rfind("done at step 6")) << out;
}

// The ranks share the validation batches (rank 0 takes 0, 2, 4 of the five, rank 1 takes 1 and 3)
// and sum each batch's loss into its own slot: the evaluation is one process's, bit for bit.
TEST_F(DataParallel, TwoRanksShareTheValidationBatchesAndMatchOneProcess) {
  std::ofstream(dir_ / "recipe.yaml") << recipe_text(6, true);
  const fs::path one = run("one", 0, "--set train.grad_accum=2");
  const fs::path two = run("two", 2, "");
  const auto evals = [](const fs::path& run_dir) {
    std::vector<std::string> lines;
    std::ifstream in(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.find("\"kind\":\"eval\"") != std::string::npos) lines.push_back(line);
    return lines;
  };
  const std::vector<std::string> a = evals(one), b = evals(two);
  ASSERT_EQ(a.size(), 2u) << "evaluations at steps 3 and 6";
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0].find("\"loss/moby\""), std::string::npos) << a[0];
  const std::string out = read_text(dir_ / "two" / "out.txt");
  EXPECT_NE(out.find("eval moby @ step 6 | loss"), std::string::npos) << out;
  EXPECT_NE(out.find("| 320 tokens"), std::string::npos) << out;  // 5 batches of 2 x 32: every batch counted
}

TEST_F(DataParallel, ThreeRanksTrainAsOneProcessWithinRoundingOfTheReductionOrder) {
  const fs::path one = run("one", 0, "--set train.grad_accum=3");
  const fs::path three = run("three", 3, "");
  expect_same_training(one, three, 1e-6, 1e-5);
  // Not bitwise equal by construction: the tolerance is needed, not slack.
  EXPECT_EQ(losses(one)[0], losses(three)[0]);  // step 1's loss comes before any reduction of weights
}

TEST_F(DataParallel, ZeroOneEqualsPlainDataParallel) {
  expect_same_training(run("plain2", 2, ""), run("zero2", 2, "--set train.zero=1"), 0, 0);
  // Three ranks: 35584 trainable parameters (in an arena with alignment gaps) in uneven shards; reduce-scatter
  // groups sums as all-reduce may not.
  expect_same_training(run("plain3", 3, ""), run("zero3", 3, "--set train.zero=1"), 1e-6, 1e-5);
  const std::string out = read_text(dir_ / "zero2" / "out.txt");
  EXPECT_NE(out.find("ZeRO stage 1: optimizer moments 140 KiB per rank"), std::string::npos) << out;
}

// With 8 KiB buckets the gradient arena is 18 all-reduces, started during backward as their gradients
// become final: two ranks still train bit for bit as one process, also with blocks re-run in
// backward and with the embedding frozen.
TEST_F(DataParallel, OverlappedSmallBucketsKeepTwoRanksBitForBit) {
  const std::string small = "--set train.grad_bucket_kib=8 ";
  expect_same_training(run("one", 0, "--set train.grad_accum=2"), run("two", 2, small + "--set train.recompute=block"),
                       0, 0);
  const std::string out = read_text(dir_ / "two" / "out.txt");
  EXPECT_NE(out.find("18 buckets of 8 KiB, each as soon as backward has finished it"), std::string::npos) << out;
  const std::string frozen = "--set 'train.frozen=[model.embed_tokens.*]' ";
  expect_same_training(run("one_frozen", 0, frozen + "--set train.grad_accum=2"), run("two_frozen", 2, small + frozen),
                       0, 0);
}

TEST_F(DataParallel, Bf16GradientReductionTrainsCloseToFp32) {
  const fs::path fp32 = run("fp32", 2, ""), bf16 = run("bf16", 2, "--set train.grad_reduce=bf16");
  const std::vector<double> a = losses(fp32), b = losses(bf16);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-2) << "step " << i + 1;
  EXPECT_NE(a.back(), b.back());  // the gradients did travel in bf16
}

// Resumed over another world size (and grad_accum, keeping the global batch), a run continues on the
// next unseen windows: it ends where the uninterrupted run ends, bit for bit.
TEST_F(DataParallel, ResumeAcrossWorldSizesContinuesOnTheNextTokens) {
  const fs::path reference = run("reference", 0, "--set train.grad_accum=2");
  for (const auto& [name, first, resumed, resumed_args] :
       {std::tuple{"two_to_one", 2, 0, std::string("--set train.grad_accum=2")},
        std::tuple{"one_to_two", 0, 2, std::string("--set train.grad_accum=1 --set train.zero=1")}}) {
    const fs::path run_dir = run(name, first, first == 0 ? "--set train.grad_accum=2" : "");
    // Back to step 3: the later checkpoint goes, `latest` names step 3.
    fs::remove_all(run_dir / "checkpoints" / checkpoint_folder_name(6));
    std::ofstream(run_dir / "checkpoints" / "latest") << checkpoint_folder_name(3) << "\n";
    ASSERT_EQ(train(dir_ / name, resumed, "--resume " + resumed_args), 0) << read_text(dir_ / name / "err.txt");
    expect_same_training(reference, run_dir, 0, 0);
  }
}

TEST_F(DataParallel, RanksWithDifferentRecipesStopWithAnErrorNamingTheRank) {
  fs::create_directories(dir_ / "mixed");
  fs::copy_file(dir_ / "recipe.yaml", dir_ / "mixed" / "recipe.yaml");
  const std::string command = "cd '" + (dir_ / "mixed").string() +
                              "' && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + kMpiexec +
                              " --oversubscribe --bind-to none -np 1 " + FATHOM_BINARY + " train recipe.yaml : -np 1 " +
                              FATHOM_BINARY + " train recipe.yaml --set train.seed=7 > out.txt 2> err.txt";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  const std::string err = read_text(dir_ / "mixed" / "err.txt");
  EXPECT_NE(err.find("error on rank 1 of 2: rank 1's recipe differs from rank 0's"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir_ / "mixed" / "run" / "checkpoints" / "latest"));
}

// Starts a long two-rank run in dir/name, sends `signal` to its rank 1 once a checkpoint exists, and
// returns mpirun's wait status (a job still running 30 s after the signal is killed: a hang).
int signal_rank1_of_a_long_run(const fs::path& dir, const std::string& name, int signal) {
  std::ofstream(dir / name / "recipe.yaml") << recipe_text(1000000);
  const fs::path folder = dir / name;
  const pid_t launcher = fork();
  if (launcher == 0) {
    setpgid(0, 0);
    ::_exit(train(folder, 2, "--set checkpoint.every=5"));
  }
  pid_t rank1 = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(folder / "run" / "checkpoints" / "latest") || (rank1 = find_rank(folder, 1)) == 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (rank1 > 0) ::kill(rank1, signal);
  bool hung = false;
  const int status = fathom::testing::wait_or_kill(launcher, std::chrono::seconds(rank1 > 0 ? 30 : 0), hung);
  if (hung)
    ADD_FAILURE() << (rank1 > 0 ? "the job hung after the signal" : "rank 1 never started: ")
                  << read_text(folder / "err.txt");
  return status;
}

// A rank killed mid-run ends the whole job (no rank hangs in a collective) with an error, and the
// checkpoints on disk stay whole.
TEST_F(DataParallel, AKilledRankEndsTheJobWithAnError) {
  fs::create_directories(dir_ / "killed");
  const int status = signal_rank1_of_a_long_run(dir_.path(), "killed", SIGKILL);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  const std::string err = read_text(dir_ / "killed" / "err.txt");
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NO_THROW(load_checkpoint(dir_ / "killed" / "run"));  // the latest checkpoint is whole
}

// SIGTERM to any one rank stops every rank at the same step with a checkpoint, and the job exits 0.
TEST_F(DataParallel, SigtermToOneRankCheckpointsEveryRankAndExitsCleanly) {
  fs::create_directories(dir_ / "stopped");
  const int status = signal_rank1_of_a_long_run(dir_.path(), "stopped", SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(dir_ / "stopped" / "err.txt");
  const std::string out = read_text(dir_ / "stopped" / "out.txt");
  EXPECT_NE(out.find("stopped at step"), std::string::npos) << out;
  const CheckpointData saved = load_checkpoint(dir_ / "stopped" / "run");
  EXPECT_NE(saved.state_json.find("\"step\""), std::string::npos);
  // Rank 0, which saw no signal, announced the stop at the step whose checkpoint is the latest.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("stop requested: saving a checkpoint at step ([0-9]+)"))) << out;
  EXPECT_EQ(latest_checkpoint(dir_ / "stopped" / "run")->filename(), checkpoint_folder_name(std::stoll(m[1])));
}

// train.tokens counts every rank's tokens: two ranks take half the steps of one process.
TEST_F(DataParallel, TokenBudgetCountsEveryRanksTokens) {
  std::string text = recipe_text(6);
  text.replace(text.find("steps: 6"), 8, "tokens: 1024");
  std::ofstream(dir_ / "recipe.yaml") << text;
  run("one", 0, "");
  run("two", 2, "");
  EXPECT_NE(read_text(dir_ / "one" / "out.txt").find("done at step 16"), std::string::npos);
  EXPECT_NE(read_text(dir_ / "two" / "out.txt").find("done at step 8;"), std::string::npos)
      << read_text(dir_ / "two" / "out.txt");
  // The last step is the run's (8), not the one process's (16): it is checkpointed.
  EXPECT_EQ(latest_checkpoint(dir_ / "two" / "run")->filename(), checkpoint_folder_name(8));
}
