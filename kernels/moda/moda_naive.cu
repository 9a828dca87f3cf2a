// The naive MoDA kernel, the paper's slow baseline (Table 7 row 1): every score is materialised. Per
// (batch, KV head) the slot range's depth K/V is gathered into a flat [T * L, d] axis; per query head
// and chunk of query rows, cuBLAS writes the fp32 scores against [sequence keys ; all T * L depth
// columns], a softmax kernel masks them (causal; same token) and normalises them jointly, and GEMMs
// multiply the probabilities into O. The backward pass materialises dP the same way and accumulates
// dK, dV and the flat depth gradients over the G heads and row chunks in fp32 (GEMMs with beta = 1, in
// a fixed order), then adds (or stores) the depth gradients in the slot range. Deterministic, atomic-free, and
// O(T^2 L) in time and (per chunk) memory.
#include <cublas_v2.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <type_traits>

#include "kernels/attention/attention_mma.cuh"
#include "kernels/moda/moda_kernels.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda::moda {

namespace {

using flash::bf16_t;
using flash::dev;

// Score matrices of one row chunk stay under this many bytes (at least one row).
constexpr size_t kScoreBudget = size_t(256) << 20;
constexpr int kThreads = 256;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Sizes and workspace layout of one call. Score columns: [0, T) sequence keys, [T, depth0) padding,
// [depth0, depth0 + T * L) depth columns (depth column c: token c / L, slot begin + c % L); rows of
// `ld` elements.
struct NaivePlan {
  int64_t B, T, Hq, Hk, G, d, S, begin, L;
  int64_t depth0, ld, rows;  // rows: query rows per chunk
  bool backward;
  // Byte offsets into the workspace.
  size_t kd, vd, scores, dprobs, probs, dscores, row_acc, dk_acc, dv_acc, ddk, ddv, bytes;

