// CUDA DSLA backward: the chunked gradients of one or both states in one pass over q, k, v, do (the
// CPU reference kernels/dsla/dsla_cpu.cpp derives them). Rows of a state are independent (S[c, :] only ever
// mixes with key dimension c), so one block per (key slice of kKeyBlock dimensions, query head, batch)
// owns S_i[c0:c0+KB, :] and dH_i[c0:c0+KB, :] whole: its dq, dk and gate gradients come out complete
// and only dv (a sum over key dimensions) is left as one fp32 partial per key slice.
//   pass 1, chunks in order, S_i from zero:  dq_i = scale w_i (e^{b_t} S_i do_t + sum_{j<=t} D_tj k_j e^{b_t-b_j}),
//            D_tj = do_t . v_j; q dq_i is parked in the dg_i output; the dgamma partial sum do (o1 - o2)
//   pass 2, chunks in reverse, dH_i from zero: dk_i, the dv partial, dg_i = suffix sums of q dq_i - k dk_i,
//            dH_i <- e^{b_L} dH_i + scale w_i sum_t (q_t e^{b_t})^T do_t
// A small kernel then sums the dv partials (and, for GQA, dk and dv over the query heads of each KV
// head) in a fixed order, and the dgamma partials: nothing is accumulated atomically.
#include <algorithm>

#include "kernels/dsla/dsla.h"
#include "kernels/dsla/dsla_chunk.cuh"
#include "kernels/dsla/dsla_launch.h"
#include "kernels/dsla/dsla_reduce.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using namespace dsla;

constexpr int kKeyBlock = 32;

template <int D, bool TWO>
struct BackwardLayout {
  static constexpr int NS = TWO ? 2 : 1, KB = kKeyBlock, P = KB + 1, PV = D + 1;
  static constexpr int q = 0, k = q + kChunk * P, b = k + kChunk * P, qh = b + NS * kChunk * P,
                       kh = qh + NS * kChunk * P, r = kh + NS * kChunk * P, v = r + NS * kChunk * P,
                       dO = v + kChunk * PV, S = dO + kChunk * PV, A = S + NS * KB * PV, Dm = A + NS * kChunk * kChunk,
                       red = Dm + kChunk * kChunk, floats = red + 32;
};

