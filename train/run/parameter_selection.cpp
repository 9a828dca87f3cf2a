#include "train/run/parameter_selection.h"

#include <fnmatch.h>

#include <algorithm>

#include "core/error.h"

namespace fathom {

namespace {

bool matches(const std::string& glob, const std::string& name) { return fnmatch(glob.c_str(), name.c_str(), 0) == 0; }

// Every glob must match at least one name.
void check_each_matches(const char* key, const std::vector<std::string>& globs, const std::vector<std::string>& names) {
  for (const std::string& glob : globs) {
    const bool any = std::any_of(names.begin(), names.end(), [&](const std::string& n) { return matches(glob, n); });
    FATHOM_CHECK(any, key, ": '", glob, "' matches no parameter (names look like '",
                 names.empty() ? std::string() : names.back(), "'; `*` matches any characters, dots included)");
  }
}

}  // namespace

std::set<std::string> frozen_parameters(const std::vector<std::string>& names,
                                        const std::vector<std::string>& trainable,
                                        const std::vector<std::string>& frozen) {
  check_each_matches("train.trainable", trainable, names);
  check_each_matches("train.frozen", frozen, names);
  std::set<std::string> out;
  for (const std::string& name : names) {
    const auto by = [&](const std::string& glob) { return matches(glob, name); };
    const bool listed_trainable = trainable.empty() || std::any_of(trainable.begin(), trainable.end(), by);
    if (!listed_trainable || std::any_of(frozen.begin(), frozen.end(), by)) out.insert(name);
  }
  FATHOM_CHECK(out.size() < names.size(), "train.trainable / train.frozen leave no parameter to train");
  return out;
}

}  // namespace fathom
