#include "kernels/dsla/dsla.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {

// The dtype of the gates, gamma and states that go with q on its device.
DType dsla_state_dtype(const Tensor& q) { return q.is_cpu() ? q.dtype() : DType::f32; }

// Shapes and dtypes of q, k, v, the gates and gamma; returns whether there are two states.
bool check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                  const Tensor& gamma) {
  FATHOM_CHECK(q.defined() && k.defined() && v.defined() && g1.defined(), op,
               ": undefined input (q, k, v and g1 are required)");
  FATHOM_CHECK(q.rank() == 4, op, ": q must be [B, T, H, d], got ", describe(q));
  const int64_t B = q.dim(0), T = q.dim(1), H = q.dim(2), d = q.dim(3);
  FATHOM_CHECK(d > 0 && H > 0, op, ": q ", describe(q), " has no heads or an empty head dimension");
  FATHOM_CHECK(k.rank() == 4 && k.dim(0) == B && k.dim(1) == T && k.dim(3) == d, op, ": k ", describe(k), " must be [",
               B, ", ", T, ", Hk, ", d, "] to match q ", describe(q));
  FATHOM_CHECK(v.shape() == k.shape(), op, ": v ", describe(v), " must have k's shape ", describe(k));
  const int64_t Hk = k.dim(2);
  FATHOM_CHECK(Hk > 0 && H % Hk == 0, op, ": the ", H, " query heads must be a multiple of the ", Hk,
               " key/value heads");
  FATHOM_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": q ", describe(q), ", k ", describe(k),
               " and v ", describe(v), " must share one dtype");
  if (q.is_cpu()) {
    FATHOM_CHECK(q.dtype() == DType::f32 || q.dtype() == DType::f64, op,
                 ": the CPU reference computes in F32 or F64, got ", describe(q));
  } else {
    FATHOM_CHECK(q.dtype() == DType::bf16 || q.dtype() == DType::f32, op,
                 ": the CUDA kernels take BF16 or F32 q, k, v, got ", describe(q));
    FATHOM_CHECK(d == 64 || d == 128, op, ": the CUDA kernels take head dimension 64 or 128, got ", d);
  }
  const DType sd = dsla_state_dtype(q);
  const bool two = g2.defined();
  for (const Tensor* g : {&g1, &g2}) {
    if (!g->defined()) continue;
    FATHOM_CHECK(g->shape() == q.shape(), op, ": gate ", describe(*g), " must have q's shape ", describe(q));
    FATHOM_CHECK(g->dtype() == sd, op, ": gate ", describe(*g), " must be ", dtype_name(sd), " for q ", describe(q));
  }
  if (two) FATHOM_CHECK(gamma.defined(), op, ": two states need gamma [", H, "]");
  if (gamma.defined()) {
    FATHOM_CHECK(gamma.rank() == 1 && gamma.dim(0) == H, op, ": gamma ", describe(gamma), " must be [", H,
                 "], one weight per query head");
    FATHOM_CHECK(gamma.dtype() == sd, op, ": gamma ", describe(gamma), " must be ", dtype_name(sd));
  }
  return two;
}

// s1 (and s2 exactly when there are two states) [B, H, d, d] in the state dtype; both undefined is fine
// where `required` is false.
void check_state(const char* op, const DslaState& s, const Tensor& q, bool two, bool required) {
  if (!required && !s.s1.defined() && !s.s2.defined()) return;
  const Shape want{q.dim(0), q.dim(2), q.dim(3), q.dim(3)};
  const DType sd = dsla_state_dtype(q);
  FATHOM_CHECK(s.s1.defined(), op, ": the state needs s1 ", dtype_name(sd), "[", want[0], ", ", want[1], ", ", want[2],
               ", ", want[3], "]");
  FATHOM_CHECK(s.s2.defined() == two, op,
               two ? ": two states (g2 given) need s2 too" : ": one state (no g2) takes no s2");
  for (const Tensor* t : {&s.s1, &s.s2}) {
    if (!t->defined()) continue;
    FATHOM_CHECK(t->shape() == want && t->dtype() == sd, op, ": state ", describe(*t), " must be ", dtype_name(sd), "[",
                 want[0], ", ", want[1], ", ", want[2], ", ", want[3], "] for q ", describe(q));
  }
}

}  // namespace

Shape dsla_scores_shape(const Tensor& q, bool two_states) {
  return {q.dim(0), q.dim(2), two_states ? 2 : 1, (q.dim(1) + kDslaChunk - 1) / kDslaChunk, kDslaChunk, kDslaChunk};
}

DslaForward dsla_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                         const Tensor& gamma, const DslaState& initial, bool return_final_state, bool keep_scores) {
  const bool two = check_inputs("dsla_forward", q, k, v, g1, g2, gamma);
  check_state("dsla_forward", initial, q, two, false);
  const Device device = common_device("dsla_forward", {&q, &k, &v, &g1, &g2, &gamma, &initial.s1, &initial.s2});
  return on_device("dsla_forward", device, FATHOM_KERNEL(dsla_forward), q, k, v, g1, g2, gamma, initial,
                   return_final_state, keep_scores);
}

DslaGrads dsla_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                        const Tensor& g2, const Tensor& gamma, const Tensor& scores) {
  const bool two = check_inputs("dsla_backward", q, k, v, g1, g2, gamma);
  FATHOM_CHECK(grad_o.defined() && grad_o.shape() == q.shape() && grad_o.dtype() == q.dtype(), "dsla_backward: grad_o ",
               describe(grad_o), " does not match q ", describe(q));
  FATHOM_CHECK(!scores.defined() || (scores.dtype() == DType::bf16 && scores.shape() == dsla_scores_shape(q, two)),
               "dsla_backward: scores ", describe(scores), " are not a forward's kept scores for q ", describe(q),
               " (bf16", dsla_scores_shape(q, two).str(), ")");
  const Device device = common_device("dsla_backward", {&grad_o, &q, &k, &v, &g1, &g2, &gamma, &scores});
  return on_device("dsla_backward", device, FATHOM_KERNEL(dsla_backward), grad_o, q, k, v, g1, g2, gamma, scores);
}

Tensor dsla_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                 const Tensor& gamma, DslaState& state) {
  const bool two = check_inputs("dsla_step", q, k, v, g1, g2, gamma);
  check_state("dsla_step", state, q, two, true);
  const Device device = common_device("dsla_step", {&q, &k, &v, &g1, &g2, &gamma, &state.s1, &state.s2});
  return on_device("dsla_step", device, FATHOM_KERNEL(dsla_step), q, k, v, g1, g2, gamma, state);
}

}  // namespace fathom
