#include "autograd/distill_losses.h"

#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "core/error.h"

namespace fathom {

namespace {

using Grads = std::vector<std::vector<double>>;

std::vector<double> host_values(const Tensor& t) {
  const Tensor host = t.to(DType::f64).to(Device::cpu());
  const double* p = host.data<double>();
  return std::vector<double>(p, p + host.numel());
}

// A gradient computed on the host, returned in the input's dtype and device.
Tensor like_input(const std::vector<double>& grad, const Tensor& input) {
  return Tensor::from_vector(grad, input.shape()).to(input.device()).to(input.dtype());
}

// The loss: F64 for F64 inputs (gradcheck), else F32 like the other objective terms.
Tensor scalar_on(double value, const Tensor& like) {
  const DType dtype = like.dtype() == DType::f64 ? DType::f64 : DType::f32;
  return Tensor::from_vector(std::vector<double>{value}, Shape{}).to(dtype).to(like.device());
}

double upstream(const Tensor& grad_output) { return grad_output.to(DType::f64).to(Device::cpu()).item(); }

int64_t row_width(const Tensor& t) {
  FATHOM_CHECK(t.rank() >= 1 && t.numel() > 0, "distillation loss: empty input ", describe(t));
  return t.dim(t.rank() - 1);
}

// Its gradient is fixed by the forward: d loss / d x, scaled by the upstream scalar.
class FixedGradientNode final : public Node {
 public:
  FixedGradientNode(std::vector<std::vector<double>> grads, std::vector<Tensor> inputs, const char* name)
      : grads_(std::move(grads)), inputs_(std::move(inputs)), name_(name) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const double g = upstream(grad_output);
    std::vector<Tensor> out;
    for (size_t i = 0; i < grads_.size(); ++i) {
      std::vector<double> scaled = grads_[i];
      for (double& v : scaled) v *= g;
      out.push_back(like_input(scaled, inputs_[i]));
    }
    return out;
  }
  void release_saved() override {
    grads_.clear();
    inputs_.clear();
  }
  const char* name() const override { return name_; }

 private:
  std::vector<std::vector<double>> grads_;
  std::vector<Tensor> inputs_;  // shape, dtype and device of each gradient
  const char* name_;
};

// softmax of one row of `v` divided by t, into `out`; returns log of the normaliser.
double softmax_row(const double* v, int64_t n, double t, double* out) {
  double max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) max = std::max(max, v[j] / t);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (out[j] = std::exp(v[j] / t - max));
  for (int64_t j = 0; j < n; ++j) out[j] /= sum;
  return max + std::log(sum);
}

}  // namespace

Variable mse_to_target(const Variable& x, const Tensor& target) {
  FATHOM_CHECK(x.defined() && x.value().shape() == target.shape(), "mse_to_target: input ", describe(x.value()),
               " and target ", describe(target), " must have one shape");
  const std::vector<double> a = host_values(x.value()), b = host_values(target);
  const double n = double(a.size());
  double sum = 0;
  std::vector<double> grad(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    sum += d * d;
    grad[i] = 2 * d / n;
  }
  Tensor y = scalar_on(sum / n, x.value());
  if (!any_requires_grad({x})) return Variable(std::move(y));
  return record(std::move(y), std::make_shared<FixedGradientNode>(Grads{std::move(grad)},
                                                                   std::vector<Tensor>{x.value()}, "mse_to_target"),
                {x});
}

Variable softmax_kl_to_target(const Variable& x, const Tensor& target, double temperature) {
  FATHOM_CHECK(x.defined() && x.value().shape() == target.shape(), "softmax_kl_to_target: input ",
               describe(x.value()), " and target ", describe(target), " must have one shape");
  FATHOM_CHECK(std::isfinite(temperature) && temperature > 0, "softmax_kl_to_target: temperature must be > 0, got ",
               temperature);
  const std::vector<double> s = host_values(x.value()), t = host_values(target);
  const int64_t n = row_width(target), rows = int64_t(s.size()) / n;
  std::vector<double> grad(s.size()), p(static_cast<size_t>(n)), q(static_cast<size_t>(n));
  const double T = temperature;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* sr = s.data() + r * n;
    const double* tr = t.data() + r * n;
    const double log_zp = softmax_row(tr, n, T, p.data());
    const double log_zq = softmax_row(sr, n, T, q.data());
    double kl = 0;
    for (int64_t j = 0; j < n; ++j) {
      // log p - log q with each log-softmax spelt out, so p = 0 contributes exactly 0.
      if (p[size_t(j)] > 0) kl += p[size_t(j)] * ((tr[j] / T - log_zp) - (sr[j] / T - log_zq));
      // d (T^2 KL) / d s_j = T (q_j - p_j), averaged over rows.
      grad[size_t(r * n + j)] = T * (q[size_t(j)] - p[size_t(j)]) / double(rows);
    }
    total += kl;
  }
  Tensor y = scalar_on(T * T * total / double(rows), x.value());
  if (!any_requires_grad({x})) return Variable(std::move(y));
  return record(std::move(y), std::make_shared<FixedGradientNode>(Grads{std::move(grad)},
                                                                   std::vector<Tensor>{x.value()}, "softmax_kl_to_target"),
                {x});
}

Variable mean_row_cosine(const Variable& a, const Variable& b) {
  FATHOM_CHECK(a.defined() && b.defined() && a.value().shape() == b.value().shape(), "mean_row_cosine: inputs ",
               describe(a.value()), " and ", describe(b.value()), " must have one shape");
  const std::vector<double> u = host_values(a.value()), v = host_values(b.value());
  const int64_t n = row_width(a.value()), rows = int64_t(u.size()) / n;
  std::vector<double> gu(u.size(), 0.0), gv(v.size(), 0.0);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* ur = u.data() + r * n;
    const double* vr = v.data() + r * n;
    double uv = 0, uu = 0, vv = 0;
    for (int64_t j = 0; j < n; ++j) uv += ur[j] * vr[j], uu += ur[j] * ur[j], vv += vr[j] * vr[j];
    if (uu == 0 || vv == 0) continue;  // no direction: no similarity and no gradient
    const double nu = std::sqrt(uu), nv = std::sqrt(vv), c = uv / (nu * nv);
    total += c;
    for (int64_t j = 0; j < n; ++j) {
      // d cos / d u = v / (|u||v|) - cos u / |u|^2, and symmetrically for v.
      gu[size_t(r * n + j)] = (vr[j] / (nu * nv) - c * ur[j] / uu) / double(rows);
      gv[size_t(r * n + j)] = (ur[j] / (nu * nv) - c * vr[j] / vv) / double(rows);
    }
  }
  Tensor y = scalar_on(total / double(rows), a.value());
  if (!any_requires_grad({a, b})) return Variable(std::move(y));
  return record(std::move(y),
                std::make_shared<FixedGradientNode>(Grads{std::move(gu), std::move(gv)},
                                                    std::vector<Tensor>{a.value(), b.value()}, "mean_row_cosine"),
                {a, b});
}

}  // namespace fathom
