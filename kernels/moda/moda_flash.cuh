// The flash-style MoDA kernels (flat, chunk, group) on top of fathom's flash attention: the same
// tiles, MMA fragments, online-softmax state and block walks (attention_forward.cuh,
// attention_backward.cuh), with a second KV source, the depth slots, walked after the causal sequence.
//
// A CTA owns the rows of `tokens` consecutive tokens times `fold` query heads, grouped in units of
// `unit` rows that hold `per_unit` whole tokens (RowMap):
//   flat, chunk: fold = 1 (one head, BQ tokens per tile, row r -> token t0 + r);
//   group:       fold = G (the G query heads of one KV head, so every K/V tile load serves all G
//                heads). A unit is one 16-row MMA m-tile holding 16 / G whole tokens (G <= 16; G = 3
//                leaves one padding row per m-tile), or, for G > 16, one token padded to a multiple
//                of 16 rows. A token's rows therefore never straddle two m-tiles (G <= 16).
// Depth columns: column c of the tile's (b, KV head) is slot begin + c % L of token c / L. A row sees
// column c iff c / L is its token. flat walks all T * L of them per tile (the paper's
// "flash-compatible" layout: dense utilisation 1 / T); chunk walks the tile's own tokens' columns
// [t0 * L, t_end * L) as CTA-wide blocks. group goes one step further: after the shared sequence walk
// each warp walks, for each of its m-tiles, only that m-tile's tokens' columns, in 16-column chunks
// staged in the warp's own slice of shared memory (dense utilisation G / 16 instead of G / BQ).
//
// Backward: the sequence dK/dV pass of flash attention runs unchanged (it needs only the joint lse);
// the dQ kernel here walks sequence then depth columns. For group (G <= 16) it also computes the
// depth dK/dV of each chunk: the m-tile holds every row that sees those columns, so P^T and dS^T
// come from the chunk's own registers (movmatrix) and dVd = P^T dO, dKd = dS^T Q are added into the
// depth gradients by one thread per element, no atomics. flat, chunk and group with G > 16 get
// theirs from a kernel that recomputes each token's P and dS against its slots on tensor cores and
// sums the G heads in registers in a fixed order (moda_depth_grads_kernel).
#pragma once
#include <type_traits>

#include "kernels/attention/attention_backward.cuh"

