#include "kernels/adamw/adamw.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_buffers(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v) {
  FATHOM_CHECK(param.defined() && grad.defined() && m.defined() && v.defined(), "adamw: undefined buffer");
  for (const Tensor* t : {&grad, &m, &v})
    FATHOM_CHECK(t->numel() == param.numel() && t->dtype() == param.dtype(), "adamw: buffer ", describe(*t),
                 " does not match param ", describe(param), " in element count or dtype");
}

void check_config(const AdamWStep& c) {
  FATHOM_CHECK(std::isfinite(c.lr) && c.lr >= 0, "adamw: lr must be finite and >= 0, got ", c.lr);
  FATHOM_CHECK(c.beta1 >= 0 && c.beta1 < 1, "adamw: beta1 must be in [0, 1), got ", c.beta1);
  FATHOM_CHECK(c.beta2 >= 0 && c.beta2 < 1, "adamw: beta2 must be in [0, 1), got ", c.beta2);
  FATHOM_CHECK(c.eps > 0 && std::isfinite(c.eps), "adamw: eps must be positive and finite, got ", c.eps);
  FATHOM_CHECK(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "adamw: weight_decay must be >= 0, got ",
               c.weight_decay);
  FATHOM_CHECK(c.step >= 1, "adamw: step counts updates from 1, got ", c.step);
  FATHOM_CHECK(c.grad_scale > 0 && std::isfinite(c.grad_scale), "adamw: grad_scale must be positive and finite, got ",
               c.grad_scale);
}

}  // namespace

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& c) {
  check_buffers(param, grad, m, v);
  check_config(c);
  return on_device("adamw", common_device("adamw", {&param, &grad, &m, &v}), FATHOM_KERNEL(adamw_update), param, grad,
                   m, v, c);
}

void adamw_update_ranges(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamWRange>& ranges,
                         const AdamWStep& config, Tensor* compute_copy) {
  check_buffers(param, grad, m, v);
  check_config(config);
  int64_t previous_end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const AdamWRange& r = ranges[i];
    FATHOM_CHECK(r.begin >= previous_end && r.begin <= r.end && r.end <= param.numel(), "adamw: range ", i, " [",
                 r.begin, ", ", r.end, ") must lie in [", previous_end, ", ", param.numel(),
                 ") (ranges ascend, do not overlap, and stay inside the ", param.numel(), " parameters)");
    FATHOM_CHECK(r.weight_decay >= 0 && std::isfinite(r.weight_decay), "adamw: range ", i,
                 " weight_decay must be >= 0, got ", r.weight_decay);
    previous_end = r.end;
  }
  if (compute_copy) {
    FATHOM_CHECK(compute_copy->defined() && compute_copy->numel() == param.numel() &&
                     (compute_copy->dtype() == DType::f32 || compute_copy->dtype() == DType::bf16 ||
                      compute_copy->dtype() == DType::f16),
                 "adamw: compute_copy ", describe(*compute_copy), " should be F32, BF16 or F16 with ", param.numel(),
                 " elements");
    FATHOM_CHECK(!compute_copy->shares_storage_with(param), "adamw: compute_copy must not share storage with param");
  }
  const Tensor none;
  return on_device("adamw", common_device("adamw", {&param, &grad, &m, &v, compute_copy ? compute_copy : &none}),
                   FATHOM_KERNEL(adamw_update_ranges), param, grad, m, v, ranges, config, compute_copy);
}

}  // namespace fathom
