// Checkpoints: one folder per saved step, run_dir/checkpoints/step_<8-digit step>/, holding
//   model.safetensors      model tensors under their HF names (metadata format=pt, as HF expects)
//   optimizer.safetensors  optimizer state tensors
//   state.json             step, tokens seen, loader position, RNG (a JSON object)
//   recipe.yaml            the resolved recipe
// and run_dir/checkpoints/latest, a one-line text file naming the newest folder. A save writes a
// temporary folder, fsyncs it and renames it into place before `latest` moves, so a crash never
// leaves `latest` pointing at a half checkpoint. Leftover ".tmp-*" entries (a save or a pruning
// that was killed) are ignored by readers and removed by the next save or run start.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"

namespace fathom {

struct CheckpointData {
  TensorMap model;
  TensorMap optimizer;
  std::string state_json;
  std::string recipe_yaml;
};

inline constexpr const char* kCheckpointModelFile = "model.safetensors";
inline constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kCheckpointStateFile = "state.json";
inline constexpr const char* kCheckpointRecipeFile = "recipe.yaml";

// "step_00000012".
std::string checkpoint_folder_name(int64_t step);

// Saves `data` as the checkpoint of `step` (replacing an existing one of that step atomically),
// points `latest` at it, then deletes the oldest step folders so that keep_last remain besides the
// one just written, which is never deleted (keep_last 0 keeps all). Refuses a state_json that is
// not a JSON object before writing anything. Returns the checkpoint folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const CheckpointData& data,
                                      int keep_last);

// What a checkpoint is read for: resuming needs every file; eval, export and model.init_from need
// only the model (and the recipe), so a checkpoint without optimizer.safetensors serves them.
enum class CheckpointUse { resume, model_only };

// `path` is a checkpoint folder, a run folder (follows checkpoints/latest) or a run's checkpoints
// folder. With CheckpointUse::model_only, `optimizer` stays empty. Every problem (missing folder or file, a dangling or
// garbage `latest`, a corrupt safetensors file, state.json that is not a JSON object) is a fathom::Error naming the
// path.
CheckpointData load_checkpoint(const std::filesystem::path& path, CheckpointUse use = CheckpointUse::resume);

// The checkpoint folder load_checkpoint(path) reads, with the same checks on `latest`.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// The folder run_dir/checkpoints/latest names; nullopt when nothing was saved yet (no latest file).
// A garbage `latest` or one naming a missing folder is an error, never silently "no checkpoint".
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// Deletes the ".tmp-*" entries of run_dir/checkpoints that no running process owns.
void remove_checkpoint_leftovers(const std::filesystem::path& run_dir);

// Deletes every checkpoint of the run: `latest` first, so an interrupted removal reads as "nothing
// saved" and never as a dangling `latest`; then the step folders and temporary leftovers.
void remove_checkpoints(const std::filesystem::path& run_dir);

// Every step folder of the run, ascending by step (temporary folders excluded).
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& run_dir);

}  // namespace fathom