namespace fathom::cuda::moda {

using flash::bf16_t;

// n / d and n % d for 0 <= n < 2^31 by a multiply-high, an add and a shift (Granlund and
// Montgomery's division by an invariant integer): every depth column and folded row divides by L,
// unit or fold, and a hardware integer division costs some twenty instructions.
struct FastDiv {
  uint32_t mul, shift;
  int d;
  __device__ __forceinline__ int div(int n) const { return int((__umulhi(uint32_t(n), mul) + uint32_t(n)) >> shift); }
  __device__ __forceinline__ int mod(int n) const { return n - div(n) * d; }
};
inline FastDiv make_fast_div(int d) {  // d >= 1
  uint32_t s = 0;
  while ((uint64_t(1) << s) < uint64_t(d)) ++s;
  const uint64_t mul = (uint64_t(1) << 32) * ((uint64_t(1) << s) - uint64_t(d)) / uint64_t(d) + 1;
  return {uint32_t(mul), s, d};
}

struct ModaArgs {
  const bf16_t* q;  // [B, T, Hq, d]
  const bf16_t* k;  // [B, T, Hk, d]
  const bf16_t* v;
  const bf16_t* kd;  // [B, T, S, Hk, d]
  const bf16_t* vd;
  bf16_t* o;
  float* lse;  // [B, Hq, T]
  // Backward only.
  const bf16_t* dout;
  bf16_t* dq;
  const float* lse2;   // [B, Hq, Tpad]: lse * log2(e), from flash's prepare kernel
  const float* delta;  // [B, Hq, Tpad]: rowsum(dO * O)
  float* ddk;          // [B, T, S, Hk, d], added into for slots [begin, begin + L)
  float* ddv;
  bool store_depth;  // ddk, ddv are written over, not added into
  bf16_t* ddk_bf16;  // set instead of ddk, ddv: bf16 buffers written over
  bf16_t* ddv_bf16;
  float* wp;  // or the depth weights [B, T, Hq, L]: p and scale * dS of each row and slot
  float* wds;
  // The sequence columns' dQ sums (unscaled, [B, Hq, Tpad, D]) where flash's dK/dV pass formed them
  // (group on wgmma); the dQ kernel then walks only the depth columns. Null: it walks both.
  const float* dq_seq;
  int B, T, Tpad, Hq, Hk, G, d, S, begin, L;
  int fold;                        // query heads folded into a tile's rows
  int unit;                        // rows per unit of whole tokens (a multiple of 16)
  int per_unit;                    // tokens per unit
  int tokens;                      // tokens per tile
  FastDiv by_L, by_fold, by_unit;  // L = 0 divides by 1 (no column is ever divided then)
  bool all_depth;                  // flat: every tile walks all T * L depth columns
  float scale, scale_log2;
};

// Row r of a tile -> token t0 + (r / unit) * per_unit + (r % unit) / fold, head (r % unit) % fold.
struct RowMap {
  int t0, per_unit;
  FastDiv unit, fold;
  __device__ __forceinline__ int token(int r) const { return t0 + unit.div(r) * per_unit + fold.div(unit.mod(r)); }
  __device__ __forceinline__ int head_in_fold(int r) const { return fold.mod(unit.mod(r)); }
  __device__ __forceinline__ bool in_unit(int r) const { return unit.mod(r) < per_unit * fold.d; }
};

// The rows a CTA owns (see the file comment). Padding rows (past a unit's tokens or the sequence)
// load zero Q and dO.
struct TileRows {
  int b, hk, hbase, t0, t_end;
  RowMap map;
  __device__ __forceinline__ int token(int r) const { return map.token(r); }
  __device__ __forceinline__ int head(int r) const { return hbase + map.head_in_fold(r); }
  __device__ __forceinline__ bool valid(int r) const { return map.in_unit(r) && map.token(r) < t_end; }
};

// Heaviest (last) tiles first, so the short ones fill the tail of the grid.
__device__ __forceinline__ TileRows tile_rows(const ModaArgs& a) {
  const int groups = a.Hq / a.fold;
  TileRows tr;
  tr.b = int(blockIdx.y) / groups;
  tr.hbase = int(blockIdx.y) % groups * a.fold;
  tr.hk = tr.hbase / a.G;
  tr.t0 = int(gridDim.x - 1 - blockIdx.x) * a.tokens;
  tr.t_end = min(tr.t0 + a.tokens, a.T);
  tr.map = RowMap{tr.t0, a.per_unit, a.by_unit, a.by_fold};
  return tr;
}

// Element offset of row r's vector in a [B, T, Hq, d] tensor.
__device__ __forceinline__ int64_t row_offset(const ModaArgs& a, const TileRows& tr, int r) {
  return ((int64_t(tr.b) * a.T + tr.token(r)) * a.Hq + tr.head(r)) * a.d;
}

// Index of row r in the [B, Hq, T] (or [B, Hq, Tpad] with stride Tpad) statistics.
__device__ __forceinline__ int64_t stat_index(const TileRows& tr, int Hq, int stride, int r) {
  return (int64_t(tr.b) * Hq + tr.head(r)) * stride + tr.token(r);
}

// Loads rows [0, BQ) of the tile from a [B, T, Hq, d] tensor (padding rows zero-filled) into a tile
// of layout Tile.
template <class Cfg, class Tile = flash::SwizzledTile<Cfg::D>>
__device__ __forceinline__ void load_query_rows(uint32_t tile, const bf16_t* x, const ModaArgs& a, const TileRows& tr,
                                                int tid) {
  flash::load_rows_async<Cfg::D, Cfg::BQ, Cfg::THREADS, Tile>(
      tile, [&](int r) -> const bf16_t* { return tr.valid(r) ? x + row_offset(a, tr, r) : nullptr; }, x, a.d, tid);
}

// Key j is visible to row r iff j <= token(r).
struct FoldedCausalMask {
  RowMap map;
  __device__ __forceinline__ bool visible(int row, int key) const { return key <= map.token(row); }
};

// Depth column c is visible to row r iff it is one of token(r)'s columns and the walk reaches it.
struct SameTokenMask {
  RowMap map;
  int L, c_end;
  __device__ __forceinline__ bool visible(int row, int c) const {
    const int lo = map.token(row) * L;
    return c >= lo && c < lo + L && c < c_end;
  }
};

// The causal sequence for tokens [t0, t_end): key blocks up to the one holding key t_end - 1; blocks
// whose keys all precede t0 are fully visible and skip the mask.
template <class Cfg>
struct FoldedSequenceKv {
  const bf16_t* k;
  const bf16_t* v;
  int64_t stride;
  int T, d, t0, t_end;
  RowMap map;

  __device__ __forceinline__ int num_blocks() const { return (t_end + Cfg::BK - 1) / Cfg::BK; }
  __device__ __forceinline__ int key0(int n) const { return n * Cfg::BK; }
  __device__ __forceinline__ bool masked(int n) const { return n >= (t0 + 1) / Cfg::BK; }
  __device__ __forceinline__ FoldedCausalMask mask() const { return {map}; }
  __device__ __forceinline__ void load(int n, uint32_t sK, uint32_t sV, int tid) const {
    flash::load_tile_async<Cfg::D, Cfg::BK, Cfg::THREADS>(sK, k, stride, n * Cfg::BK, T, d, tid);
    flash::load_tile_async<Cfg::D, Cfg::BK, Cfg::THREADS>(sV, v, stride, n * Cfg::BK, T, d, tid);
  }
};

template <class Cfg>
__device__ __forceinline__ FoldedSequenceKv<Cfg> sequence_source(const ModaArgs& a, const TileRows& tr) {
  const int64_t off = (int64_t(tr.b) * a.T * a.Hk + tr.hk) * a.d;
  return {a.k + off, a.v + off, int64_t(a.Hk) * a.d, a.T, a.d, tr.t0, tr.t_end, tr.map};
}

// Depth columns [c0, c_end) of one (batch, KV head), in blocks of BK from c0; every block is masked.
template <class Cfg>
struct DepthKv {
  const bf16_t* kd;  // at (b, token 0, slot `begin`, hk)
  const bf16_t* vd;
  int64_t token_stride, slot_stride;
  FastDiv L;
  int d, c0, c_end;
  SameTokenMask m;

