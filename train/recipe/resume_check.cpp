#include "train/recipe/resume_check.h"

#include <algorithm>

#include "core/error.h"
#include "train/recipe/recipe_schema.h"

namespace fathom {

const std::vector<std::string>& keys_changeable_on_resume() {
  // Not batch_size, seq_len nor the seed: the loader's saved position means something only for the
  // order they give. train.grad_accum may change, so that a run resumed over another world size can
  // keep its global batch (batch_size x grad_accum x world): the position counts global windows. train.steps / train.tokens stretch or
  // shorten the schedule from the current step on. The world size is no key: the loader's position
  // counts global windows, so another world continues on the next unseen ones; ZeRO checkpoints are
  // whole, so train.zero may change too. data.validation is only evaluated, never trained on.
  static const std::vector<std::string> keys = {
      "name",          "train.steps",     "train.tokens",     "train.device",   "train.threads",
      "train.recompute", "train.grad_accum", "train.grad_reduce", "train.grad_bucket_kib", "train.zero", "data.validation", "data.verify",    "eval.every",     "eval.batches",
      "checkpoint.every", "checkpoint.keep_last", "log.every", "log.dir"};
  return keys;
}

void check_resume_compatible(const Recipe& saved, const Recipe& now, const std::string& saved_source) {
  const std::vector<std::string>& allowed = keys_changeable_on_resume();
  std::string changes;
  for (const RecipeKey& key : recipe_keys()) {
    if (std::find(allowed.begin(), allowed.end(), key.path) != allowed.end()) continue;
    if (same_value(key, saved, now)) continue;
    changes += "\n  " + key.path + ": " + describe_value(key, saved) + " in the run, " + describe_value(key, now) +
               " in the recipe";
  }
  FATHOM_CHECK(changes.empty(), "--resume: the recipe changes the run saved in ", saved_source, ":", changes,
               "\nput those keys back to the run's values, or start a new run (another log.dir, or --overwrite); "
               "keys that may change on resume: ",
               [&] {
                 std::string list;
                 for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
                 return list;
               }());
}

}  // namespace fathom
