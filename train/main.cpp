// The `fathom` command line: one program, one subcommand per task.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/error.h"
#include "train/evaluator.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace {

int report(const fathom::Error& e) {
  std::cerr << "fathom: error: " << e.message() << "\n";
  if (std::getenv("FATHOM_DEBUG")) std::cerr << "  (raised at " << e.where() << ")\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fathom: a C++/CUDA training framework for depth-adaptive decoders (OLMo2, MoDA, MoD, DSLA)",
               "fathom"};
  app.require_subcommand(1);

  std::string recipe_path, checkpoint;
  std::vector<std::string> overrides;
  fathom::TrainOptions train_options;

  CLI::App* train = app.add_subcommand("train", "Train a model from a YAML recipe");
  train->add_option("recipe", recipe_path, "Recipe file (see recipes/)")->required()->check(CLI::ExistingFile);
  train->add_option("--set", overrides, "Override a recipe value, e.g. --set train.steps=100 (repeatable)");
  train->add_flag("--resume", train_options.resume, "Continue from the run folder's latest checkpoint");
  train->add_flag("--overwrite", train_options.overwrite, "Delete an existing run folder and start again");

  CLI::App* eval = app.add_subcommand("eval", "Evaluate a checkpoint on the recipe's validation domains");
  eval->add_option("recipe", recipe_path, "Recipe file")->required()->check(CLI::ExistingFile);
  eval->add_option("--checkpoint", checkpoint, "Checkpoint folder, or a run folder (uses its latest)")->required();
  eval->add_option("--set", overrides, "Override a recipe value (repeatable)");

  CLI11_PARSE(app, argc, argv);
  try {
    const fathom::Recipe recipe = fathom::load_recipe(recipe_path, overrides);
    if (*train) {
      const fathom::TrainResult result = fathom::run_training(recipe, train_options);
      std::cout << (result.stopped_by_signal ? "stopped" : "done") << " at step " << result.steps_done
                << "; run folder " << result.run_dir.string() << "\n";
    } else if (*eval) {
      fathom::run_evaluation(recipe, checkpoint, std::cout);
    }
  } catch (const fathom::Error& e) {
    return report(e);
  }
  return 0;
}
