#include "layers/recompute.h"

#include "core/error.h"

namespace fathom {

const std::vector<std::string>& recompute_names() {
  static const std::vector<std::string> names{"none", "selective", "block"};
  return names;
}

Recompute parse_recompute(const std::string& name) {
  const std::vector<std::string>& names = recompute_names();
  std::string choices;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return Recompute(i);
    choices += (i ? ", " : "") + names[i];
  }
  FATHOM_FAIL("recompute must be one of ", choices, ", got '", name, "'");
}

const char* recompute_name(Recompute recompute) { return recompute_names()[size_t(recompute)].c_str(); }

}  // namespace fathom
