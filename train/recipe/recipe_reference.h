// The recipe reference: every key of the schema (recipe_keys(), whatever registered them) with its
// default, what it accepts, whether `train --resume` may change it and what it means, as one Markdown
// table. `fathom recipe reference` prints it; the README carries a copy between the markers below
// (scripts/update_recipe_reference.sh rewrites it, and a test fails when the copy differs).
#pragma once
#include <string>

#include "train/recipe/recipe_schema.h"

namespace fathom {

inline constexpr const char* kRecipeReferenceBegin = "<!-- recipe-reference:begin -->";
inline constexpr const char* kRecipeReferenceEnd = "<!-- recipe-reference:end -->";

// A key's default as the reference shows it: the value of a default-constructed Recipe (as
// describe_value writes it, in backquotes; "none" for an empty string), or what its Presence says
// ("required", "from `model.size`", "derived", ...).
std::string describe_default(const RecipeKey& key);

// What a key accepts: its type (describe_type), range, and for lists and mappings the names allowed.
std::string describe_accepted(const RecipeKey& key);

// The whole table, one row per key in schema order, ending in a newline.
std::string recipe_reference_markdown();

}  // namespace fathom