  NaivePlan(const ModaShape& m, bool bwd) : backward(bwd) {
    const FlashShape& s = m.seq;
    B = s.B, T = s.T, Hq = s.Hq, Hk = s.Hk, G = s.Hq / s.Hk, d = s.d;
    S = m.slots, begin = m.slot_begin, L = m.slot_end - m.slot_begin;
    depth0 = int64_t(align_up(size_t(T), 8));
    ld = int64_t(align_up(size_t(depth0 + T * L), 8));
    // fp32 scores and bf16 probabilities (forward); plus fp32 dP and bf16 dS (backward).
    const size_t per_row = size_t(ld) * (bwd ? 12 : 6) + size_t(d) * 4;
    rows = std::clamp<int64_t>(int64_t(kScoreBudget / per_row), 1, T);
    size_t at = 0;
    auto take = [&](size_t n) {
      const size_t offset = at;
      at = align_up(at + n, 256);
      return offset;
    };
    const size_t flat = size_t(T * L * d), chunk = size_t(rows * ld);
    kd = take(flat * 2);
    vd = take(flat * 2);
    scores = take(chunk * 4);
    probs = take(chunk * 2);
    row_acc = take(size_t(rows * d) * 4);
    dprobs = dscores = dk_acc = dv_acc = ddk = ddv = 0;
    if (bwd) {
      dprobs = take(chunk * 4);
      dscores = take(chunk * 2);
      dk_acc = take(size_t(T * d) * 4);
      dv_acc = take(size_t(T * d) * 4);
      ddk = take(flat * 4);
      ddv = take(flat * 4);
    }
    bytes = at;
  }
};

template <class T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// One cuBLAS handle per device for the life of the process; a call holds the lock while it uses it
// (the stream is handle state).
struct BlasHandles {
  std::mutex mutex;
  std::map<int, cublasHandle_t> handles;
  cublasHandle_t get(int device) {
    auto it = handles.find(device);
    if (it != handles.end()) return it->second;
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    return handles[device] = h;
  }
};
BlasHandles& blas() {
  static BlasHandles* handles = new BlasHandles;
  return *handles;
}

// Row-major C[M x N] = alpha op(A) op(B) + beta C, with op(A) [M x K] and op(B) [K x N]; A and B are
// stored row-major with leading dimensions lda and ldb, transposed when a_t / b_t. cuBLAS is
// column-major, so it computes C^T = op(B)^T op(A)^T on the same buffers.
void gemm(cublasHandle_t h, bool a_t, bool b_t, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
          cudaDataType_t ta, int64_t lda, const void* B, cudaDataType_t tb, int64_t ldb, float beta, void* C,
          cudaDataType_t tc, int64_t ldc) {
  if (M == 0 || N == 0) return;
  CUBLAS_CHECK(cublasGemmEx(h, b_t ? CUBLAS_OP_T : CUBLAS_OP_N, a_t ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M), int(K),
                            &alpha, B, tb, int(ldb), A, ta, int(lda), &beta, C, tc, int(ldc), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}
constexpr cudaDataType_t kBf16 = CUDA_R_16BF, kF32 = CUDA_R_32F;

// ---- kernels ----

// Copies slots [begin, begin + L) of one (b, KV head) of a depth buffer into a flat [T * L, d] matrix.
__global__ void gather_slots_kernel(const bf16_t* depth, bf16_t* flat, int64_t T, int64_t S, int64_t begin, int64_t L,
                                    int64_t Hk, int64_t d, int64_t b, int64_t hk) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;  // 8 bf16 = 16 bytes
  if (i >= T * L * d) return;
  const int64_t c = i / d, col = i % d, t = c / L, s = c % L;
  const int64_t src = (((b * T + t) * S + begin + s) * Hk + hk) * d + col;
  *reinterpret_cast<uint4*>(flat + i) = *reinterpret_cast<const uint4*>(depth + src);
}

// Adds a flat [T * L, d] fp32 gradient into slots [begin, begin + L) of one (b, KV head), or with
// `store` writes it over them.
template <class Out>
__global__ void scatter_add_slots_kernel(const float* flat, Out* depth, int64_t T, int64_t S, int64_t begin, int64_t L,
                                         int64_t Hk, int64_t d, int64_t b, int64_t hk, bool store) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * L * d) return;
  const int64_t c = i / d, col = i % d, t = c / L, s = c % L;
  Out& x = depth[(((b * T + t) * S + begin + s) * Hk + hk) * d + col];
  if constexpr (std::is_same_v<Out, float>)
    x = (store ? 0.f : x) + flat[i];
  else
    x = __float2bfloat16(flat[i]);  // bf16 buffers are only stored into
}

// Rows of an fp32 [rows x d] accumulator as bf16 rows of stride `stride`.
__global__ void store_rows_kernel(const float* acc, bf16_t* dst, int64_t stride, int64_t rows, int64_t d) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * d) return;
  dst[(i / d) * stride + i % d] = __float2bfloat16(acc[i]);
}

// Whether score column j of query token t is visible.
__device__ __forceinline__ bool visible(int64_t j, int64_t t, int64_t T, int64_t depth0, int64_t L) {
  if (j < T) return j <= t;
  const int64_t c = j - depth0;
  return c >= t * L && c < (t + 1) * L;
}

// Block-wide reductions over kThreads threads (fixed order: deterministic).
template <class Op>
__device__ float block_reduce(float v, float* scratch, Op op) {
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) v = op(v, scratch[w]);
  return v;
}

// One CTA per row of the chunk (token t0 + row of head h): masks and scales the scores, writes the
// joint log-sum-exp and the bf16 probabilities.
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const float* scores, bf16_t* probs, float* lse, int64_t ld, int64_t T, int64_t depth0,
                        int64_t L, int64_t t0, float scale) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x, t = t0 + row, cols = depth0 + T * L;
  const float* s = scores + row * ld;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads)
    if (visible(j, t, T, depth0, L)) mx = fmaxf(mx, s[j] * scale);
  mx = block_reduce(mx, scratch, [](float a, float b) { return fmaxf(a, b); });
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads)
    if (visible(j, t, T, depth0, L)) sum += expf(s[j] * scale - mx);
  sum = block_reduce(sum, scratch, [](float a, float b) { return a + b; });
  const float row_lse = mx + logf(sum);
  for (int64_t j = threadIdx.x; j < cols; j += kThreads)
    probs[row * ld + j] = __float2bfloat16(visible(j, t, T, depth0, L) ? expf(s[j] * scale - row_lse) : 0.f);
  if (threadIdx.x == 0) lse[t] = row_lse;
}

