// CUDA rotary embedding: rope_angles is a (cos, sin) table per (position entry, frequency), computed in
// f64 by a small kernel; rope_apply is one pass over x rotating the pairs (i, i + d/2) in f32. The inverse frequencies
// are copied to each device once per (head dim, theta, scaling) and kept, so a call issues no copy from the host (and a
// decoding step that applies RoPE can be captured as a CUDA graph).
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/rope/rope.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

template <typename I>
__global__ void rope_table_kernel(const I* positions, int64_t n_pos, int64_t half, const double* inv_freq,
                                  float2* table, DeviceErrorRecord* errors) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n_pos * half; e += stride) {
    const int64_t p = e / half, i = e % half;
    const int64_t pos = int64_t(positions[p]);
    if (pos < 0 && i == 0) report_device_error(errors, kRopeNegativePosition, pos, p, 0);
    // As the CPU reference: angle = pos * inv_freq[i] in double, then cos and sin.
    const double angle = double(pos) * inv_freq[i];
    double s, c;
    sincos(angle, &s, &c);
    table[e] = make_float2(float(c), float(s));
  }
}

// One thread per (token, head group, pack of N frequencies): its cos/sin (sin times `sign`: -1 rotates
// back) stay in registers across the
// heads hg, hg + head_groups, ... Training shapes take one group (every head in one thread); a decoding
// step's few tokens spread their heads over more threads so that the device has work for every SM.
template <int N, typename T>
__global__ void rope_apply_kernel(const T* x, T* y, const float2* table, int64_t tokens, int64_t seq, int64_t heads,
                                  int64_t head_groups, int64_t half, bool per_row, float sign) {
  const int64_t packs_per_token = half / N;
  const int64_t total = tokens * head_groups * packs_per_token;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t i = (idx % packs_per_token) * N, group = idx / packs_per_token;
    const int64_t bt = group / head_groups, hg = group % head_groups;  // bt = b * T + t
    const int64_t p = per_row ? bt : bt % seq;
    float2 cs[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      cs[k] = table[p * half + i + k];
      cs[k].y *= sign;
    }
    for (int64_t h = hg; h < heads; h += head_groups) {
      const int64_t offset = (bt * heads + h) * 2 * half;
      const Pack<T, N> x1 = load_pack<N>(x + offset + i), x2 = load_pack<N>(x + offset + half + i);
      Pack<T, N> y1, y2;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float a = to_float(x1.v[k]), b = to_float(x2.v[k]);
        y1.v[k] = from_float<T>(a * cs[k].x - b * cs[k].y);
        y2.v[k] = from_float<T>(b * cs[k].x + a * cs[k].y);
      }
      store_pack<N>(y + offset + i, y1);
      store_pack<N>(y + offset + half + i, y2);
    }
  }
}

// Head groups per token: one, unless the tokens' packs alone give fewer than kMinThreads threads.
constexpr int64_t kMinThreads = 32768;
int64_t head_groups_for(int64_t tokens, int64_t packs_per_token, int64_t heads) {
  const int64_t threads = std::max<int64_t>(tokens * packs_per_token, 1);
  return std::clamp<int64_t>((kMinThreads + threads - 1) / threads, 1, std::max<int64_t>(heads, 1));
}

// The d/2 inverse frequencies on `device`, made on the first call for their key and kept for the
// process (never destroyed: CUDA memory must not be freed by static destructors).
const Tensor& device_inverse_frequencies(int64_t d, double theta, const RopeScaling& scaling, Device device) {
  using Key = std::tuple<int, int64_t, double, std::string, double, double, double, int64_t>;
  static std::mutex mutex;
  static auto* tables = new std::map<Key, Tensor>;
  const Key key{device.index,
                d,
                theta,
                scaling.type,
                scaling.factor,
                scaling.low_freq_factor,
                scaling.high_freq_factor,
                scaling.original_max_position};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = tables->find(key);
  if (it == tables->end()) {
    Tensor t = Tensor::from_vector(rope_inverse_frequencies(d, theta, scaling), {d / 2}).to(device);
    // Complete before any stream reads it (later calls may come from other streams).
    CUDA_CHECK(cudaStreamSynchronize(stream_for(device)));
    it = tables->emplace(key, std::move(t)).first;
  }
  return it->second;
}

}  // namespace

Tensor rope_angles(const Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling) {
  const int64_t n_pos = positions.numel(), half = head_dim / 2;
  std::vector<int64_t> dims = positions.shape().vec();
  dims.insert(dims.end(), {half, 2});
  Tensor table = Tensor::empty(Shape(dims), DType::f32, positions.device());
  if (n_pos == 0) return table;
  // The frequencies (with any llama3 scaling) come from the host code every backend shares.
  const Tensor& inv_freq = device_inverse_frequencies(head_dim, theta, scaling, positions.device());
  dispatch_index("rope", "positions", positions.dtype(), [&]<typename I>() {
    rope_table_kernel<I><<<grid_for(n_pos * half, 256), 256, 0, stream_for(positions.device())>>>(
        static_cast<const I*>(positions.raw()), n_pos, half, inv_freq.data<double>(),
        reinterpret_cast<float2*>(table.raw()), device_error_record());
    CUDA_CHECK_LAUNCH();
  });
  return table;
}

Tensor rope_apply(const Tensor& x, const Tensor& angles, bool inverse) {
  const int64_t B = x.dim(0), seq = x.dim(1), H = x.dim(2), d = x.dim(3), half = d / 2;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  cudaStream_t stream = stream_for(x.device());
  const auto* t = reinterpret_cast<const float2*>(angles.raw());
  const bool per_row = angles.rank() == 4;
  const float sign = inverse ? -1.f : 1.f;
  dispatch_device_float("rope", x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.raw());
    T* yp = static_cast<T*>(y.raw());
    constexpr int N = 4;
    const int64_t tokens = B * seq;
    if (half % N == 0 && all_aligned(N * sizeof(T), xp, yp)) {
      const int64_t groups = head_groups_for(tokens, half / N, H);
      rope_apply_kernel<N, T><<<grid_for(tokens * groups * half / N, 256), 256, 0, stream>>>(
          xp, yp, t, tokens, seq, H, groups, half, per_row, sign);
    } else {
      const int64_t groups = head_groups_for(tokens, half, H);
      rope_apply_kernel<1, T><<<grid_for(tokens * groups * half, 256), 256, 0, stream>>>(xp, yp, t, tokens, seq, H,
                                                                                         groups, half, per_row, sign);
    }
    CUDA_CHECK_LAUNCH();
  });
  return y;
}

}  // namespace fathom::cuda
