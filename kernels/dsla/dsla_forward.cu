// CUDA DSLA forward: the chunked recurrence for one or both states in one pass over q, k, v. One block
// per (value slice of kValueBlock columns, query head, batch) walks the chunks in order; its slice of
// each state, S_i[:, e0:e0+VB], stays in shared memory in fp32. Per chunk (dsla_chunk.cuh):
//   A_i[t][j] = sum_c q_tc k_jc e^{b_i,tc - b_i,jc}      (exact pairwise ratios, both states in one loop)
//   o_t       = scale sum_i w_i (sum_c q_tc e^{b_i,tc} S_i[c] + sum_{j<=t} A_i[t][j] v_j)
//   S_i      <- e^{b_i,L} S_i + sum_j (k_j e^{b_i,L - b_i,j})^T v_j
#include <algorithm>

#include "kernels/dsla/dsla.h"
#include "kernels/dsla/dsla_chunk.cuh"
#include "kernels/dsla/dsla_launch.h"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using namespace dsla;

constexpr int kValueBlock = 32;

template <int D, bool TWO>
struct ForwardLayout {
  static constexpr int NS = TWO ? 2 : 1, VB = kValueBlock, P = D + 1;  // P: padded row stride
  static constexpr int q = 0, k = q + kChunk * P, b = k + kChunk * P, qh = b + NS * kChunk * P,
                       kh = qh + NS * kChunk * P, v = kh + NS * kChunk * P, S = v + kChunk * VB, A = S + NS * D * VB,
                       floats = A + NS * kChunk * kChunk;
};

template <typename T, int D, bool TWO>
__global__ void __launch_bounds__(kThreads)
    dsla_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        const float* __restrict__ g1, const float* __restrict__ g2, const float* __restrict__ gamma,
                        const float* s1_in, const float* s2_in, T* __restrict__ o, float* s1_out, float* s2_out,
                        int64_t T_len, int H, int Hk) {
  using Ly = ForwardLayout<D, TWO>;
  constexpr int NS = Ly::NS, VB = Ly::VB, P = Ly::P, C = kChunk;
  extern __shared__ float smem[];
  float *qs = smem + Ly::q, *ks = smem + Ly::k, *bs = smem + Ly::b, *qh = smem + Ly::qh, *kh = smem + Ly::kh;
  float *vs = smem + Ly::v, *S = smem + Ly::S, *A = smem + Ly::A;
  const int tid = threadIdx.x, e0 = blockIdx.x * VB, h = blockIdx.y, hk = h / (H / Hk);
  const int64_t b = blockIdx.z;
  const float scale = rsqrtf(float(D));
  float w[2] = {1.0f, 0.0f};
  if (TWO) w[0] = gamma[h], w[1] = 1.0f - gamma[h];

  const int64_t state_base = (b * H + h) * int64_t(D) * D;
  for (int i = tid; i < NS * D * VB; i += kThreads) {
    const int s = i / (D * VB), c = i / VB % D, e = i % VB;
    const float* src = s == 0 ? s1_in : s2_in;
    S[i] = src != nullptr ? src[state_base + int64_t(c) * D + e0 + e] : 0.0f;
  }
  for (int64_t t0 = 0; t0 < T_len; t0 += C) {
    const int L = chunk_rows(t0, T_len);
    __syncthreads();  // the previous chunk is done with the buffers
    load_chunk<D, P>(qs, q, b, t0, L, T_len, H, h, D, 0);
    load_chunk<D, P>(ks, k, b, t0, L, T_len, Hk, hk, D, 0);
    load_chunk<VB, VB>(vs, v, b, t0, L, T_len, Hk, hk, D, e0);
    load_chunk<D, P>(bs, g1, b, t0, L, T_len, H, h, D, 0, kLog2e);
    if (TWO) load_chunk<D, P>(bs + C * P, g2, b, t0, L, T_len, H, h, D, 0, kLog2e);
    __syncthreads();
    cumulate_gates<D, P>(bs, NS);
    __syncthreads();
    {
      const int t = tid / C, j = tid % C;
      float a[2] = {0.0f, 0.0f};
      if (j <= t) {
#pragma unroll 4
        for (int c = 0; c < D; ++c) {
          const float qk = qs[t * P + c] * ks[j * P + c];
#pragma unroll
          for (int s = 0; s < NS; ++s) a[s] += qk * exp2f(bs[s * C * P + t * P + c] - bs[s * C * P + j * P + c]);
        }
      }
#pragma unroll
      for (int s = 0; s < NS; ++s) A[s * C * C + t * C + j] = a[s];
    }
    for (int i = tid; i < NS * C * D; i += kThreads) {
      const int s = i / (C * D), t = i / D % C, c = i % D;
      const float* bcol = bs + s * C * P + c;
      qh[s * C * P + t * P + c] = qs[t * P + c] * exp2f(bcol[t * P]);
      kh[s * C * P + t * P + c] = ks[t * P + c] * exp2f(bcol[(C - 1) * P] - bcol[t * P]);
    }
    __syncthreads();
    {
      const int t = tid / 16;
      for (int e = tid % 16; e < VB; e += 16) {
        float acc = 0.0f;
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          float part = 0.0f;
          const float* qrow = qh + s * C * P + t * P;
          const float* Scol = S + s * D * VB + e;
#pragma unroll 8
          for (int c = 0; c < D; ++c) part += qrow[c] * Scol[c * VB];
          for (int j = 0; j <= t; ++j) part += A[s * C * C + t * C + j] * vs[j * VB + e];
          acc += w[s] * part;
        }
        if (t < L) o[((b * T_len + t0 + t) * H + h) * int64_t(D) + e0 + e] = from_float<T>(scale * acc);
      }
    }
    __syncthreads();
    for (int i = tid; i < NS * D * VB; i += kThreads) {
      const int s = i / (D * VB), c = i / VB % D, e = i % VB;
      const float* kcol = kh + s * C * P + c;
      float acc = exp2f(bs[s * C * P + (C - 1) * P + c]) * S[i];
#pragma unroll
      for (int j = 0; j < C; ++j) acc += kcol[j * P] * vs[j * VB + e];
      S[i] = acc;
    }
  }
  __syncthreads();
  if (s1_out != nullptr)
    for (int i = tid; i < NS * D * VB; i += kThreads) {
      const int s = i / (D * VB), c = i / VB % D, e = i % VB;
      (s == 0 ? s1_out : s2_out)[state_base + int64_t(c) * D + e0 + e] = S[i];
    }
}

