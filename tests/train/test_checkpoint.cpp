#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <random>

#include "core/file_io.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/measure/metrics_log.h"

using namespace fathom;
using fathom::testing::expect_error;
using fathom::testing::read_bytes;
using fathom::testing::ScratchFolder;
using fathom::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

// A small but complete checkpoint: HF-named model tensors, AdamW-like state, a state and a recipe.
CheckpointData random_checkpoint(uint64_t seed) {
  std::mt19937_64 rng(seed);
  CheckpointData data;
  data.model = {{"model.embed_tokens.weight", random_tensor({11, 4}, DType::f32, rng)},
                {"model.layers.0.self_attn.q_proj.weight", random_tensor({4, 4}, DType::bf16, rng)},
                {"model.layers.0.post_attention_layernorm.weight", random_tensor({4}, DType::f32, rng)},
                {"lm_head.weight", random_tensor({11, 4}, DType::f16, rng)}};
  data.optimizer = {{"exp_avg", random_tensor({128}, DType::f32, rng)},
                    {"exp_avg_sq", random_tensor({128}, DType::f32, rng)},
                    {"step", random_tensor({}, DType::i64, rng)}};
  data.state_json =
      "{\"step\": " + std::to_string(rng() % 1000) + ", \"rng\": {\"seed\": " + std::to_string(rng()) + "}}\n";
  data.recipe_yaml = "model:\n  size: olmo2_14M\ntrain:\n  lr: " + std::to_string(double(rng() % 100) / 1e4) + "\n";
  return data;
}

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
    EXPECT_EQ(std::memcmp(a[i].second.raw(), b[i].second.raw(), a[i].second.nbytes()), 0) << a[i].first;
  }
}

void expect_same(const CheckpointData& a, const CheckpointData& b) {
  expect_same(a.model, b.model);
  expect_same(a.optimizer, b.optimizer);
  EXPECT_EQ(a.state_json, b.state_json);
  EXPECT_EQ(a.recipe_yaml, b.recipe_yaml);
}

std::vector<int64_t> saved_steps(const fs::path& run) {
  std::vector<int64_t> steps;
  for (const auto& [step, folder] : list_checkpoints(run)) steps.push_back(step);
  return steps;
}

std::vector<std::string> entry_names(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The pid of a process that has exited: what a crashed save leaves in its temporary names.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

}  // namespace

TEST(Checkpoint, FolderNames) {
  EXPECT_EQ(checkpoint_folder_name(0), "step_00000000");
  EXPECT_EQ(checkpoint_folder_name(12), "step_00000012");
  EXPECT_EQ(checkpoint_folder_name(123456789), "step_123456789");
  expect_error([] { checkpoint_folder_name(-1); }, {"non-negative"});
}

TEST(Checkpoint, SaveLoadRoundTrip) {
  ScratchFolder run;
  const CheckpointData data = random_checkpoint(1);
  EXPECT_EQ(latest_checkpoint(run.path()), std::nullopt);
  const fs::path folder = save_checkpoint(run.path(), 12, data, 3);
  EXPECT_EQ(folder, run.path() / "checkpoints" / "step_00000012");
  EXPECT_EQ(entry_names(folder),
            (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "recipe.yaml", "state.json"}));
  EXPECT_EQ(entry_names(run / "checkpoints"), (std::vector<std::string>{"latest", "step_00000012"}));
  EXPECT_EQ(read_bytes(run / "checkpoints" / "latest"), "step_00000012\n");
  EXPECT_EQ(latest_checkpoint(run.path()), folder);
  EXPECT_EQ(read_safetensors((folder / "model.safetensors").string()).metadata().at("format"), "pt");

  expect_same(load_checkpoint(run.path()), data);           // a run folder
  expect_same(load_checkpoint(folder), data);               // a checkpoint folder
  expect_same(load_checkpoint(run / "checkpoints"), data);  // a run's checkpoints folder
  EXPECT_EQ(resolve_checkpoint(run.path()), folder);
}

