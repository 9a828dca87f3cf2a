// CUDA MoD routing. Top-k: one block per sequence holds the row's order keys in shared memory; each
// thread counts the tokens that rank above its own (stopping at k), and a ballot compaction writes the
// chosen indices in ascending order. Gather and scatter copy whole rows in 16-byte (or narrower)
// units. The routed residual works on the chosen rows only (the others are a copy); its backward
// reduces each row's <grad, y - x> in a fixed order, so every result repeats bit for bit.
#include <cstdint>

#include "kernels/mod/mod_routing.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int64_t kMaxTopkSeq = 49152;  // 192 KiB of keys in shared memory

// A key whose unsigned order is the ranking: numbers by value with -0 == +0, every NaN on top.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0xffffffffu;
  if (v == 0.0f) v = 0.0f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void topk_kernel(const float* scores, int S, int k, int32_t* out) {
  extern __shared__ uint32_t keys[];
  __shared__ int warp_counts[32];
  const float* row = scores + int64_t(blockIdx.x) * S;
  for (int i = threadIdx.x; i < S; i += blockDim.x) keys[i] = order_key(row[i]);
  __syncthreads();
  int32_t* chosen_out = out + int64_t(blockIdx.x) * k;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int base = 0;  // tokens chosen before this chunk
  for (int chunk = 0; chunk < S; chunk += blockDim.x) {
    const int i = chunk + threadIdx.x;
    bool chosen = false;
    if (i < S) {
      const uint32_t key = keys[i];
      int above = 0;
      for (int j = 0; j < S && above < k; ++j) {
        const uint32_t other = keys[j];
        above += (other > key || (other == key && j < i)) ? 1 : 0;
      }
      chosen = above < k;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, chosen);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = base, total = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp) offset += warp_counts[w];
      total += warp_counts[w];
    }
    if (chosen) chosen_out[offset + __popc(ballot & ((1u << lane) - 1u))] = i;
    __syncthreads();  // warp_counts is rewritten by the next chunk
    base += total;
  }
}

// Copies rows of `units` Units between [B, rows_a, ...] and [B, rows_b, ...]: gather reads row
// idx[b, j] of the seq side and writes row j of the k side; scatter the other way round.
template <typename Unit, bool kGather>
__global__ void copy_rows_kernel(const Unit* src, Unit* dst, const int32_t* idx, int64_t B, int64_t k, int64_t S,
                                 int64_t units, DeviceErrorRecord* errors) {
  const int64_t total = B * k * units, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t row = t / units, u = t % units, b = row / k;
    const int32_t i = idx[row];
    if (i < 0 || i >= S) {
      if (u == 0) report_device_error(errors, kRouteIndexOutOfRange, i, row, S);
      continue;
    }
    const int64_t seq_row = b * S + i;
    if constexpr (kGather)
      dst[row * units + u] = src[seq_row * units + u];
    else
      dst[seq_row * units + u] = src[row * units + u];
  }
}

template <bool kGather>
void copy_rows(const Tensor& src, Tensor& dst, const Tensor& idx, int64_t S) {
  const int64_t B = idx.dim(0), k = idx.dim(1);
  const int64_t row_bytes = int64_t(src.nbytes()) / (B * (kGather ? S : k));
  if (B * k == 0 || row_bytes == 0) return;
  const auto launch = [&]<typename Unit>() {
    const int64_t units = row_bytes / int64_t(sizeof(Unit));
    copy_rows_kernel<Unit, kGather><<<grid_for(B * k * units, 256), 256, 0, stream_for(src.device())>>>(
        static_cast<const Unit*>(src.raw()), static_cast<Unit*>(dst.raw()), idx.data<int32_t>(), B, k, S, units,
        device_error_record());
    CUDA_CHECK_LAUNCH();
  };
  const auto fits = [&](size_t unit) {
    return row_bytes % int64_t(unit) == 0 && all_aligned(unit, src.raw(), dst.raw());
  };
  if (fits(16)) return launch.template operator()<uint4>();
  if (fits(8)) return launch.template operator()<uint2>();
  if (fits(4)) return launch.template operator()<uint32_t>();
  if (fits(2)) return launch.template operator()<uint16_t>();
  launch.template operator()<uint8_t>();
}

__device__ __forceinline__ float gate_of(const float* r, int64_t i, RouteWeight weight) {
  if (weight == RouteWeight::one) return 1.0f;
  const float v = r[i];
  return weight == RouteWeight::sigmoid ? 1.0f / (1.0f + expf(-v)) : v;
}