template <typename T, int D, bool TWO>
void launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                    const Tensor& gamma, const DslaState& initial, DslaForward& out) {
  const int64_t B = q.dim(0), T_len = q.dim(1);
  const int H = int(q.dim(2)), Hk = int(k.dim(2));
  const size_t smem = size_t(ForwardLayout<D, TWO>::floats) * sizeof(float);
  auto kernel = dsla_forward_kernel<T, D, TWO>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned(D / kValueBlock), unsigned(H), unsigned(B));
  kernel<<<grid, kThreads, smem, stream_for(q.device())>>>(
      static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()), static_cast<const T*>(v.raw()),
      static_cast<const float*>(g1.raw()), TWO ? static_cast<const float*>(g2.raw()) : nullptr,
      gamma.defined() ? static_cast<const float*>(gamma.raw()) : nullptr, optional_data(initial.s1),
      optional_data(initial.s2), static_cast<T*>(out.o.raw()), optional_data(out.final_state.s1),
      optional_data(out.final_state.s2), T_len, H, Hk);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

DslaForward dsla_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                         const Tensor& gamma, const DslaState& initial, bool return_final_state, bool keep_scores) {
  const bool two = g2.defined();
  const Device device = q.device();
  DslaForward out{Tensor::empty(q.shape(), q.dtype(), device), {}, {}};
  const Shape state_shape{q.dim(0), q.dim(2), q.dim(3), q.dim(3)};
  if (return_final_state) {
    out.final_state.s1 = Tensor::empty(state_shape, DType::f32, device);
    if (two) out.final_state.s2 = Tensor::empty(state_shape, DType::f32, device);
  }
  if (q.numel() == 0) {  // no tokens: the final state is the initial one
    for (auto [dst, src] : {std::pair{&out.final_state.s1, &initial.s1}, std::pair{&out.final_state.s2, &initial.s2}})
      if (dst->defined()) src->defined() ? dst->copy_from(*src) : dst->zero_();
    return out;
  }
  if (dsla_tensor_core_applies(
          {&q, &k, &v, &g1, &g2, &initial.s1, &initial.s2, &out.final_state.s1, &out.final_state.s2})) {
    dsla_tensor_core_forward(q, k, v, g1, g2, gamma, initial, keep_scores, out);
    return out;
  }
  dispatch_device_float("dsla_forward", q.dtype(), [&]<typename T>() {
    dispatch_dsla_shape(q.dim(3), two,
                        [&]<int D, bool TWO>() { launch_forward<T, D, TWO>(q, k, v, g1, g2, gamma, initial, out); });
  });
  return out;
}

}  // namespace fathom::cuda
