// train.trainable / train.frozen: which parameters a run trains, by name globs (fnmatch: `*` and `?`
// match any characters, dots included; `[...]` a set), e.g. frozen: ["model.embed_tokens.*", "lm_head.*"]
// or trainable: ["model.layers.3.*"].
#pragma once
#include <set>
#include <string>
#include <vector>

namespace fathom {

// The names in `names` that the run freezes: with trainable globs, every name none of them matches;
// then every name a frozen glob matches. A glob that matches no name is an error naming it (and an
// example name), and so is a selection that leaves nothing to train.
std::set<std::string> frozen_parameters(const std::vector<std::string>& names,
                                        const std::vector<std::string>& trainable,
                                        const std::vector<std::string>& frozen);

}  // namespace fathom
