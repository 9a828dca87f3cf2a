#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/random.h"

namespace fathom {

namespace {

// sum(w * y) in double.
double weighted_sum(const Tensor& w, const Variable& y) {
  FATHOM_CHECK(y.defined() && y.dtype() == DType::f64 && y.shape() == w.shape(), "gradcheck: f returned ",
               y.defined() ? describe(y.value()) : "an undefined value", " on a perturbed input, expected ",
               describe(w));
  const double* wp = w.data<double>();
  const double* yp = y.value().data<double>();
  double total = 0;
  for (int64_t i = 0, n = w.numel(); i < n; ++i) total += wp[i] * yp[i];
  return total;
}

}  // namespace

GradcheckResult gradcheck(std::function<Variable(const std::vector<Variable>&)> f, std::vector<Tensor> inputs,
                          GradcheckOptions opts) {
  FATHOM_CHECK(opts.eps > 0 && opts.atol >= 0 && opts.rtol >= 0, "gradcheck: eps must be > 0 and tolerances >= 0");
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& t = inputs[i];
    FATHOM_CHECK(t.defined() && t.is_cpu(), "gradcheck: input ", i, " must be a defined CPU tensor");
    const bool floating = is_floating(t.dtype());
    FATHOM_CHECK(!floating || t.dtype() == DType::f64, "gradcheck: floating input ", i, " is ", describe(t),
                 "; central differences need F64");
    t = t.clone();  // perturbed in place below; the caller's tensors stay untouched
    vars.emplace_back(t, floating);
  }

  // Analytic: backward of y with the seed w gives d sum(w * y) / dx.
  Variable y = f(vars);
  FATHOM_CHECK(y.defined() && y.requires_grad(), "gradcheck: f's result does not depend on any floating input");
  FATHOM_CHECK(y.dtype() == DType::f64, "gradcheck: f returned ", describe(y.value()), ", expected F64");
  Tensor w = Tensor::empty(y.shape(), DType::f64);
  Generator gen{opts.seed, 0};
  fill_normal(w, gen, 0.0, 1.0);
  backward(y, w);

  GradcheckResult result;
  NoGrad no_grad;
  std::vector<Variable> plain;
  for (const Tensor& t : inputs) plain.emplace_back(t, false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!vars[i].requires_grad()) continue;
    const Tensor& analytic = vars[i].grad();  // undefined when f does not use this input
    double* x = inputs[i].data<double>();
    for (int64_t e = 0, n = inputs[i].numel(); e < n; ++e) {
      const double saved = x[e];
      x[e] = saved + opts.eps;
      const double plus = weighted_sum(w, f(plain));
      x[e] = saved - opts.eps;
      const double minus = weighted_sum(w, f(plain));
      x[e] = saved;
      const double numeric = (plus - minus) / (2 * opts.eps);
      const double a = analytic.defined() ? analytic.data<double>()[e] : 0.0;
      const double abs_err = std::abs(a - numeric);
      result.max_abs_error = std::max(result.max_abs_error, abs_err);
      result.max_rel_error = std::max(result.max_rel_error, abs_err / std::max(std::abs(numeric), opts.atol));
      ++result.checked;
      const bool pass = abs_err <= opts.atol + opts.rtol * std::abs(numeric) && std::isfinite(a);
      if (!pass && result.ok) {
        result.ok = false;
        result.failed_input = int(i);
        result.failed_element = e;
        result.analytic = a;
        result.numeric = numeric;
      }
    }
  }
  std::ostringstream msg;
  if (result.ok) {
    msg << "gradcheck passed on " << result.checked << " elements (max abs error " << result.max_abs_error
        << ", max rel error " << result.max_rel_error << ")";
  } else {
    msg.precision(10);
    msg << "gradcheck failed at input " << result.failed_input << " " << describe(inputs[result.failed_input])
        << ", element " << result.failed_element << ": analytic " << result.analytic << " vs numeric " << result.numeric
        << " (max abs error " << result.max_abs_error << ", max rel error " << result.max_rel_error << ")";
  }
  result.message = msg.str();
  return result;
}

}  // namespace fathom
