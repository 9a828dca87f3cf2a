// `fathom distill RECIPE [--resume]`: chained layer-by-layer DSLA distillation (train/distill/distill_chain.h).
#include <memory>

#include "train/cli/commands.h"
#include "train/distill/distill_chain.h"
#include "train/recipe/recipe.h"

namespace fathom {

void add_distill_command(CLI::App& app) {
  struct Args {
    std::string recipe;
    std::vector<std::string> overrides;
    bool resume = false;
    int64_t max_steps = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("distill",
                                     "Convert a teacher's attention layers to DSLA one by one, "
                                     "training each against the teacher (recipe section distill)");
  cmd->add_option("recipe", args->recipe, "Recipe file with a distill section")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "Override a recipe value (repeatable)");
  cmd->add_flag("--resume", args->resume, "Continue the chain at the layer and step where it stopped");
  cmd->add_option("--max-steps", args->max_steps,
                  "Stop with a checkpoint after this many training steps (over all layers); --resume continues")
      ->check(CLI::PositiveNumber);
  cmd->callback([args] {
    const Recipe recipe = load_recipe(args->recipe, args->overrides);
    FATHOM_CHECK(!recipe.distill.teacher.empty(), args->recipe,
                 ": fathom distill needs a distill section with distill.teacher (checkpoint:DIR or hf:DIR)");
    run_distillation(
        recipe, DistillOptions{
                    .resume = args->resume, .quiet = false, .max_steps = args->max_steps, .recipe_file = args->recipe});
  });
}

}  // namespace fathom
