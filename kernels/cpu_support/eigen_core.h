// Eigen, included once for all of fathom. GCC reports -Wmaybe-uninitialized inside Eigen's
// vectorized kernels (AVX-512 builds: hundreds of lines) even though its headers are -isystem: a
// warning in code inlined into a fathom function is suppressed only when every location of the
// inlining chain is in a system header. Its diagnostic pragmas do apply by the header's own
// location, so this silences Eigen's warnings and leaves fathom's own code warned as before.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
