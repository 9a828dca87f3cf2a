#include "layers/mlp.h"

#include "autograd/ops.h"

namespace fathom {

MLP::MLP(const ModelConfig& c)
    : gate_proj_(c.d_model, c.ffn_hidden, ParameterInit::normal(c.init_std, c.init_cutoff)),
      up_proj_(c.d_model, c.ffn_hidden, ParameterInit::normal(c.init_std, c.init_cutoff)),
      down_proj_(c.ffn_hidden, c.d_model, ParameterInit::normal(c.init_std, c.init_cutoff)) {
  add_child("gate_proj", gate_proj_);
  add_child("up_proj", up_proj_);
  add_child("down_proj", down_proj_);
}

Variable MLP::forward(const Variable& x) const {
  // Few rows on a GPU with nothing recorded (decoding; FATHOM_SWIGLU_PROJECTION=fused asks for it): both
  // projections and the gating in one launch.
  if (!gate_proj_.fp8() && !up_proj_.fp8())
    if (std::optional<Variable> gated = fused_swiglu_projection(x, gate_proj_.weight(), up_proj_.weight()))
      return down_proj_.forward(*gated);
  // Up before gate: the order fathom has always recorded them in (so x's gradient sums its two parts
  // in the same order and training stays bit-identical); it is now explicit, not the compiler's choice.
  const std::vector<Variable> up_gate = project_each(x, {&up_proj_, &gate_proj_});
  return down_proj_.forward(swiglu(up_gate[1], up_gate[0]));
}

std::optional<std::pair<Variable, Variable>> MLP::forward_after_residual_step(ResidualStep kind,
                                                                              const Variable& residual,
                                                                              const Variable& x,
                                                                              const RMSNorm& norm) const {
  // SwiGLU in gate/up's launch asked for (forward's first path): the step, the products and SwiGLU in one launch.
  if (swiglu_projection_choice() == Fusion::fused) {
    if (gate_proj_.fp8() || up_proj_.fp8()) return std::nullopt;
    std::optional<ResidualProjections> step = swiglu_projection_after_residual_step(
        kind, residual, x, norm.weight(), norm.eps(), gate_proj_.weight(), up_proj_.weight());
    if (!step) return std::nullopt;
    return std::pair{step->h, down_proj_.forward(step->ys[0])};
  }
  std::optional<ResidualProjections> step =
      project_each_after_residual_step(kind, residual, x, norm, {&up_proj_, &gate_proj_});  // forward's order
  if (!step) return std::nullopt;
  return std::pair{step->h, down_proj_.forward(swiglu(step->ys[1], step->ys[0]))};
}

}  // namespace fathom