// The row of [B * S] that chosen row `row` of [B * k] stands for; -1 (reported) for a bad index.
__device__ __forceinline__ int64_t sequence_row(const int32_t* idx, int64_t row, int64_t k, int64_t S,
                                                DeviceErrorRecord* errors) {
  const int32_t pos = idx[row];
  if (pos >= 0 && pos < S) return (row / k) * S + pos;
  if (threadIdx.x == 0) report_device_error(errors, kRouteIndexOutOfRange, pos, row, S);
  return -1;
}

// One block per chosen row: out[i] = (1 - w) x[i] + w y[j].
template <typename T>
__global__ void routed_mix_kernel(const T* x, const T* y, const float* r, const int32_t* idx, T* out, int64_t k,
                                  int64_t S, int64_t d, RouteWeight weight, DeviceErrorRecord* errors) {
  const int64_t row = blockIdx.x;
  const int64_t i = sequence_row(idx, row, k, S, errors);
  if (i < 0) return;
  const float w = gate_of(r, i, weight);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    out[i * d + c] = from_float<T>((1.0f - w) * to_float(x[i * d + c]) + w * to_float(y[row * d + c]));
}

// One block per chosen row: dx[i] = (1 - w) g[i], dy[j] = w g[i], dr[i] = g'(r) <g[i], y[j] - x[i]>.
template <typename T>
__global__ void routed_mix_backward_kernel(const T* g, const T* x, const T* y, const float* r, const int32_t* idx,
                                           T* dx, T* dy, float* dr, int64_t k, int64_t S, int64_t d, RouteWeight weight,
                                           DeviceErrorRecord* errors) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t i = sequence_row(idx, row, k, S, errors);
  if (i < 0) return;
  const float w = gate_of(r, i, weight);
  float dot = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float gc = to_float(g[i * d + c]);
    dot += gc * (to_float(y[row * d + c]) - to_float(x[i * d + c]));
    dx[i * d + c] = from_float<T>((1.0f - w) * gc);
    dy[row * d + c] = from_float<T>(w * gc);
  }
  if (dr == nullptr) return;
  dot = block_sum(dot, scratch);
  if (threadIdx.x == 0) {
    float slope = 1.0f;
    if (weight == RouteWeight::sigmoid) {
      const float s = 1.0f / (1.0f + expf(-r[i]));
      slope = s * (1.0f - s);
    }
    dr[i] = dot * slope;
  }
}

constexpr int kMixThreads = 256;
constexpr int kBceThreads = 1024;

__global__ void bce_forward_kernel(const float* l, const float* t, int64_t n, float* loss) {
  __shared__ double scratch[32];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double li = l[i];
    sum += fmax(li, 0.0) - li * double(t[i]) + log1p(exp(-fabs(li)));
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *loss = float(sum / double(n));
}

__global__ void bce_backward_kernel(const float* grad_loss, const float* l, const float* t, int64_t n, float* dl) {
  const float scale = *grad_loss / float(n);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    // sigmoid(l) - t as (1 - t) sigmoid(l) - t sigmoid(-l): no cancellation where the prediction is
    // right and confident (t = 1, l >> 0), whose small gradient 1 - sigmoid(l) would round to 0.
    dl[i] = scale * ((1.0f - t[i]) / (1.0f + expf(-l[i])) - t[i] / (1.0f + expf(l[i])));
}

void check_f32(const char* op, const Tensor& t) {
  FATHOM_CHECK(t.dtype() == DType::f32, op, ": the CUDA kernel takes F32, got ", describe(t));
}

}  // namespace

Tensor topk_per_sequence(const Tensor& scores, int64_t k) {
  const int64_t B = scores.dim(0), S = scores.dim(1);
  FATHOM_CHECK(S <= kMaxTopkSeq, "topk_per_sequence: the CUDA kernel takes sequences of up to ", kMaxTopkSeq,
               " tokens, got ", S);
  FATHOM_CHECK(B <= 2147483647, "topk_per_sequence: ", B, " sequences exceed the grid");
  Tensor out = Tensor::empty({B, k}, DType::i32, scores.device());
  if (B == 0) return out;
  const size_t smem = size_t(S) * sizeof(uint32_t);
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int threads = int(std::min<int64_t>(1024, (S + 31) / 32 * 32));
  topk_kernel<<<unsigned(B), threads, smem, stream_for(scores.device())>>>(scores.data<float>(), int(S), int(k),
                                                                           out.data<int32_t>());
  CUDA_CHECK_LAUNCH();
  return out;
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  std::vector<int64_t> dims = x.shape().vec();
  dims[1] = idx.dim(1);
  Tensor rows = Tensor::empty(Shape(dims), x.dtype(), x.device());
  copy_rows<true>(x, rows, idx, x.dim(1));
  return rows;
}

