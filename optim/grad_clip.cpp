#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/elementwise.h"

namespace fathom {

double clip_grad_norm(Tensor& grads, double max_norm) {
  const double norm = std::sqrt(sum_squares(grads));
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) scale_inplace(grads, max_norm / (norm + 1e-6));
  return norm;
}

}  // namespace fathom