// Backward of one chunk row: P from the scores and the forward lse, dS = P (dP - rowsum(dO * O)), both
// as bf16 operands of the gradient GEMMs. o and dout point at the row's vectors.
__global__ void __launch_bounds__(kThreads)
    softmax_grad_rows_kernel(const float* scores, const float* dprobs, bf16_t* probs, bf16_t* dscores, const float* lse,
                             const bf16_t* o, const bf16_t* dout, int64_t row_stride, int64_t ld, int64_t T,
                             int64_t depth0, int64_t L, int64_t d, int64_t t0, float scale) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x, t = t0 + row, cols = depth0 + T * L;
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += kThreads)
    dot += __bfloat162float(o[row * row_stride + c]) * __bfloat162float(dout[row * row_stride + c]);
  const float delta = block_reduce(dot, scratch, [](float a, float b) { return a + b; });
  const float row_lse = lse[t];
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const int64_t i = row * ld + j;
    const bool seen = visible(j, t, T, depth0, L);  // padding columns hold no scores at all
    const float p = seen ? expf(scores[i] * scale - row_lse) : 0.f;
    probs[i] = __float2bfloat16(p);
    dscores[i] = __float2bfloat16(seen ? p * (dprobs[i] - delta) : 0.f);
  }
}

unsigned blocks_for(int64_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  FATHOM_CHECK(err == cudaSuccess, "moda naive: ", what, " failed: ", cudaGetErrorString(err));
}

// Pointers of one (b, KV head, query head h, row chunk [t0, t0 + rows)).
struct Chunk {
  int64_t b, hk, h, t0, rows;
};

// Scores of a chunk's rows against [sequence ; flat depth]: `x` rows (q for S, dO for dP) times the
// KV head's `keys` and the flat depth `flat_keys`, into an fp32 [rows x ld] buffer.
void chunk_scores(cublasHandle_t h, const NaivePlan& n, const Chunk& c, const bf16_t* x, const bf16_t* keys,
                  const bf16_t* flat_keys, float* out) {
  const int64_t x_stride = n.Hq * n.d, kv_stride = n.Hk * n.d;
  const bf16_t* xr = x + ((c.b * n.T + c.t0) * n.Hq + c.h) * n.d;
  const bf16_t* kr = keys + (c.b * n.T * n.Hk + c.hk) * n.d;
  gemm(h, false, true, c.rows, n.T, n.d, 1.f, xr, kBf16, x_stride, kr, kBf16, kv_stride, 0.f, out, kF32, n.ld);
  if (n.L > 0)
    gemm(h, false, true, c.rows, n.T * n.L, n.d, 1.f, xr, kBf16, x_stride, flat_keys, kBf16, n.d, 0.f, out + n.depth0,
         kF32, n.ld);
}

// out[rows x d] (fp32) = alpha (P_seq values + P_depth flat_values) for bf16 row operands `p` of a chunk.
void chunk_times_values(cublasHandle_t h, const NaivePlan& n, const Chunk& c, const bf16_t* p, const bf16_t* values,
                        const bf16_t* flat_values, float alpha, float* out) {
  const bf16_t* vr = values + (c.b * n.T * n.Hk + c.hk) * n.d;
  gemm(h, false, false, c.rows, n.d, n.T, alpha, p, kBf16, n.ld, vr, kBf16, n.Hk * n.d, 0.f, out, kF32, n.d);
  if (n.L > 0)
    gemm(h, false, false, c.rows, n.d, n.T * n.L, alpha, p + n.depth0, kBf16, n.ld, flat_values, kBf16, n.d, 1.f, out,
         kF32, n.d);
}

