#include <iostream>
#include <memory>

#include "core/path_safety.h"
#include "data/tokenizer.h"
#include "layers/hf_export.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/commands.h"
#include "train/recipe/recipe.h"

namespace fathom {

void add_export_command(CLI::App& app) {
  struct Args {
    std::string format, checkpoint, out, dtype = "f32";
    bool overwrite = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("export", "Export a checkpoint in another framework's format");
  cmd->add_option("--format", args->format, "Output format")->required()->check(CLI::IsMember({"hf"}));
  cmd->add_option("--checkpoint", args->checkpoint, "Checkpoint folder, or a run folder (uses its latest)")->required();
  cmd->add_option("--out", args->out, "Output folder (written atomically)")->required();
  cmd->add_option("--dtype", args->dtype, "Weight dtype: f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_flag("--overwrite", args->overwrite, "Replace an existing output folder");
  cmd->callback([args] {
    const std::filesystem::path folder = resolve_checkpoint(args->checkpoint);
    // Replacing the output folder must not delete the run being exported, nor the current folder.
    if (std::filesystem::exists(args->out)) check_safe_to_replace(args->out, {args->checkpoint, folder}, "export");
    const CheckpointData checkpoint = load_checkpoint(folder, CheckpointUse::model_only);
    // The checkpoint's own recipe describes its model; an init_from source it names may be gone.
    const Recipe recipe = parse_saved_recipe(checkpoint.recipe_yaml, (folder / kCheckpointRecipeFile).string());
    HfExportOptions options;
    options.dtype = args->dtype == "bf16" ? DType::bf16 : DType::f32;
    options.max_position_embeddings = recipe.train.seq_len;
    options.eos_token_id = make_tokenizer(recipe.data.tokenizer)->eos_id();
    options.overwrite = args->overwrite;
    export_hf_model(recipe.model, checkpoint.model, args->out, options);
    std::cout << "exported " << folder.string() << " as " << hf_export_class(recipe.model) << " to " << args->out
              << (hf_needs_remote_code(recipe.model) ? " (remote code: load it with trust_remote_code=True)" : "")
              << "\n";
  });
}

}  // namespace fathom
