// The fp32 attention kernels (attention_fp32.h): plain CUDA cores, every product and sum in fp32, no
// atomics. Tiles are kTile query rows by kTile keys; within a block each row (query row, or key row in
// the dK/dV kernel) belongs to kThreadsPerRow threads, which own its columns c = part + kThreadsPerRow * i.
// Shared tiles are [kTile][d + 1] floats: the odd row stride spreads a column over distinct banks.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace fathom::cuda::fp32_attention {

constexpr int kTile = 16;
constexpr int kThreadsPerRow = 8;
constexpr int kThreads = kTile * kThreadsPerRow;
constexpr int kMaxHeadDim = 256;

// Element offsets of a head's rows in a key or value buffer: row j of KV head h in batch b starts at
// b * batch + h * head + j * position ([B, T, Hk, d] for training, [B, Hk, capacity, d] for a KV cache).
struct KeyLayout {
  int64_t batch = 0, head = 0, position = 0;
};

// Query rows, outputs, lse and delta are [B, Tq, Hq, d] and [B, Hq, Tq]. Query row t sits at position
// keys - Tq + t and attends to keys 0 .. that position.
struct ForwardArgs {
  const float* q;
  const float* k;
  const float* v;
  float* o;
  float* lse;  // may be null (decoding needs none)
  KeyLayout kv;
  int Tq, Hq, G, d;
  int keys;             // keys to attend over, when `past` is null
  const int32_t* past;  // when set: keys = min(past_b + Tq, key_capacity), read on the device
  int key_capacity;     // key rows the buffers hold
  float scale;
  int past_rows = 1;  // past's entries: 1 (past_b = past[0] for every b) or B (past_b = past[b])
};

struct BackwardArgs {
  const float* q;
  const float* k;
  const float* v;
  const float* o;
  const float* grad_o;
  const float* lse;
  float* delta;  // [B, Hq, T] scratch: rowsum(dO * O)
  float* dq;
  float* dk;
  float* dv;
  int T, Hq, Hk, G, d;
  float scale;
};

// Floats of shared memory per kernel: the tiles plus the kTile x kTile score tiles.
__host__ __device__ inline int row_stride(int d) { return d + 1; }
inline size_t forward_smem_bytes(int d) { return size_t(3 * kTile * row_stride(d) + kTile * kTile) * sizeof(float); }
inline size_t backward_smem_bytes(int d) {
  return size_t(4 * kTile * row_stride(d) + 2 * kTile * kTile) * sizeof(float);
}

// Rows [row0, row0 + kTile) of the rows starting at `src` (`stride` elements apart) into `tile`;
// rows at or past `rows` become zeros.
__device__ inline void load_tile(float* tile, const float* src, int64_t stride, int row0, int rows, int d) {
  const int P = row_stride(d);
  for (int e = threadIdx.x; e < kTile * d; e += kThreads) {
    const int r = e / d, c = e % d, row = row0 + r;
    tile[r * P + c] = row < rows ? src[int64_t(row) * stride + c] : 0.0f;
  }
}

__device__ inline float dot(const float* a, const float* b, int d) {
  float sum = 0;
  for (int c = 0; c < d; ++c) sum = fmaf(a[c], b[c], sum);
  return sum;
}

// acc[i] (column part + kThreadsPerRow * i, for columns below d) += w * row[column].
template <int kColumns>
__device__ inline void add_scaled_row(float (&acc)[kColumns], float w, const float* row, int part, int d) {
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    const int c = part + kThreadsPerRow * i;
    if (c < d) acc[i] = fmaf(w, row[c], acc[i]);
  }
}

// Writes factor * acc to the row at `dst` (its column 0).
template <int kColumns>
__device__ inline void store_row(float* dst, const float (&acc)[kColumns], float factor, int part, int d) {
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    const int c = part + kThreadsPerRow * i;
    if (c < d) dst[c] = factor * acc[i];
  }
}

