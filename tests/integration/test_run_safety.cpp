// What `train`, `eval` and `export` promise about run folders: --overwrite replaces a run only once
// the new one is valid and has a checkpoint, never the current folder or what a command reads;
// --resume refuses a changed run; file system failures are clear errors, never a crash; a stop
// signal at any moment ends cleanly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/prep.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/run_dir.h"
#include "train/measure/evaluator.h"
#include "train/recipe/recipe.h"
#include "train/run/stop_signal.h"
#include "train/run/trainer.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::error_of;
using fathom::testing::expect_error;
using fathom::testing::read_bytes;
using fathom::testing::ScratchFolder;
using fathom::testing::write_bytes;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";
const std::string kTrainText = kCorpus + "/train/sotu_2009-2019.txt";
const std::string kValidationText = kCorpus + "/validation/moby_dick.txt";

std::string tiny_recipe(const fs::path& run_dir, int steps, const std::string& train = kTrainText,
                        const std::string& validation = kValidationText) {
  return "name: tiny\n"
         "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, vocab_size: 264}\n"
         "data:\n"
         "  tokenizer: bytes\n"
         "  train: ['" +
         train +
         "']\n"
         "  validation: {moby_dick: ['" +
         validation +
         "']}\n"
         "train: {device: cpu, threads: 2, batch_size: 4, seq_len: 32, steps: " +
         std::to_string(steps) +
         ", optimizer: {lr: 3.0e-3}, schedule: {warmup_steps: 2}}\n"
         "eval: {every: 0, batches: 2}\n"
         "checkpoint: {every: 3, keep_last: 10}\n"
         "log: {every: 1, dir: '" +
         run_dir.string() + "'}\n";
}

Recipe recipe_for(const fs::path& run_dir, int steps, const std::vector<std::string>& overrides = {}) {
  return parse_recipe(tiny_recipe(run_dir, steps), "tiny.yaml", overrides);
}

RunOptions options(bool resume = false, bool overwrite = false) {
  RunOptions o;
  o.quiet = true;
  o.resume = resume;
  o.overwrite = overwrite;
  return o;
}

std::string latest_name(const fs::path& run) { return latest_checkpoint(run)->filename().string(); }

struct InFolder {
  explicit InFolder(const fs::path& dir) : previous(fs::current_path()) { fs::current_path(dir); }
  ~InFolder() { fs::current_path(previous); }
  fs::path previous;
};

pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// Runs the fathom binary; returns its exit status (or 128 + signal) and its stderr.
std::pair<int, std::string> run_fathom(const ScratchFolder& dir, const std::string& args) {
  const fs::path err = dir / "stderr.txt";
  // In the scratch folder: a command that goes wrong there harms nothing else.
  const std::string command =
      "cd '" + dir.path().string() + "' && " + FATHOM_BINARY + " " + args + " > /dev/null 2> '" + err.string() + "'";
  const int status = std::system(command.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, fs::exists(err) ? read_bytes(err) : ""};
}

void expect_clean_error(const std::pair<int, std::string>& result, const std::vector<std::string>& fragments) {
  EXPECT_EQ(result.first, 1) << result.second;
  EXPECT_EQ(result.second.rfind("fathom: error: ", 0), 0u) << result.second;
  EXPECT_EQ(result.second.find("terminate called"), std::string::npos) << result.second;
  for (const std::string& f : fragments)
    EXPECT_NE(result.second.find(f), std::string::npos) << f << " in " << result.second;
}

}  // namespace

// ---- 1. nothing is deleted before the new work is known to be valid ----

TEST(RunSafety, OverwriteWithABadRecipeKeepsTheOldRun) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "run", 3), options());
  const std::string metrics = read_bytes(dir / "run" / "metrics.jsonl");
  const std::string misspelt = error_of([&] {
    run_training(parse_recipe(tiny_recipe(dir / "run", 3, kTrainText + ".typo"), "tiny.yaml"), options(false, true));
  });
  EXPECT_NE(misspelt.find(".typo"), std::string::npos) << misspelt;
  const std::string bad_vocab =
      error_of([&] { run_training(recipe_for(dir / "run", 3, {"model.vocab_size=100"}), options(false, true)); });
  EXPECT_NE(bad_vocab.find("model.vocab_size"), std::string::npos) << bad_vocab;
  EXPECT_EQ(latest_name(dir / "run"), "step_00000003");
  EXPECT_EQ(read_bytes(dir / "run" / "metrics.jsonl"), metrics);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "no leftovers";
}