template <typename T, int D, bool TWO>
__global__ void __launch_bounds__(kThreads)
    dsla_backward_kernel(const T* __restrict__ grad_o, const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, const float* __restrict__ g1, const float* __restrict__ g2,
                         const float* __restrict__ gamma, T* __restrict__ dq, float* __restrict__ dk_heads,
                         float* __restrict__ dv_parts, float* dg1, float* dg2, float* __restrict__ dgamma_parts,
                         int64_t T_len, int H, int Hk) {
  using Ly = BackwardLayout<D, TWO>;
  constexpr int NS = Ly::NS, KB = Ly::KB, P = Ly::P, PV = Ly::PV, C = kChunk;
  extern __shared__ float smem[];
  float *qs = smem + Ly::q, *ks = smem + Ly::k, *bs = smem + Ly::b, *qh = smem + Ly::qh, *kh = smem + Ly::kh;
  float *R = smem + Ly::r, *vs = smem + Ly::v, *dos = smem + Ly::dO, *S = smem + Ly::S, *A = smem + Ly::A;
  float *Dm = smem + Ly::Dm, *red = smem + Ly::red;
  const int tid = threadIdx.x, cb = blockIdx.x, c0 = cb * KB, h = blockIdx.y, hk = h / (H / Hk);
  const int64_t b = blockIdx.z;
  const float scale = rsqrtf(float(D));
  float w[2] = {1.0f, 0.0f};
  if (TWO) w[0] = gamma[h], w[1] = 1.0f - gamma[h];
  float* dg[2] = {dg1, dg2};
  const int64_t n_chunks = (T_len + C - 1) / C;
  auto row = [&](int64_t t, int heads, int head) { return ((b * T_len + t) * heads + head) * int64_t(D); };

  // Loads chunk t0 and forms its per-chunk quantities: cumulative gates, D = do v^T, the key slice's
  // part of A_i, and q e^{b}, k e^{b_L - b}.
  auto prepare_chunk = [&](int64_t t0, int L) {
    __syncthreads();
    load_chunk<KB, P>(qs, q, b, t0, L, T_len, H, h, D, c0);
    load_chunk<KB, P>(ks, k, b, t0, L, T_len, Hk, hk, D, c0);
    load_chunk<D, PV>(vs, v, b, t0, L, T_len, Hk, hk, D, 0);
    load_chunk<D, PV>(dos, grad_o, b, t0, L, T_len, H, h, D, 0);
    load_chunk<KB, P>(bs, g1, b, t0, L, T_len, H, h, D, c0, kLog2e);
    if (TWO) load_chunk<KB, P>(bs + C * P, g2, b, t0, L, T_len, H, h, D, c0, kLog2e);
    __syncthreads();
    cumulate_gates<KB, P>(bs, NS);
    __syncthreads();
    const int t = tid / C, j = tid % C;
    float dm = 0.0f, a[2] = {0.0f, 0.0f};
    if (j <= t) {
#pragma unroll 8
      for (int e = 0; e < D; ++e) dm += dos[t * PV + e] * vs[j * PV + e];
#pragma unroll 8
      for (int c = 0; c < KB; ++c) {
        const float qk = qs[t * P + c] * ks[j * P + c];
#pragma unroll
        for (int s = 0; s < NS; ++s) a[s] += qk * exp2f(bs[s * C * P + t * P + c] - bs[s * C * P + j * P + c]);
      }
    }
    Dm[t * C + j] = dm;
#pragma unroll
    for (int s = 0; s < NS; ++s) A[s * C * C + t * C + j] = a[s];
    for (int i = tid; i < NS * C * KB; i += kThreads) {
      const int s = i / (C * KB), tt = i / KB % C, c = i % KB;
      const float* bcol = bs + s * C * P + c;
      qh[s * C * P + tt * P + c] = qs[tt * P + c] * exp2f(bcol[tt * P]);
      kh[s * C * P + tt * P + c] = ks[tt * P + c] * exp2f(bcol[(C - 1) * P] - bcol[tt * P]);
    }
    __syncthreads();
  };

  // Pass 1: forward states.
  for (int i = tid; i < NS * KB * PV; i += kThreads) S[i] = 0.0f;
  float dgamma_acc = 0.0f;
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const int64_t t0 = ci * C;
    const int L = chunk_rows(t0, T_len);
    prepare_chunk(t0, L);
    if (TWO) {  // this key slice's part of sum do . (o1 - o2)
      for (int i = tid; i < C * D; i += kThreads) {
        const int t = i / D, e = i % D;
        float diff = 0.0f;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          float part = 0.0f;
          for (int c = 0; c < KB; ++c) part += qh[s * C * P + t * P + c] * S[s * KB * PV + c * PV + e];
          for (int j = 0; j <= t; ++j) part += A[s * C * C + t * C + j] * vs[j * PV + e];
          diff += s == 0 ? part : -part;
        }
        dgamma_acc += dos[t * PV + e] * scale * diff;
      }
    }
    for (int i = tid; i < C * KB; i += kThreads) {
      const int t = i / KB, c = i % KB;
      float total = 0.0f;
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const float* bcol = bs + s * C * P + c;
        float inter = 0.0f, intra = 0.0f;
#pragma unroll 8
        for (int e = 0; e < D; ++e) inter += S[s * KB * PV + c * PV + e] * dos[t * PV + e];
        for (int j = 0; j <= t; ++j) intra += Dm[t * C + j] * ks[j * P + c] * exp2f(bcol[t * P] - bcol[j * P]);
        const float dqs = scale * w[s] * (exp2f(bcol[t * P]) * inter + intra);
        total += dqs;
        if (t < L) dg[s][row(t0 + t, H, h) + c0 + c] = qs[t * P + c] * dqs;  // parked for pass 2
      }
      if (t < L) dq[row(t0 + t, H, h) + c0 + c] = from_float<T>(total);
    }
    __syncthreads();
    for (int i = tid; i < NS * KB * D; i += kThreads) {
      const int s = i / (KB * D), c = i / D % KB, e = i % D;
      const float* kcol = kh + s * C * P + c;
      float* Se = S + s * KB * PV + c * PV + e;
      float acc = exp2f(bs[s * C * P + (C - 1) * P + c]) * *Se;
#pragma unroll
      for (int j = 0; j < C; ++j) acc += kcol[j * P] * vs[j * PV + e];
      *Se = acc;
    }
  }
  if (TWO) {
    const float total = block_sum(dgamma_acc, red);
    if (tid == 0) dgamma_parts[(b * H + h) * (D / KB) + cb] = total;
  }

  // Pass 2: state gradients, chunks in reverse. S now holds dH.
  __syncthreads();
  for (int i = tid; i < NS * KB * PV; i += kThreads) S[i] = 0.0f;
  float suffix = 0.0f;  // thread (s, c) < NS * KB carries the gate gradient's suffix sum across chunks
  float* dv_part = dv_parts + int64_t(cb) * (int64_t(gridDim.z) * T_len * H * D);
  for (int64_t ci = n_chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = ci * C;
    const int L = chunk_rows(t0, T_len);
    prepare_chunk(t0, L);
    for (int i = tid; i < C * KB; i += kThreads) {
      const int j = i / KB, c = i % KB;
      float total = 0.0f;
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const float* bcol = bs + s * C * P + c;
        float inter = 0.0f, intra = 0.0f;
#pragma unroll 8
        for (int e = 0; e < D; ++e) inter += S[s * KB * PV + c * PV + e] * vs[j * PV + e];
        for (int t = j; t < C; ++t) intra += Dm[t * C + j] * qs[t * P + c] * exp2f(bcol[t * P] - bcol[j * P]);
        const float dks = scale * w[s] * intra + exp2f(bcol[(C - 1) * P] - bcol[j * P]) * inter;
        total += dks;
        R[s * C * P + j * P + c] = j < L ? dg[s][row(t0 + j, H, h) + c0 + c] - ks[j * P + c] * dks : 0.0f;
      }
      if (j < L) dk_heads[row(t0 + j, H, h) + c0 + c] = total;
    }
    for (int i = tid; i < C * D; i += kThreads) {
      const int j = i / D, e = i % D;
      float acc = 0.0f;
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        float inter = 0.0f, intra = 0.0f;
        for (int c = 0; c < KB; ++c) inter += kh[s * C * P + j * P + c] * S[s * KB * PV + c * PV + e];
        for (int t = j; t < C; ++t) intra += A[s * C * C + t * C + j] * dos[t * PV + e];
        acc += inter + scale * w[s] * intra;
      }
      if (j < L) dv_part[row(t0 + j, H, h) + e] = acc;
    }
    __syncthreads();
    if (tid < NS * KB) {
      const int s = tid / KB, c = tid % KB;
      for (int t = L - 1; t >= 0; --t) {
        suffix += R[s * C * P + t * P + c];
        dg[s][row(t0 + t, H, h) + c0 + c] = suffix;
      }
    }
    for (int i = tid; i < NS * KB * D; i += kThreads) {
      const int s = i / (KB * D), c = i / D % KB, e = i % D;
      const float* qcol = qh + s * C * P + c;
      float* He = S + s * KB * PV + c * PV + e;
      float acc = 0.0f;
#pragma unroll
      for (int t = 0; t < C; ++t) acc += qcol[t * P] * dos[t * PV + e];
      *He = exp2f(bs[s * C * P + (C - 1) * P + c]) * *He + scale * w[s] * acc;
    }
  }
}

