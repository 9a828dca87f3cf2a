// train.recompute: what the forward keeps for the backward, traded against recomputation.
//   none       every op keeps what its backward reads;
//   selective  the outputs of cheap elementwise ops (RMSNorm, RoPE, SwiGLU) are rebuilt in backward
//              from tensors the graph keeps anyway, not kept by the projections and attention that
//              read them (autograd/saved_tensor.h): less memory for a few elementwise passes;
//   block      each block keeps only its input and is re-run in backward (autograd checkpoint).
// All three give the same gradients bit for bit.
#pragma once
#include <string>
#include <vector>

namespace fathom {

enum class Recompute { none, selective, block };

// The names, in the enum's order (the recipe's choices for train.recompute).
const std::vector<std::string>& recompute_names();
// One of recompute_names(); anything else is an error naming the choices.
Recompute parse_recompute(const std::string& name);
const char* recompute_name(Recompute recompute);

}  // namespace fathom