  __device__ __forceinline__ int num_blocks() const { return (c_end - c0 + Cfg::BK - 1) / Cfg::BK; }
  __device__ __forceinline__ int key0(int n) const { return c0 + n * Cfg::BK; }
  __device__ __forceinline__ bool masked(int) const { return true; }
  __device__ __forceinline__ SameTokenMask mask() const { return m; }
  __device__ __forceinline__ int64_t column_offset(int c) const {
    const int token = L.div(c);
    return int64_t(token) * token_stride + int64_t(c - token * L.d) * slot_stride;
  }
  __device__ __forceinline__ void load(int n, uint32_t sK, uint32_t sV, int tid) const {
    load_columns<Cfg::BK, Cfg::THREADS>(key0(n), c_end, sK, sV, tid);
  }
  // Copies columns [first, first + ROWS) into swizzled K and V tiles; columns at or past `end` are zeros.
  template <int ROWS, int THREADS>
  __device__ __forceinline__ void load_columns(int first, int end, uint32_t sK, uint32_t sV, int tid) const {
    flash::load_rows_async<Cfg::D, ROWS, THREADS>(
        sK, [&](int r) -> const bf16_t* { return first + r < end ? kd + column_offset(first + r) : nullptr; }, kd, d,
        tid);
    flash::load_rows_async<Cfg::D, ROWS, THREADS>(
        sV, [&](int r) -> const bf16_t* { return first + r < end ? vd + column_offset(first + r) : nullptr; }, vd, d,
        tid);
  }
};

template <class Cfg>
__device__ __forceinline__ DepthKv<Cfg> depth_source(const ModaArgs& a, const TileRows& tr) {
  const int64_t slot_stride = int64_t(a.Hk) * a.d, token_stride = int64_t(a.S) * slot_stride;
  const int64_t off = int64_t(tr.b) * a.T * token_stride + int64_t(a.begin) * slot_stride + int64_t(tr.hk) * a.d;
  const int c0 = a.all_depth ? 0 : tr.t0 * a.L, c_end = a.all_depth ? a.T * a.L : tr.t_end * a.L;
  return {a.kd + off, a.vd + off, token_stride, slot_stride, a.by_L, a.d, c0, c_end, SameTokenMask{tr.map, a.L, c_end}};
}

// ---------------------------------------------------------------------------------------------
// group's per-warp depth walk (see the file comment): one m-tile against chunks of depth columns.

// A warp's chunk stages: K and V of kColumns columns each. D = 64: chunks of 32 columns in two
// stages (the next chunk loads while one is used), one stage where the configuration runs two CTAs
// per SM (their shared memory would not hold two); D = 128 (eight warps): 16 columns, one stage.
template <class Cfg>
struct WarpChunks {
  static constexpr int kColumns = Cfg::D <= 64 ? 32 : 16;
  static constexpr int kTile = kColumns * Cfg::D * 2, kStage = 2 * kTile;
  static constexpr int kStages = Cfg::D <= 64 && Cfg::MIN_BLOCKS < 2 ? 2 : 1;
  static constexpr int kWarpBytes = kStages * kStage, kBytes = Cfg::WARPS * kWarpBytes;
};

// The shape the flash block functions (attend_block, dq_block_scores, ...) run at in the walk.
template <class Cfg>
struct ChunkShape {
  static constexpr int D = Cfg::D, MT = 1, BK = WarpChunks<Cfg>::kColumns;
};

// Shared memory after the Q (and dO) tiles: the sequence walk's KV stages, reused by the depth walk.
template <class Cfg, bool WARP_DEPTH>
constexpr int kv_region_bytes() {
  return WARP_DEPTH && WarpChunks<Cfg>::kBytes > 2 * Cfg::kStageBytes ? WarpChunks<Cfg>::kBytes : 2 * Cfg::kStageBytes;
}

// The depth columns [lo, hi) of the tokens of the m-tile starting at tile row r0.
struct ColumnRange {
  int lo, hi;
};
__device__ __forceinline__ ColumnRange mtile_columns(const TileRows& tr, int r0, int L) {
  const int first = tr.token(r0), end = min(first + tr.map.per_unit, tr.t_end);
  return first < end ? ColumnRange{first * L, end * L} : ColumnRange{0, 0};
}

// SameTokenMask for one m-tile, with the first column of each of the thread's two rows (r0 + g and
// r0 + g + 8) worked out once: the walk calls it for every element of every chunk.
struct MtileMask {
  int row_g, L, hi;
  int lo0, lo8;
  __device__ __forceinline__ bool visible(int row, int c) const {
    const int lo = row - row_g >= 8 ? lo8 : lo0;
    return c >= lo && c < lo + L && c < hi;
  }
};
__device__ __forceinline__ MtileMask mtile_mask(const TileRows& tr, int r0, int L, int hi, int lane) {
  const int row_g = r0 + (lane >> 2);
  return {row_g, L, hi, tr.token(row_g) * L, tr.token(row_g + 8) * L};
}

// Walks the chunks of `cols` through the warp's stages at `slice`: body(c, sK, sV) runs with columns
// [c, c + kColumns) resident (zeros past cols.hi). The caller's previous walk, if any, has fully landed.
template <class Cfg, class Body>
__device__ __forceinline__ void for_each_chunk(const DepthKv<Cfg>& depth, ColumnRange cols, uint32_t slice, int lane,
                                               Body&& body) {
  using W = WarpChunks<Cfg>;
  constexpr int C = W::kColumns;
  auto load = [&](int c, int stage) {
    const uint32_t sK = slice + uint32_t(stage * W::kStage);
    depth.template load_columns<C, 32>(c, cols.hi, sK, sK + W::kTile, lane);
    flash::cp_async_commit();
  };
  if (cols.lo >= cols.hi) return;
  load(cols.lo, 0);
  int stage = 0;
  for (int c = cols.lo; c < cols.hi; c += C) {
    const bool more = c + C < cols.hi;
    if constexpr (W::kStages == 2) {
      if (more) {
        load(c + C, stage ^ 1);  // that stage's last reader passed the __syncwarp below
        flash::cp_async_wait<1>();
      } else {
        flash::cp_async_wait<0>();
      }
    } else {
      flash::cp_async_wait<0>();
    }
    __syncwarp();  // every lane's copies of this chunk are visible
    const uint32_t sK = slice + uint32_t(stage * W::kStage);
    body(c, sK, sK + W::kTile);
    __syncwarp();  // the stage is free again
    if constexpr (W::kStages == 2) {
      stage ^= 1;
    } else if (more) {
      load(c + C, 0);
    }
  }
}

// movmatrix: the transpose of an 8 x 8 bf16 fragment (lane 4g + t holds row g, columns 2t, 2t + 1).
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// What a dQ kernel does with the depth dK/dV of its chunks: nothing (another kernel forms them), add
// or store them into the fp32 buffers (ModaArgs::store_depth), store them into the bf16 ones, or
// store each row's weights (p, scale * dS) per slot instead.
enum class DepthGrads { none, f32, bf16, weights };

// The depth-gradient buffers that DG writes.
template <class T>
struct DepthGradBuffers {
  T* k;
  T* v;
};
template <DepthGrads DG>
__device__ __forceinline__ auto depth_grad_buffers(const ModaArgs& a) {
  if constexpr (DG == DepthGrads::bf16)
    return DepthGradBuffers<bf16_t>{a.ddk_bf16, a.ddv_bf16};
  else
    return DepthGradBuffers<float>{a.ddk, a.ddv};
}

// Address of column c's gradient vector in a depth gradient [B, T, S, Hk, d].
template <class T>
__device__ __forceinline__ T* depth_grad_row(T* dst, const ModaArgs& a, const TileRows& tr, int c) {
  const int token = a.by_L.div(c), slot = c - token * a.L;
  return dst + (((int64_t(tr.b) * a.T + token) * a.S + a.begin + slot) * a.Hk + tr.hk) * a.d;
}

// Writes two adjacent depth-gradient elements.
__device__ __forceinline__ void store_pair(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store_pair(bf16_t* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

// Starts pulling the depth gradients of columns [c0, c0 + C) below `hi` into L2, so that their
// read-add-write at the end of the chunk waits on L2 rather than HBM.
template <int D, int C>
__device__ __forceinline__ void prefetch_depth_grads(const ModaArgs& a, const TileRows& tr, int c0, int hi, int lane) {
  constexpr int kLines = D * 4 / 128;  // 128-byte lines per column vector
#pragma unroll
  for (int i = lane; i < 2 * C * kLines; i += 32) {
    const int c = c0 + i / kLines % C;
    if (c >= hi) continue;
    const float* row = depth_grad_row(i / kLines < C ? a.ddk : a.ddv, a, tr, c);
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + i % kLines * 32));
  }
}

// dst[column c] += factor * (X^T Y)[c] (= with a.store_depth, and always into bf16) for the chunk's columns [c0, c0 +
// C) below `hi`: X holds one m-tile's P or dS against the chunk (fp32 C fragments, 16 rows x C columns), Y is dO or Q,
// whose m-tile rows (from r0) are in the tile sY of layout YTile. dst is a depth gradient [B, T, S, Hk, d].
// Each element has one owner (this thread), so the reads and writes need no atomics; they are issued
// in batches of four 16-column products, all reads before any write, so one batch costs one memory
// round trip instead of one per element pair.
template <int D, int C, class YTile = flash::SwizzledTile<D>, class Out>
__device__ __forceinline__ void add_chunk_depth_grads(Out* dst, const ModaArgs& a, const TileRows& tr,
                                                      const float (&x)[1][C / 8][4], uint32_t sY, int r0, int c0,
                                                      int hi, float factor, int lane) {
  constexpr int kBatch = 4;  // 16-column products of Y per batch
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int cb = 0; cb < C / 16; ++cb) {
    // X^T as an A fragment: its 8 x 8 block (m, k) is block (k, m) of X's columns cb*16.., transposed.
    const uint32_t xt[4] = {transpose_8x8(flash::pack_bf16(x[0][2 * cb][0], x[0][2 * cb][1])),
                            transpose_8x8(flash::pack_bf16(x[0][2 * cb + 1][0], x[0][2 * cb + 1][1])),
                            transpose_8x8(flash::pack_bf16(x[0][2 * cb][2], x[0][2 * cb][3])),
                            transpose_8x8(flash::pack_bf16(x[0][2 * cb + 1][2], x[0][2 * cb + 1][3]))};
    Out* rows[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = c0 + cb * 16 + g + 8 * half;
      rows[half] = c < hi ? depth_grad_row(dst, a, tr, c) + 2 * t : nullptr;
    }
#pragma unroll
    for (int nb = 0; nb < D / 16; nb += kBatch) {
      float acc[kBatch][2][4] = {};
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        uint32_t y[4];
        YTile::load_b_trans(y, sY, r0, (nb + i) * 16, lane);
        flash::mma_16816(acc[i][0], xt, y[0], y[1]);
        flash::mma_16816(acc[i][1], xt, y[2], y[3]);
      }
      float2 old[2][kBatch][2] = {};
      if constexpr (std::is_same_v<Out, float>) {  // bf16 buffers are only stored into
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int i = 0; i < kBatch; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j)
              if (rows[half] != nullptr && !a.store_depth)
                old[half][i][j] = *reinterpret_cast<const float2*>(rows[half] + (nb + i) * 16 + j * 8);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int i = 0; i < kBatch; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            if (rows[half] != nullptr)
              store_pair(rows[half] + (nb + i) * 16 + j * 8, old[half][i][j].x + acc[i][j][2 * half] * factor,
                         old[half][i][j].y + acc[i][j][2 * half + 1] * factor);
    }
  }
}

