#include "layers/recompute.h"

#include "core/error.h"

namespace fathom {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "block") return Recompute::block;
  FATHOM_FAIL("recompute must be one of none, selective, block, got '", name, "'");
}

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::block: return "block";
  }
  return "?";
}

}  // namespace fathom
