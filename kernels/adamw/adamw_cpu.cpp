// CPU AdamW: one fused, vectorisable pass over the four buffers (per range for adamw_update_ranges).
#include <cmath>

#include "kernels/adamw/adamw.h"
#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"

namespace fathom::cpu {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& c) {
  dispatch_float("adamw", param.dtype(), [&]<typename T>() {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    // Scalars in double first: 1 - beta^step loses precision in float for small step and beta near 1.
    const double bc1 = 1.0 - std::pow(c.beta1, double(c.step));
    const double bc2 = 1.0 - std::pow(c.beta2, double(c.step));
    const T decay = T(1.0 - c.lr * c.weight_decay);
    const T b1 = T(c.beta1), b2 = T(c.beta2), one_b1 = T(1.0 - c.beta1), one_b2 = T(1.0 - c.beta2);
    const T step = T(c.lr / bc1), inv_bc2 = T(1.0 / bc2), eps = T(c.eps), gscale = T(c.grad_scale);
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] * gscale;
      const T mi = b1 * mp[i] + one_b1 * gi;
      const T vi = b2 * vp[i] + one_b2 * gi * gi;
      mp[i] = mi;
      vp[i] = vi;
      p[i] = p[i] * decay - step * mi / (std::sqrt(vi * inv_bc2) + eps);
    }
  });
}

// One adamw_update per range, then the converted copy.
void adamw_update_ranges(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamWRange>& ranges,
                         const AdamWStep& config, Tensor* compute_copy) {
  for (const AdamWRange& r : ranges) {
    const int64_t n = r.end - r.begin;
    Tensor p = param.flat().narrow(r.begin, n), mr = m.flat().narrow(r.begin, n), vr = v.flat().narrow(r.begin, n);
    AdamWStep c = config;
    c.weight_decay = r.weight_decay;
    cpu::adamw_update(p, grad.flat().narrow(r.begin, n), mr, vr, c);
    if (compute_copy) compute_copy->flat().narrow(r.begin, n).copy_from(p.to(compute_copy->dtype()));
  }
}

}  // namespace fathom::cpu
