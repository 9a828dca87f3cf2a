#include "kernels/adamw.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace fathom {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& c) {
  FATHOM_CHECK(param.defined() && grad.defined() && m.defined() && v.defined(), "adamw: undefined buffer");
  for (const Tensor* t : {&grad, static_cast<const Tensor*>(&m), static_cast<const Tensor*>(&v)})
    FATHOM_CHECK(t->numel() == param.numel() && t->dtype() == param.dtype(), "adamw: buffer ", describe(*t),
                 " does not match param ", describe(param), " in element count or dtype");
  FATHOM_CHECK(std::isfinite(c.lr) && c.lr >= 0, "adamw: lr must be finite and >= 0, got ", c.lr);
  FATHOM_CHECK(c.beta1 >= 0 && c.beta1 < 1, "adamw: beta1 must be in [0, 1), got ", c.beta1);
  FATHOM_CHECK(c.beta2 >= 0 && c.beta2 < 1, "adamw: beta2 must be in [0, 1), got ", c.beta2);
  FATHOM_CHECK(c.eps > 0 && std::isfinite(c.eps), "adamw: eps must be positive and finite, got ", c.eps);
  FATHOM_CHECK(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "adamw: weight_decay must be >= 0, got ",
               c.weight_decay);
  FATHOM_CHECK(c.step >= 1, "adamw: step counts updates from 1, got ", c.step);
  if (common_device("adamw", {&param, &grad, &m, &v}).is_cpu()) return cpu::adamw_update(param, grad, m, v, c);
  no_cuda_kernel("adamw");
}

}  // namespace fathom
