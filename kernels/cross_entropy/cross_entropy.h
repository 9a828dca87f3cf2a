// Softmax cross-entropy with z-loss over rows of logits:
//   loss = mean over counted rows of (lse_i - logit_i[target_i]) + z_loss_weight * lse_i^2,
// where lse_i = logsumexp(logits_i) and rows whose target equals ignore_index are not counted.
// With no counted row the loss is 0 and so is its gradient.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

struct CrossEntropyOutput {
  Tensor loss;  // one element (rank 0), stats_dtype(logits): F32 for F32/BF16 logits, F64 for F64
  Tensor lse;   // [N], stats_dtype(logits), for every row (ignored ones too)
  // F64 [3] on the logits' device: the sums over counted rows of lse - logit[target] and of lse^2,
  // and the number of counted rows. ce, z and counted below are read from it.
  Tensor sums;
  double ce = 0;  // mean of lse - logit[target] over counted rows
  double z = 0;   // z_loss_weight * mean of lse^2 over counted rows; loss = ce + z
  int64_t counted = 0;
};

// logits [N, V] floating, targets (I32/I64) [N]. A target outside [0, V) other than ignore_index is
// an error naming its row and value.
CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index);
// d loss / d logits [N, V], times grad_loss (one element).
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double z_loss_weight, int64_t ignore_index);
// The same into grad_logits (logits' shape and dtype), which may be the logits tensor itself: a
// 100K-vocabulary batch then needs no second logits-sized buffer.
void cross_entropy_backward_into(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, double z_loss_weight, int64_t ignore_index, Tensor& grad_logits);

// The forward with the gradient fused in, for logits nothing reads afterwards (the training step's):
// each row is read once, and its gradient overwrites it in the same pass, saving the backward's
// second pass over a logits-sized tensor. Returns what cross_entropy_forward returns, bit for bit,
// and leaves in `logits` what cross_entropy_backward_into(grad_loss, ...) would write there.
// grad_loss (one element, stats_dtype(logits)) is the gradient the loss is expected to receive;
// scale_grad_unless_expected corrects the gradient if another one arrives. With read_parts false,
// ce, z and counted are left 0 and only `sums` holds them: on CUDA nothing then waits for the
// device, and a caller running many chunks gathers their sums and reads them once.
CrossEntropyOutput cross_entropy_forward_with_grad(Tensor& logits, const Tensor& targets, double z_loss_weight,
                                                   int64_t ignore_index, const Tensor& grad_loss,
                                                   bool read_parts = true);
// grad *= upstream / expected, unless upstream equals expected: then nothing is touched (on CUDA the
// kernel reads the two scalars and exits, so the expected case costs no pass over grad). upstream
// and expected hold one element each, of one floating dtype; expected must not be 0.
void scale_grad_unless_expected(Tensor& grad, const Tensor& upstream, const Tensor& expected);

// The backends' entry points. CUDA: F32 or BF16 logits; the forward synchronises once (the loss parts are
// returned as numbers), the fused forward too unless told not to read them.
using CrossEntropyForwardKernel = CrossEntropyOutput(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                                     int64_t ignore_index);
using CrossEntropyBackwardIntoKernel = void(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                            const Tensor& lse, double z_loss_weight, int64_t ignore_index,
                                            Tensor& grad_logits);
using CrossEntropyForwardWithGradKernel = CrossEntropyOutput(Tensor& logits, const Tensor& targets,
                                                             double z_loss_weight, int64_t ignore_index,
                                                             const Tensor& grad_loss, bool read_parts);
using ScaleGradUnlessExpectedKernel = void(Tensor& grad, const Tensor& upstream, const Tensor& expected);
FATHOM_BACKENDS(CrossEntropyForwardKernel, cross_entropy_forward)
FATHOM_BACKENDS(CrossEntropyBackwardIntoKernel, cross_entropy_backward_into)
FATHOM_BACKENDS(CrossEntropyForwardWithGradKernel, cross_entropy_forward_with_grad)
FATHOM_BACKENDS(ScaleGradUnlessExpectedKernel, scale_grad_unless_expected)

}  // namespace fathom
