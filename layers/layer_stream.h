// A decoding step's stream between two layers, which a block may hand on with its last residual step not yet
// taken. Post-norm (OLMo2) the stream is then residual + norm(out); pre-norm (Llama) residual + out, no norm of its
// own, and the next block's input norm reads it. The next block takes that step inside its q/k/v launch
// (skinny_matmul_after_residual_step; pre-norm together with its input norm) where it can, and otherwise as its own
// launch (take, the one the block would have run; a pre-norm block with its input norm through add_rms_norm). Post-norm
// the bits are the same either way; pre-norm the launch and add_rms_norm's one pass at one row sum the norm's squares
// in add_rms_norm's order, the block-by-block path's norm launch in rms_norm's.
#pragma once

#include <utility>

#include "kernels/runtime/kernel_choice.h"
#include "layers/rms_norm.h"

namespace fathom {

struct LayerStream {
  Variable x{};                        // the stream, once taken
  Variable residual{}, out{};          // otherwise the step's two inputs
  const RMSNorm* norm = nullptr;       // post-norm's step joins out through it; null pre-norm

  bool taken() const { return !residual.defined(); }
  // The stream: x, or the step as its own launch (RMSNorm::forward_onto post-norm, add pre-norm).
  Variable take() const;
  // The stream and norm(stream). A pre-norm step not yet taken goes into the norm's launch (RMSNorm::forward_after_add:
  // add_rms_norm's one pass at one row, summed as the q/k/v launch sums); otherwise take(), then the norm.
  std::pair<Variable, Variable> take_normed(const RMSNorm& next_norm) const;
};

// Whether a decoding block hands its last residual step on to the next layer (fused) or takes it itself
// (separate): FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused|separate, read at the first call; unset, fused (its GPU tests
// passed; on an H100 it made OLMo2's batch-1 steps 0.3-0.4% faster at 1B and 0.9-1.7% at 190M, inside the spread,
// bench/results/2026-12-06_residual_step_across_layers_h100.md).
Fusion residual_step_across_layers_choice();
void set_residual_step_across_layers_choice(Fusion choice);

}  // namespace fathom
