#include <iostream>

#include "train/cli/commands.h"
#include "train/recipe/recipe_reference.h"

namespace fathom {

void add_recipe_command(CLI::App& app) {
  CLI::App* recipe = app.add_subcommand("recipe", "About recipes");
  recipe->require_subcommand(1);
  CLI::App* reference = recipe->add_subcommand(
      "reference",
      "Print every recipe key with its default, what it accepts, whether --resume may change it and "
      "what it means, as a Markdown table (the README's recipe reference)");
  reference->callback([] { std::cout << recipe_reference_markdown(); });
}

}  // namespace fathom
