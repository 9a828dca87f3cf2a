// linear_fp8: y = x W^T with FP8 operands. Forward: x (e4m3) @ W^T (e4m3). Backward: dx = dy (e5m2) @ W
// (e4m3), dW = dy^T (e5m2) @ x (e4m3). Every cast uses its tensor's own amax from the same step
// (current scaling), so nothing but the tensors is kept between steps. The node saves what the bf16
// linear saves (x, or its selective-recompute rebuild, and W's compute copy) and casts them again in
// backward: the casts are exact functions of those tensors, so the memory plan is unchanged and the
// gradients are those of the forward's quantized values.
//
// linear_fp8_each shares x's casts between the linears of one input (q/k/v, up/gate): its amax and e4m3
// rows once in the forward, its e4m3 transpose once in the backward, where each linear used to make its own.
#include <memory>
#include <optional>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"
#include "kernels/fp8/fp8.h"
#include "kernels/matmul/fp8_matmul.h"

namespace fathom {

namespace {

// x's casts, shared by the FP8 linears of one input: the forward's amax, and the e4m3 transpose the
// weight gradients read, made by the first of the linears' backward passes and kept until the last of
// their nodes lets go (they run one after another: the linears of one input are adjacent in the graph).
struct SharedInputCast {
  Tensor amax;
  std::optional<Fp8Tensor> transposed;

  const Fp8Tensor& transpose(const Tensor& x2d) {
    if (!transposed) transposed = fp8_cast_transpose(x2d, amax, DType::e4m3, false);
    return *transposed;
  }
};

// Hopper's FP8 GEMMs keep partial sums in the tensor cores' reduced-precision accumulator longer with
// fast accumulation: taken for the forward, never for gradients (the common FP8 training recipe).
constexpr Fp8GemmOptions kForward{.accumulate = false, .fast_accumulation = true};

class Fp8LinearNode final : public Node {
 public:
  // x_cast: x's amax (and, once made, its transpose), shared with the other linears of x; weight_amax: the
  // forward's amax of the weight ([1]). The backward's casts reuse both.
  Fp8LinearNode(SavedTensor x, std::shared_ptr<SharedInputCast> x_cast, Tensor weight, Tensor weight_amax,
                Shape x_shape, Tensor weight_grad, DType x_dtype, DType dweight_dtype)
      : x_(std::move(x)),
        x_cast_(std::move(x_cast)),
        weight_(std::move(weight)),
        weight_amax_(std::move(weight_amax)),
        x_shape_(x_shape),
        weight_grad_(std::move(weight_grad)),
        x_dtype_(x_dtype),
        dweight_dtype_(dweight_dtype) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }

  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor*>& partial) override {
    const int64_t rows = x_shape_.rows(), in = x_shape_.last(), out = grad_output.dim(-1);
    const Tensor dy = grad_output.to(x_dtype_).view({rows, out});
    const bool need_dx = needs_input_grad(0), need_dw = needs_input_grad(1);
    // dy in e5m2: its rows for dx, its transpose for dW (cuBLASLt's FP8 GEMMs read only that layout).
    const Tensor dy_amax = fp8_amax(dy);
    const Fp8Tensor g =
        need_dw ? fp8_cast_transpose(dy, dy_amax, DType::e5m2, need_dx) : fp8_cast(dy, dy_amax, DType::e5m2);
    Tensor dx, dweight;
    if (need_dx) {
      // W^T [in, out] in e4m3: dx [rows, in] = dy [rows, out] (W^T)^T.
      const Fp8Tensor w = fp8_cast_transpose(weight_, weight_amax_, DType::e4m3, false);
      Tensor* dx_sum = partial.empty() ? nullptr : partial[0];
      if (dx_sum && dx_sum->dtype() == x_dtype_) {
        Tensor sum2d = dx_sum->view({rows, in});
        fp8_matmul(g.data, g.scale_inv, w.transposed, w.scale_inv, sum2d, {.accumulate = true});
      } else {
        dx = Tensor::empty(x_shape_, x_dtype_, dy.device());
        Tensor dx2d = dx.view({rows, in});
        fp8_matmul(g.data, g.scale_inv, w.transposed, w.scale_inv, dx2d);
      }
    }
    if (need_dw) {
      // x^T [in, rows padded to 16] in e4m3: dW [out, in] = dy^T [out, rows] (x^T)^T; the padding is zero.
      const Fp8Tensor& x = x_cast_->transpose(x_.get().view({rows, in}));
      if (weight_grad_.defined()) {
        fp8_matmul(g.transposed, g.scale_inv, x.transposed, x.scale_inv, weight_grad_, {.accumulate = true});
      } else {
        dweight = Tensor::empty({out, in}, dweight_dtype_, dy.device());
        fp8_matmul(g.transposed, g.scale_inv, x.transposed, x.scale_inv, dweight);
      }
    }
    return {dx, dweight};
  }
  void release_saved() override {
    x_.release();
    x_cast_.reset();
    weight_ = Tensor();
    weight_amax_ = Tensor();
    weight_grad_ = Tensor();
  }
  const char* name() const override { return "linear_fp8"; }

