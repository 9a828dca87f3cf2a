#include "layers/mod_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fathom {

const std::vector<std::string>& mod_router_weight_names() {
  static const std::vector<std::string> names{"identity", "sigmoid"};
  return names;
}

const std::vector<std::string>& mod_causal_names() {
  static const std::vector<std::string> names{"predictor", "aux_loss"};
  return names;
}

const std::vector<std::string>& mod_router_names() {
  static const std::vector<std::string> names{"learned", "random"};
  return names;
}

const std::string& name_of(ModRouterWeight weight) { return mod_router_weight_names()[size_t(weight)]; }
const std::string& name_of(ModCausal causal) { return mod_causal_names()[size_t(causal)]; }
const std::string& name_of(ModRouter router) { return mod_router_names()[size_t(router)]; }

int64_t ModConfig::tokens_routed(int64_t seq_len) const {
  // In double, c * S is exact for the capacities people write (1/8, 0.5) and any S below 2^50.
  const int64_t k = int64_t(std::ceil(capacity * double(seq_len)));
  return std::clamp<int64_t>(k, 1, seq_len);
}

void ModConfig::validate(int64_t n_layers) const {
  FATHOM_CHECK(std::isfinite(capacity) && capacity >= 0 && capacity <= 1,
               "mod.capacity must be in (0, 1] (0 turns MoD off), got ", capacity);
  FATHOM_CHECK(every >= 1, "mod.every must be >= 1 (route every n-th block), got ", every);
  FATHOM_CHECK(std::isfinite(aux_loss_weight) && aux_loss_weight >= 0,
               "mod.aux_loss_weight must be a finite number >= 0, got ", aux_loss_weight);
  FATHOM_CHECK(std::isfinite(predictor_loss_weight) && predictor_loss_weight >= 0,
               "mod.predictor_loss_weight must be a finite number >= 0, got ", predictor_loss_weight);
  if (!enabled()) return;
  bool any = false;
  for (int64_t layer = 0; layer < n_layers; ++layer) any = any || routes(layer);
  FATHOM_CHECK(any, "mod.every is ", every, ", which routes none of the ", n_layers,
               " blocks (block 0 stays dense; routed are blocks every-1, 2*every-1, ...): lower mod.every");
}

}  // namespace fathom
