// The README's recipe reference must name every recipe key, so it cannot fall behind the schema.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "train/recipe/recipe_schema.h"

TEST(Readme, RecipeReferenceNamesEveryKey) {
  std::ifstream in(std::string(FATHOM_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& key : fathom::recipe_keys()) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on a literal + a temporary string.
    std::string quoted = "`";
    quoted.append(key.path).append("`");
    EXPECT_NE(text.str().find(quoted), std::string::npos) << key.path;
  }
}
