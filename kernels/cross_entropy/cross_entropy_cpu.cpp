// CPU cross-entropy with z-loss, one row per task; exp runs in SIMD through Eigen arrays. The loss
// is summed over rows in order, in double, so it does not depend on the thread count. The row math
// (log-sum-exp, gradient) is written once and shared by the forward, the backward and the forward
// with the gradient fused in.
#include <cmath>
#include <vector>

#include "kernels/cpu_support/eigen_maps.h"
#include "kernels/cpu_support/parallel.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/dispatch.h"

namespace fathom::cpu {

namespace {
// Targets as int64, validated on one thread before any parallel work; returns the counted rows.
int64_t read_targets(const Tensor& targets, int64_t vocab, int64_t ignore_index, std::vector<int64_t>& out) {
  out.resize(size_t(targets.numel()));
  int64_t counted = 0;
  dispatch_index("cross_entropy", "targets", targets.dtype(), [&]<typename I>() {
    const I* t = targets.data<I>();
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t target = int64_t(t[i]);
      if (target == ignore_index) {
        out[i] = ignore_index;
        continue;
      }
      FATHOM_CHECK(target >= 0 && target < vocab, "cross_entropy: target ", target, " at row ", i, " is outside [0, ",
                   vocab, ") and is not ignore_index (", ignore_index, ")");
      out[i] = target;
      ++counted;
    }
  });
  return counted;
}

// d loss / d lse_i for a counted row: the loss is a mean, so grad_loss / counted (0 with no counted row).
double row_gradient_scale(const Tensor& grad_loss, int64_t counted) {
  return counted > 0 ? grad_loss.item() / double(counted) : 0.0;
}

template <typename T>
T row_lse(const ConstArrayView<T>& row) {
  const T max = row.maxCoeff();
  return max + std::log((row - max).exp().sum());
}

// d/dx_j of g (lse - x_t + w lse^2) = g p_j (1 + 2 w lse) - g [j = t], with p = softmax(x) = exp(x - lse);
// zero for an ignored row. grad_row may be row itself: each element is read before it is written.
template <typename T>
void write_row_gradient(const T* row, T* grad_row, int64_t V, T lse, double g, double z_loss_weight, int64_t target,
                        int64_t ignore_index) {
  ArrayView<T> out(grad_row, V);
  if (target == ignore_index) {
    out.setZero();
    return;
  }
  const T coef = T(g * (1.0 + 2.0 * z_loss_weight * double(lse)));
  out = (ConstArrayView<T>(row, V) - lse).exp() * coef;
  out[target] -= T(g);
}

// The forward; with `grad` (the logits themselves) it also writes each row's gradient, g per counted
// row, right after the row's statistics, while the row is still in cache.
CrossEntropyOutput forward_rows(const Tensor& logits, const Tensor& targets, double z_loss_weight, int64_t ignore_index,
                                Tensor* grad, const Tensor* grad_loss) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<int64_t> target;
  CrossEntropyOutput out;
  out.counted = read_targets(targets, V, ignore_index, target);
  const double g = grad ? row_gradient_scale(*grad_loss, out.counted) : 0.0;
  out.lse = Tensor::empty({N}, logits.dtype());
  std::vector<double> ce_row(size_t(N), 0.0);
  dispatch_float("cross_entropy", logits.dtype(), [&]<typename T>() {
    const T* x = logits.data<T>();
    T* d = grad ? grad->data<T>() : nullptr;
    T* lse = out.lse.data<T>();
#pragma omp parallel for schedule(static) if (N * V > kMinParallelWork)
    for (int64_t i = 0; i < N; ++i) {
      const ConstArrayView<T> row(x + i * V, V);
      const T l = row_lse(row);
      lse[i] = l;
      if (target[i] != ignore_index) ce_row[i] = double(l) - double(row[target[i]]);
      if (d) write_row_gradient(x + i * V, d + i * V, V, l, g, z_loss_weight, target[i], ignore_index);
    }
    double ce = 0, z = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (target[i] == ignore_index) continue;
      ce += ce_row[i];
      z += double(lse[i]) * double(lse[i]);
    }
    out.sums = Tensor::from_vector<double>({ce, z, double(out.counted)}, {3});
    if (out.counted > 0) {
      out.ce = ce / double(out.counted);
      out.z = z_loss_weight * z / double(out.counted);
    }
  });
  out.loss = Tensor::full(Shape{}, out.ce + out.z, logits.dtype());
  return out;
}
}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index) {
  return forward_rows(logits, targets, z_loss_weight, ignore_index, nullptr, nullptr);
}

CrossEntropyOutput cross_entropy_forward_with_grad(Tensor& logits, const Tensor& targets, double z_loss_weight,
                                                   int64_t ignore_index, const Tensor& grad_loss, bool read_parts) {
  CrossEntropyOutput out = forward_rows(logits, targets, z_loss_weight, ignore_index, &logits, &grad_loss);
  if (!read_parts) {  // the same contract as on CUDA: only `sums` holds them
    out.ce = out.z = 0;
    out.counted = 0;
  }
  return out;
}

void cross_entropy_backward_into(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, double z_loss_weight, int64_t ignore_index, Tensor& grad) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<int64_t> target;
  const double g = row_gradient_scale(grad_loss, read_targets(targets, V, ignore_index, target));
  dispatch_float("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    const T* x = logits.data<T>();
    const T* l = lse.data<T>();
    T* d = grad.data<T>();
#pragma omp parallel for schedule(static) if (N * V > kMinParallelWork)
    for (int64_t i = 0; i < N; ++i)
      write_row_gradient(x + i * V, d + i * V, V, l[i], g, z_loss_weight, target[i], ignore_index);
  });
}

void scale_grad_unless_expected(Tensor& grad, const Tensor& upstream, const Tensor& expected) {
  const double u = upstream.item(), e = expected.item();
  if (u == e) return;
  FATHOM_CHECK(e != 0, "scale_grad_unless_expected: the expected gradient is 0, so the gradient cannot be rescaled");
  const double ratio = u / e;
  dispatch_float("scale_grad_unless_expected", grad.dtype(),
                 [&]<typename T>() { ArrayView<T>(grad.data<T>(), grad.numel()) *= T(ratio); });
}

}  // namespace fathom::cpu