// One block per (query tile, query head, batch): an online softmax over key tiles. Every thread of a
// row keeps the row's running max m and denominator l (the same values: each reads the whole score row).
template <int kColumns>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs a) {
  extern __shared__ float smem[];
  const int d = a.d, P = row_stride(d);
  float* qs = smem;
  float* ks = qs + kTile * P;
  float* vs = ks + kTile * P;
  float* scores = vs + kTile * P;  // [kTile][kTile]
  const int h = blockIdx.y, b = blockIdx.z, row0 = blockIdx.x * kTile;
  const int r = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int keys = a.past ? max(a.Tq, min(a.past[a.past_rows > 1 ? b : 0] + a.Tq, a.key_capacity)) : a.keys;
  const int t = row0 + r, position = keys - a.Tq + t;
  const bool row_valid = t < a.Tq;

  const int64_t q_stride = int64_t(a.Hq) * d;
  const int64_t q_offset = (int64_t(b) * a.Tq * a.Hq + h) * d;  // of row 0; q and o alike
  const int64_t kv_offset = int64_t(b) * a.kv.batch + int64_t(h / a.G) * a.kv.head;
  load_tile(qs, a.q + q_offset, q_stride, row0, a.Tq, d);

  float m = -INFINITY, l = 0, acc[kColumns] = {};
  const int key_end = keys - a.Tq + min(row0 + kTile, a.Tq);  // one past the block's last query position
  for (int j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile(ks, a.k + kv_offset, a.kv.position, j0, key_end, d);
    load_tile(vs, a.v + kv_offset, a.kv.position, j0, key_end, d);
    __syncthreads();
    for (int jj = part; jj < kTile; jj += kThreadsPerRow)
      scores[r * kTile + jj] = a.scale * dot(qs + r * P, ks + jj * P, d);
    __syncthreads();
    const int visible = min(kTile, position - j0 + 1);  // keys j0 + jj <= position
    if (!row_valid || visible <= 0) continue;
    float tile_max = -INFINITY;
    for (int jj = 0; jj < visible; ++jj) tile_max = fmaxf(tile_max, scores[r * kTile + jj]);
    const float m_new = fmaxf(m, tile_max);
    const float rescale = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l *= rescale;
#pragma unroll
    for (int i = 0; i < kColumns; ++i) acc[i] *= rescale;
    for (int jj = 0; jj < visible; ++jj) {
      const float p = expf(scores[r * kTile + jj] - m_new);
      l += p;
      add_scaled_row(acc, p, vs + jj * P, part, d);
    }
    m = m_new;
  }
  if (!row_valid) return;
  store_row(a.o + q_offset + int64_t(t) * q_stride, acc, 1.0f / l, part, d);
  if (a.lse && part == 0) a.lse[(int64_t(b) * a.Hq + h) * a.Tq + t] = m + logf(l);
}

// delta[b, h, t] = sum_c dO[b, t, h, c] O[b, t, h, c]: one warp per row.
__global__ void __launch_bounds__(kThreads) delta_kernel(BackwardArgs a, int64_t rows) {
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;  // over [B, T, Hq]
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float sum = 0;
  for (int c = lane; c < a.d; c += 32) sum = fmaf(a.grad_o[row * a.d + c], a.o[row * a.d + c], sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane != 0) return;
  const int64_t h = row % a.Hq, t = (row / a.Hq) % a.T, b = row / (int64_t(a.Hq) * a.T);
  a.delta[(b * a.Hq + h) * a.T + t] = sum;
}

// The score gradient of query row i and key j: P = exp(scale q.k - lse), dS = P (dO.v - delta).
struct ScoreGrad {
  float p, ds;
};
__device__ inline ScoreGrad score_grad(const float* q, const float* k, const float* grad_o, const float* v, float lse,
                                       float delta, float scale, int d) {
  const float p = expf(scale * dot(q, k, d) - lse);
  return {p, p * (dot(grad_o, v, d) - delta)};
}