// Stores the weights of one m-tile's rows (from tile row r0) against the chunk's columns [c0, c0 + C):
// p and scale * dS of every (row, column) pair where the column is one of the row's token's slots.
template <int C>
__device__ __forceinline__ void store_chunk_weights(const ModaArgs& a, const TileRows& tr, const MtileMask& mask,
                                                    const float (&p)[1][C / 8][4], const float (&ds)[1][C / 8][4],
                                                    int r0, int c0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half;
    if (!tr.valid(r)) continue;
    const int token = tr.token(r);
    const int64_t row = ((int64_t(tr.b) * a.T + token) * a.Hq + tr.head(r)) * a.L - int64_t(token) * a.L;
#pragma unroll
    for (int nb = 0; nb < C / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = c0 + nb * 8 + 2 * t + e;
        if (!mask.visible(r, c)) continue;
        a.wp[row + c] = p[0][nb][2 * half + e];
        a.wds[row + c] = ds[0][nb][2 * half + e] * a.scale;
      }
  }
}

// One m-tile's depth walk in the forward pass: attends the 16 rows starting at tile row r0 (Q
// fragments q1, state `one`) to their tokens' depth columns through the warp's chunk slice.
template <class Cfg>
__device__ __forceinline__ void attend_mtile_depth(flash::SoftmaxState<Cfg::D, 1>& one,
                                                   const uint32_t (&q1)[1][Cfg::D / 16][4], const DepthKv<Cfg>& depth,
                                                   const ModaArgs& a, const TileRows& tr, int r0, uint32_t slice,
                                                   int lane) {
  const ColumnRange cols = mtile_columns(tr, r0, a.L);
  const MtileMask mask = mtile_mask(tr, r0, a.L, cols.hi, lane);
  for_each_chunk<Cfg>(depth, cols, slice, lane, [&](int c, uint32_t sK, uint32_t sV) {
    flash::attend_block<ChunkShape<Cfg>, true>(one, q1, sK, sV, r0, c, mask, a.scale_log2, lane);
  });
}

