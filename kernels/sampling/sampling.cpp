#include "kernels/sampling/sampling.h"

#include "kernels/argmax/argmax.h"

namespace fathom {

Tensor sample_rows(const Tensor& logits, const SamplingOptions& options, const Tensor& draw_indices) {
  FATHOM_CHECK(logits.defined() && logits.rank() == 2 && logits.dim(1) >= 1 && logits.dim(1) <= (int64_t(1) << 31) - 1,
               "sample_rows: logits must be [batch, vocab] with 1 <= vocab < 2^31, got ", describe(logits));
  FATHOM_CHECK(logits.dtype() == DType::f32 || logits.dtype() == DType::bf16 || logits.dtype() == DType::f16,
               "sample_rows: logits must be F32, BF16 or F16, got ", dtype_name(logits.dtype()));
  FATHOM_CHECK(draw_indices.defined() && draw_indices.rank() == 1 && draw_indices.dim(0) == logits.dim(0),
               "sample_rows: draw_indices must be [", logits.dim(0), "] (one per row of logits ", describe(logits),
               "), got ", describe(draw_indices));
  FATHOM_CHECK(draw_indices.dtype() == DType::i64, "sample_rows: draw_indices must be I64, got ",
               dtype_name(draw_indices.dtype()));
  FATHOM_CHECK(draw_indices.device() == logits.device(), "sample_rows: draw_indices are on ",
               draw_indices.device().str(), " but the logits on ", logits.device().str(),
               "; both must be on one device");
  options.validate();
  if (options.temperature == 0) return argmax_rows(logits);
  return on_device("sample_rows", logits.device(), FATHOM_KERNEL(sample_rows), logits, options, draw_indices);
}

}  // namespace fathom
