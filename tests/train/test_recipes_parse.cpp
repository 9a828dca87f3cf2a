// Every recipe shipped in recipes/ parses and validates (data paths need not exist to parse).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "layers/dsla_config.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"
#include "train/recipe/recipe.h"

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
    EXPECT_EQ(recipe.data.validation.at("moby_dick"),
              std::vector<std::string>{"data/prepared/dolma2/validation/moby_dick"});
    EXPECT_EQ(recipe.data.validation.at("sotu_recent"),
              std::vector<std::string>{"data/prepared/dolma2/validation/sotu_recent"});
  }
}

// The MoDA step-overhead pair (recipes/bench) parses and differs only in its name and moda.variant.
TEST(ShippedRecipes, ModaStepOverheadPairDiffersOnlyInTheVariant) {
  const std::string folder = std::string(FATHOM_SOURCE_DIR) + "/recipes/bench/";
  const Recipe baseline = load_recipe(folder + "moda-190m-baseline.yaml");
  Recipe moda = load_recipe(folder + "moda-190m-attn_kv_ffn_kv.yaml");
  EXPECT_EQ(baseline.name, "moda-190m-baseline");
  EXPECT_EQ(moda.name, "moda-190m-attn_kv_ffn_kv");
  EXPECT_EQ(baseline.model.options.get<MoDAConfig>().variant, MoDAVariant::none);
  EXPECT_EQ(moda.model.options.get<MoDAConfig>().variant, MoDAVariant::attn_kv_ffn_kv);
  EXPECT_EQ(moda.train.seq_len, 2048);
  EXPECT_EQ(moda.model.d_model, 768);
  EXPECT_EQ(moda.model.n_heads / moda.model.n_kv_heads, 2);
  moda.name = baseline.name;
  moda.log.dir = baseline.log.dir;  // derived from the name
  moda.model.options.get<MoDAConfig>().variant = baseline.model.options.get<MoDAConfig>().variant;
  EXPECT_EQ(recipe_to_yaml(moda), recipe_to_yaml(baseline));
}
