#include "train/recipe/recipe_reference.h"

#include <type_traits>

#include "core/suggest.h"

namespace fathom {

namespace {

// A table cell: one line, and a '|' would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else {
      out += c == '\n' ? ' ' : c;
    }
  }
  return out;
}

bool is_empty_string(const RecipeKey& key, const Recipe& recipe) {
  using StringField = std::string& (*)(Recipe&);
  const StringField* field = std::get_if<StringField>(&key.field);
  Recipe values = recipe;  // the accessors take a mutable Recipe
  return field && (*field)(values).empty();
}

}  // namespace

std::string describe_default(const RecipeKey& key) {
  switch (key.presence) {
    case Presence::required:
      return "required";
    case Presence::required_without_size:
      return "from `model.size`";
    case Presence::derived:
      return "derived";
    case Presence::steps_or_tokens:
      return "`train.steps` or `train.tokens` required";
    case Presence::optional:
      break;
  }
  const Recipe defaults;  // named, not {}: GCC 12 warns (-Wmaybe-uninitialized, a false positive) otherwise
  if (is_empty_string(key, defaults)) return "none";
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on a literal + a temporary string.
  std::string value = "`";
  value.append(describe_value(key, defaults)).append("`");
  return value;
}

std::string describe_accepted(const RecipeKey& key) {
  std::string text = key.describe_type();
  const std::string range = key.range.describe();
  if (!range.empty()) text += " " + range;
  // describe_type names the choices of a string or enum; a list's entries or a mapping's names are
  // checked against them too.
  if (!key.choices.empty() && !text.starts_with("one of ")) text += "; names: " + join_names(key.choices);
  return text;
}

std::string recipe_reference_markdown() {
  std::string out =
      "| key | default | accepts | on `--resume` | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const RecipeKey& key : recipe_keys()) {
    out += "| `" + key.path + "` | " + cell(describe_default(key)) + " | " + cell(describe_accepted(key)) + " | " +
           (key.resumable ? "may change" : "must match") + " | " + cell(key.doc) + " |\n";
  }
  return out;
}

}  // namespace fathom