TEST(RunSafety, OverwriteReplacesTheOldRunOnlyOnceTheNewOneHasACheckpoint) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "run", 3), options());
  // The new run fails at its first step, before any checkpoint: the old run comes back whole.
  const std::string nan = error_of([&] {
    run_training(recipe_for(dir / "run", 20,
                            {"train.optimizer.lr=1.0e30", "train.optimizer.clip=0", "train.schedule.warmup_steps=0",
                             "checkpoint.every=0"}),
                 options(false, true));
  });
  EXPECT_NE(nan.find("not finite"), std::string::npos) << nan;
  EXPECT_EQ(latest_name(dir / "run"), "step_00000003");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "no leftovers";
  // A new run that gets its checkpoint replaces the old one.
  EXPECT_EQ(run_training(recipe_for(dir / "run", 2), options(false, true)).steps_done, 2);
  EXPECT_EQ(latest_name(dir / "run"), "step_00000002");
  EXPECT_EQ(list_checkpoints(dir / "run").size(), 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "no leftovers";
}

TEST(RunSafety, OverwriteNeverRemovesTheCurrentFolderOrWhatTheRunReads) {
  ScratchFolder dir;
  write_bytes(dir / "precious.txt", "keep me");
  {
    InFolder cwd(dir.path());
    expect_error([&] { run_training(recipe_for(".", 3), options(false, true)); },
                 {"train --overwrite", "current folder"});
    expect_error([&] { run_training(recipe_for(fs::path(".."), 3), options(false, true)); }, {"current folder"});
  }
  EXPECT_EQ(read_bytes(dir / "precious.txt"), "keep me");
  // A run folder that holds the run's own data.
  fs::create_directories(dir / "run");
  fs::copy_file(kTrainText, dir / "run" / "train.txt");
  const Recipe reads_its_folder =
      parse_recipe(tiny_recipe(dir / "run", 3, (dir / "run" / "train.txt").string()), "t.yaml");
  expect_error([&] { run_training(reads_its_folder, options(false, true)); },
               {"train.txt", "which this command reads"});
  EXPECT_TRUE(fs::exists(dir / "run" / "train.txt"));
  // And the recipe file itself.
  write_bytes(dir / "run" / "r.yaml", tiny_recipe(dir / "run", 3));
  RunOptions o = options(false, true);
  o.recipe_file = dir / "run" / "r.yaml";
  expect_error([&] { run_training(recipe_for(dir / "run", 3), o); }, {"r.yaml"});
}

TEST(RunSafety, AReplacementInterruptedByAKillIsFinishedAtTheNextStart) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "old", 3), options());
  // Killed after moving the old run aside, before the new run's first checkpoint.
  const fs::path aside = dir / (".tmp-replaced-run-" + std::to_string(dead_pid()));
  fs::rename(dir / "old", aside);
  fs::create_directories(dir / "run");
  write_bytes(dir / "run" / "metrics.jsonl", "");
  { RunFolder folder(dir / "run", RunFolderRequest{true, false, {}}); }
  EXPECT_FALSE(fs::exists(aside));
  EXPECT_EQ(latest_name(dir / "run"), "step_00000003");
  // Killed after the new run's first checkpoint: the old run is deleted.
  run_training(recipe_for(dir / "old", 3), options());
  const fs::path aside2 = dir / (".tmp-replaced-run-" + std::to_string(dead_pid()));
  fs::rename(dir / "old", aside2);
  { RunFolder folder(dir / "run", RunFolderRequest{true, false, {}}); }
  EXPECT_FALSE(fs::exists(aside2));
  EXPECT_EQ(latest_name(dir / "run"), "step_00000003");
}

// ---- 2. file system failures are clear errors ----

TEST(RunSafety, UnusableLogDirIsAClearErrorBeforeAnyWork) {
  ScratchFolder dir;
  write_bytes(dir / "file", "x");
  expect_error([&] { run_training(recipe_for(dir / "file", 3), options()); },
               {"log.dir", "exists and is not a folder"});
  expect_error([&] { run_training(recipe_for(dir / "file" / "run", 3), options()); },
               {"cannot create the run folder", "is a file, not a folder"});
  EXPECT_EQ(read_bytes(dir / "file"), "x");
}

