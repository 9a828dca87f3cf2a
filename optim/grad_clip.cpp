#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/elementwise/elementwise.h"

namespace fathom {

double grad_norm(const Tensor& grads) { return std::sqrt(sum_squares(grads)); }

double clip_coefficient(double norm, double max_norm) {
  return max_norm > 0 && std::isfinite(norm) && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

}  // namespace fathom
