#include "layers/layer_stream.h"

namespace fathom {

namespace {
constinit KernelChoice<Fusion> across_layers_in_force("FATHOM_RESIDUAL_STEP_ACROSS_LAYERS", Fusion::fused,
                                                      parse_fusion);
}  // namespace

Fusion residual_step_across_layers_choice() { return across_layers_in_force.get(); }

void set_residual_step_across_layers_choice(Fusion choice) { across_layers_in_force.set(choice); }

}  // namespace fathom
