#include "train/checkpoint/checkpoint.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/file_io.h"
#include "core/json.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCheckpointsFolder = "checkpoints";
constexpr const char* kLatestFile = "latest";
constexpr std::string_view kStepPrefix = "step_";

// The step of a folder named "step_<digits>", or nullopt for any other name.
std::optional<int64_t> parse_step_folder_name(std::string_view name) {
  if (name.substr(0, kStepPrefix.size()) != kStepPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

// Up to 64 characters of untrusted text, printable, for an error message.
std::string printable_excerpt(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return text.size() > 64 ? out + "..." : out;
}

fs::directory_iterator open_folder(const fs::path& folder) {
  std::error_code error;
  fs::directory_iterator it(folder, error);
  FATHOM_CHECK(!error, "cannot list the folder ", folder, ": ", error.message());
  return it;
}

// Deletes ".tmp-*" entries that no running save owns (a crash, or a failed save, left them).
void remove_stale_temp_entries(const fs::path& checkpoints) {
  for (const auto& entry : open_folder(checkpoints)) {
    const std::string name = entry.path().filename().string();
    if (temp_entry_is_stale(name)) remove_all_or_fail(entry.path(), "a leftover of an interrupted save");
  }
}

void check_state_json(const std::string& text, const std::string& source) {
  const YAML::Node state = parse_json(text, source);
  FATHOM_CHECK(state.IsMap(), source, " is not a JSON object");
}

// The folder checkpoints/latest names, checked; nullopt when there is no latest file.
std::optional<fs::path> read_latest(const fs::path& checkpoints) {
  const fs::path latest = checkpoints / kLatestFile;
  std::error_code error;
  if (!fs::exists(latest, error)) return std::nullopt;
  const std::string text = read_file(latest, 4096);
  const size_t end = text.find_last_not_of(" \t\r\n");
  const std::string name = end == std::string::npos ? "" : text.substr(0, end + 1);
  FATHOM_CHECK(parse_step_folder_name(name).has_value(), latest,
               " is corrupt: expected a checkpoint folder name like step_00000100, found '", printable_excerpt(name),
               "'");
  const fs::path folder = checkpoints / name;
  FATHOM_CHECK(fs::is_directory(folder, error), latest, " names ", name, ", but the folder ", folder,
               " does not exist");
  return folder;
}

}  // namespace

std::string checkpoint_folder_name(int64_t step) {
  FATHOM_CHECK(step >= 0, "checkpoint step must be non-negative, got ", step);
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return std::string(kStepPrefix) + digits;
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const CheckpointData& data, int keep_last) {
  const std::string name = checkpoint_folder_name(step);
  FATHOM_CHECK(keep_last >= 0, "checkpoint keep_last must be >= 0 (0 keeps all), got ", keep_last);
  check_state_json(data.state_json, "state.json of checkpoint " + name);

  const fs::path checkpoints = run_dir / kCheckpointsFolder;
  std::error_code error;
  fs::create_directories(checkpoints, error);
  FATHOM_CHECK(!error, "cannot create the checkpoint folder ", checkpoints, ": ", error.message());
  remove_stale_temp_entries(checkpoints);

  const fs::path temp = checkpoints / temp_name_for(name);
  remove_all_or_fail(temp, "a leftover of an earlier save");
  FATHOM_CHECK(fs::create_directory(temp, error), "cannot create ", temp, ": ",
               error ? error.message() : "it already exists");
  TempFolderGuard guard(temp);
  write_safetensors(temp / kCheckpointModelFile, data.model, {{"format", "pt"}});
  write_safetensors(temp / kCheckpointOptimizerFile, data.optimizer);
  write_file_atomically(temp / kCheckpointStateFile, data.state_json);
  write_file_atomically(temp / kCheckpointRecipeFile, data.recipe_yaml);
  fsync_directory(temp);

  const fs::path folder = checkpoints / name;
  move_folder_into_place(temp, folder);
  guard.release();
  fsync_directory(checkpoints);
  write_file_atomically(checkpoints / kLatestFile, name + "\n");

  if (keep_last > 0) {
    const auto all = list_checkpoints(run_dir);
    for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) {
      if (all[i].first == step) continue;
      try {
        retire_folder(all[i].second);
      } catch (const Error& e) {
        FATHOM_FAIL("checkpoint ", folder, " was saved, but deleting the old checkpoint ", all[i].second,
                    " failed: ", e.message());
      }
    }
  }
  return folder;
}