TEST(Checkpoint, LatestFollowsEverySaveAndKeepLastPrunes) {
  ScratchFolder run;
  for (int64_t step = 1; step <= 5; ++step) {
    save_checkpoint(run.path(), step * 10, random_checkpoint(uint64_t(step)), 2);
    EXPECT_EQ(latest_checkpoint(run.path()), run / "checkpoints" / checkpoint_folder_name(step * 10));
  }
  EXPECT_EQ(saved_steps(run.path()), (std::vector<int64_t>{40, 50}));
  expect_same(load_checkpoint(run.path()), random_checkpoint(5));
  expect_same(load_checkpoint(run / "checkpoints" / "step_00000040"), random_checkpoint(4));

  // Saving an older step (a run resumed from an earlier checkpoint): it becomes latest and is kept.
  save_checkpoint(run.path(), 20, random_checkpoint(7), 2);
  EXPECT_EQ(saved_steps(run.path()), (std::vector<int64_t>{20, 40, 50}));
  expect_same(load_checkpoint(run.path()), random_checkpoint(7));

  ScratchFolder keep_all;
  for (int64_t step = 0; step < 4; ++step) save_checkpoint(keep_all.path(), step, random_checkpoint(9), 0);
  EXPECT_EQ(saved_steps(keep_all.path()), (std::vector<int64_t>{0, 1, 2, 3}));
  save_checkpoint(keep_all.path(), 4, random_checkpoint(9), 1);
  EXPECT_EQ(saved_steps(keep_all.path()), (std::vector<int64_t>{4}));
}

TEST(Checkpoint, ResavingAStepReplacesIt) {
  ScratchFolder run;
  save_checkpoint(run.path(), 3, random_checkpoint(1), 5);
  save_checkpoint(run.path(), 3, random_checkpoint(2), 5);
  expect_same(load_checkpoint(run.path()), random_checkpoint(2));
  EXPECT_EQ(entry_names(run / "checkpoints"), (std::vector<std::string>{"latest", "step_00000003"}));
}

TEST(Checkpoint, RemovingARunsCheckpointsLeavesNothingSaved) {
  ScratchFolder run;
  for (int64_t step = 1; step <= 3; ++step) save_checkpoint(run.path(), step, random_checkpoint(uint64_t(step)), 0);
  remove_checkpoints(run.path());
  EXPECT_FALSE(latest_checkpoint(run.path()).has_value());
  EXPECT_TRUE(saved_steps(run.path()).empty());
  EXPECT_TRUE(entry_names(run / "checkpoints").empty());
  remove_checkpoints(run.path());  // again, and on a run that never saved: nothing to do, no error
  ScratchFolder never_saved;
  remove_checkpoints(never_saved.path());
  save_checkpoint(run.path(), 4, random_checkpoint(4), 0);  // the run can save again afterwards
  EXPECT_EQ(saved_steps(run.path()), (std::vector<int64_t>{4}));
}

TEST(Checkpoint, LeftoverTemporariesAreIgnoredThenCleaned) {
  ScratchFolder run;
  save_checkpoint(run.path(), 1, random_checkpoint(1), 5);
  const fs::path checkpoints = run / "checkpoints";
  // What a crash in the middle of saving step 2 leaves: a half-written folder and a temp latest.
  const std::string crashed = ".tmp-step_00000002-" + std::to_string(dead_pid());
  fs::create_directory(checkpoints / crashed);
  write_bytes(checkpoints / crashed / "model.safetensors", "\x08\x00garbage");
  write_bytes(checkpoints / (".tmp-latest.0-" + std::to_string(dead_pid())), "step_00000002");
  // A save in progress in another live process (pid 1 always exists) must not be touched.
  const std::string live = ".tmp-step_00000009-1";
  fs::create_directory(checkpoints / live);

  EXPECT_EQ(latest_checkpoint(run.path()), checkpoints / "step_00000001");
  EXPECT_EQ(saved_steps(run.path()), std::vector<int64_t>{1});
  expect_same(load_checkpoint(run.path()), random_checkpoint(1));

  save_checkpoint(run.path(), 2, random_checkpoint(2), 5);
  EXPECT_EQ(entry_names(checkpoints), (std::vector<std::string>{live, "latest", "step_00000001", "step_00000002"}));
  expect_same(load_checkpoint(run.path()), random_checkpoint(2));
}

TEST(Checkpoint, FailedSaveChangesNothing) {
  ScratchFolder run;
  save_checkpoint(run.path(), 1, random_checkpoint(1), 5);
  const fs::path checkpoints = run / "checkpoints";
  const auto before = entry_names(checkpoints);

  CheckpointData bad_state = random_checkpoint(2);
  bad_state.state_json = "{\"step\": 2,";
  expect_error([&] { save_checkpoint(run.path(), 2, bad_state, 5); }, {"state.json", "invalid JSON"});
  bad_state.state_json = "[2]";
  expect_error([&] { save_checkpoint(run.path(), 2, bad_state, 5); }, {"state.json", "not a JSON object"});

  CheckpointData bad_tensors = random_checkpoint(2);
  bad_tensors.optimizer.push_back(bad_tensors.optimizer.front());  // duplicate name, found mid-save
  expect_error([&] { save_checkpoint(run.path(), 2, bad_tensors, 5); }, {"optimizer.safetensors", "appears twice"});

  expect_error([&] { save_checkpoint(run.path(), -5, random_checkpoint(2), 5); }, {"non-negative"});
  expect_error([&] { save_checkpoint(run.path(), 2, random_checkpoint(2), -1); }, {"keep_last"});

  EXPECT_EQ(entry_names(checkpoints), before);
  expect_same(load_checkpoint(run.path()), random_checkpoint(1));
}

