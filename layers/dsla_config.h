// DSLA's options (DESIGN.md 4.4), the recipe's `dsla` section: how many gated states a dsla layer
// (model.layers) keeps, and whether their mixing weight gamma is one per layer or one per query head.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fathom {

// gamma = sigmoid(c): one learned c for the layer (the paper), or one per query head.
enum class DslaGamma { layer, head };

// The names, in the enum's order: the recipe's choices.
const std::vector<std::string>& dsla_gamma_names();
const std::string& name_of(DslaGamma gamma);

struct DslaConfig {
  // 2: two gated states mixed by gamma (DSLA); 1: one state, plain gated linear attention (the
  // paper's single-state ablation; no gamma).
  int64_t states = 2;
  DslaGamma gamma = DslaGamma::layer;

  // Throws fathom::Error unless states is 1 or 2.
  void validate() const;

  bool operator==(const DslaConfig&) const = default;
};

}  // namespace fathom
