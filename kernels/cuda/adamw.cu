// CUDA AdamW over the flat parameter arena: every weight-decay range in one launch (the ranges travel
// in the kernel's parameter block, each block of threads owning a fixed slice of one range), fp32
// state, optionally writing the updated weights to a bf16 (or f16/f32) compute copy in the same pass.
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;
constexpr int64_t kPerBlock = kThreads * kPerThread;
constexpr int kMaxRanges = 64;  // per launch; more ranges take several launches

struct RangeTable {
  int count;
  int64_t begin[kMaxRanges];
  int64_t end[kMaxRanges];
  float decay[kMaxRanges];            // 1 - lr * weight_decay
  int64_t first_block[kMaxRanges + 1];
};

struct Scalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_bias2, eps;
};

template <typename C>
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, C* __restrict__ copy, const __grid_constant__ RangeTable table,
                             Scalars s) {
  int r = 0;
  while (r + 1 < table.count && table.first_block[r + 1] <= int64_t(blockIdx.x)) ++r;
  const int64_t start = table.begin[r] + (int64_t(blockIdx.x) - table.first_block[r]) * kPerBlock;
  const int64_t stop = min(table.end[r], start + kPerBlock);
  const float decay = table.decay[r];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = start + k * kThreads + threadIdx.x;
    if (i >= stop) break;
    const float gi = g[i];
    const float mi = s.beta1 * m[i] + s.one_minus_beta1 * gi;
    const float vi = s.beta2 * v[i] + s.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - s.step_size * mi / (sqrtf(vi * s.inv_bias2) + s.eps);
    p[i] = pi;
    if constexpr (!std::is_same_v<C, void>) copy[i] = from_float<C>(pi);
  }
}

template <typename C>
void launch_batches(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamWRange>& ranges,
                    const AdamWStep& c, C* copy, cudaStream_t stream) {
  // Scalars in double first, as the CPU reference: 1 - beta^step loses precision in float.
  const double bc1 = 1.0 - std::pow(c.beta1, double(c.step));
  const double bc2 = 1.0 - std::pow(c.beta2, double(c.step));
  const Scalars s{float(c.beta1), float(c.beta2), float(1.0 - c.beta1), float(1.0 - c.beta2), float(c.lr / bc1),
                  float(1.0 / bc2), float(c.eps)};
  for (size_t first = 0; first < ranges.size(); first += kMaxRanges) {
    RangeTable table{};
    int64_t blocks = 0;
    for (size_t i = first; i < ranges.size() && table.count < kMaxRanges; ++i) {
      const AdamWRange& r = ranges[i];
      if (r.end == r.begin) continue;
      table.begin[table.count] = r.begin;
      table.end[table.count] = r.end;
      table.decay[table.count] = float(1.0 - c.lr * r.weight_decay);
      table.first_block[table.count] = blocks;
      blocks += (r.end - r.begin + kPerBlock - 1) / kPerBlock;
      ++table.count;
    }
    if (blocks == 0) continue;
    table.first_block[table.count] = blocks;
    adamw_kernel<C><<<unsigned(blocks), kThreads, 0, stream>>>(
        static_cast<float*>(param.raw()), static_cast<const float*>(grad.raw()), static_cast<float*>(m.raw()),
        static_cast<float*>(v.raw()), copy, table, s);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void adamw_update_ranges(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamWRange>& ranges,
                         const AdamWStep& config, Tensor* compute_copy) {
  FATHOM_CHECK(param.dtype() == DType::f32, "adamw: the CUDA kernel keeps F32 master weights and state, got ",
               describe(param));
  cudaStream_t stream = stream_for(param.device());
  if (compute_copy == nullptr) return launch_batches<void>(param, grad, m, v, ranges, config, nullptr, stream);
  switch (compute_copy->dtype()) {
    case DType::bf16:
      return launch_batches(param, grad, m, v, ranges, config, static_cast<__nv_bfloat16*>(compute_copy->raw()), stream);
    case DType::f16:
      return launch_batches(param, grad, m, v, ranges, config, static_cast<__half*>(compute_copy->raw()), stream);
    case DType::f32:
      return launch_batches(param, grad, m, v, ranges, config, static_cast<float*>(compute_copy->raw()), stream);
    default: FATHOM_FAIL("adamw: compute_copy must be F32, BF16 or F16, got ", describe(*compute_copy));
  }
}

}  // namespace fathom::cuda
