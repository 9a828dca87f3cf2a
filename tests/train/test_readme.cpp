// The README's recipe reference is the schema's: it names every recipe key, and the table between its
// markers is exactly what `fathom recipe reference` prints, so it cannot fall behind the schema.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "train/recipe/recipe_reference.h"
#include "train/recipe/recipe_schema.h"

namespace {

std::string readme_text() {
  std::ifstream in(std::string(FATHOM_SOURCE_DIR) + "/README.md");
  EXPECT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST(Readme, RecipeReferenceNamesEveryKey) {
  const std::string text = readme_text();
  for (const auto& key : fathom::recipe_keys()) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on a literal + a temporary string.
    std::string quoted = "`";
    quoted.append(key.path).append("`");
    EXPECT_NE(text.find(quoted), std::string::npos) << key.path;
  }
}

TEST(Readme, RecipeReferenceIsTheGeneratedOne) {
  const std::string text = readme_text();
  const std::string begin = fathom::kRecipeReferenceBegin, end = fathom::kRecipeReferenceEnd;
  ASSERT_EQ(count_of(text, begin), 1u) << "README.md must hold the line " << begin << " once";
  ASSERT_EQ(count_of(text, end), 1u) << "README.md must hold the line " << end << " once";
  const size_t from = text.find(begin + "\n"), to = text.find("\n" + end);
  ASSERT_NE(from, std::string::npos) << begin << " must end its line";
  ASSERT_NE(to, std::string::npos) << end << " must start its line";
  ASSERT_LT(from, to) << begin << " must come before " << end;
  const std::string readme = text.substr(from + begin.size() + 1, to + 1 - (from + begin.size() + 1));
  const std::string generated = fathom::recipe_reference_markdown();
  if (readme == generated) return;
  // Name the first line that differs.
  std::istringstream a(readme), b(generated);
  std::string line_a, line_b;
  int line = 0;
  while (true) {
    const bool more_a = bool(std::getline(a, line_a)), more_b = bool(std::getline(b, line_b));
    ++line;
    if (!more_a && !more_b) break;
    if (!more_a || !more_b || line_a != line_b) {
      if (!more_a) line_a = "(nothing)";
      if (!more_b) line_b = "(nothing)";
      break;
    }
  }
  ADD_FAILURE() << "README.md's recipe reference differs from `fathom recipe reference` (the schema, "
                   "train/recipe/recipe_schema.cpp); regenerate it with scripts/update_recipe_reference.sh\n"
                << "first difference, line " << line << " of the table:\n  README.md: " << line_a
                << "\n  generated: " << line_b;
}
