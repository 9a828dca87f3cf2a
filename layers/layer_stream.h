// A decoding step's stream between two layers, which a post-norm block may hand on with its last residual step
// not yet taken: the stream is then residual + norm(out), and the next block takes that step inside its q/k/v
// launch (skinny_matmul_after_residual_step), one launch a layer fewer. A layer that cannot take it so takes it
// as its own launch (take), the one the block would have run: the same bits either way.
#pragma once

#include "kernels/runtime/kernel_choice.h"
#include "layers/rms_norm.h"

namespace fathom {

struct LayerStream {
  Variable x{};                // the stream, once taken
  Variable residual{}, out{};  // otherwise the step's two inputs
  const RMSNorm* norm = nullptr;

  bool taken() const { return norm == nullptr; }
  // The stream: x, or the step as its own launch (RMSNorm::forward_onto).
  Variable take() const { return taken() ? x : norm->forward_onto(residual, out); }
};

// Whether a decoding post-norm block hands its last residual step on to the next layer (fused) or takes it
// itself (separate): FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused|separate, read at the first call; unset, fused (its
// GPU tests passed, and on an H100 it made batch-1 steps 0.3-0.4% faster at 1B and 0.9-1.7% at 190M, inside the spread,
// bench/results/2026-12-06_residual_step_across_layers_h100.md).
Fusion residual_step_across_layers_choice();
void set_residual_step_across_layers_choice(Fusion choice);

}  // namespace fathom
