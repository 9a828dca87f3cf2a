#include "layers/linear.h"

#include "autograd/ops.h"

namespace fathom {

Linear::Linear(int64_t in_features, int64_t out_features, ParameterInit init)
    : weight_(add_parameter("weight", {out_features, in_features}, init)) {}

Variable Linear::forward(const Variable& x) const { return fp8_ ? linear_fp8(x, weight_) : linear(x, weight_); }

Fp8Linears use_fp8_linears(Module& model) {
  Fp8Linears out;
  model.visit_modules([&](const std::string& name, Module& module) {
    auto* linear = dynamic_cast<Linear*>(&module);
    if (!linear || !linear->fp8_allowed()) return;
    const bool aligned = linear->in_features() % 16 == 0 && linear->out_features() % 16 == 0;
    linear->set_fp8(aligned);
    (aligned ? out.fp8 : out.kept).push_back(name);
  });
  return out;
}

}  // namespace fathom