TEST(RunSafety, ThreadsHaveARange) {
  expect_error([] { recipe_for("r", 3, {"train.threads=100000"}); }, {"train.threads must be in [0, 1024]"});
  expect_error([] { recipe_for("r", 3, {"train.threads=3000000000"}); }, {"train.threads"});
  expect_error([] { recipe_for("r", 3, {"train.threads=-1"}); }, {"train.threads"});
  EXPECT_EQ(recipe_for("r", 3, {"train.threads=1024"}).train.threads, 1024);
  EXPECT_EQ(recipe_for("r", 3, {"checkpoint.keep_last=0"}).checkpoint.keep_last, 0);
}

TEST(RunSafetyCli, FileSystemFailuresAreErrorsNotCrashes) {
  ScratchFolder dir;
  write_bytes(dir / "file", "x");
  const fs::path recipe = dir / "tiny.yaml";
  write_bytes(recipe, tiny_recipe(dir / "run", 2));
  expect_clean_error(run_fathom(dir, "train " + recipe.string() + " --set log.dir=" + (dir / "file").string()),
                     {"file"});
  expect_clean_error(run_fathom(dir, "train " + recipe.string() + " --set log.dir=" + (dir / "file" / "x").string()),
                     {"is a file, not a folder"});
  expect_clean_error(run_fathom(dir, "train " + recipe.string() + " --set train.threads=100000"), {"train.threads"});
  expect_clean_error(run_fathom(dir, "train " + recipe.string() + " --resume --overwrite"),
                     {"--resume", "--overwrite"});
}

// ---- 3. a run cannot change under --resume ----

TEST(RunSafety, ResumeRefusesAChangedRunAndNamesEveryChange) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "run", 3), options());
  const std::string message = error_of([&] {
    run_training(recipe_for(dir / "run", 6, {"model.rope_theta=10000", "train.batch_size=2", "data.documents=files"}),
                 options(true));
  });
  EXPECT_NE(message.find("model.rope_theta: 500000 in the run, 10000 in the recipe"), std::string::npos) << message;
  EXPECT_NE(message.find("train.batch_size: 4 in the run, 2 in the recipe"), std::string::npos) << message;
  EXPECT_NE(message.find("data.documents: 'lines' in the run, 'files' in the recipe"), std::string::npos) << message;
  EXPECT_NE(message.find("keys that may change on resume: "), std::string::npos) << message;
  EXPECT_EQ(message.find("train.steps:"), std::string::npos) << message;
  const std::string tokenizer =
      error_of([&] { run_training(recipe_for(dir / "run", 6, {"data.tokenizer=gpt2"}), options(true)); });
  EXPECT_NE(tokenizer.find("data.tokenizer: 'bytes' in the run, 'gpt2' in the recipe"), std::string::npos) << tokenizer;
  EXPECT_EQ(latest_name(dir / "run"), "step_00000003");
  // Length, reporting and checkpointing may change.
  EXPECT_EQ(run_training(recipe_for(dir / "run", 5,
                                    {"log.every=2", "eval.batches=1", "checkpoint.every=1", "train.threads=1",
                                     "train.recompute=block"}),
                         options(true))
                .steps_done,
            5);
  expect_error([&] { run_training(recipe_for(dir / "run", 6), options(true, true)); },
               {"--resume", "--overwrite", "only one"});
}

// ---- 4. data integrity ----