template <typename T, int D, bool TWO>
void launch_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                     const Tensor& g2, const Tensor& gamma, DslaGrads& grads) {
  const int64_t B = q.dim(0), T_len = q.dim(1);
  const int H = int(q.dim(2)), Hk = int(k.dim(2)), G = H / Hk, slices = D / kKeyBlock;
  const Device device = q.device();
  cudaStream_t stream = stream_for(device);
  // dk straight into the output where each KV head has one query head and the dtype is F32.
  const bool dk_direct = G == 1 && q.dtype() == DType::f32;
  Tensor dk_heads = dk_direct ? grads.dk : Tensor::empty(q.shape(), DType::f32, device);
  Tensor dv_parts = Tensor::empty({slices, B, T_len, H, D}, DType::f32, device);
  Tensor dgamma_parts = Tensor::empty({B, H, slices}, DType::f32, device);
  const size_t smem = size_t(BackwardLayout<D, TWO>::floats) * sizeof(float);
  auto kernel = dsla_backward_kernel<T, D, TWO>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<dim3(unsigned(slices), unsigned(H), unsigned(B)), kThreads, smem, stream>>>(
      static_cast<const T*>(grad_o.raw()), static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
      static_cast<const T*>(v.raw()), static_cast<const float*>(g1.raw()),
      TWO ? static_cast<const float*>(g2.raw()) : nullptr,
      gamma.defined() ? static_cast<const float*>(gamma.raw()) : nullptr, static_cast<T*>(grads.dq.raw()),
      static_cast<float*>(dk_heads.raw()), static_cast<float*>(dv_parts.raw()), static_cast<float*>(grads.dg1.raw()),
      optional_data(grads.dg2), static_cast<float*>(dgamma_parts.raw()), T_len, H, Hk);
  CUDA_CHECK_LAUNCH();
  const int64_t n = B * T_len * Hk * D;
  reduce_kv_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
      static_cast<const float*>(dk_heads.raw()), static_cast<const float*>(dv_parts.raw()),
      static_cast<T*>(grads.dk.raw()), static_cast<T*>(grads.dv.raw()), B * T_len, Hk, G, D, slices, !dk_direct);
  CUDA_CHECK_LAUNCH();
  if (TWO) {
    reduce_dgamma_kernel<<<unsigned((H + 127) / 128), 128, 0, stream>>>(
        static_cast<const float*>(dgamma_parts.raw()), static_cast<float*>(grads.dgamma.raw()), B, H, slices);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

DslaGrads dsla_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                        const Tensor& g2, const Tensor& gamma, const Tensor& scores) {
  const bool two = g2.defined();
  const Device device = q.device();
  DslaGrads grads{Tensor::empty(q.shape(), q.dtype(), device),
                  Tensor::empty(k.shape(), k.dtype(), device),
                  Tensor::empty(v.shape(), v.dtype(), device),
                  Tensor::empty(q.shape(), DType::f32, device),
                  two ? Tensor::empty(q.shape(), DType::f32, device) : Tensor(),
                  gamma.defined() ? Tensor::zeros(gamma.shape(), DType::f32, device) : Tensor()};
  if (q.numel() == 0) {
    grads.dk.zero_();
    grads.dv.zero_();
    return grads;
  }
  if (dsla_tensor_core_applies({&q, &grad_o, &k, &v, &g1, &g2, &scores})) {
    dsla_tensor_core_backward(grad_o, q, k, v, g1, g2, gamma, scores, grads);
    return grads;
  }
  // The other kernels never keep scores, and recompute their own.
  dispatch_device_float("dsla_backward", q.dtype(), [&]<typename T>() {
    dispatch_dsla_shape(q.dim(3), two,
                        [&]<int D, bool TWO>() { launch_backward<T, D, TWO>(grad_o, q, k, v, g1, g2, gamma, grads); });
  });
  return grads;
}

}  // namespace fathom::cuda