// One m-tile's depth walk in the dQ pass: adds the 16 rows' (from tile row r0) depth terms to dq1
// (unscaled) and, as DG says, each chunk's depth dK/dV from the Q and dO tiles sQ, sDO (layout Tile).
template <class Cfg, DepthGrads DG, class Tile>
__device__ __forceinline__ void dq_mtile_depth(float (&dq1)[1][Cfg::D / 8][4], const uint32_t (&q1)[1][Cfg::D / 16][4],
                                               const uint32_t (&d1)[1][Cfg::D / 16][4], const float (&lse2)[1][2],
                                               const float (&delta)[1][2], const DepthKv<Cfg>& depth, const ModaArgs& a,
                                               const TileRows& tr, int r0, uint32_t slice, uint32_t sQ, uint32_t sDO,
                                               int lane) {
  using One = ChunkShape<Cfg>;
  constexpr int D = Cfg::D, C = One::BK;
  const ColumnRange cols = mtile_columns(tr, r0, a.L);
  const MtileMask mask = mtile_mask(tr, r0, a.L, cols.hi, lane);
  for_each_chunk<Cfg>(depth, cols, slice, lane, [&](int c, uint32_t sK, uint32_t sV) {
    if constexpr (DG == DepthGrads::f32)
      if (!a.store_depth) prefetch_depth_grads<D, C>(a, tr, c, cols.hi, lane);
    float p[1][C / 8][4], ds[1][C / 8][4];
    flash::dq_block_scores<One>(p, ds, q1, d1, lse2, delta, sK, sV, r0, c, true, mask, a.scale_log2, lane);
    flash::dq_block_accumulate<One>(dq1, ds, sK, lane);
    if constexpr (DG == DepthGrads::weights) {
      store_chunk_weights<C>(a, tr, mask, p, ds, r0, c, lane);
    } else if constexpr (DG != DepthGrads::none) {
      const auto dst = depth_grad_buffers<DG>(a);
      add_chunk_depth_grads<D, C, Tile>(dst.v, a, tr, p, sDO, r0, c, cols.hi, 1.f, lane);
      add_chunk_depth_grads<D, C, Tile>(dst.k, a, tr, ds, sQ, r0, c, cols.hi, a.scale, lane);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Forward: flash attention's forward with folded rows and the depth source after the sequence.
// WARP_DEPTH (group): each warp walks its own m-tiles' depth columns; otherwise the CTA walks the
// tile's (chunk) or all (flat) depth columns in BK blocks.
template <class Cfg, bool WARP_DEPTH>
constexpr int forward_smem_bytes() {
  return Cfg::kTileQ + kv_region_bytes<Cfg, WARP_DEPTH>();
}

template <class Cfg, bool WARP_DEPTH>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) moda_forward_kernel(const ModaArgs a) {
  constexpr int D = Cfg::D, MT = Cfg::MT;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const TileRows tr = tile_rows(a);

  const uint32_t sQ = flash::smem_addr(smem), stages = sQ + Cfg::kTileQ;
  load_query_rows<Cfg>(sQ, a.q, a, tr, tid);
  flash::cp_async_commit();
  const FoldedSequenceKv<Cfg> seq = sequence_source<Cfg>(a, tr);
  flash::start_source<Cfg>(seq, stages, tid);
  flash::cp_async_wait<1>();
  __syncthreads();

  const int wrow = warp * MT * 16;
  uint32_t qf[MT][D / 16][4];
  flash::load_row_fragments<D, MT>(qf, sQ, wrow, lane);

  flash::SoftmaxState<D, MT> st;
  st.init();
  flash::attend_source<Cfg>(st, qf, seq, stages, wrow, a.scale_log2, tid);
  // The sequence walk ended with a barrier: the KV stages are free.
  const DepthKv<Cfg> depth = depth_source<Cfg>(a, tr);
  if constexpr (WARP_DEPTH) {
    const uint32_t slice = stages + uint32_t(warp * WarpChunks<Cfg>::kWarpBytes);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r0 = wrow + mt * 16;
      flash::SoftmaxState<D, 1> one;
      one.m[0][0] = st.m[mt][0], one.m[0][1] = st.m[mt][1];
      one.l[0][0] = st.l[mt][0], one.l[0][1] = st.l[mt][1];
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) one.o[0][nt][e] = st.o[mt][nt][e];
      const auto& q1 = *reinterpret_cast<const uint32_t(*)[1][D / 16][4]>(&qf[mt]);
      attend_mtile_depth<Cfg>(one, q1, depth, a, tr, r0, slice, lane);
      st.m[mt][0] = one.m[0][0], st.m[mt][1] = one.m[0][1];
      st.l[mt][0] = one.l[0][0], st.l[mt][1] = one.l[0][1];
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[mt][nt][e] = one.o[0][nt][e];
    }
  } else {
    flash::start_source<Cfg>(depth, stages, tid);
    flash::attend_source<Cfg>(st, qf, depth, stages, wrow, a.scale_log2, tid);
  }

  const int g = lane >> 2, t = lane & 3;
  float inv[MT][2], lse[MT][2];
  flash::finish_rows(st, inv, lse);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wrow + mt * 16 + g + 8 * half;
      if (t == 0 && tr.valid(r)) a.lse[stat_index(tr, a.Hq, a.T, r)] = lse[mt][half];
    }
  // Each warp stages only its own rows of the Q tile, which only it has read.
  flash::stage_accumulator<D, MT>(smem, st.o, inv, wrow, lane);
  __syncthreads();
  flash::store_rows<D, Cfg::BQ, Cfg::THREADS>(
      [&](int r) -> bf16_t* { return tr.valid(r) ? a.o + row_offset(a, tr, r) : nullptr; }, a.d, smem, tid);
}

