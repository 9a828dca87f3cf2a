#include "kernels/mod/mod_routing.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {

// idx I32 [B, k] for rows of x [B, S, ...] (k <= S).
void check_idx(const char* op, const Tensor& idx, int64_t batch, int64_t seq_len) {
  FATHOM_CHECK(idx.defined() && idx.dtype() == DType::i32 && idx.rank() == 2 && idx.dim(0) == batch &&
                   idx.dim(1) >= 1 && idx.dim(1) <= seq_len,
               op, ": idx must be I32 [", batch, ", k] with 1 <= k <= ", seq_len, ", got ", describe(idx));
}

void check_rows(const char* op, const char* name, const Tensor& t) {
  FATHOM_CHECK(t.defined() && t.rank() >= 2, op, ": ", name, " must be [B, S, ...], got ", describe(t));
}

// y [B, k, d...] of x's dtype, whose trailing dims match x [B, S, d...].
void check_routed_rows(const char* op, const Tensor& x, const Tensor& y, const Tensor& idx) {
  check_rows(op, "x", x);
  check_idx(op, idx, x.dim(0), x.dim(1));
  std::vector<int64_t> want = x.shape().vec();
  want[1] = idx.dim(1);
  FATHOM_CHECK(y.defined() && y.shape() == Shape(want) && y.dtype() == x.dtype(), op, ": y ", describe(y), " must be ",
               dtype_name(x.dtype()), Shape(want).str(), " (x ", describe(x), ", idx ", describe(idx), ")");
}

void check_logits(const char* op, const Tensor& r, const Tensor& x, RouteWeight weight) {
  if (weight == RouteWeight::one) return;
  FATHOM_CHECK(r.defined() && r.rank() == 2 && r.dim(0) == x.dim(0) && r.dim(1) == x.dim(1) &&
                   r.dtype() == stats_dtype(x.dtype()),
               op, ": router logits r must be ", dtype_name(stats_dtype(x.dtype())), "[", x.dim(0), ", ", x.dim(1),
               "], got ", describe(r));
}

}  // namespace

Tensor topk_per_sequence(const Tensor& scores, int64_t k) {
  FATHOM_CHECK(scores.defined() && scores.rank() == 2 && scores.dtype() == DType::f32 && scores.dim(1) >= 1,
               "topk_per_sequence: scores must be F32 [B, S] with S >= 1, got ", describe(scores));
  FATHOM_CHECK(k >= 1 && k <= scores.dim(1), "topk_per_sequence: k must be in [1, S = ", scores.dim(1), "], got ", k);
  return on_device("topk_per_sequence", scores.device(), FATHOM_KERNEL(topk_per_sequence), scores, k);
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  check_rows("gather_rows", "x", x);
  check_idx("gather_rows", idx, x.dim(0), x.dim(1));
  return on_device("gather_rows", common_device("gather_rows", {&x, &idx}), FATHOM_KERNEL(gather_rows), x, idx);
}

Tensor scatter_rows(const Tensor& rows, const Tensor& idx, int64_t seq_len) {
  check_rows("scatter_rows", "rows", rows);
  check_idx("scatter_rows", idx, rows.dim(0), seq_len);
  FATHOM_CHECK(rows.dim(1) == idx.dim(1), "scatter_rows: rows ", describe(rows), " and idx ", describe(idx),
               " differ in k");
  return on_device("scatter_rows", common_device("scatter_rows", {&rows, &idx}), FATHOM_KERNEL(scatter_rows), rows, idx,
                   seq_len);
}

Tensor routed_mix_forward(const Tensor& x, const Tensor& y, const Tensor& r, const Tensor& idx, RouteWeight weight) {
  check_routed_rows("routed_mix", x, y, idx);
  check_logits("routed_mix", r, x, weight);
  const Tensor unused;
  const Tensor* logits = weight == RouteWeight::one ? &unused : &r;
  return on_device("routed_mix", common_device("routed_mix", {&x, &y, logits, &idx}), FATHOM_KERNEL(routed_mix_forward),
                   x, y, r, idx, weight);
}

RoutedMixGrads routed_mix_backward(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& r,
                                   const Tensor& idx, RouteWeight weight) {
  check_routed_rows("routed_mix_backward", x, y, idx);
  check_logits("routed_mix_backward", r, x, weight);
  FATHOM_CHECK(grad_out.defined() && grad_out.shape() == x.shape() && grad_out.dtype() == x.dtype(),
               "routed_mix_backward: grad_out ", describe(grad_out), " does not match x ", describe(x));
  const Tensor unused;
  const Tensor* logits = weight == RouteWeight::one ? &unused : &r;
  return on_device("routed_mix_backward", common_device("routed_mix_backward", {&grad_out, &x, &y, logits, &idx}),
                   FATHOM_KERNEL(routed_mix_backward), grad_out, x, y, r, idx, weight);
}

namespace {
void check_bce(const char* op, const Tensor& logits, const Tensor& targets) {
  FATHOM_CHECK(
      logits.defined() && logits.numel() >= 1 && (logits.dtype() == DType::f32 || logits.dtype() == DType::f64), op,
      ": logits must be a non-empty F32 (or F64) tensor, got ", describe(logits));
  FATHOM_CHECK(targets.defined() && targets.shape() == logits.shape() && targets.dtype() == logits.dtype(), op,
               ": targets ", describe(targets), " must match logits ", describe(logits));
}
}  // namespace

Tensor routing_bce_forward(const Tensor& logits, const Tensor& targets) {
  check_bce("routing_bce", logits, targets);
  return on_device("routing_bce", common_device("routing_bce", {&logits, &targets}), FATHOM_KERNEL(routing_bce_forward),
                   logits, targets);
}

Tensor routing_bce_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets) {
  check_bce("routing_bce_backward", logits, targets);
  FATHOM_CHECK(grad_loss.defined() && grad_loss.numel() == 1 && grad_loss.dtype() == logits.dtype(),
               "routing_bce_backward: grad_loss must be one ", dtype_name(logits.dtype()), " element, got ",
               describe(grad_loss));
  return on_device("routing_bce_backward", common_device("routing_bce_backward", {&grad_loss, &logits, &targets}),
                   FATHOM_KERNEL(routing_bce_backward), grad_loss, logits, targets);
}

}  // namespace fathom
