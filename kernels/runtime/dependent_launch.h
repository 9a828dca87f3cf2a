// Whether a decoding step's kernels (the skinny GEMM, the norms, the elementwise map, the decode prologue
// and attention) are launched as programmatic dependent launches (dependent_launch.cuh): each starts while
// the kernel ahead of it finishes (a GEMM of short rows fetching its first weights into L2 meanwhile,
// skinny_matmul.h's FATHOM_SKINNY_L2_PREFETCH), so the step's launch boundaries cost less. The results are the same
// bits either way.
#pragma once
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// FATHOM_DEPENDENT_LAUNCH=on|off, read at the first launch (unset: on, which the decoding benchmark
// measured to pay, bench/results/2026-12-05_decode_defaults_h100.md), unless set_dependent_launch replaced it.
Toggle dependent_launch();
void set_dependent_launch(Toggle choice);

}  // namespace fathom

namespace fathom::cuda {

// Whether programmatic dependent launches and thread-block clusters may be asked for on `device` (CUDA builds):
// it has compute capability 9.0 or newer, and every pass of fathom's kernels was built for sm_90 or newer
// (FATHOM_SM90_KERNELS, CMakeLists.txt), so their griddepcontrol and cluster instructions are there. The second form
// asks of the current device, whose streams the launches go to.
bool supports_sm90_launches(int device);
bool current_device_supports_sm90_launches();

}  // namespace fathom::cuda