// dQ: one block per (query tile, query head, batch); dq_i = scale sum_{j <= i} dS_ij k_j.
template <int kColumns>
__global__ void __launch_bounds__(kThreads) query_grad_kernel(BackwardArgs a) {
  extern __shared__ float smem[];
  const int d = a.d, P = row_stride(d);
  float* qs = smem;
  float* dos = qs + kTile * P;
  float* ks = dos + kTile * P;
  float* vs = ks + kTile * P;
  float* dscores = vs + kTile * P;  // [kTile][kTile]
  const int h = blockIdx.y, b = blockIdx.z, row0 = blockIdx.x * kTile;
  const int r = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;
  const int t = row0 + r;
  const bool row_valid = t < a.T;

  const int64_t q_stride = int64_t(a.Hq) * d, kv_stride = int64_t(a.Hk) * d;
  const int64_t q_offset = (int64_t(b) * a.T * a.Hq + h) * d;
  const int64_t kv_offset = (int64_t(b) * a.T * a.Hk + h / a.G) * d;
  const int64_t stat = (int64_t(b) * a.Hq + h) * a.T + t;
  const float lse = row_valid ? a.lse[stat] : 0.0f, delta = row_valid ? a.delta[stat] : 0.0f;
  load_tile(qs, a.q + q_offset, q_stride, row0, a.T, d);
  load_tile(dos, a.grad_o + q_offset, q_stride, row0, a.T, d);

  float acc[kColumns] = {};
  const int key_end = min(row0 + kTile, a.T);
  for (int j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    load_tile(ks, a.k + kv_offset, kv_stride, j0, key_end, d);
    load_tile(vs, a.v + kv_offset, kv_stride, j0, key_end, d);
    __syncthreads();
    for (int jj = part; jj < kTile; jj += kThreadsPerRow) {
      const bool visible = row_valid && j0 + jj <= t;
      dscores[r * kTile + jj] =
          visible ? score_grad(qs + r * P, ks + jj * P, dos + r * P, vs + jj * P, lse, delta, a.scale, d).ds : 0.0f;
    }
    __syncthreads();
    for (int jj = 0; jj < kTile; ++jj) add_scaled_row(acc, dscores[r * kTile + jj], ks + jj * P, part, d);
  }
  if (row_valid) store_row(a.dq + q_offset + int64_t(t) * q_stride, acc, a.scale, part, d);
}

// dK and dV: one block per (key tile, KV head, batch), summing over the G query heads of the KV head
// and the query rows i >= j: dk_j = scale sum dS_ij q_i, dv_j = sum P_ij dO_i. Here row r of a thread
// is a query row while the scores are formed and a key row while they are summed.
template <int kColumns>
__global__ void __launch_bounds__(kThreads) key_value_grad_kernel(BackwardArgs a) {
  extern __shared__ float smem[];
  const int d = a.d, P = row_stride(d);
  float* ks = smem;
  float* vs = ks + kTile * P;
  float* qs = vs + kTile * P;
  float* dos = qs + kTile * P;
  float* probs = dos + kTile * P;  // [query kTile][key kTile]
  float* dscores = probs + kTile * kTile;
  const int hk = blockIdx.y, b = blockIdx.z, key0 = blockIdx.x * kTile;
  const int r = threadIdx.x / kThreadsPerRow, part = threadIdx.x % kThreadsPerRow;

  const int64_t q_stride = int64_t(a.Hq) * d, kv_stride = int64_t(a.Hk) * d;
  const int64_t kv_offset = (int64_t(b) * a.T * a.Hk + hk) * d;
  load_tile(ks, a.k + kv_offset, kv_stride, key0, a.T, d);
  load_tile(vs, a.v + kv_offset, kv_stride, key0, a.T, d);

  float dk[kColumns] = {}, dv[kColumns] = {};
  for (int g = 0; g < a.G; ++g) {
    const int h = hk * a.G + g;
    const int64_t q_offset = (int64_t(b) * a.T * a.Hq + h) * d;
    for (int row0 = key0; row0 < a.T; row0 += kTile) {  // query tiles at or after the key tile
      const int i = row0 + r;
      const int64_t stat = (int64_t(b) * a.Hq + h) * a.T + i;
      const float lse = i < a.T ? a.lse[stat] : 0.0f, delta = i < a.T ? a.delta[stat] : 0.0f;
      __syncthreads();
      load_tile(qs, a.q + q_offset, q_stride, row0, a.T, d);
      load_tile(dos, a.grad_o + q_offset, q_stride, row0, a.T, d);
      __syncthreads();
      for (int jj = part; jj < kTile; jj += kThreadsPerRow) {
        ScoreGrad s{0.0f, 0.0f};
        if (i < a.T && key0 + jj <= i)
          s = score_grad(qs + r * P, ks + jj * P, dos + r * P, vs + jj * P, lse, delta, a.scale, d);
        probs[r * kTile + jj] = s.p;
        dscores[r * kTile + jj] = s.ds;
      }
      __syncthreads();
      for (int ii = 0; ii < kTile; ++ii) {  // r is now the key row
        add_scaled_row(dv, probs[ii * kTile + r], dos + ii * P, part, d);
        add_scaled_row(dk, dscores[ii * kTile + r], qs + ii * P, part, d);
      }
    }
  }
  const int j = key0 + r;
  if (j >= a.T) return;
  store_row(a.dk + kv_offset + int64_t(j) * kv_stride, dk, a.scale, part, d);
  store_row(a.dv + kv_offset + int64_t(j) * kv_stride, dv, 1.0f, part, d);
}

}  // namespace fathom::cuda::fp32_attention
