// CUDA AdamW over the flat parameter arena: every weight-decay range in one launch (the ranges travel
// in the kernel's parameter block, each block of threads owning a fixed slice of one range), fp32
// state, optionally writing the updated weights to a bf16 (or f16/f32) compute copy in the same pass,
// with global-norm clipping's coefficient applied to the gradients as they are read.
#include <cmath>

#include "kernels/adamw/adamw.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

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
  float decay[kMaxRanges];  // 1 - lr * weight_decay
  int64_t first_block[kMaxRanges + 1];
};

struct Scalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_bias2, eps, grad_scale;
};

// One element's update; returns the new parameter.
__device__ __forceinline__ float adamw_element(float& p, float g, float& m, float& v, const Scalars& s, float decay) {
  const float gi = g * s.grad_scale;
  m = s.beta1 * m + s.one_minus_beta1 * gi;
  v = s.beta2 * v + s.one_minus_beta2 * gi * gi;
  p = p * decay - s.step_size * m / (sqrtf(v * s.inv_bias2) + s.eps);
  return p;
}

// Each thread updates kPerThread consecutive elements: as one 16-byte load and store per buffer where
// they are aligned and inside the range (nearly everywhere), one at a time at a range's ragged ends.
template <typename C>
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, C* __restrict__ copy, const __grid_constant__ RangeTable table,
                             Scalars s) {
  static_assert(kPerThread == 4, "one float4 per thread and buffer");
  int r = 0;
  while (r + 1 < table.count && table.first_block[r + 1] <= int64_t(blockIdx.x)) ++r;
  const int64_t start = table.begin[r] + (int64_t(blockIdx.x) - table.first_block[r]) * kPerBlock;
  const int64_t stop = min(table.end[r], start + kPerBlock);
  const float decay = table.decay[r];
  const int64_t i0 = start + int64_t(threadIdx.x) * kPerThread;
  if (i0 + kPerThread <= stop && i0 % kPerThread == 0) {
    float4 pv = *reinterpret_cast<const float4*>(p + i0), mv = *reinterpret_cast<const float4*>(m + i0),
           vv = *reinterpret_cast<const float4*>(v + i0);
    const float4 gv = *reinterpret_cast<const float4*>(g + i0);
    adamw_element(pv.x, gv.x, mv.x, vv.x, s, decay);
    adamw_element(pv.y, gv.y, mv.y, vv.y, s, decay);
    adamw_element(pv.z, gv.z, mv.z, vv.z, s, decay);
    adamw_element(pv.w, gv.w, mv.w, vv.w, s, decay);
    *reinterpret_cast<float4*>(p + i0) = pv;
    *reinterpret_cast<float4*>(m + i0) = mv;
    *reinterpret_cast<float4*>(v + i0) = vv;
    if constexpr (!std::is_same_v<C, void>) {
      Pack<C, kPerThread> c;
      c.v[0] = from_float<C>(pv.x), c.v[1] = from_float<C>(pv.y), c.v[2] = from_float<C>(pv.z),
      c.v[3] = from_float<C>(pv.w);
      store_pack<kPerThread>(copy + i0, c);
    }
    return;
  }
  for (int64_t i = i0; i < min(stop, i0 + kPerThread); ++i) {
    const float pi = adamw_element(p[i], g[i], m[i], v[i], s, decay);
    if constexpr (!std::is_same_v<C, void>) copy[i] = from_float<C>(pi);
  }
}

template <typename C>
void launch_batches(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamWRange>& ranges,
                    const AdamWStep& c, C* copy, cudaStream_t stream) {
  // Scalars in double first, as the CPU reference: 1 - beta^step loses precision in float.
  const double bc1 = 1.0 - std::pow(c.beta1, double(c.step));
  const double bc2 = 1.0 - std::pow(c.beta2, double(c.step));
  const Scalars s{float(c.beta1),    float(c.beta2),   float(1.0 - c.beta1), float(1.0 - c.beta2),
                  float(c.lr / bc1), float(1.0 / bc2), float(c.eps),         float(c.grad_scale)};
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
      return launch_batches(param, grad, m, v, ranges, config, static_cast<__nv_bfloat16*>(compute_copy->raw()),
                            stream);
    case DType::f16:
      return launch_batches(param, grad, m, v, ranges, config, static_cast<__half*>(compute_copy->raw()), stream);
    case DType::f32:
      return launch_batches(param, grad, m, v, ranges, config, static_cast<float*>(compute_copy->raw()), stream);
    default:
      FATHOM_FAIL("adamw: compute_copy must be F32, BF16 or F16, got ", describe(*compute_copy));
  }
}

// One range over every element: the same single launch.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& config) {
  cuda::adamw_update_ranges(param, grad, m, v, {{0, param.numel(), config.weight_decay}}, config, nullptr);
}

}  // namespace fathom::cuda
