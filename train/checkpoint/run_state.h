// The small state that, with the weights and optimizer moments, makes a resume bit-exact:
// saved as state.json in every checkpoint.
#pragma once
#include <cstdint>
#include <string>

#include "data/loader.h"

namespace fathom {

struct RunState {
  int64_t step = 0;         // optimizer steps completed
  int64_t tokens_seen = 0;  // training tokens consumed
  uint64_t seed = 0;        // the recipe seed the run started with
  LoaderState loader;
};

std::string run_state_to_json(const RunState& state);
RunState run_state_from_json(const std::string& json, const std::string& source);

}  // namespace fathom
