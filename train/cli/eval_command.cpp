#include <iostream>
#include <memory>

#include "train/cli/commands.h"
#include "train/measure/evaluator.h"
#include "train/recipe/recipe.h"

namespace fathom {

void add_eval_command(CLI::App& app) {
  struct Args {
    std::string recipe, checkpoint;
    std::vector<std::string> overrides;
    std::string routing = "topk";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on the recipe's validation domains");
  cmd->add_option("recipe", args->recipe, "Recipe file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--checkpoint", args->checkpoint, "Checkpoint folder, or a run folder (uses its latest)")->required();
  cmd->add_option("--set", args->overrides, "Override a recipe value (repeatable)");
  cmd->add_option("--routing", args->routing,
                  "MoD: route each sequence's top-k tokens as in training (topk), or each token by the causal "
                  "router as generation does (causal)")
      ->check(CLI::IsMember({"topk", "causal"}));
  cmd->callback([args] {
    // The evaluated checkpoint gives the model, so model.init_from's source need not exist any more.
    const ModelOrigin origin{ModelOrigin::Kind::checkpoint, args->checkpoint};
    run_evaluation(load_recipe(args->recipe, args->overrides, origin), args->checkpoint, std::cout,
                   /*as_decoded=*/args->routing == "causal");
  });
}

}  // namespace fathom