// ---------------------------------------------------------------------------------------------
// Backward dQ; with WARP_DEPTH the per-warp depth walk, and with DG (group, G <= 16) also the depth
// dK/dV of each chunk. Shared memory: Q and dO tiles, then the KV region.
template <class Cfg, bool WARP_DEPTH>
constexpr int dq_smem_bytes() {
  return 2 * Cfg::kTileQ + kv_region_bytes<Cfg, WARP_DEPTH>();
}

template <class Cfg, bool WARP_DEPTH, DepthGrads DG>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) moda_backward_dq_kernel(const ModaArgs a) {
  static_assert(WARP_DEPTH || DG == DepthGrads::none, "depth gradients come from the per-warp walk");
  constexpr int D = Cfg::D, MT = Cfg::MT, BK = Cfg::BK;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2;
  const TileRows tr = tile_rows(a);

  const uint32_t sQ = flash::smem_addr(smem), sDO = sQ + Cfg::kTileQ, stages = sDO + Cfg::kTileQ;
  load_query_rows<Cfg>(sQ, a.q, a, tr, tid);
  load_query_rows<Cfg>(sDO, a.dout, a, tr, tid);
  flash::cp_async_commit();
  const FoldedSequenceKv<Cfg> seq = sequence_source<Cfg>(a, tr);
  flash::start_source<Cfg>(seq, stages, tid);
  flash::cp_async_wait<1>();
  __syncthreads();

  const int wrow = warp * MT * 16;
  uint32_t qf[MT][D / 16][4], df[MT][D / 16][4];
  flash::load_row_fragments<D, MT>(qf, sQ, wrow, lane);
  flash::load_row_fragments<D, MT>(df, sDO, wrow, lane);
  // Padding rows: lse2 = +inf makes their probabilities 0.
  float lse2[MT][2], delta[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wrow + mt * 16 + g + 8 * half;
      const bool valid = tr.valid(r);
      lse2[mt][half] = valid ? a.lse2[stat_index(tr, a.Hq, a.Tpad, r)] : INFINITY;
      delta[mt][half] = valid ? a.delta[stat_index(tr, a.Hq, a.Tpad, r)] : 0.f;
    }

  float dq[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[mt][nt][e] = 0.f;

  flash::for_each_block<Cfg>(seq, stages, tid, [&](int n, uint32_t sK, uint32_t sV) {
    float p[MT][BK / 8][4], ds[MT][BK / 8][4];
    flash::dq_block_scores<Cfg>(p, ds, qf, df, lse2, delta, sK, sV, wrow, seq.key0(n), seq.masked(n), seq.mask(),
                                a.scale_log2, lane);
    flash::dq_block_accumulate<Cfg>(dq, ds, sK, lane);
  });

  const DepthKv<Cfg> depth = depth_source<Cfg>(a, tr);
  if constexpr (WARP_DEPTH) {
    const uint32_t slice = stages + uint32_t(warp * WarpChunks<Cfg>::kWarpBytes);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const auto& q1 = *reinterpret_cast<const uint32_t(*)[1][D / 16][4]>(&qf[mt]);
      const auto& d1 = *reinterpret_cast<const uint32_t(*)[1][D / 16][4]>(&df[mt]);
      const auto& lse2_1 = *reinterpret_cast<const float(*)[1][2]>(&lse2[mt]);
      const auto& delta_1 = *reinterpret_cast<const float(*)[1][2]>(&delta[mt]);
      auto& dq1 = *reinterpret_cast<float(*)[1][D / 8][4]>(&dq[mt]);
      dq_mtile_depth<Cfg, DG, flash::SwizzledTile<D>>(dq1, q1, d1, lse2_1, delta_1, depth, a, tr, wrow + mt * 16, slice,
                                                      sQ, sDO, lane);
    }
  } else {
    flash::start_source<Cfg>(depth, stages, tid);
    flash::for_each_block<Cfg>(depth, stages, tid, [&](int n, uint32_t sK, uint32_t sV) {
      float p[MT][BK / 8][4], ds[MT][BK / 8][4];
      flash::dq_block_scores<Cfg>(p, ds, qf, df, lse2, delta, sK, sV, wrow, depth.key0(n), true, depth.mask(),
                                  a.scale_log2, lane);
      flash::dq_block_accumulate<Cfg>(dq, ds, sK, lane);
    });
  }

  float qscale[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) qscale[mt][0] = qscale[mt][1] = a.scale;
  // Each warp overwrites only its own rows of the Q tile; the depth walk read only those too.
  flash::stage_accumulator<D, MT>(smem, dq, qscale, wrow, lane);
  __syncthreads();
  flash::store_rows<D, Cfg::BQ, Cfg::THREADS>(
      [&](int r) -> bf16_t* { return tr.valid(r) ? a.dq + row_offset(a, tr, r) : nullptr; }, a.d, smem, tid);
}