// Runs body(chunk) for every query head of KV head hk of batch b and every row chunk, in order.
template <class Body>
void for_each_chunk(const NaivePlan& n, int64_t b, int64_t hk, Body&& body) {
  for (int64_t g = 0; g < n.G; ++g)
    for (int64_t t0 = 0; t0 < n.T; t0 += n.rows) body(Chunk{b, hk, hk * n.G + g, t0, std::min(n.rows, n.T - t0)});
}

void gather(const NaivePlan& n, const bf16_t* depth, bf16_t* flat, int64_t b, int64_t hk, cudaStream_t stream) {
  if (n.L == 0) return;
  gather_slots_kernel<<<blocks_for(n.T * n.L * n.d / 8), kThreads, 0, stream>>>(depth, flat, n.T, n.S, n.begin, n.L,
                                                                                n.Hk, n.d, b, hk);
  check_launch("the depth gather");
}

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

size_t naive_forward_workspace_bytes(const ModaShape& shape) { return NaivePlan(shape, false).bytes; }
size_t naive_backward_workspace_bytes(const ModaShape& shape) { return NaivePlan(shape, true).bytes; }

void naive_forward(const ModaParams& p, cudaStream_t stream) {
  const NaivePlan n(p.shape, false);
  const float scale = float(p.shape.seq.scale);
  bf16_t *kd = at<bf16_t>(p.workspace, n.kd), *vd = at<bf16_t>(p.workspace, n.vd);
  float* scores = at<float>(p.workspace, n.scores);
  bf16_t* probs = at<bf16_t>(p.workspace, n.probs);
  float* out = at<float>(p.workspace, n.row_acc);
  std::lock_guard<std::mutex> lock(blas().mutex);
  cublasHandle_t h = blas().get(current_device());
  CUBLAS_CHECK(cublasSetStream(h, stream));
  for (int64_t b = 0; b < n.B; ++b)
    for (int64_t hk = 0; hk < n.Hk; ++hk) {
      gather(n, dev(p.depth_k), kd, b, hk, stream);
      gather(n, dev(p.depth_v), vd, b, hk, stream);
      for_each_chunk(n, b, hk, [&](const Chunk& c) {
        chunk_scores(h, n, c, dev(p.q), dev(p.k), kd, scores);
        softmax_rows_kernel<<<unsigned(c.rows), kThreads, 0, stream>>>(scores, probs, p.lse + (b * n.Hq + c.h) * n.T,
                                                                       n.ld, n.T, n.depth0, n.L, c.t0, scale);
        check_launch("the softmax");
        chunk_times_values(h, n, c, probs, dev(p.v), vd, 1.f, out);
        store_rows_kernel<<<blocks_for(c.rows * n.d), kThreads, 0, stream>>>(
            out, dev(p.o) + ((b * n.T + c.t0) * n.Hq + c.h) * n.d, n.Hq * n.d, c.rows, n.d);
        check_launch("the output store");
      });
    }
}