 private:
  SavedTensor x_;  // kept (or rebuilt) only when the weight needs a gradient
  std::shared_ptr<SharedInputCast> x_cast_;
  Tensor weight_;  // the compute copy, kept only when x needs a gradient
  Tensor weight_amax_;
  Shape x_shape_;
  Tensor weight_grad_;  // mixed precision: the weight's F32 gradient in the arena, accumulated into
  DType x_dtype_;
  DType dweight_dtype_;
};

}  // namespace

std::vector<Variable> linear_fp8_each(const Variable& x, std::span<const Variable* const> weights) {
  FATHOM_CHECK(x.defined(), "linear_fp8: undefined input");
  FATHOM_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16, "linear_fp8: x must be F32 or BF16, got ",
               describe(x.value()));
  for (const Variable* weight : weights) {
    FATHOM_CHECK(weight->defined(), "linear_fp8: undefined weight");
    FATHOM_CHECK(weight->value().rank() == 2, "linear_fp8: weight must be [out, in], got ", describe(weight->value()));
    FATHOM_CHECK(x.value().rank() >= 1 && x.dim(-1) == weight->dim(1), "linear_fp8: x ", describe(x.value()),
                 " must end in the weight's input width ", weight->dim(1), " (weight ", describe(weight->value()), ")");
    FATHOM_CHECK(fp8_linear_widths_aligned(weight->dim(0), weight->dim(1)), "linear_fp8: weight ",
                 describe(weight->value()),
                 " needs both widths to be multiples of 16 (the FP8 GEMMs' alignment); such a layer stays in bf16");
  }
  const Shape& xs = x.shape();
  const Tensor x2d = x.value().view({xs.rows(), xs.last()});
  auto x_cast = std::make_shared<SharedInputCast>();
  x_cast->amax = fp8_amax(x2d);
  const Fp8Tensor xq = fp8_cast(x2d, x_cast->amax, DType::e4m3);
  std::vector<Variable> out;
  for (const Variable* weight_ptr : weights) {
    const Variable& weight = *weight_ptr;
    const Tensor& w = weight.compute_value();
    const Tensor w_amax = fp8_amax(w);
    const Fp8Tensor wq = fp8_cast(w, w_amax, DType::e4m3);
    std::vector<int64_t> out_dims = xs.vec();
    out_dims.back() = weight.dim(0);
    Tensor y = Tensor::empty(Shape(out_dims), x.dtype(), x.device());
    Tensor y2d = y.view({xs.rows(), weight.dim(0)});
    fp8_matmul(xq.data, xq.scale_inv, wq.data, wq.scale_inv, y2d, kForward);
    if (!any_requires_grad({x, weight})) {
      out.emplace_back(std::move(y));
      continue;
    }
    const bool into_arena = weight.requires_grad() && weight.is_leaf() && weight.has_compute_copy() &&
                            weight.grad().defined() && weight.grad().dtype() == DType::f32;
    const DType dweight_dtype = weight.dtype() == DType::bf16 ? DType::bf16 : DType::f32;
    auto node = std::make_shared<Fp8LinearNode>(
        weight.requires_grad() ? SavedTensor::of(x) : SavedTensor(), weight.requires_grad() ? x_cast : nullptr,
        x.requires_grad() ? w : Tensor(), x.requires_grad() ? w_amax : Tensor(), xs,
        into_arena ? weight.grad().view(weight.shape()) : Tensor(), x.dtype(), dweight_dtype);
    out.push_back(record(std::move(y), std::move(node), {x, weight}));
  }
  return out;
}

Variable linear_fp8(const Variable& x, const Variable& weight) {
  const Variable* one[] = {&weight};
  return linear_fp8_each(x, one)[0];
}

}  // namespace fathom
