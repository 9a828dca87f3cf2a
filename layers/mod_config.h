// Mixture-of-Depths options (DESIGN.md 4.3), the recipe's `mod` section: which blocks are routed, the
// capacity each routed block runs at, how the chosen tokens' block delta is weighted, and how routing is
// made causal for generation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fathom {

// g in out[idx] += g(r[idx]) * delta: the router logit itself (the paper) or its sigmoid.
enum class ModRouterWeight { identity, sigmoid };
// What routes tokens when the whole sequence is not known (generation, causal evaluation): a small
// predictor on the stop-gradient block input, or the router itself trained with an auxiliary BCE loss
// (route where sigmoid(r) > 0.5).
enum class ModCausal { predictor, aux_loss };
// Who picks the k tokens: the learned router, or uniform random scores (the paper's control at the
// same capacity; the chosen tokens' delta then has weight 1).
enum class ModRouter { learned, random };

const std::vector<std::string>& mod_router_weight_names();
const std::vector<std::string>& mod_causal_names();
const std::vector<std::string>& mod_router_names();
const std::string& name_of(ModRouterWeight weight);
const std::string& name_of(ModCausal causal);
const std::string& name_of(ModRouter router);

struct ModConfig {
  double capacity = 0;  // c: each routed block runs k = ceil(c * S) tokens per sequence; 0 turns MoD off
  int64_t every = 2;    // route blocks every-1, 2*every-1, ...; block 0 always stays dense
  ModRouterWeight router_weight = ModRouterWeight::identity;
  ModCausal causal = ModCausal::predictor;
  double aux_loss_weight = 0.01;       // objective weight of the router's BCE (causal: aux_loss)
  double predictor_loss_weight = 1.0;  // objective weight of the predictor's BCE (causal: predictor)
  ModRouter router = ModRouter::learned;

  bool enabled() const { return capacity > 0; }
  // Whether block `layer` is routed.
  bool routes(int64_t layer) const { return enabled() && layer > 0 && (layer + 1) % every == 0; }
  // k for sequences of seq_len tokens: ceil(c * S), at least 1.
  int64_t tokens_routed(int64_t seq_len) const;
  // A predictor is trained (learned router, causal: predictor) / the router's BCE is (causal: aux_loss).
  bool has_predictor() const { return enabled() && router == ModRouter::learned && causal == ModCausal::predictor; }
  bool has_aux_loss() const { return enabled() && router == ModRouter::learned && causal == ModCausal::aux_loss; }
  // Throws fathom::Error naming the key: capacity in [0, 1], every >= 1, finite weights >= 0, and
  // with MoD on at least one routed block among n_layers.
  void validate(int64_t n_layers) const;

  bool operator==(const ModConfig&) const = default;
};

}  // namespace fathom
