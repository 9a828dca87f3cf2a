// CPU cross-entropy with z-loss, one row per task; exp runs in SIMD through Eigen arrays. The loss
// is summed over rows in order, in double, so it does not depend on the thread count.
#include <cmath>
#include <vector>

#include "kernels/cpu/eigen_maps.h"
#include "kernels/cross_entropy.h"
#include "kernels/cpu/parallel.h"
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
      FATHOM_CHECK(target >= 0 && target < vocab, "cross_entropy: target ", target, " at row ", i,
                   " is outside [0, ", vocab, ") and is not ignore_index (", ignore_index, ")");
      out[i] = target;
      ++counted;
    }
  });
  return counted;
}
}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<int64_t> target;
  CrossEntropyOutput out;
  out.counted = read_targets(targets, V, ignore_index, target);
  out.lse = Tensor::empty({N}, logits.dtype());
  std::vector<double> ce_row(size_t(N), 0.0);
  dispatch_float("cross_entropy", logits.dtype(), [&]<typename T>() {
    const T* x = logits.data<T>();
    T* lse = out.lse.data<T>();
#pragma omp parallel for schedule(static) if (N * V > kMinParallelWork)
    for (int64_t i = 0; i < N; ++i) {
      const ConstArrayView<T> row(x + i * V, V);
      const T max = row.maxCoeff();
      const T l = max + std::log((row - max).exp().sum());
      lse[i] = l;
      if (target[i] != ignore_index) ce_row[i] = double(l) - double(row[target[i]]);
    }
    double ce = 0, z = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (target[i] == ignore_index) continue;
      ce += ce_row[i];
      z += double(lse[i]) * double(lse[i]);
    }
    if (out.counted > 0) {
      out.ce = ce / double(out.counted);
      out.z = z_loss_weight * z / double(out.counted);
    }
  });
  out.loss = Tensor::full(Shape{}, out.ce + out.z, logits.dtype());
  return out;
}

// d/dx_j of (lse - x_t + w lse^2) = p_j (1 + 2 w lse) - [j = t], with p = softmax(x) = exp(x - lse).
// grad may be logits itself: each element is read before it is written.
void cross_entropy_backward_into(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, double z_loss_weight, int64_t ignore_index, Tensor& grad) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<int64_t> target;
  const int64_t counted = read_targets(targets, V, ignore_index, target);
  const double g = counted > 0 ? grad_loss.item() / double(counted) : 0.0;
  dispatch_float("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    const T* x = logits.data<T>();
    const T* l = lse.data<T>();
    T* d = grad.data<T>();
#pragma omp parallel for schedule(static) if (N * V > kMinParallelWork)
    for (int64_t i = 0; i < N; ++i) {
      ArrayView<T> out_row(d + i * V, V);
      if (target[i] == ignore_index) {
        out_row.setZero();
        continue;
      }
      const T row_lse = l[i];
      const T coef = T(g * (1.0 + 2.0 * z_loss_weight * double(row_lse)));
      out_row = (ConstArrayView<T>(x + i * V, V) - row_lse).exp() * coef;
      out_row[target[i]] -= T(g);
    }
  });
}

}  // namespace fathom::cpu
