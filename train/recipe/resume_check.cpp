#include "train/recipe/resume_check.h"

#include "core/error.h"
#include "train/recipe/recipe_schema.h"

namespace fathom {

// Which keys are resumable is the schema's (RecipeKey::resumable), and why: not batch_size, seq_len nor
// the seed, since the loader's saved position means something only for the order they give.
// train.grad_accum may change, so that a run resumed over another world size can keep its global batch
// (batch_size x grad_accum x world): the position counts global windows, so another world continues on
// the next unseen ones. train.steps / train.tokens stretch or shorten the schedule from the current step
// on. ZeRO checkpoints are whole, so train.zero may change too. data.validation is only evaluated, never
// trained on.
std::vector<std::string> keys_changeable_on_resume() {
  std::vector<std::string> resumable;  // built per call: a layer kind registered later adds its options
  for (const RecipeKey& key : recipe_keys())
    if (key.resumable) resumable.push_back(key.path);
  return resumable;
}

void check_resume_compatible(const Recipe& saved, const Recipe& now, const std::string& saved_source) {
  std::string changes;
  for (const RecipeKey& key : recipe_keys()) {
    if (key.resumable || same_value(key, saved, now)) continue;
    changes += "\n  " + key.path + ": " + describe_value(key, saved) + " in the run, " + describe_value(key, now) +
               " in the recipe";
  }
  FATHOM_CHECK(changes.empty(), "--resume: the recipe changes the run saved in ", saved_source, ":", changes,
               "\nput those keys back to the run's values, or start a new run (another log.dir, or --overwrite); "
               "keys that may change on resume: ",
               [] {
                 std::string list;
                 for (const std::string& k : keys_changeable_on_resume()) list += (list.empty() ? "" : ", ") + k;
                 return list;
               }());
}

}  // namespace fathom
