// linear: y = x W^T over the last dim of x; leading dims are flattened into GEMM rows.
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm.h"

namespace fathom {

namespace {

class LinearNode final : public Node {
 public:
  LinearNode(SavedTensor x, Tensor weight, Shape x_shape, Tensor weight_grad, DType compute_dtype)
      : x_(std::move(x)),
        weight_(std::move(weight)),
        x_shape_(x_shape),
        weight_grad_(std::move(weight_grad)),
        compute_dtype_(compute_dtype) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }

  // dx = dy W, or dx_sum += dy W in the same product when x already has a gradient sum of dx's dtype.
  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor*>& partial) override {
    // A wide output (linear_wide) sends back a wide gradient; the GEMMs take x's dtype.
    const Tensor dy = grad_output.to(compute_dtype_).view({grad_output.shape().rows(), grad_output.dim(-1)});
    Tensor* dx_sum = partial.empty() ? nullptr : partial[0];
    Tensor dx, dweight;
    if (needs_input_grad(0)) {
      if (dx_sum && dx_sum->dtype() == dy.dtype()) {
        Tensor sum2d = dx_sum->view({x_shape_.rows(), x_shape_.last()});
        matmul(dy, false, weight_, false, sum2d, 1.0, 1.0);
      } else {
        dx = matmul(dy, false, weight_, false).view(x_shape_);
      }
    }
    if (needs_input_grad(1)) {
      const Tensor x2d = x_.get().view({x_shape_.rows(), x_shape_.last()});
      if (weight_grad_.defined())
        matmul(dy, true, x2d, false, weight_grad_, 1.0, 1.0);  // dy^T x added into the fp32 arena
      else
        dweight = matmul(dy, true, x2d, false);  // dy^T x
    }
    return {dx, dweight};
  }
  void release_saved() override {
    x_.release();
    weight_ = Tensor();
    weight_grad_ = Tensor();
  }
  const char* name() const override { return "linear"; }

 private:
  SavedTensor x_;  // kept (or rebuilt) only when the weight needs a gradient
  Tensor weight_;  // kept only when x needs a gradient
  Shape x_shape_;
  // Mixed precision: the weight's F32 gradient, which the bf16 GEMM accumulates into directly (no
  // weight-sized temporary, and fp32 accumulation across micro-batches and tied uses).
  Tensor weight_grad_;
  DType compute_dtype_;
};

// Checks that weight [out, in] applies to x [..., in]; returns a new y [..., out] of `dtype` on x's device.
Tensor linear_output(const Variable& x, const Variable& weight, DType dtype) {
  FATHOM_CHECK(x.defined() && weight.defined(), "linear: undefined input");
  FATHOM_CHECK(weight.value().rank() == 2, "linear: weight must be [out, in], got ", describe(weight.value()));
  FATHOM_CHECK(x.value().rank() >= 1 && x.dim(-1) == weight.dim(1), "linear: x ", describe(x.value()),
               " must end in the weight's input width ", weight.dim(1), " (weight ", describe(weight.value()), ")");
  std::vector<int64_t> out_dims = x.shape().vec();
  out_dims.back() = weight.dim(0);
  return Tensor::empty(Shape(out_dims), dtype, x.device());
}

// y in out_dtype: x's, or F32 for BF16 x (the GEMM accumulates in f32 and writes it unrounded).
Variable linear_into(const Variable& x, const Variable& weight, DType out_dtype) {
  Tensor y = linear_output(x, weight, out_dtype);
  const Tensor& w = weight.compute_value();
  const Shape& xs = x.shape();
  const Tensor x2d = x.value().view({xs.rows(), xs.last()});
  Tensor y2d = y.view({xs.rows(), weight.dim(0)});
  matmul(x2d, false, w, true, y2d);
  if (!any_requires_grad({x, weight})) return Variable(std::move(y));
  const bool into_arena = weight.requires_grad() && weight.is_leaf() && weight.has_compute_copy() &&
                          weight.grad().defined() && weight.grad().dtype() == DType::f32;
  auto node = std::make_shared<LinearNode>(weight.requires_grad() ? SavedTensor::of(x) : SavedTensor(),
                                           x.requires_grad() ? w : Tensor(), xs,
                                           into_arena ? weight.grad().view(weight.shape()) : Tensor(), x.dtype());
  return record(std::move(y), std::move(node), {x, weight});
}

}  // namespace

Variable linear(const Variable& x, const Variable& weight) {
  FATHOM_CHECK(x.defined(), "linear: undefined input");
  return linear_into(x, weight, x.dtype());
}

std::vector<Variable> linear_each(const Variable& x, std::span<const Variable* const> weights) {
  FATHOM_CHECK(x.defined(), "linear: undefined input");
  std::vector<Variable> out;
  bool records = x.requires_grad();
  for (const Variable* w : weights) records = records || w->requires_grad();
  if (records && GradMode::enabled()) {
    for (const Variable* w : weights) out.push_back(linear(x, *w));
    return out;
  }
  std::vector<Tensor> ws, ys2d;
  for (const Variable* w : weights) {
    Tensor y = linear_output(x, *w, x.dtype());
    ws.push_back(w->compute_value());
    ys2d.push_back(y.view({y.shape().rows(), w->dim(0)}));
    out.emplace_back(std::move(y));
  }
  matmul_each(x.value().view({x.shape().rows(), x.shape().last()}), ws, ys2d);
  return out;
}