void naive_backward(const ModaBackwardParams& p, cudaStream_t stream) {
  const NaivePlan n(p.shape, true);
  const float scale = float(p.shape.seq.scale);
  void* w = p.workspace;
  bf16_t *kd = at<bf16_t>(w, n.kd), *vd = at<bf16_t>(w, n.vd);
  float *scores = at<float>(w, n.scores), *dprobs = at<float>(w, n.dprobs), *row_acc = at<float>(w, n.row_acc);
  bf16_t *probs = at<bf16_t>(w, n.probs), *dscores = at<bf16_t>(w, n.dscores);
  float *dk_acc = at<float>(w, n.dk_acc), *dv_acc = at<float>(w, n.dv_acc);
  float *ddk = at<float>(w, n.ddk), *ddv = at<float>(w, n.ddv);
  const int64_t q_stride = n.Hq * n.d, kv_stride = n.Hk * n.d;
  std::lock_guard<std::mutex> lock(blas().mutex);
  cublasHandle_t h = blas().get(current_device());
  CUBLAS_CHECK(cublasSetStream(h, stream));
  for (int64_t b = 0; b < n.B; ++b)
    for (int64_t hk = 0; hk < n.Hk; ++hk) {
      gather(n, dev(p.depth_k), kd, b, hk, stream);
      gather(n, dev(p.depth_v), vd, b, hk, stream);
      CUDA_CHECK(cudaMemsetAsync(dk_acc, 0, size_t(n.T * n.d) * 4, stream));
      CUDA_CHECK(cudaMemsetAsync(dv_acc, 0, size_t(n.T * n.d) * 4, stream));
      if (n.L > 0) {
        CUDA_CHECK(cudaMemsetAsync(ddk, 0, size_t(n.T * n.L * n.d) * 4, stream));
        CUDA_CHECK(cudaMemsetAsync(ddv, 0, size_t(n.T * n.L * n.d) * 4, stream));
      }
      for_each_chunk(n, b, hk, [&](const Chunk& c) {
        const int64_t row0 = ((b * n.T + c.t0) * n.Hq + c.h) * n.d;
        const bf16_t *qr = dev(p.q) + row0, *dor = dev(p.grad_o) + row0;
        chunk_scores(h, n, c, dev(p.q), dev(p.k), kd, scores);
        chunk_scores(h, n, c, dev(p.grad_o), dev(p.v), vd, dprobs);
        softmax_grad_rows_kernel<<<unsigned(c.rows), kThreads, 0, stream>>>(
            scores, dprobs, probs, dscores, p.lse + (b * n.Hq + c.h) * n.T, dev(p.o) + row0, dor, q_stride, n.ld, n.T,
            n.depth0, n.L, n.d, c.t0, scale);
        check_launch("the softmax gradient");
        // dQ = scale dS [K ; flat depth K].
        chunk_times_values(h, n, c, dscores, dev(p.k), kd, scale, row_acc);
        store_rows_kernel<<<blocks_for(c.rows * n.d), kThreads, 0, stream>>>(row_acc, dev(p.dq) + row0, q_stride,
                                                                             c.rows, n.d);
        check_launch("the dQ store");
        // dK += scale dS^T Q, dV += P^T dO over the sequence columns; likewise the flat depth columns.
        gemm(h, true, false, n.T, n.d, c.rows, scale, dscores, kBf16, n.ld, qr, kBf16, q_stride, 1.f, dk_acc, kF32,
             n.d);
        gemm(h, true, false, n.T, n.d, c.rows, 1.f, probs, kBf16, n.ld, dor, kBf16, q_stride, 1.f, dv_acc, kF32, n.d);
        if (n.L > 0) {
          gemm(h, true, false, n.T * n.L, n.d, c.rows, scale, dscores + n.depth0, kBf16, n.ld, qr, kBf16, q_stride, 1.f,
               ddk, kF32, n.d);
          gemm(h, true, false, n.T * n.L, n.d, c.rows, 1.f, probs + n.depth0, kBf16, n.ld, dor, kBf16, q_stride, 1.f,
               ddv, kF32, n.d);
        }
      });
      const int64_t kv0 = (b * n.T * n.Hk + hk) * n.d;
      store_rows_kernel<<<blocks_for(n.T * n.d), kThreads, 0, stream>>>(dk_acc, dev(p.dk) + kv0, kv_stride, n.T, n.d);
      store_rows_kernel<<<blocks_for(n.T * n.d), kThreads, 0, stream>>>(dv_acc, dev(p.dv) + kv0, kv_stride, n.T, n.d);
      check_launch("the dK/dV store");
      if (n.L > 0) {
        const int64_t flat = n.T * n.L * n.d;
        auto scatter = [&](const float* from, auto* to) {
          scatter_add_slots_kernel<<<blocks_for(flat), kThreads, 0, stream>>>(from, to, n.T, n.S, n.begin, n.L, n.Hk,
                                                                              n.d, b, hk, p.store_depth_grads);
        };
        if (p.d_depth_k_bf16 != nullptr) {
          scatter(ddk, dev(p.d_depth_k_bf16));
          scatter(ddv, dev(p.d_depth_v_bf16));
        } else {
          scatter(ddk, p.d_depth_k);
          scatter(ddv, p.d_depth_v);
        }
        check_launch("the depth gradient scatter");
      }
    }
}

}  // namespace fathom::cuda::moda
