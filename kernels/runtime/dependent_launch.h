// Whether the kernels written for it (the skinny GEMM of a decoding step) are launched as programmatic
// dependent launches (dependent_launch.cuh): each starts while the kernel ahead of it finishes and
// fetches its first weights into L2 meanwhile, so the memory system does not idle between a decoding
// step's launches. The results are the same bits either way.
#pragma once
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// FATHOM_DEPENDENT_LAUNCH=on|off, read at the first launch (unset: off until its benchmark has run on
// an H200), unless set_dependent_launch replaced it.
Toggle dependent_launch();
void set_dependent_launch(Toggle choice);

}  // namespace fathom
