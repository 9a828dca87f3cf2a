// linear_cross_entropy: the training step's head and loss, a chunk of rows at a time. Each
// chunk's logits h_c W^T live only while the chunk is processed: the fused cross-entropy pass writes
// their gradient over them, and the two products of that gradient, dh_c = g_c W and dW += g_c^T h_c,
// are formed at once. Nothing [N, V]-sized outlives a chunk; the node keeps dh and dW for backward.
#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/dispatch.h"
#include "kernels/matmul/matmul.h"

namespace fathom {

namespace {

// The gradients were formed in the forward for an expected upstream gradient; backward rescales them
// only when another one arrives (scale_grad_unless_expected touches nothing in the expected case).
class LinearCrossEntropyNode final : public Node {
 public:
  LinearCrossEntropyNode(Tensor dh, Tensor dweight, Tensor expected)
      : dh_(std::move(dh)), dweight_(std::move(dweight)), expected_(std::move(expected)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const Tensor upstream = grad_output.to(expected_.dtype());
    if (needs_input_grad(0)) scale_grad_unless_expected(dh_, upstream, expected_);
    if (needs_input_grad(1)) scale_grad_unless_expected(dweight_, upstream, expected_);
    return {needs_input_grad(0) ? dh_ : Tensor(), needs_input_grad(1) ? dweight_ : Tensor()};
  }
  void release_saved() override { dh_ = dweight_ = expected_ = Tensor(); }
  const char* name() const override { return "linear_cross_entropy"; }

 private:
  Tensor dh_, dweight_, expected_;
};

// Counted (non-ignored) targets per chunk of `chunk_rows`; a target outside [0, V) is an error naming
// its row in the whole batch. Host targets are read where they are (no wait on the device).
std::vector<int64_t> counted_per_chunk(const Tensor& targets, int64_t vocab, int64_t chunk_rows, int64_t ignore_index) {
  const Tensor host = targets.to(Device::cpu()).to(DType::i64);
  const std::vector<int64_t> ids = host.to_vector<int64_t>();
  std::vector<int64_t> counted(size_t((int64_t(ids.size()) + chunk_rows - 1) / chunk_rows), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == ignore_index) continue;
    FATHOM_CHECK(ids[i] >= 0 && ids[i] < vocab, "cross_entropy: target ", ids[i], " at row ", i,
                 " is outside the vocabulary [0, ", vocab, ") and is not the ignore index ", ignore_index);
    ++counted[i / size_t(chunk_rows)];
  }
  return counted;
}

}  // namespace

LossParts linear_cross_entropy(const Variable& h, const Variable& weight, const Tensor& targets, double z_loss_weight,
                               double expected_grad, int64_t chunk_rows, int64_t ignore_index) {
  FATHOM_CHECK(h.defined() && weight.defined(), "linear_cross_entropy: undefined input");
  FATHOM_CHECK(h.value().rank() == 2 && weight.value().rank() == 2 && h.dim(1) == weight.dim(1),
               "linear_cross_entropy: h must be [N, d] and the weight [V, d], got ", describe(h.value()), " and ",
               describe(weight.value()));
  FATHOM_CHECK(targets.rank() == 1 && targets.dim(0) == h.dim(0), "linear_cross_entropy: targets must be [N] for h ",
               describe(h.value()), ", got ", describe(targets));
  FATHOM_CHECK(chunk_rows >= 1, "linear_cross_entropy: chunk_rows must be >= 1, got ", chunk_rows);
  FATHOM_CHECK(std::isfinite(expected_grad) && expected_grad != 0,
               "linear_cross_entropy: expected_grad must be "
               "finite and nonzero (the gradients are rescaled by upstream / expected_grad), got ",
               expected_grad);
  if (!any_requires_grad({h, weight}))
    return cross_entropy(linear(h, weight), targets.to(h.device()), z_loss_weight, ignore_index);

  const Tensor& x = h.value();
  const Tensor& w = weight.compute_value();
  const int64_t N = x.dim(0), V = w.dim(0), d = x.dim(1);
  const DType stats = stats_dtype(x.dtype());
  const std::vector<int64_t> counted = counted_per_chunk(targets, V, chunk_rows, ignore_index);
  const Tensor device_targets = targets.to(x.device());
  int64_t total = 0;
  for (int64_t c : counted) total += c;

  // dW accumulates over the chunks in the weight's own precision (F32 master weights under mixed
  // precision), as the linear layer's does into the gradient arena.
  const bool want_dh = h.requires_grad(), want_dweight = weight.requires_grad();
  Tensor dh = want_dh ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  // The first chunk's product overwrites dW (beta = 0); zeros only for an empty batch.
  Tensor dweight = want_dweight ? (N > 0 ? Tensor::empty({V, d}, weight.dtype(), x.device())
                                         : Tensor::zeros({V, d}, weight.dtype(), x.device()))
                                : Tensor();
  const Tensor expected = Tensor::full(Shape{}, expected_grad, stats).to(x.device());
  // Each chunk's loss is a mean over its own counted rows: weighting it by counted_c / total makes
  // the gradient expected_grad * d(mean over the whole batch) / d logits. The chunks' weights go to
  // the device in one copy; their loss sums are gathered there and read once, after the last chunk.
  std::vector<double> chunk_grad(counted.size(), 0.0);
  for (size_t c = 0; c < counted.size(); ++c)
    if (total > 0) chunk_grad[c] = expected_grad * double(counted[c]) / double(total);
  const Tensor grad_losses = Tensor::from_vector(chunk_grad, {int64_t(chunk_grad.size())}).to(stats).to(x.device());
  // Row c: chunk c's loss sums (F64 [3], kernels/cross_entropy/cross_entropy.h), gathered by device copies.
  Tensor sums = Tensor::empty({int64_t(counted.size()), 3}, DType::f64, x.device());
  for (int64_t chunk = 0, r0 = 0; r0 < N; ++chunk, r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, N - r0);
    const Tensor x_c = x.narrow(r0, rows);
    Tensor grad = matmul(x_c, false, w, true);  // the chunk's logits, about to hold their gradient
    const CrossEntropyOutput out = cross_entropy_forward_with_grad(grad, device_targets.narrow(r0, rows), z_loss_weight,
                                                                   ignore_index, grad_losses.narrow(chunk, 1), false);
    Tensor row = sums.narrow(chunk, 1).view({3});
    row.copy_from(out.sums);
    if (want_dh) {
      Tensor dh_c = dh.narrow(r0, rows);
      matmul(grad, false, w, false, dh_c);  // dh_c = g_c W
    }
    if (want_dweight) matmul(grad, true, x_c, false, dweight, 1.0, r0 > 0 ? 1.0 : 0.0);  // dW += g_c^T h_c
  }
  LossParts parts;
  parts.counted = total;
  if (total > 0) {
    const std::vector<double> s = sums.to_vector<double>();  // the one wait on the device
    double ce = 0, z = 0;
    for (size_t c = 0; c < counted.size(); ++c) ce += s[3 * c], z += s[3 * c + 1];
    parts.ce = ce / double(total);
    parts.z = z_loss_weight * z / double(total);
  }
  auto node = std::make_shared<LinearCrossEntropyNode>(std::move(dh), std::move(dweight), expected);
  parts.loss = record(Tensor::full(Shape{}, parts.ce + parts.z, stats).to(x.device()), std::move(node), {h, weight});
  return parts;
}

}  // namespace fathom
