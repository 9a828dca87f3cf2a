#include <iostream>
#include <memory>

#include "train/cli/commands.h"
#include "train/recipe/recipe.h"
#include "train/run/stop_signal.h"
#include "train/run/trainer.h"

namespace fathom {

void add_train_command(CLI::App& app) {
  struct Args {
    std::string recipe;
    std::vector<std::string> overrides;
    RunOptions options;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model from a YAML recipe");
  cmd->add_option("recipe", args->recipe, "Recipe file (see recipes/)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "Override a recipe value, e.g. --set train.steps=100 (repeatable)");
  cmd->add_flag("--resume", args->options.resume, "Continue from the run folder's latest checkpoint");
  cmd->add_flag("--overwrite", args->options.overwrite,
                "Start the run again, replacing its folder once the new run has a checkpoint");
  cmd->callback([args] {
    // From the start: a signal while the recipe is read stops the run after its first step.
    const StopSignalScope stop_signals;
    args->options.recipe_file = args->recipe;
    // A resumed run has its weights, and so its model, in its checkpoint: model.init_from's source
    // is not read again (it may be gone).
    const ModelOrigin origin{args->options.resume ? ModelOrigin::Kind::own_run : ModelOrigin::Kind::init_source, ""};
    const TrainResult result = run_training(load_recipe(args->recipe, args->overrides, origin), args->options);
    if (result.reports)
      std::cout << (result.stopped_by_signal ? "stopped" : "done") << " at step " << result.steps_done
                << "; run folder " << result.run_dir.string() << "\n";
  });
}

}  // namespace fathom
