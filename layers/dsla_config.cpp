#include "layers/dsla_config.h"

#include "core/error.h"

namespace fathom {

const std::vector<std::string>& dsla_gamma_names() {
  static const std::vector<std::string> names{"layer", "head"};
  return names;
}

const std::string& name_of(DslaGamma gamma) { return dsla_gamma_names()[size_t(gamma)]; }

void DslaConfig::validate() const {
  FATHOM_CHECK(states == 1 || states == 2,
               "dsla.states must be 1 (one gated state) or 2 (two states mixed by gamma), got ", states);
}

}  // namespace fathom