void remove_checkpoint_leftovers(const fs::path& run_dir) {
  const fs::path checkpoints = run_dir / kCheckpointsFolder;
  std::error_code error;
  if (fs::is_directory(checkpoints, error)) remove_stale_temp_entries(checkpoints);
}

void remove_checkpoints(const fs::path& run_dir) {
  fs::remove(run_dir / kCheckpointsFolder / kLatestFile);
  for (const auto& [step, folder] : list_checkpoints(run_dir)) fs::remove_all(folder);
  remove_checkpoint_leftovers(run_dir);
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  const fs::path checkpoints = run_dir / kCheckpointsFolder;
  std::error_code error;
  if (!fs::is_directory(checkpoints, error)) return found;
  for (const auto& entry : open_folder(checkpoints)) {
    const auto step = parse_step_folder_name(entry.path().filename().string());
    if (step && entry.is_directory()) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path checkpoints = run_dir / kCheckpointsFolder;
  std::error_code error;
  if (!fs::is_directory(checkpoints, error)) return std::nullopt;
  return read_latest(checkpoints);
}

fs::path resolve_checkpoint(const fs::path& path) {
  std::error_code error;
  FATHOM_CHECK(fs::exists(path, error), "checkpoint path ", path, " does not exist");
  FATHOM_CHECK(fs::is_directory(path, error), "checkpoint path ", path,
               " is not a folder (expected a checkpoint folder or a run folder)");
  const bool is_run = fs::is_directory(path / kCheckpointsFolder, error);
  const bool is_checkpoints = !is_run && fs::exists(path / kLatestFile, error);
  if (!is_run && !is_checkpoints) return path;
  const fs::path checkpoints = is_run ? path / kCheckpointsFolder : path;
  const auto folder = read_latest(checkpoints);
  FATHOM_CHECK(folder.has_value(), "run folder ", path, " has no ", fs::path(kCheckpointsFolder) / kLatestFile,
               ": no checkpoint was saved yet");
  return *folder;
}

CheckpointData load_checkpoint(const fs::path& path, CheckpointUse use) {
  const fs::path folder = resolve_checkpoint(path);
  std::error_code error;
  const char* files[] = {kCheckpointModelFile, kCheckpointOptimizerFile, kCheckpointStateFile, kCheckpointRecipeFile};
  int missing = 0;
  for (const char* file : files) missing += !fs::exists(folder / file, error);
  FATHOM_CHECK(missing < 4, folder,
               " is neither a checkpoint folder (no model.safetensors, optimizer.safetensors, state.json, "
               "recipe.yaml) nor a run folder (no checkpoints/latest)");
  const bool needs_optimizer = use == CheckpointUse::resume;
  for (const char* file : files) {
    if (file == kCheckpointOptimizerFile && !needs_optimizer) continue;
    FATHOM_CHECK(fs::is_regular_file(folder / file, error), "checkpoint ", folder, " is missing ", file,
                 needs_optimizer && file == kCheckpointOptimizerFile
                     ? " (a model-only checkpoint serves eval and export, not --resume)"
                     : "");
  }

  CheckpointData data;
  data.model = load_all((folder / kCheckpointModelFile).string());
  if (needs_optimizer) data.optimizer = load_all((folder / kCheckpointOptimizerFile).string());
  const fs::path state = folder / kCheckpointStateFile;
  data.state_json = read_file(state);
  check_state_json(data.state_json, state.string());
  data.recipe_yaml = read_file(folder / kCheckpointRecipeFile);
  return data;
}

}  // namespace fathom
