// Sampling the next token of every row of logits on the logits' device, so no step copies logits to the
// host: logits [B, V] (F32, BF16 or F16) -> I32 [B].
//
// Row b's token follows softmax(logits[b] / temperature) restricted to the top_k largest logits and
// then to the shortest prefix, by descending logit, whose probability reaches top_p of what top-k
// kept; ties in the order go to the lower index (so top_k = 1 is argmax). The draw is Philox's uniform
// for (options.seed, draw_indices[b]), the one the CPU reference uses, so a seed reproduces a
// generation on either device. Temperature 0 is argmax_rows. A NaN logit is never chosen (it counts
// as -inf); a row with no finite maximum (every logit -inf or NaN, or some +inf) takes its argmax.
//
// The backends agree in distribution, not token for token: the CPU walks the kept tokens from the most
// likely down (in index order when nothing is cut), the CUDA kernel in its own fixed order. Each is deterministic: the
// same logits, seed and draw index give the same token, run to run.
#pragma once
#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/sampling/sampling_options.h"

namespace fathom {

// logits [B, V], draw_indices I64 [B] on the logits' device -> I32 [B] there.
Tensor sample_rows(const Tensor& logits, const SamplingOptions& options, const Tensor& draw_indices);

// The backends' entry point (arguments checked, temperature > 0).
using SampleRowsKernel = Tensor(const Tensor& logits, const SamplingOptions& options, const Tensor& draw_indices);
FATHOM_BACKENDS(SampleRowsKernel, sample_rows)

namespace cpu {
// The CPU reference for one row (non-empty), any temperature: the algorithm behind sample_rows' CPU
// backend and the host-side sampler.
int64_t sample_row(std::span<const float> logits, const SamplingOptions& options, uint64_t draw_index);
}  // namespace cpu

}  // namespace fathom