TEST(RunSafety, AShortValidationDomainFailsAtTheStartNamingItsFiles) {
  ScratchFolder dir;
  write_bytes(dir / "short.txt", "too short\n");
  const std::string message = error_of([&] {
    run_training(parse_recipe(tiny_recipe(dir / "run", 3, kTrainText, (dir / "short.txt").string()), "t.yaml"),
                 options());
  });
  EXPECT_NE(message.find("validation domain 'moby_dick'"), std::string::npos) << message;
  EXPECT_NE(message.find("short.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("train.seq_len 32"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir / "run")) << "a run that fails validation leaves no folder";
}

TEST(RunSafety, ShardsAreCheckedAgainstTheirManifest) {
  ScratchFolder dir;
  PrepOptions prep;
  prep.tokenizer = "bytes";
  prep.out = (dir / "prepared").string();
  prep.train = {kTrainText};
  prep.validation = {{"moby_dick", {kValidationText}}};
  prep.threads = 2;
  prep.shard_tokens = 100'000;
  prepare_data(prep);
  const std::string train = (dir / "prepared" / "train").string();
  const std::string validation = (dir / "prepared" / "validation" / "moby_dick").string();
  auto recipe = [&](const std::string& verify) {
    return parse_recipe(tiny_recipe(dir / "run", 1, train, validation), "t.yaml", {"data.verify=" + verify});
  };
  run_training(recipe("auto"), options());
  EXPECT_TRUE(fs::exists(dir / "prepared" / ".fathom-verified"));

  // One token changed for another valid one: same size, same header, different contents.
  const fs::path shard = dir / "prepared" / "train" / "shard_00000.bin";
  std::string bytes = read_bytes(shard);
  bytes[100] = bytes[100] == 'a' ? 'b' : 'a';  // token 34 (little-endian uint16): 'a' or 'b', both < 257
  bytes[101] = 0;
  write_bytes(shard, bytes);
  for (const char* mode : {"auto", "always"})
    expect_error([&] { run_training(recipe(mode), options(false, true)); },
                 {"shard_00000.bin", "does not match", "manifest.json", "SHA-256"});
  EXPECT_EQ(run_training(recipe("never"), options(false, true)).steps_done, 1);
  // A shard that no manifest names: only `always` insists.
  fs::create_directories(dir / "loose");
  fs::copy_file(shard, dir / "loose" / "shard.bin");
  expect_error(
      [&] {
        run_training(parse_recipe(tiny_recipe(dir / "run2", 1, (dir / "loose").string(), validation), "t.yaml",
                                  {"data.verify=always"}),
                     options());
      },
      {"no manifest.json names the shard"});
}

TEST(RunSafetyCli, TheFinalCheckpointIsWrittenBeforeTheFinalEvaluation) {
  ScratchFolder dir;
  const fs::path recipe = dir / "tiny.yaml";
  write_bytes(recipe, tiny_recipe(dir / "run", 2));
  const fs::path out = dir / "out.txt";
  ASSERT_EQ(std::system((std::string(FATHOM_BINARY) + " train " + recipe.string() + " > " + out.string()).c_str()), 0);
  const std::string text = read_bytes(out);
  const size_t checkpoint = text.find("checkpoint " + (dir / "run" / "checkpoints" / "step_00000002").string());
  ASSERT_NE(checkpoint, std::string::npos) << text;
  EXPECT_LT(checkpoint, text.find("eval moby_dick @ step 2")) << text;
}

namespace {
// The "eval" lines of a run's metrics.jsonl, in order.
std::vector<std::string> evaluation_records(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::vector<std::string> records;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"kind\":\"eval\"") != std::string::npos) records.push_back(line);
  return records;
}

// Starts `fathom train recipe` and kills it (SIGKILL) as soon as its console says the checkpoint of
// `step` is written, that is inside the window before that step's evaluation; returns its wait status.
int kill_after_checkpoint(const fs::path& recipe, const fs::path& run, int step) {
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl(FATHOM_BINARY, FATHOM_BINARY, "train", recipe.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  const std::string wanted = "checkpoint " + (run / "checkpoints" / name).string();
  FILE* lines = ::fdopen(out[0], "r");
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, lines))
    if (std::string(buffer).rfind(wanted, 0) == 0) {
      ::kill(child, SIGKILL);
      break;
    }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::fclose(lines);
  return status;
}
}  // namespace

// A kill between a checkpoint and its evaluation (mid-run, and after the final checkpoint) loses no
// evaluation: --resume makes it up first, and the records equal an uninterrupted run's.
TEST(RunSafetyCli, AnEvaluationCutOffByAKillIsMadeUpOnResume) {
  ScratchFolder dir;
  // Evaluations long next to the time a kill takes to land, so the kill falls inside the window.
  const std::vector<std::string> sets{"eval.every=3", "eval.batches=64"};
  run_training(recipe_for(dir / "straight", 6, sets), options());
  const std::vector<std::string> expected = evaluation_records(dir / "straight");
  ASSERT_EQ(expected.size(), 2u);

  for (const int killed_at : {3, 6}) {
    SCOPED_TRACE("killed after the checkpoint of step " + std::to_string(killed_at));
    const fs::path run = dir / ("killed_at_" + std::to_string(killed_at));
    const fs::path recipe = dir / ("killed_at_" + std::to_string(killed_at) + ".yaml");
    std::string text = tiny_recipe(run, 6);
    const std::string no_evaluations = "eval: {every: 0, batches: 2}";
    text.replace(text.find(no_evaluations), no_evaluations.size(), "eval: {every: 3, batches: 64}");
    write_bytes(recipe, text);
    const int status = kill_after_checkpoint(recipe, run, killed_at);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the run ended before the kill: " << status;
    ASSERT_EQ(latest_name(run), killed_at == 3 ? "step_00000003" : "step_00000006");
    ASSERT_EQ(evaluation_records(run).size(), killed_at == 3 ? 0u : 1u) << "the kill came after the evaluation";

    const TrainResult resumed = run_training(recipe_for(run, 6, sets), options(/*resume=*/true));
    EXPECT_EQ(resumed.steps_done, 6);
    EXPECT_EQ(evaluation_records(run), expected);
    // Made up once: a second resume of the finished run evaluates nothing again.
    run_training(recipe_for(run, 6, sets), options(/*resume=*/true));
    EXPECT_EQ(evaluation_records(run), expected);
  }
}

