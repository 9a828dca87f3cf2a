// Every recipe shipped in recipes/ parses and validates (data paths need not exist to parse).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "train/recipe.h"

using namespace fathom;
namespace fs = std::filesystem;

TEST(ShippedRecipes, EveryRecipeInRecipesFolderLoads) {
  const fs::path folder = fs::path(FATHOM_SOURCE_DIR) / "recipes";
  int recipes = 0;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() != ".yaml") continue;
    ++recipes;
    SCOPED_TRACE(entry.path().string());
    try {
      const Recipe recipe = load_recipe(entry.path().string());
      EXPECT_EQ(recipe.name, entry.path().stem().string()) << "a recipe's name should match its file name";
      EXPECT_FALSE(recipe.data.train.empty());
      EXPECT_FALSE(recipe.data.validation.empty()) << "every shipped recipe reports validation loss";
    } catch (const Error& e) {
      ADD_FAILURE() << e.message();
    }
  }
  EXPECT_GE(recipes, 3);
}

TEST(ShippedRecipes, GpuBenchmarksTrainOnThePreparedFullCorpus) {
  for (const char* name : {"olmo2-190m", "olmo2-1b"}) {
    const Recipe recipe = load_recipe(std::string(FATHOM_SOURCE_DIR) + "/recipes/" + name + ".yaml");
    EXPECT_EQ(recipe.data.train, std::vector<std::string>{"data/prepared/dolma2/train"}) << name;
    ASSERT_EQ(recipe.data.validation.size(), 2u) << name;
    EXPECT_EQ(recipe.data.validation.at("moby_dick"), std::vector<std::string>{"data/prepared/dolma2/validation/moby_dick"});
    EXPECT_EQ(recipe.data.validation.at("sotu_recent"),
              std::vector<std::string>{"data/prepared/dolma2/validation/sotu_recent"});
  }
}
