// Whether a decoding step's kernels (the skinny GEMM, the norms, the elementwise map, the decode prologue
// and attention) are launched as programmatic dependent launches (dependent_launch.cuh): each starts while
// the kernel ahead of it finishes, and each GEMM fetches its first weights into L2 meanwhile, so the memory
// system does not idle at the step's launch boundaries. The results are the same bits either way.
#pragma once
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// FATHOM_DEPENDENT_LAUNCH=on|off, read at the first launch (unset: on, which the decoding benchmark
// measured to pay, bench/results/2026-12-05_decode_defaults_h100.md), unless set_dependent_launch replaced it.
Toggle dependent_launch();
void set_dependent_launch(Toggle choice);

}  // namespace fathom