// ---- 5. signals ----

namespace {
// Starts `fathom train` with SIGINT and SIGTERM blocked, so that signals sent at once stay pending
// through its start-up: they arrive at the very start of the run, whatever the machine's speed.
pid_t start_train_with_signals_pending(const fs::path& recipe, const std::string& extra = "") {
  // Blocked before the fork, so that the child has them blocked from its first instruction on.
  sigset_t stop, previous;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, &previous);
  const pid_t child = fork();
  if (child != 0) sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (child == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    if (extra.empty())
      execl(FATHOM_BINARY, FATHOM_BINARY, "train", recipe.c_str(), static_cast<char*>(nullptr));
    else
      execl(FATHOM_BINARY, FATHOM_BINARY, "train", recipe.c_str(), extra.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return child;
}
}  // namespace

TEST(RunSafetyCli, SignalsDuringStartUpEndCleanlyWithAResumableCheckpoint) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "straight", 4), options());
  const fs::path recipe = dir / "tiny.yaml";
  write_bytes(recipe, tiny_recipe(dir / "run", 4));
  const pid_t child = start_train_with_signals_pending(recipe);
  ASSERT_GT(child, 0);
  kill(child, SIGTERM);
  kill(child, SIGINT);  // a second signal changes nothing
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(latest_name(dir / "run"), "step_00000001");
  EXPECT_EQ(run_training(recipe_for(dir / "run", 4), options(true)).steps_done, 4);
  const TensorMap a = load_checkpoint(dir / "straight").model, b = load_checkpoint(dir / "run").model;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>());
}

// ---- 7. leftovers and needless refusals ----

TEST(RunSafety, EvalAndExportNeedOnlyTheModel) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "run", 2), options());
  fs::remove(*latest_checkpoint(dir / "run") / kCheckpointOptimizerFile);
  std::ostringstream out;
  run_evaluation(recipe_for(dir / "run", 2), (dir / "run").string(), out);
  EXPECT_NE(out.str().find("moby_dick"), std::string::npos);
  const auto exported =
      run_fathom(dir, "export --format hf --checkpoint " + (dir / "run").string() + " --out " + (dir / "hf").string());
  EXPECT_EQ(exported.first, 0) << exported.second;
  EXPECT_TRUE(fs::exists(dir / "hf" / "config.json"));
  expect_error([&] { run_training(recipe_for(dir / "run", 4), options(true)); }, {"optimizer.safetensors"});
}

TEST(RunSafetyCli, ExportOverwriteNeverRemovesTheRunOrTheCurrentFolder) {
  ScratchFolder dir;
  run_training(recipe_for(dir / "run", 2), options());
  const std::string run = (dir / "run").string();
  const std::string base = "export --format hf --checkpoint " + run + " --overwrite --out ";
  expect_clean_error(run_fathom(dir, base + run), {"which this command reads"});
  expect_clean_error(run_fathom(dir, base + dir.path().string()), {"refusing to replace"});
  fs::create_directories(dir / "run" / "hf");
  write_bytes(dir / "run" / "hf" / "x", "x");
  expect_clean_error(run_fathom(dir, base + (dir / "run" / "hf").string()), {"lies inside"});
  expect_clean_error(run_fathom(dir, "export --format hf --checkpoint " + run + " --overwrite --out ."),
                     {"current folder"});
  EXPECT_EQ(latest_name(dir / "run"), "step_00000002");
}
