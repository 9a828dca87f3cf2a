#include "layers/rms_norm.h"

#include "autograd/ops.h"

namespace fathom {

RMSNorm::RMSNorm(int64_t dim, double eps) : weight_(add_parameter("weight", {dim}, ParameterInit::ones())), eps_(eps) {}

Variable RMSNorm::forward(const Variable& x) const { return rms_norm(x, weight_, eps_); }

Variable RMSNorm::forward_onto(const Variable& residual, const Variable& x, bool rebuild_from_inputs) const {
  return residual_rms_norm(residual, x, weight_, eps_, rebuild_from_inputs);
}

std::pair<Variable, Variable> RMSNorm::forward_after_add(const Variable& residual, const Variable& x) const {
  return add_rms_norm(residual, x, weight_, eps_);
}

}  // namespace fathom