TEST(Checkpoint, MissingOrGarbageLatestIsAClearError) {
  ScratchFolder run;
  const fs::path checkpoints = run / "checkpoints";
  expect_error([&] { load_checkpoint(run / "nope"); }, {"nope", "does not exist"});
  expect_error([&] { load_checkpoint(run.path()); }, {"neither a checkpoint folder", "nor a run folder"});
  write_bytes(run / "file", "x");
  expect_error([&] { load_checkpoint(run / "file"); }, {"is not a folder"});

  fs::create_directory(checkpoints);
  EXPECT_EQ(latest_checkpoint(run.path()), std::nullopt);
  expect_error([&] { load_checkpoint(run.path()); }, {"has no", "latest", "no checkpoint was saved yet"});

  save_checkpoint(run.path(), 7, random_checkpoint(1), 5);
  for (const std::string& garbage : {std::string("\x00\xff\x13junk", 7), std::string("../../etc"),
                                     std::string("step_abc"), std::string(""), std::string(".tmp-step_1-2")}) {
    write_bytes(checkpoints / "latest", garbage);
    expect_error([&] { load_checkpoint(run.path()); }, {"latest", "is corrupt"});
    expect_error([&] { latest_checkpoint(run.path()); }, {"latest", "is corrupt"});
  }
  write_bytes(checkpoints / "latest", std::string(10000, 's'));
  expect_error([&] { load_checkpoint(run.path()); }, {"latest", "10000 bytes"});

  write_bytes(checkpoints / "latest", "step_00000099\n");
  expect_error([&] { load_checkpoint(run.path()); }, {"step_00000099", "does not exist"});
  expect_error([&] { latest_checkpoint(run.path()); }, {"step_00000099", "does not exist"});

  write_bytes(checkpoints / "latest", "step_00000007\n");
  expect_same(load_checkpoint(run.path()), random_checkpoint(1));
}

TEST(Checkpoint, DamagedFilesAreClearErrors) {
  ScratchFolder run;
  const fs::path folder = save_checkpoint(run.path(), 4, random_checkpoint(3), 5);

  const std::string model = read_bytes(folder / "model.safetensors");
  write_bytes(folder / "model.safetensors", model.substr(0, model.size() - 3));
  expect_error([&] { load_checkpoint(run.path()); }, {(folder / "model.safetensors").string(), "truncated"});
  write_bytes(folder / "model.safetensors", model);

  const std::string optimizer = read_bytes(folder / "optimizer.safetensors");
  write_bytes(folder / "optimizer.safetensors", optimizer.substr(0, 6));
  expect_error([&] { load_checkpoint(folder); }, {(folder / "optimizer.safetensors").string(), "too short"});
  write_bytes(folder / "optimizer.safetensors", optimizer);

  const std::string state = read_bytes(folder / "state.json");
  write_bytes(folder / "state.json", state.substr(0, state.size() / 2));
  expect_error([&] { load_checkpoint(run.path()); }, {(folder / "state.json").string(), "invalid JSON"});
  write_bytes(folder / "state.json", "\"just a string\"");
  expect_error([&] { load_checkpoint(run.path()); }, {(folder / "state.json").string(), "not a JSON object"});
  write_bytes(folder / "state.json", state);

  for (const char* file : {"state.json", "recipe.yaml", "model.safetensors", "optimizer.safetensors"}) {
    SCOPED_TRACE(file);
    const std::string bytes = read_bytes(folder / file);
    fs::remove(folder / file);
    expect_error([&] { load_checkpoint(run.path()); }, {folder.string(), std::string("is missing ") + file});
    write_bytes(folder / file, bytes);
  }
  expect_same(load_checkpoint(run.path()), random_checkpoint(3));
}

TEST(FileIo, StaleTemporaryNames) {
  EXPECT_FALSE(temp_entry_is_stale("step_00000001"));
  EXPECT_FALSE(temp_entry_is_stale("latest"));
  EXPECT_FALSE(temp_entry_is_stale(".tmp-step_00000001-1"));  // pid 1 is alive
  EXPECT_TRUE(temp_entry_is_stale(".tmp-step_00000001-" + std::to_string(dead_pid())));
  EXPECT_TRUE(temp_entry_is_stale(temp_name_for("step_00000001")));  // this process: an earlier failure
  EXPECT_TRUE(temp_entry_is_stale(".tmp-garbage"));
  EXPECT_TRUE(temp_entry_is_stale(".tmp-x-0"));
  EXPECT_EQ(temp_name_for("latest"), ".tmp-latest-" + std::to_string(::getpid()));
}

