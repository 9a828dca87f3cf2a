// The training objective: a weighted sum of named terms, recipe key train.loss (default
// {ce: 1, z_loss: 1e-5}). A term is the fused, chunked head and cross-entropy (ce, with z_loss riding in
// the same kernel), distillation's, or an auxiliary loss that layers add to the model output by name,
// which its layer kind registers (layers/layer_kinds.h: MoD's router and predictor losses).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "layers/decoder.h"

namespace fathom {

// The term names: the objective's own, then every layer kind's, in registration order.
std::vector<std::string> objective_term_names();

// Unweighted per-term values of one micro-batch, for logging: ce is the mean cross-entropy, z_loss
// the weighted z-loss term (as the loss kernel reports it), layer terms their loss summed over the
// layers that report it.
using TermValues = std::map<std::string, double>;

struct ObjectiveValue {
  Variable loss;  // one element: sum of weight * term
  TermValues terms;
};

class Objective {
 public:
  // Weights by term name. Throws fathom::Error (naming the term) for an unknown name, a weight that is
  // negative or not finite, or z_loss without ce (the z-loss rides in the cross-entropy kernel).
  explicit Objective(std::map<std::string, double> weights);
  // Next-token cross-entropy plus z_loss_weight * logsumexp^2: the pretraining objective.
  static Objective language_model(double z_loss_weight);
  // A run's objective: the terms of train.loss (`loss`) plus, for a model with MoD, the routed blocks'
  // losses at mod.aux_loss_weight (mod_router) or mod.predictor_loss_weight (mod_predictor). Those two
  // are set by the mod keys only: train.loss naming them is an error that says so.
  static Objective for_model(const std::map<std::string, double>& loss, const ModelConfig& model);

  double weight(const std::string& term) const;  // 0 for a term not in the objective
  const std::map<std::string, double>& weights() const { return weights_; }

  // The objective of one micro-batch, targets (I32/I64, host or device) [B, T] with -100 where a
  // position has none. The head and loss form their gradients in this forward for the gradient the
  // loss will receive, grad_scale (the caller backpropagates grad_scale * loss): the [tokens, vocab]
  // logits are never whole. A layer loss without a weight here is an error naming it.
  ObjectiveValue evaluate(const Decoder& model, const ModelOutput& output, const Tensor& targets,
                          double grad_scale) const;

 private:
  std::map<std::string, double> weights_;
  std::set<std::string, std::less<>> layer_terms_;  // the layer kinds' term names when this was made
};

}  // namespace fathom
