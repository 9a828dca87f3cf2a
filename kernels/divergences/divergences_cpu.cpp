// CPU reference of the divergences: plain loops over rows, f64 accumulation whatever the
// input dtype (F32 or F64), one row per task where rows are independent; sums over rows run in order
// on one thread, so results do not depend on the thread count.
#include <cmath>
#include <vector>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/divergences/divergences.h"

namespace fathom::cpu {

namespace {

// One element of the statistics dtype holding `value`.
Tensor scalar_like(double value, const Tensor& input) {
  return Tensor::full(Shape{}, value, stats_dtype(input.dtype()));
}

double upstream(const Tensor& grad_loss) { return grad_loss.to(Device::cpu()).item(); }

// logsumexp(v / t) over one row.
template <typename T>
double row_lse(const T* v, int64_t n, double t) {
  double max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) max = std::max(max, double(v[j]) / t);
  if (max == -INFINITY) return max;
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(double(v[j]) / t - max);
  return max + std::log(sum);
}

}  // namespace

SoftmaxKlOutput softmax_kl_forward(const Tensor& student, const Tensor& teacher, double temperature) {
  const int64_t n = student.shape().last(), rows = student.shape().rows();
  const DType stats = stats_dtype(student.dtype());
  SoftmaxKlOutput out;
  std::vector<double> lse_s(static_cast<size_t>(rows)), lse_t(lse_s.size()), kl(lse_s.size());
  const double T = temperature;
  dispatch_float("softmax_kl", student.dtype(), [&]<typename E>() {
    const E* s = student.data<E>();
    const E* t = teacher.data<E>();
#pragma omp parallel for schedule(static) if (rows * n > kMinParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      const E* sr = s + r * n;
      const E* tr = t + r * n;
      const double zs = row_lse(sr, n, T), zt = row_lse(tr, n, T);
      // KL = sum_j p_j (log p_j - log q_j), p = softmax(t / T), q = softmax(s / T); a p_j of 0
      // contributes exactly 0.
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double log_p = double(tr[j]) / T - zt, p = std::exp(log_p);
        if (p > 0) sum += p * (log_p - (double(sr[j]) / T - zs));
      }
      lse_s[size_t(r)] = zs, lse_t[size_t(r)] = zt, kl[size_t(r)] = sum;
    }
  });
  double total = 0;
  for (double v : kl) total += v;
  out.loss = scalar_like(T * T * total / double(rows), student);
  out.lse_student = Tensor::from_vector(lse_s, Shape{rows}).to(stats);
  out.lse_teacher = Tensor::from_vector(lse_t, Shape{rows}).to(stats);
  return out;
}

Tensor softmax_kl_backward(const Tensor& grad_loss, const Tensor& student, const Tensor& teacher,
                           const Tensor& lse_student, const Tensor& lse_teacher, double temperature) {
  const int64_t n = student.shape().last(), rows = student.shape().rows();
  const double T = temperature, scale = upstream(grad_loss) * T / double(rows);
  const Tensor zs = lse_student.to(DType::f64), zt = lse_teacher.to(DType::f64);
  Tensor grad = Tensor::empty(student.shape(), student.dtype());
  dispatch_float("softmax_kl_backward", student.dtype(), [&]<typename E>() {
    const E* s = student.data<E>();
    const E* t = teacher.data<E>();
    const double* ls = zs.data<double>();
    const double* lt = zt.data<double>();
    E* g = grad.data<E>();
    // d (T^2 KL) / d s_j = T (q_j - p_j), averaged over rows.
#pragma omp parallel for schedule(static) if (rows * n > kMinParallelWork)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = r * n; j < (r + 1) * n; ++j)
        g[j] = E(scale * (std::exp(double(s[j]) / T - ls[r]) - std::exp(double(t[j]) / T - lt[r])));
  });
  return grad;
}

