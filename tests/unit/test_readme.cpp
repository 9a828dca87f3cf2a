// The README's recipe reference must name every recipe key, so it cannot fall behind the schema.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "train/recipe_schema.h"

TEST(Readme, RecipeReferenceNamesEveryKey) {
  std::ifstream in(std::string(FATHOM_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& key : fathom::recipe_keys())
    EXPECT_NE(text.str().find("`" + std::string(key.path) + "`"), std::string::npos) << key.path;
}
