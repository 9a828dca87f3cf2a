#include "train/run/objective.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/suggest.h"
#include "layers/layer_kinds.h"
#include "train/measure/memory_plan.h"

namespace fathom {

namespace {

enum class TermSource {
  cross_entropy,  // the fused head + cross-entropy
  z_loss,         // logsumexp^2, in the cross-entropy kernel
  layer,          // a NamedLoss of the model output with the term's name
};

struct ObjectiveTerm {
  std::string name;
  TermSource source;
};

// The objective's own terms, then every layer kind's (layers/layer_kinds.h), in registration order.
std::vector<ObjectiveTerm> objective_terms() {
  std::vector<ObjectiveTerm> terms{
      {"ce", TermSource::cross_entropy},
      {"z_loss", TermSource::z_loss},
      // Distillation (train/distill/distill_objective.h): against the teacher's logits and the converted
      // layer's output, added to the model output by the distillation step (train/run/extra_losses.h).
      {"logit_kl", TermSource::layer},
      {"layer_align", TermSource::layer},
  };
  for (const LayerKind& kind : layer_kinds())
    for (const KindLossTerm& term : kind.loss_terms) terms.push_back({term.name, TermSource::layer});
  return terms;
}

std::optional<ObjectiveTerm> find_term(const std::string& name) {
  for (const ObjectiveTerm& term : objective_terms())
    if (term.name == name) return term;
  return std::nullopt;
}

}  // namespace

std::vector<std::string> objective_term_names() {
  std::vector<std::string> out;
  for (const ObjectiveTerm& term : objective_terms()) out.push_back(term.name);
  return out;
}

Objective::Objective(std::map<std::string, double> weights) : weights_(std::move(weights)) {
  for (const ObjectiveTerm& term : objective_terms())
    if (term.source == TermSource::layer) layer_terms_.insert(term.name);
  for (const auto& [name, weight] : weights_) {
    if (!find_term(name)) {
      const auto closest = closest_name(name, objective_term_names());
      FATHOM_FAIL("train.loss: unknown term '", name, "'", closest ? " (did you mean '" + *closest + "'?)" : "",
                  "; the terms are ", join_names(objective_term_names()));
    }
    FATHOM_CHECK(std::isfinite(weight) && weight >= 0, "train.loss.", name, " must be a finite weight >= 0, got ",
                 weight);
  }
  FATHOM_CHECK(weight("z_loss") == 0 || weight("ce") > 0,
               "train.loss: z_loss needs ce (the z-loss is computed with the cross-entropy); give ce a weight > 0");
}

Objective Objective::language_model(double z_loss_weight) {
  return Objective({{"ce", 1.0}, {"z_loss", z_loss_weight}});
}

Objective Objective::for_model(const std::map<std::string, double>& loss, const ModelConfig& model) {
  std::map<std::string, double> weights = loss;
  // A kind that weighs a term by its own option (MoD's mod.aux_loss_weight) owns that weight.
  for (const LayerKind& kind : layer_kinds())
    for (const KindLossTerm& term : kind.loss_terms) {
      if (!term.weight_from_model) continue;
      FATHOM_CHECK(!weights.contains(term.name), "train.loss.", term.name, ": the weight of the ", kind.name,
                   " kind's ", term.name, " loss is ", term.weight_key, "; set it there");
      if (const std::optional<double> w = term.weight_from_model(model)) weights[term.name] = *w;
    }
  return Objective(std::move(weights));
}

double Objective::weight(const std::string& term) const {
  const auto it = weights_.find(term);
  return it == weights_.end() ? 0.0 : it->second;
}

ObjectiveValue Objective::evaluate(const Decoder& model, const ModelOutput& output, const Tensor& targets,
                                   double grad_scale) const {
  const int64_t tokens = targets.numel(), d = model.config().d_model, vocab = model.config().vocab_size;
  FATHOM_CHECK(output.hidden.defined() && output.hidden.value().numel() == tokens * d, "objective: hidden states ",
               describe(output.hidden.value()), " do not match targets ", describe(targets));
  ObjectiveValue value;
  const double ce_weight = weight("ce");
  if (ce_weight > 0) {
    // ce_weight * (ce + (z / ce_weight) * z-term): the kernel forms its gradient for what it will receive.
    const Variable h = reshape(output.hidden, {tokens, d});
    const LossParts parts =
        linear_cross_entropy(h, model.head_weight(), targets.view({tokens}), weight("z_loss") / ce_weight,
                             grad_scale * ce_weight, loss_chunk_rows(vocab, dtype_size(h.dtype())));
    value.loss = ce_weight == 1.0 ? parts.loss : scale(parts.loss, ce_weight);
    value.terms["ce"] = parts.ce;
    value.terms["z_loss"] = parts.z * ce_weight;
  }
  for (const NamedLoss& aux : output.aux_losses) {
    FATHOM_CHECK(layer_terms_.contains(aux.name), "objective: a layer reports loss '", aux.name,
                 "', which no layer kind registers as a loss term (layers/layer_kinds.h)");
    const double w = weight(aux.name);
    value.terms[aux.name] += aux.value.value().to(DType::f64).to(Device::cpu()).item();
    if (w == 0) continue;
    const Variable weighted = w == 1.0 ? aux.value : scale(aux.value, w);
    value.loss = value.loss.defined() ? add(value.loss, weighted) : weighted;
  }
  FATHOM_CHECK(value.loss.defined(), "train.loss: every term has weight 0; nothing to train");
  return value;
}

}  // namespace fathom
