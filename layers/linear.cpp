#include "layers/linear.h"

#include <algorithm>

#include "autograd/ops.h"
#include "kernels/fp8/fp8.h"

namespace fathom {

Linear::Linear(int64_t in_features, int64_t out_features, ParameterInit init)
    : weight_(add_parameter("weight", {out_features, in_features}, init)) {}

Variable Linear::forward(const Variable& x) const { return fp8_ ? linear_fp8(x, weight_) : linear(x, weight_); }

std::vector<Variable> project_each(const Variable& x, std::initializer_list<const Linear*> linears) {
  std::vector<const Variable*> weights;
  for (const Linear* l : linears) weights.push_back(&l->weight());
  const auto fp8 = [](const Linear* l) { return l->fp8(); };
  if (std::none_of(linears.begin(), linears.end(), fp8)) return linear_each(x, weights);
  if (std::all_of(linears.begin(), linears.end(), fp8)) return linear_fp8_each(x, weights);
  std::vector<Variable> out;
  for (const Linear* l : linears) out.push_back(l->forward(x));
  return out;
}

std::optional<ResidualProjections> project_each_after_residual_step(ResidualStep kind, const Variable& residual,
                                                                    const Variable& sublayer_out, const RMSNorm& norm,
                                                                    std::initializer_list<const Linear*> linears) {
  std::vector<const Variable*> weights;
  for (const Linear* l : linears) {
    if (l->fp8()) return std::nullopt;
    weights.push_back(&l->weight());
  }
  return project_after_residual_step(kind, residual, sublayer_out, norm.weight(), norm.eps(), weights);
}

Fp8Linears use_fp8_linears(Module& model) {
  Fp8Linears out;
  model.visit_modules([&](const std::string& name, Module& module) {
    auto* linear = dynamic_cast<Linear*>(&module);
    if (!linear || !linear->fp8_allowed()) return;
    const bool aligned = fp8_linear_widths_aligned(linear->out_features(), linear->in_features());
    linear->set_fp8(aligned);
    (aligned ? out.fp8 : out.kept).push_back(name);
  });
  return out;
}

bool any_fp8_linear(const Module& model) {
  bool any = false;
  model.visit_modules([&](const std::string&, const Module& module) {
    if (const auto* linear = dynamic_cast<const Linear*>(&module)) any = any || linear->fp8();
  });
  return any;
}

}  // namespace fathom
