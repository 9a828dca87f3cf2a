#include "train/distill/distill_objective.h"

#include "autograd/divergences.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "layers/dsla.h"

namespace fathom {

namespace {

double weight_of(const Recipe::Distill& distill, const std::string& term) {
  const auto it = distill.loss.find(term);
  return it == distill.loss.end() ? 0.0 : it->second;
}

}  // namespace

std::map<std::string, double> distill_objective_weights(const Recipe::Distill& distill) {
  std::map<std::string, double> weights;
  for (const auto& [term, weight] : distill.loss)
    if (weight > 0) weights[term] = weight;
  return weights;
}

ForwardOptions distill_forward_options(const Recipe::Distill& distill, int64_t layer) {
  ForwardOptions options;
  options.layer_outputs = weight_of(distill, "layer_align") > 0;
  if (weight_of(distill, kGateCosLoss) > 0) options.layer_taps.emplace_back(layer, kGateCosLoss);
  return options;
}

ExtraLosses distill_teacher_losses(const Teacher& teacher, const Recipe::Distill& distill, int64_t layer) {
  const bool logit_kl = weight_of(distill, "logit_kl") > 0, align = weight_of(distill, "layer_align") > 0;
  if (!logit_kl && !align) return nullptr;
  const double temperature = distill.temperature;
  const bool align_kl = distill.align == "kl";
  return [&teacher, logit_kl, align, align_kl, temperature, layer](const Decoder& student, const Tensor& inputs,
                                                                   ModelOutput& output) {
    const TeacherTargets target = teacher.targets(inputs, logit_kl, align ? layer : -1);
    if (logit_kl) {
      const int64_t d = student.config().d_model;
      // The student's logits under its (frozen) head; the hidden state carries the gradient.
      const Variable logits =
          linear(reshape(output.hidden, {output.hidden.value().numel() / d, d}), student.head_weight());
      output.aux_losses.push_back({"logit_kl", softmax_kl_to_target(logits, target.logits, temperature)});
    }
    if (align) {
      FATHOM_CHECK(layer < int64_t(output.layer_outputs.size()),
                   "layer_align: the forward reported no output of layer ", layer);
      const Variable& h = output.layer_outputs[size_t(layer)];
      output.aux_losses.push_back({"layer_align", align_kl ? softmax_kl_to_target(h, target.layer_output, 1.0)
                                                           : mse_to_target(h, target.layer_output)});
    }
  };
}

}  // namespace fathom