Tensor mse_forward(const Tensor& x, const Tensor& target) {
  double sum = 0;
  dispatch_float("mse", x.dtype(), [&]<typename E>() {
    const E* a = x.data<E>();
    const E* b = target.data<E>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double d = double(a[i]) - double(b[i]);
      sum += d * d;
    }
  });
  return scalar_like(sum / double(x.numel()), x);
}

Tensor mse_backward(const Tensor& grad_loss, const Tensor& x, const Tensor& target) {
  const double scale = 2 * upstream(grad_loss) / double(x.numel());
  Tensor grad = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("mse_backward", x.dtype(), [&]<typename E>() {
    const E* a = x.data<E>();
    const E* b = target.data<E>();
    E* g = grad.data<E>();
    const int64_t total = x.numel();
#pragma omp parallel for schedule(static) if (total > kMinParallelWork)
    for (int64_t i = 0; i < total; ++i) g[i] = E(scale * (double(a[i]) - double(b[i])));
  });
  return grad;
}

RowCosineOutput row_cosine_forward(const Tensor& a, const Tensor& b) {
  const int64_t n = a.shape().last(), rows = a.shape().rows();
  std::vector<double> sums(static_cast<size_t>(3 * rows));
  dispatch_float("row_cosine", a.dtype(), [&]<typename E>() {
    const E* u = a.data<E>();
    const E* v = b.data<E>();
#pragma omp parallel for schedule(static) if (rows * n > kMinParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      double uv = 0, uu = 0, vv = 0;
      for (int64_t j = r * n; j < (r + 1) * n; ++j) {
        const double x = double(u[j]), y = double(v[j]);
        uv += x * y, uu += x * x, vv += y * y;
      }
      sums[size_t(3 * r)] = uv, sums[size_t(3 * r + 1)] = uu, sums[size_t(3 * r + 2)] = vv;
    }
  });
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double uv = sums[size_t(3 * r)], uu = sums[size_t(3 * r + 1)], vv = sums[size_t(3 * r + 2)];
    if (uu > 0 && vv > 0) total += uv / std::sqrt(uu * vv);  // a row of zeros has no direction
  }
  RowCosineOutput out;
  out.loss = scalar_like(total / double(rows), a);
  out.sums = Tensor::from_vector(sums, Shape{rows, 3}).to(stats_dtype(a.dtype()));
  return out;
}

std::pair<Tensor, Tensor> row_cosine_backward(const Tensor& grad_loss, const Tensor& a, const Tensor& b,
                                              const Tensor& sums) {
  const int64_t n = a.shape().last(), rows = a.shape().rows();
  const double scale = upstream(grad_loss) / double(rows);
  const Tensor s = sums.to(DType::f64);
  Tensor ga = Tensor::empty(a.shape(), a.dtype()), gb = Tensor::empty(b.shape(), b.dtype());
  dispatch_float("row_cosine_backward", a.dtype(), [&]<typename E>() {
    const E* u = a.data<E>();
    const E* v = b.data<E>();
    const double* st = s.data<double>();
    E* du = ga.data<E>();
    E* dv = gb.data<E>();
#pragma omp parallel for schedule(static) if (rows * n > kMinParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      const double uv = st[3 * r], uu = st[3 * r + 1], vv = st[3 * r + 2];
      const bool directed = uu > 0 && vv > 0;
      const double inv = directed ? 1 / std::sqrt(uu * vv) : 0, c = uv * inv;
      // d cos / d u = v / (|u||v|) - cos u / |u|^2, and symmetrically for v.
      for (int64_t j = r * n; j < (r + 1) * n; ++j) {
        const double x = double(u[j]), y = double(v[j]);
        du[j] = directed ? E(scale * (y * inv - c * x / uu)) : E(0);
        dv[j] = directed ? E(scale * (x * inv - c * y / vv)) : E(0);
      }
    }
  });
  return {ga, gb};
}

}  // namespace fathom::cpu