Tensor scatter_rows(const Tensor& rows, const Tensor& idx, int64_t seq_len) {
  std::vector<int64_t> dims = rows.shape().vec();
  dims[1] = seq_len;
  Tensor out = Tensor::zeros(Shape(dims), rows.dtype(), rows.device());
  copy_rows<false>(rows, out, idx, seq_len);
  return out;
}

Tensor routed_mix_forward(const Tensor& x, const Tensor& y, const Tensor& r, const Tensor& idx, RouteWeight weight) {
  const int64_t B = x.dim(0), S = x.dim(1), k = idx.dim(1), d = x.numel() / (B * S);
  if (weight != RouteWeight::one) check_f32("routed_mix", r);
  Tensor out = x.clone();
  if (B * k == 0) return out;
  FATHOM_CHECK(B * k <= 2147483647, "routed_mix: ", B * k, " chosen rows exceed the grid");
  dispatch_device_float("routed_mix", x.dtype(), [&]<typename T>() {
    routed_mix_kernel<T><<<unsigned(B * k), kMixThreads, 0, stream_for(x.device())>>>(
        static_cast<const T*>(x.raw()), static_cast<const T*>(y.raw()),
        weight == RouteWeight::one ? nullptr : r.data<float>(), idx.data<int32_t>(), static_cast<T*>(out.raw()), k, S,
        d, weight, device_error_record());
    CUDA_CHECK_LAUNCH();
  });
  return out;
}

RoutedMixGrads routed_mix_backward(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& r,
                                   const Tensor& idx, RouteWeight weight) {
  const int64_t B = x.dim(0), S = x.dim(1), k = idx.dim(1), d = x.numel() / (B * S);
  RoutedMixGrads grads{grad_out.clone(), Tensor::empty(y.shape(), y.dtype(), y.device()), Tensor()};
  if (weight != RouteWeight::one) {
    check_f32("routed_mix_backward", r);
    grads.dr = Tensor::zeros(r.shape(), DType::f32, r.device());
  }
  if (B * k == 0) return grads;
  FATHOM_CHECK(B * k <= 2147483647, "routed_mix_backward: ", B * k, " chosen rows exceed the grid");
  dispatch_device_float("routed_mix_backward", x.dtype(), [&]<typename T>() {
    routed_mix_backward_kernel<T><<<unsigned(B * k), kMixThreads, 0, stream_for(x.device())>>>(
        static_cast<const T*>(grad_out.raw()), static_cast<const T*>(x.raw()), static_cast<const T*>(y.raw()),
        weight == RouteWeight::one ? nullptr : r.data<float>(), idx.data<int32_t>(), static_cast<T*>(grads.dx.raw()),
        static_cast<T*>(grads.dy.raw()), grads.dr.defined() ? grads.dr.data<float>() : nullptr, k, S, d, weight,
        device_error_record());
    CUDA_CHECK_LAUNCH();
  });
  return grads;
}

Tensor routing_bce_forward(const Tensor& logits, const Tensor& targets) {
  check_f32("routing_bce", logits);
  Tensor loss = Tensor::empty(Shape{}, DType::f32, logits.device());
  bce_forward_kernel<<<1, kBceThreads, 0, stream_for(logits.device())>>>(logits.data<float>(), targets.data<float>(),
                                                                         logits.numel(), loss.data<float>());
  CUDA_CHECK_LAUNCH();
  return loss;
}

Tensor routing_bce_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets) {
  check_f32("routing_bce_backward", logits);
  Tensor dl = Tensor::empty(logits.shape(), DType::f32, logits.device());
  bce_backward_kernel<<<grid_for(logits.numel(), 256), 256, 0, stream_for(logits.device())>>>(
      grad_loss.data<float>(), logits.data<float>(), targets.data<float>(), logits.numel(), dl.data<float>());
  CUDA_CHECK_LAUNCH();
  return dl;
}

}  // namespace fathom::cuda
