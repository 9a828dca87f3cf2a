// SwiGLU feed-forward: down(silu(gate(x)) * up(x)).
#pragma once
#include <optional>
#include <utility>

#include "kernels/matmul/skinny_matmul.h"
#include "layers/linear.h"
#include "layers/model_config.h"
#include "layers/rms_norm.h"

namespace fathom {

class MLP : public Module {
 public:
  explicit MLP(const ModelConfig& config);
  Variable forward(const Variable& x) const;
  // The block's residual step (`norm` joining sublayer output x to `residual`) and forward of what it gives
  // the MLP, with the step inside the gate/up launch where a decoding step allows (autograd/ops.h
  // project_after_residual_step; with FATHOM_SWIGLU_PROJECTION=fused, swiglu_projection_after_residual_step, SwiGLU
  // in that launch too): {h, the MLP's output}; otherwise nothing, and the caller runs both.
  std::optional<std::pair<Variable, Variable>> forward_after_residual_step(ResidualStep kind, const Variable& residual,
                                                                           const Variable& x,
                                                                           const RMSNorm& norm) const;

 private:
  Linear gate_proj_, up_proj_, down_proj_;
};

}  // namespace fathom
