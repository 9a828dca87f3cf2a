// The kernels of the divergences (autograd/divergences.h, DESIGN.md 4.4): each reduces a student tensor
// against a fixed teacher tensor (or two gate tensors against each other) to one element, rows over the last dimension. The loss and per-row statistics are in
// stats_dtype(input) (F32 for F32/BF16, F64 for F64); gradients are in the input's dtype.
//   softmax_kl: T^2 * mean over rows of KL(softmax(teacher / T) || softmax(student / T))
//   mse:        mean over all elements of (x - target)^2
//   row_cosine: mean over rows of cos(a_row, b_row), 0 (and no gradient) for a row of zeros
// The CPU reference accumulates in f64. The CUDA kernels read bf16 or f32 and accumulate in f32 per
// thread: one block per row streams it once (an online softmax for the student and the teacher
// together, so neither softmax is ever stored), and the rows' terms are summed in f64 in a fixed
// order, so results repeat bit for bit.
#pragma once
#include <utility>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

struct SoftmaxKlOutput {
  Tensor loss;         // one element (rank 0)
  Tensor lse_student;  // [rows] logsumexp(student_row / T), for the backward
  Tensor lse_teacher;  // [rows] logsumexp(teacher_row / T)
};
// student and teacher of one shape [..., n], dtype and device; temperature > 0.
SoftmaxKlOutput softmax_kl_forward(const Tensor& student, const Tensor& teacher, double temperature);
// d loss / d student = grad_loss * T * (softmax(student / T) - softmax(teacher / T)) / rows;
// grad_loss holds one element.
Tensor softmax_kl_backward(const Tensor& grad_loss, const Tensor& student, const Tensor& teacher,
                           const Tensor& lse_student, const Tensor& lse_teacher, double temperature);

// x and target of one shape, dtype and device.
Tensor mse_forward(const Tensor& x, const Tensor& target);
// d loss / d x = grad_loss * 2 (x - target) / numel.
Tensor mse_backward(const Tensor& grad_loss, const Tensor& x, const Tensor& target);

struct RowCosineOutput {
  Tensor loss;  // one element
  Tensor sums;  // [rows, 3]: a.b, |a|^2 and |b|^2 of each row, for the backward
};
// a and b of one shape [..., n], dtype and device.
RowCosineOutput row_cosine_forward(const Tensor& a, const Tensor& b);
// (d loss / d a, d loss / d b): d cos / d a = b / (|a||b|) - cos a / |a|^2 (and symmetrically),
// times grad_loss / rows; zero on a row where a or b is zero.
std::pair<Tensor, Tensor> row_cosine_backward(const Tensor& grad_loss, const Tensor& a, const Tensor& b,
                                              const Tensor& sums);

// The backends' entry points. CUDA: F32 or BF16 inputs (f32 arithmetic); rows of at most 2^31 - 1
// elements. Nothing there waits for the device.
using SoftmaxKlForwardKernel = SoftmaxKlOutput(const Tensor& student, const Tensor& teacher, double temperature);
using SoftmaxKlBackwardKernel = Tensor(const Tensor& grad_loss, const Tensor& student, const Tensor& teacher,
                                       const Tensor& lse_student, const Tensor& lse_teacher, double temperature);
using MseForwardKernel = Tensor(const Tensor& x, const Tensor& target);
using MseBackwardKernel = Tensor(const Tensor& grad_loss, const Tensor& x, const Tensor& target);
using RowCosineForwardKernel = RowCosineOutput(const Tensor& a, const Tensor& b);
using RowCosineBackwardKernel = std::pair<Tensor, Tensor>(const Tensor& grad_loss, const Tensor& a, const Tensor& b,
                                                          const Tensor& sums);
FATHOM_BACKENDS(SoftmaxKlForwardKernel, softmax_kl_forward)
FATHOM_BACKENDS(SoftmaxKlBackwardKernel, softmax_kl_backward)
FATHOM_BACKENDS(MseForwardKernel, mse_forward)
FATHOM_BACKENDS(MseBackwardKernel, mse_backward)
FATHOM_BACKENDS(RowCosineForwardKernel, row_cosine_forward)
FATHOM_BACKENDS(RowCosineBackwardKernel, row_cosine_backward)

}  // namespace fathom