std::optional<Variable> fused_swiglu_projection(const Variable& x, const Variable& gate, const Variable& up) {
  FATHOM_CHECK(x.defined() && gate.defined() && up.defined(), "swiglu projection: undefined input");
  const bool records = x.requires_grad() || gate.requires_grad() || up.requires_grad();
  // The cheap refusals first: evaluation's many rows allocate nothing here.
  if ((records && GradMode::enabled()) || !x.device().is_cuda() || swiglu_projection_choice() != Fusion::fused ||
      gate.shape() != up.shape() || x.shape().rows() > kSkinnyMatmulMaxRows)
    return std::nullopt;
  const Tensor x2d = x.value().view({x.shape().rows(), x.shape().last()});
  const Tensor &g = gate.compute_value(), &u = up.compute_value();
  if (!use_skinny_matmul(x2d, false, g, true, x.dtype(), 1.0, 0.0) ||
      !use_skinny_matmul(x2d, false, u, true, x.dtype(), 1.0, 0.0))
    return std::nullopt;
  Tensor y = linear_output(x, gate, x.dtype());
  Tensor y2d = y.view({y.shape().rows(), gate.dim(0)});
  skinny_swiglu(x2d, g, u, y2d);
  return Variable(std::move(y));
}

namespace {

// The residual step's operands and the weights' values where one launch may take the step and the products of
// `weights` (project_after_residual_step's conditions), else nothing.
std::optional<std::pair<ResidualStepInputs, std::vector<Tensor>>> residual_step_launch(
    ResidualStep kind, const Variable& residual, const Variable& x, const Variable& norm_weight, double eps,
    std::span<const Variable* const> weights) {
  FATHOM_CHECK(residual.defined() && x.defined() && norm_weight.defined(), "residual step: undefined input");
  bool records = residual.requires_grad() || x.requires_grad() || norm_weight.requires_grad();
  for (const Variable* w : weights) records = records || w->requires_grad();
  // The cheap refusals first: evaluation's many rows allocate nothing here.
  // Pre-norm, the launch adds as add_rms_norm's one pass does: only where add_rms_norm takes that pass.
  if ((records && GradMode::enabled()) || !x.device().is_cuda() || residual_step_in_gemm_choice() != Fusion::fused ||
      (kind == ResidualStep::pre_norm && !add_rms_norm_takes_one_pass(x.shape().rows())) || x.dtype() != DType::bf16 ||
      residual.shape() != x.shape() || x.shape().rows() > kResidualStepMaxRows)
    return std::nullopt;
  const int64_t M = x.shape().rows(), K = x.shape().last();
  const ResidualStepInputs step{kind, residual.value().view({M, K}), x.value().view({M, K}),
                                norm_weight.compute_value(), eps};
  std::vector<Tensor> ws;
  for (const Variable* w : weights) ws.push_back(w->compute_value());
  if (step.residual.dtype() != DType::bf16 || step.weight.dtype() != DType::bf16 || !residual_step_fits(step, ws))
    return std::nullopt;
  for (const Tensor& w : ws)
    if (!use_skinny_matmul(step.x, false, w, true, DType::bf16, 1.0, 0.0)) return std::nullopt;
  return std::pair{step, std::move(ws)};
}

}  // namespace

std::optional<ResidualProjections> project_after_residual_step(ResidualStep kind, const Variable& residual,
                                                               const Variable& x, const Variable& norm_weight,
                                                               double eps, std::span<const Variable* const> weights) {
  auto launch = residual_step_launch(kind, residual, x, norm_weight, eps, weights);
  if (!launch) return std::nullopt;
  const auto& [step, ws] = *launch;
  const int64_t M = step.x.dim(0);
  ResidualProjections out;
  std::vector<Tensor> ys2d;
  for (size_t i = 0; i < ws.size(); ++i) {
    Tensor y = linear_output(x, *weights[i], DType::bf16);
    ys2d.push_back(y.view({M, ws[i].dim(0)}));
    out.ys.emplace_back(std::move(y));
  }
  Tensor h = Tensor::empty(x.shape(), DType::bf16, x.device());
  Tensor h2d = h.view(step.x.shape());
  skinny_matmul_after_residual_step(step, ws, ys2d, h2d);
  out.h = Variable(std::move(h));
  return out;
}

std::optional<ResidualProjections> swiglu_projection_after_residual_step(ResidualStep kind, const Variable& residual,
                                                                         const Variable& x,
                                                                         const Variable& norm_weight, double eps,
                                                                         const Variable& gate, const Variable& up) {
  if (swiglu_projection_choice() != Fusion::fused || gate.shape() != up.shape()) return std::nullopt;
  const Variable* weights[] = {&gate, &up};
  auto launch = residual_step_launch(kind, residual, x, norm_weight, eps, weights);
  if (!launch) return std::nullopt;
  const auto& [step, ws] = *launch;
  Tensor y = linear_output(x, gate, DType::bf16);
  Tensor y2d = y.view({step.x.dim(0), gate.dim(0)});
  Tensor h = Tensor::empty(x.shape(), DType::bf16, x.device());
  Tensor h2d = h.view(step.x.shape());
  skinny_swiglu_after_residual_step(step, ws[0], ws[1], y2d, h2d);
  return ResidualProjections{Variable(std::move(h)), {Variable(std::move(y))}};
}

Variable linear_wide(const Variable& x, const Variable& weight) {
  FATHOM_CHECK(x.defined(), "linear_wide: undefined input");
  return linear_into(x, weight, x.dtype() == DType::bf16 ? DType::f32 : x.dtype());
}

}  // namespace fathom