TEST(FileIo, AtomicWriterLeavesNothingWhenAbandoned) {
  ScratchFolder dir;
  write_file_atomically(dir / "f", "old");
  {
    AtomicFileWriter writer(dir / "f");
    writer.write("new contents");
  }  // destroyed without commit: the old file stays, the temporary goes
  EXPECT_EQ(read_bytes(dir / "f"), "old");
  EXPECT_EQ(entry_names(dir.path()), std::vector<std::string>{"f"});
  write_file_atomically(dir / "f", "new");
  EXPECT_EQ(read_file(dir / "f"), "new");
  expect_error([&] { read_file(dir / "f", 2); }, {"3 bytes"});
  expect_error([&] { read_file(dir / "absent"); }, {"absent", "cannot open"});
}

namespace {
// While alive, files of this process cannot grow past `bytes` (write() fails with EFBIG, as on a
// full disk). Unlike permission bits, this limit holds for root too.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &previous_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // the default action would end the process
    rlimit limit = previous_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &previous_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit previous_{};
  void (*previous_handler_)(int) = nullptr;
};
}  // namespace

TEST(Checkpoint, AFullDiskDuringASaveLeavesTheLatestIntact) {
  ScratchFolder dir;
  const CheckpointData first = random_checkpoint(1);
  save_checkpoint(dir.path(), 1, first, 3);
  CheckpointData big = random_checkpoint(2);
  std::mt19937_64 rng(3);
  big.model.emplace_back("model.norm.weight", random_tensor({1 << 16}, DType::f32, rng));  // 256 KiB
  std::string message;
  {
    const FileSizeLimit limit(64 << 10);
    message = fathom::testing::error_of([&] { save_checkpoint(dir.path(), 2, big, 3); });
  }
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_EQ(latest_checkpoint(dir.path())->filename(), "step_00000001");
  expect_same(load_checkpoint(dir.path()), first);
  EXPECT_EQ(entry_names(dir / "checkpoints"), (std::vector<std::string>{"latest", "step_00000001"}));
}

TEST(Checkpoint, KeepLastZeroKeepsAll) {
  ScratchFolder dir;
  for (int64_t step = 1; step <= 5; ++step) save_checkpoint(dir.path(), step, random_checkpoint(uint64_t(step)), 0);
  EXPECT_EQ(saved_steps(dir.path()), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(Checkpoint, ModelOnlyCheckpointsServeEverythingButResume) {
  ScratchFolder dir;
  const CheckpointData data = random_checkpoint(4);
  const fs::path folder = save_checkpoint(dir.path(), 7, data, 3);
  fs::remove(folder / kCheckpointOptimizerFile);
  const CheckpointData model_only = load_checkpoint(dir.path(), CheckpointUse::model_only);
  expect_same(model_only.model, data.model);
  EXPECT_TRUE(model_only.optimizer.empty());
  EXPECT_EQ(model_only.recipe_yaml, data.recipe_yaml);
  expect_error([&] { load_checkpoint(dir.path()); },
               {"is missing optimizer.safetensors", "model-only checkpoint serves eval and export"});
}

TEST(Checkpoint, LeftoversOfAKilledPruningAreRemovedAtTheNextStart) {
  ScratchFolder dir;
  save_checkpoint(dir.path(), 1, random_checkpoint(5), 3);
  const fs::path retired = dir / "checkpoints" / (".tmp-retired-step_00000000-" + std::to_string(dead_pid()));
  fs::create_directories(retired / "inside");
  remove_checkpoint_leftovers(dir.path());
  EXPECT_FALSE(fs::exists(retired));
  EXPECT_EQ(saved_steps(dir.path()), (std::vector<int64_t>{1}));
  remove_checkpoint_leftovers(dir / "no-such-run");  // nothing to clean: no error
}

// Metrics share the run folder's disk: a full disk while appending is an error naming the file.
TEST(MetricsLog, AFullDiskIsAClearError) {
  ScratchFolder dir;
  MetricsLog log(dir.path(), 0);
  log.write("train", 1, {{"loss", 2.5}});
  const uintmax_t size = fs::file_size(dir / "metrics.jsonl");
  std::string message;
  {
    const FileSizeLimit limit(size);
    message = fathom::testing::error_of([&] { log.write("train", 2, {{"loss", 2.25}}); });
  }
  EXPECT_NE(message.find("metrics.jsonl"), std::string::npos) << message;
  EXPECT_NE(message.find("free disk space"), std::string::npos) << message;
}
