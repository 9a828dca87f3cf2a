#include "layers/layer_stream.h"

#include "autograd/ops.h"

namespace fathom {

namespace {
constinit KernelChoice<Fusion> across_layers_in_force("FATHOM_RESIDUAL_STEP_ACROSS_LAYERS", Fusion::fused,
                                                      parse_fusion);
}  // namespace

Variable LayerStream::take() const {
  if (taken()) return x;
  return norm ? norm->forward_onto(residual, out) : add(residual, out);
}

std::pair<Variable, Variable> LayerStream::take_normed(const RMSNorm& next_norm) const {
  if (!taken() && norm == nullptr) return next_norm.forward_after_add(residual, out);
  const Variable stream = take();
  return {stream, next_norm.forward(stream)};
}

Fusion residual_step_across_layers_choice() { return across_layers_in_force.get(); }

void set_residual_step_across_layers_choice(Fusion choice) { across_layers_in_force.set(choice); }

}  // namespace fathom
