// `train --resume` continues the run its checkpoint belongs to, or refuses: a recipe whose model,
// tokenizer, data, optimizer or batch geometry differ from the checkpoint's saved recipe.yaml
// would train a different run from that checkpoint (or break the loader's bit-exact position).
#pragma once
#include <string>
#include <vector>

#include "train/recipe/recipe.h"

namespace fathom {

// The keys a resumed run may change, in schema order: those whose RecipeKey::resumable is set (its
// length, its reporting, and where and how fast it runs). The recipe reference (`fathom recipe
// reference`, the README) shows the same property.
std::vector<std::string> keys_changeable_on_resume();

// An error listing every other key whose value differs between `saved` (the checkpoint's recipe,
// read from `saved_source`) and `now`, with both values.
void check_resume_compatible(const Recipe& saved, const Recipe& now, const std::string& saved_source);

}  // namespace fathom