// ---------------------------------------------------------------------------------------------
// Depth dK/dV where no dQ tile holds every query row of a token (flat and chunk, one head per tile;
// group with G > 16, whose token spans m-tiles): one warp per (batch, token, KV head, 16 slots of the
// range) recomputes P and dS of the token's G query heads against those slots with flash attention's
// dK/dV warp item, the slots taking the keys' place and the heads the queries', 16 heads at a time.
// Each slot's gradient sums the G heads in registers in a fixed order; one owner per element.
constexpr int kDepthGradWarps = 4;
template <int D>
__host__ __device__ constexpr int depth_grads_warp_bytes() {
  return 4 * 16 * D * 2 + 128;  // K, V, Q, dO tiles of 16 rows; lse2[16], delta[16]
}
template <int D>
constexpr int depth_grads_smem_bytes() {
  return kDepthGradWarps * depth_grads_warp_bytes<D>();
}

template <int D>
__global__ void __launch_bounds__(kDepthGradWarps * 32) moda_depth_grads_kernel(const ModaArgs a) {
  using Tile = flash::SwizzledTile<D>;
  constexpr int kTile = 16 * D * 2;
  extern __shared__ __align__(128) char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  // Units in (batch, token, KV head, slot chunk) order: a token's chunks share its Q and dO rows.
  const int chunks = (a.L + 15) / 16;
  const int64_t unit = int64_t(blockIdx.x) * kDepthGradWarps + warp;
  if (unit >= int64_t(a.B) * a.T * a.Hk * chunks) return;  // whole warps; only warp barriers follow
  const int c0 = int(unit % chunks) * 16, hk = int(unit / chunks % a.Hk);
  const int64_t bt = unit / (int64_t(chunks) * a.Hk);  // b * T + token
  const int token = int(bt % a.T), b = int(bt / a.T);

  char* mine = smem + warp * depth_grads_warp_bytes<D>();
  const uint32_t sK = flash::smem_addr(mine), sV = sK + kTile, sQ = sV + kTile, sDO = sQ + kTile;
  float* stats = reinterpret_cast<float*>(mine + 4 * kTile);  // lse2[16], then delta[16]
  // Rows past the slot range or the token's heads are zero-filled.
  const int64_t slot_row0 = (bt * a.S + a.begin + c0) * a.Hk + hk;  // in rows of d elements
  const int64_t head_row0 = bt * a.Hq + int64_t(hk) * a.G;
  auto slot_rows = [&](const bf16_t* base) {
    return
        [=](int r) -> const bf16_t* { return c0 + r < a.L ? base + (slot_row0 + int64_t(r) * a.Hk) * a.d : nullptr; };
  };
  flash::load_rows_async<D, 16, 32>(sK, slot_rows(a.kd), a.kd, a.d, lane);
  flash::load_rows_async<D, 16, 32>(sV, slot_rows(a.vd), a.vd, a.d, lane);

  float dk[1][D / 8][4] = {}, dv[1][D / 8][4] = {};
  for (int h0 = 0; h0 < a.G; h0 += 16) {
    auto head_rows = [&](const bf16_t* base) {
      return [=](int r) -> const bf16_t* { return h0 + r < a.G ? base + (head_row0 + h0 + r) * a.d : nullptr; };
    };
    flash::load_rows_async<D, 16, 32>(sQ, head_rows(a.q), a.q, a.d, lane);
    flash::load_rows_async<D, 16, 32>(sDO, head_rows(a.dout), a.dout, a.d, lane);
    flash::cp_async_commit();
    if (lane < 16) {  // padding heads: lse2 = +inf, so their probabilities are 0
      const bool valid = h0 + lane < a.G;
      const int64_t stat = (int64_t(b) * a.Hq + hk * a.G + h0 + lane) * a.Tpad + token;
      stats[lane] = valid ? a.lse2[stat] : INFINITY;
      stats[16 + lane] = valid ? a.delta[stat] : 0.f;
    }
    flash::cp_async_wait<0>();
    __syncwarp();
    flash::dkdv_warp_item<D, 16>(
        dk, dv, [&](uint32_t(&f)[4], int ks) { Tile::load_a(f, sK, 0, ks * 16, lane); },
        [&](uint32_t(&f)[4], int ks) { Tile::load_a(f, sV, 0, ks * 16, lane); }, sQ, sDO, stats, stats + 16, false,
        [](int, int) { return false; }, a.scale_log2, lane);
    __syncwarp();  // the next heads' copies overwrite the Q and dO tiles and the statistics
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (c0 + g + 8 * half >= a.L) continue;
    const int64_t row = (slot_row0 + int64_t(g + 8 * half) * a.Hk) * a.d;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      const float2 k = make_float2(a.scale * dk[0][nt][2 * half], a.scale * dk[0][nt][2 * half + 1]);
      const float2 v = make_float2(dv[0][nt][2 * half], dv[0][nt][2 * half + 1]);
      if (a.ddk_bf16 != nullptr) {
        store_pair(a.ddk_bf16 + row + col, k.x, k.y);
        store_pair(a.ddv_bf16 + row + col, v.x, v.y);
        continue;
      }
      const float2 k0 = a.store_depth ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(a.ddk + row + col);
      const float2 v0 = a.store_depth ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(a.ddv + row + col);
      store_pair(a.ddk + row + col, k0.x + k.x, k0.y + k.y);
      store_pair(a.ddv + row + col, v0.x + v.x, v0.y + v.y);
    }
  }
}

}  // namespace fathom::cuda::moda
