// The persistent decoding kernel (persistent_decode.h): one CTA per SM, 8 consumer warps and one producer warp.
//
// The stream. Everything a CTA reads from memory that no phase of this launch writes reaches it through a ring
// of shared-memory stages that the producer warp's one thread fills with bulk copies, in the order the
// consumers use it: every GEMM's slice of its weight (rows [c N / G, (c+1) N / G) of each matrix, G CTAs,
// contiguous in memory, cut into items of whole rows of at most one 16 KiB stage), each norm's weight
// vector, and the keys and values of the cache positions this CTA's attention reads. The producer waits only
// for a stage to be released, never for a phase, so while the consumers wait at a barrier the ring fills
// with what the next phases read; and no consumer waits on a DRAM round trip, which behind a ring-deep queue
// of bulk copies takes several microseconds.
//
// Phases, each ended by a grid-wide barrier (grid_sync: one 64-bit count of arrivals in the workspace that only
// grows, by G at each barrier of every launch; a CTA adds its arrival without waiting for the add and polls until
// the count reaches its barrier's target, one round trip to L2 after the last arrival):
//   1. q/k/v: every CTA first makes the GEMM input itself (the residual step of the previous layer, from the
//      residual and the sublayer's output, and the pre-norm's norm), CTA 0 also stores the new residual;
//   2. attention: a (KV head, split of the cache) per CTA; QK-norm's sums in the decode prologue's order,
//      RoPE, the new key and value written to the cache by the split that holds the position; each split's
//      partial softmax goes to the workspace and the last split of a KV head to arrive (a counter) merges them;
//   3. o_proj; 4. the residual step, then gate and up, with SwiGLU as the up rows complete; 5. down_proj.
// After the last layer: the residual step, the final norm and the LM head.
//
// GEMM. Where K is a multiple of 2048, warp w reads columns [w K / 8, (w + 1) K / 8) of every row of an item from
// the stage, against the same columns of the input, and each row's warp sums go to shared memory; elsewhere (the
// 190M's 768 and 3072, whose eighths would leave lanes idle) each warp takes whole rows, dealt to the warps in turn.
// Once a chunk of up to kPartRows rows is in, a thread per row adds its sums in order and runs the phase's epilogue.
// The warps do not wait for each other between items. Every output is rounded to BF16 where the layer-by-layer step
// rounds it.
//
// No L2 lead. The ring holds a few microseconds of a CTA's share of the bandwidth, less than a layer's attention and
// barriers take. Asking L2 for the GEMM items 8 or 16 past the one copied made a 1B step 7% and 18% slower than
// no lead (H100, bench/results/2026-12-06_persistent_attention_h100.md): the stream's own copies, the norms'
// vectors among them, queue behind the prefetches.
//
// Weights under L2's evict-first policy. A 1B layer streams about 135 MB of weights through a 50 MB L2, read once a
// step; under the default policy they pushed out what each layer reads again: the code of the phases that run once a
// layer (attention, the residual steps), the activations, the cache. Evict-first made a 1B step 14% faster and a
// 190M one 8% (H100, bench/results/2026-12-06_persistent_evict_first_h100.md). Asking L2 for the FFN's first rows
// while attention runs on a few CTAs made it 2-7% slower: the attending CTAs' loads queue behind them.
//
// Memory order. Phases read what other CTAs wrote in earlier phases of this launch (the residuals, the
// sublayers' outputs, q/k/v, the partials): grid_sync releases every write of a CTA (a CTA barrier, then
// an arrival with release semantics) and acquires the others' (a load with acquire semantics by the waiting thread,
// then a CTA barrier). Such reads in this file go through L2 (__ldcg); those of the decode prologue's helpers
// (attention's q, k and v) are plain loads, which the acquire orders as well.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "kernels/attention/decode_prologue.cuh"
#include "kernels/decode_step/persistent_decode.h"
#include "kernels/decode_step/persistent_decode_limits.h"
#include "kernels/hopper/tma.cuh"
#include "kernels/rms_norm/rms_norm_math.cuh"
#include "kernels/runtime/argument_checks.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using namespace persistent_decode;
using bf16 = __nv_bfloat16;
using V8 = Pack<bf16, 8>;

constexpr int kWarps = 8;
constexpr int kConsumers = kWarps * 32;  // prologue::kParts: QK-norm's sums in the prologue's order
constexpr int kThreads = kConsumers + 32;
constexpr int kStages = 8;  // at least 3: two norm vectors held at once (the head's), and one more; 11 was slower
constexpr int kMaxHeadDim = 128;
constexpr int kTileKeys = 8 * kWarps;  // 8 keys a warp
constexpr int kCounterLine = 32;       // 128 bytes of counters
constexpr int kPartRows = 128;         // rows of a GEMM whose warp sums wait in shared memory for their epilogue
static_assert(kMaxStageRows <= kPartRows, "an item's rows fit in a chunk");
static_assert(kConsumers == prologue::kParts, "QK-norm's sums are the decode prologue's parts");

struct LayerPtrs {
  const bf16 *q, *k, *v, *o, *gate, *up, *down;
  const bf16 *q_norm, *k_norm, *attn_norm, *ffn_norm;
  bf16 *cache_k, *cache_v;
};

struct Args {
  const LayerPtrs* layers;
  int L, D, Hq, Hk, dh, F, vocab, capacity;
  int one_split_tiles;  // a cache of at most this many tiles is one split a KV head (SplitPlan)
  bool pre_norm;
  float eps, scale_log2;
  const bf16* x0;
  const float2* angles;
  const int32_t* past;
  const bf16* final_norm;
  const bf16* head;
  bf16* logits;
  // Workspace: the residuals (X after a layer's first step, H after its second), the sublayers' outputs (o_proj's
  // O, down_proj's Dn), attention's output A, the raw q/k/v, SwiGLU's output, the attention partials ([Hq, G]
  // splits), a merge counter per KV head and the barrier's count.
  bf16 *X, *H, *O, *Dn, *A, *QKV, *ACT;
  float* part_acc;
  float2* part_ml;
  unsigned* head_counters;
  unsigned long long* arrivals;  // grid_sync's count; a multiple of G between launches
  int64_t* trace;                // null, or [G, trace_slots(L)] SM clocks at the phases' ends (FATHOM_PERSISTENT_TRACE)
};

// The trace's marks: the start, 13 a layer (the end of each phase, of attention's q/k and its tiles, and of each
// barrier), the head's two.
constexpr int kMarksPerLayer = 13;
__host__ __device__ constexpr int trace_slots(int layers) { return 1 + kMarksPerLayer * layers + 2; }

__device__ __forceinline__ void mark(const Args& a, int slot) {
  if (a.trace && threadIdx.x == 0) a.trace[int64_t(blockIdx.x) * trace_slots(a.L) + slot] = int64_t(clock64());
}

struct AttentionSmem {
  float q[kMaxGroup][kMaxHeadDim];
  bf16 k[kMaxHeadDim], v[kMaxHeadDim];
  float2 ml[kWarps][kMaxGroup];
  float acc[kWarps][kMaxGroup][kMaxHeadDim];
};

struct Smem {
  bf16 ring[kStages][kStageBytes / 2];
  union {
    bf16 x[kMaxWidth];  // the GEMM's input row
    AttentionSmem attn;
  } u;
  float part[2][kPartRows][kWarps + 1];  // rows' warp sums, two chunks of rows in turn (padded: no bank conflicts)
  int part_row[2][kPartRows];            // each such row's index in its matrix
  bf16 gate[kMaxGateRows];
  float2 sums[kWarps];
  int last;
  alignas(8) uint64_t bars[2 * kStages];
  LayerPtrs layers[kMaxLayers];
};

// The ring: item n of the stream lives in stage n % kStages (flash::StageRing: a "full" barrier counting the item's
// bytes, an "empty" one an arrival per consumer warp that has read it). The depth is a power of two, so a stage and
// its parity are bit operations: the GEMM's item loop computes them for every item (a run-time depth cost it an
// integer division each time).
struct Ring : flash::StageRing<kStages, kWarps> {
  uint32_t stage0;
  __device__ __forceinline__ const bf16* stage(const Smem& s, int n) const { return s.ring[n % kStages]; }
  __device__ __forceinline__ uint32_t stage_address(int n) const {
    return stage0 + uint32_t(n % kStages) * uint32_t(kStageBytes);
  }
};
static_assert((kStages & (kStages - 1)) == 0, "the ring's depth is a power of two");

enum class Kind { qkv, out, gate_up, down, head };

// The matrices of one GEMM phase (sharing K).
struct Phase {
  const bf16* w[3];
  int rows[3];
  int count, K;
  Kind kind;
};

__device__ Phase phase_of(const Args& a, const Smem& s, int l, Kind kind) {
  const LayerPtrs& y = s.layers[l];
  const int qw = a.Hq * a.dh, kw = a.Hk * a.dh;
  switch (kind) {
    case Kind::qkv:
      return {{y.q, y.k, y.v}, {qw, kw, kw}, 3, a.D, kind};
    case Kind::out:
      return {{y.o}, {a.D}, 1, qw, kind};
    case Kind::gate_up:
      return {{y.gate, y.up}, {a.F, a.F}, 2, a.D, kind};
    case Kind::down:
      return {{y.down}, {a.D}, 1, a.F, kind};
    default:
      return {{a.head}, {a.vocab}, 1, a.D, kind};
  }
}

// The most rows an item of the phase holds: a stage's worth.
__device__ __forceinline__ int items_rows(const Phase& p) {
  return min(int(kMaxStageRows), int(kStageBytes / (2 * p.K)));
}

// The first row of this CTA's slice of matrix m of a phase (the slice ends where the next CTA's begins).
__device__ __forceinline__ int slice_begin(const Phase& p, int m, unsigned cta) {
  return int(int64_t(cta) * p.rows[m] / gridDim.x);
}

// A walk over the items of this CTA's slice of a phase, in stream order: matrix m's rows [r0, r0 + rows()).
struct Items {
  const Phase& p;
  int count, per_item, m = -1, lo = 0, hi = 0, r0 = 0;
  __device__ explicit Items(const Phase& phase) : p(phase), count(phase.count), per_item(items_rows(phase)) {
    next_matrix();
  }
  __device__ bool done() const { return m >= count; }
  __device__ int rows() const { return min(per_item, hi - r0); }
  __device__ void advance() {
    r0 += per_item;
    if (r0 >= hi) next_matrix();
  }
  __device__ void next_matrix() {  // the next matrix whose slice has rows
    do {
      ++m;
      if (m < count) lo = r0 = slice_begin(p, m, blockIdx.x), hi = slice_begin(p, m, blockIdx.x + 1);
    } while (m < count && lo >= hi);
  }
};

// f(matrix, slice's first row, item's first row, rows) for each item of Items' walk.
template <class F>
__device__ __forceinline__ void for_each_item(const Phase& p, F&& f) {
  for (Items it(p); !it.done(); it.advance()) f(it.m, it.lo, it.r0, it.rows());
}

// How attention cuts a cache of `past` positions plus the new one: items (KV head, split) over the CTAs, each
// split whole 64-key tiles, about G / Hk splits a head. The producer and the consumers plan alike.
struct SplitPlan {
  int len, tiles_per_split, splits, items;
  __device__ SplitPlan(const Args& a, int past) {
    len = past + 1;
    const int tiles = (len + kTileKeys - 1) / kTileKeys, per_head = max(1, int(gridDim.x) / a.Hk);
    // A short cache is one split a head: its few tiles come from the ring faster than partials could be
    // merged through memory.
    tiles_per_split = tiles <= a.one_split_tiles ? tiles : (tiles + per_head - 1) / per_head;
    splits = (tiles + tiles_per_split - 1) / tiles_per_split;
    items = a.Hk * splits;
  }
  // Item i's KV head and positions [p0, p1).
  __device__ int head(const Args& a, int item) const { return item % a.Hk; }
  __device__ int p0(const Args& a, int item) const { return item / a.Hk * tiles_per_split * kTileKeys; }
  __device__ int p1(const Args& a, int item) const { return min(len, p0(a, item) + tiles_per_split * kTileKeys); }
};
// Ring items a tile of keys and values takes: both in one stage at head dim 64, one stage each at 128.
__device__ __forceinline__ int items_per_tile(int dh) { return dh == 64 ? 1 : 2; }

__device__ __forceinline__ void group_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory"); }

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The arrival count this launch's barriers start from (thread 0, before its first barrier): the count is a multiple
// of G when the launch starts, and no barrier of it can have completed before this CTA arrives, so the count read
// is that multiple plus the arrivals so far, fewer than G.
__device__ unsigned long long arrivals_at_launch(const Args& a) {
  return load_acquire(a.arrivals) / gridDim.x * gridDim.x;
}

// Every consumer of every CTA has arrived; what each wrote before is visible to all after. `target` (thread 0's)
// is the count at the previous barrier, arrivals_at_launch's at the first.
__device__ void grid_sync(const Args& a, unsigned long long& target) {
  group_sync();
  if (threadIdx.x == 0) {
    target += gridDim.x;
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;\n" ::"l"(a.arrivals) : "memory");
    // A CTA that never arrives (a fault elsewhere) ends the kernel with an error, after some seconds of polls
    // (each a round trip to L2), instead of a hang.
    for (long long spins = 0; load_acquire(a.arrivals) < target; ++spins)
      if (spins > (1ll << 24)) __trap();
  }
  group_sync();
}

// The sum over the consumers, in warp order, to every consumer.
__device__ float group_sum(float v, Smem& s) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) s.sums[threadIdx.x / 32].x = v;
  group_sync();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += s.sums[w].x;
  group_sync();
  return total;
}

__device__ __forceinline__ V8 load_l2(const bf16* p) {
  const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(p));
  V8 out;
  std::memcpy(&out, &raw, sizeof(out));
  return out;
}

// The GEMM input after a residual step: v = R (S null), R + norm(S) s_norm (post-norm), or R + S (pre-norm);
// then the input is v, or v normalised by `after` (pre-norm's sublayer norm, the final norm). CTA 0 stores v in
// `out` (where given): the residual the next step adds to. Each pass reloads its rows (from L2) rather than
// holding them, which keeps the kernel's registers for the GEMM.
__device__ __noinline__ void residual_step(const Args& a, Smem& s, const bf16* R, const bf16* S, const bf16* s_norm,
                                           const bf16* after, bf16* out) {
  const int tid = threadIdx.x, vectors = a.D / 8;
  // The first vector of each row is loaded once, up front; the rest (d_model over 2048) again in each pass.
  V8 r_first, s_first;
  if (tid < vectors) {
    r_first = load_l2(R + tid * 8);
    if (S) s_first = load_l2(S + tid * 8);
  }
  const auto r_at = [&](int j) { return j == tid ? r_first : load_l2(R + j * 8); };
  const auto s_at = [&](int j) { return j == tid ? s_first : load_l2(S + j * 8); };
  float rstd = 1;
  if (S && s_norm) {
    float ss = 0;
    for (int j = tid; j < vectors; j += kConsumers) ss += prologue::squares(s_at(j));
    rstd = rms::rstd(group_sum(ss, s), a.D, a.eps);
  }
  float ss = 0;
  for (int j = tid; j < vectors; j += kConsumers) {
    const V8 r = r_at(j);
    V8 v = r;
    if (S) {
      const V8 sub = s_at(j);
      if (s_norm) {
        const V8 w = load_pack<8>(s_norm + j * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e) v.v[e] = rms::residual_normed(to_float(r.v[e]), sub.v[e], rstd, w.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v.v[e] = rms::rounded_sum(r.v[e], sub.v[e]);
      }
    }
    if (out && blockIdx.x == 0) store_pack<8>(out + j * 8, v);
    store_pack<8>(s.u.x + j * 8, v);
    ss += prologue::squares(v);
  }
  if (after) {
    rstd = rms::rstd(group_sum(ss, s), a.D, a.eps);  // group_sum's barriers also publish x
    for (int j = tid; j < vectors; j += kConsumers) {
      V8 v = load_pack<8>(s.u.x + j * 8);
      const V8 w = load_pack<8>(after + j * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) v.v[e] = rms::normed(v.v[e], rstd, w.v[e]);
      store_pack<8>(s.u.x + j * 8, v);  // each thread rewrites only its own vectors
    }
  }
  group_sync();
}

// The GEMM input copied from a buffer another phase wrote.
__device__ void load_input(Smem& s, const bf16* from, int n) {
  for (int j = threadIdx.x; j < n / 8; j += kConsumers) store_pack<8>(s.u.x + j * 8, load_l2(from + j * 8));
  group_sync();
}

__device__ __forceinline__ float dot8(const V8& w, const V8& x) {
  float acc = 0;
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    const float2 wf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.v[e]));
    const float2 xf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.v[e]));
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
  return acc;
}

// Row `row` of matrix m of the phase is y (rounded to BF16 here, as the step's GEMMs round); `local` is its
// index in this CTA's slice.
__device__ __forceinline__ void epilogue(const Args& a, Smem& s, Kind kind, int m, int local, int row, float y) {
  const bf16 out = from_float<bf16>(y);
  switch (kind) {
    case Kind::qkv:
      a.QKV[(m == 0 ? 0 : a.Hq * a.dh + (m - 1) * a.Hk * a.dh) + row] = out;
      break;
    case Kind::out:
      a.O[row] = out;
      break;
    case Kind::gate_up:
      if (m == 0) {
        s.gate[local] = out;  // read at the up row's epilogue, in a later chunk (after the barrier that flushes it)
      } else {
        const float g = to_float(s.gate[local]);
        a.ACT[row] = from_float<bf16>(swiglu_value(g, to_float(out)));  // SwiGLU as the swiglu kernel rounds it
      }
      break;
    case Kind::down:
      a.Dn[row] = out;
      break;
    default:
      a.logits[row] = out;
  }
}

// A chunk's rows are in (Parts sums each, in shared memory): each row's sums added in order, then its epilogue.
// The next chunk's sums go to the other buffer while these epilogues run.
template <int Parts>
__device__ __forceinline__ void flush_chunk(const Args& a, Smem& s, Kind kind, int m, int lo, int& held, int& buf) {
  group_sync();  // every warp's sums of the chunk are in
  for (int i = threadIdx.x; i < held; i += kConsumers) {
    float y = 0;
#pragma unroll
    for (int w = 0; w < Parts; ++w) y += s.part[buf][i][w];
    const int row = s.part_row[buf][i];
    epilogue(a, s, kind, m, row - lo, row, y);
  }
  buf ^= 1;
  held = 0;
}

// Sums each of R rows' partials over a warp's 32 lanes by a transposed reduction: at each of log2 R exchanges the
// lanes halve the rows between them (R - 1 shuffles), then the lanes that share a row add theirs (log2(32 / R)
// more), instead of 5 R shuffles row by row. Returns the total of row row_of_lane<R>(lane), which every lane of that
// row holds.
template <int R>
__device__ __forceinline__ float rows_sum(float (&v)[R], int lane) {
#pragma unroll
  for (int width = R, offset = 16; width > 1; width /= 2, offset /= 2) {
    const bool upper = lane & offset;
#pragma unroll
    for (int i = 0; i < width / 2; ++i) {
      const float keep = upper ? v[i + width / 2] : v[i], send = upper ? v[i] : v[i + width / 2];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
  float total = v[0];
#pragma unroll
  for (int offset = 16 / R; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
  return total;
}
template <int R>
__device__ __forceinline__ int row_of_lane(int lane) {
  int row = 0;
#pragma unroll
  for (int width = R, offset = 16; width > 1; width /= 2, offset /= 2) row += lane & offset ? width / 2 : 0;
  return row;
}

// This CTA's items of a GEMM phase whose items hold at most R rows of at most V 16-byte vectors a lane (n: the stream's
// next item; buf: the chunk of warp sums being filled). Each warp walks the items on its own: its columns of each
// row against the same columns of the input (in shared memory), the row's sum over its lanes into the chunk, the
// stage released. The warps meet only when a chunk is full, at a change of matrix and at the phase's end: then each
// row's eight warp sums are added in warp order and its epilogue runs, while the warps go on into the other chunk.
// The loop is what the kernel spends its issue slots on, so it has no per-row guard (an item of fewer than R rows
// also multiplies what follows it in shared memory, into sums no lane writes) and a per-vector guard only where a
// warp's slice of a row does not fill its lanes (kWhole false).
template <int R, int V>
__device__ __noinline__ void gemv_rows(const Args& a, Smem& s, const Ring ring, const Phase& p, int& n, int& buf) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int K = p.K, slice = K / kWarps, vectors = slice / 8;
  const Kind kind = p.kind;
  const bf16* x = s.u.x + warp * slice;  // read from shared memory at each item: held in registers across the
                                         // items' loop, ptxas spilled it and reloaded it for every row
  const int my_row = row_of_lane<R>(lane);
  const bool writes = (lane & (32 / R - 1)) == 0;  // one lane of each row's group
  int held = 0, held_m = -1, lo = 0;               // rows in the chunk, their matrix and its slice's first row
  const auto flush = [&] { flush_chunk<kWarps>(a, s, kind, held_m, lo, held, buf); };
  // acc[r]: this lane's part of row r of the item in `stage`.
  const auto products = [&]<bool kWhole>(const bf16* stage, float(&acc)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc[r] = 0;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int v = (lane + 32 * i) * 8;
        if (kWhole || lane + 32 * i < vectors) acc[r] += dot8(load_pack<8>(stage + r * K + v), load_pack<8>(x + v));
      }
    }
  };
  const bool whole = vectors == 32 * V;
  for_each_item(p, [&](int m, int slice_lo, int r0, int rows) {
    // A chunk holds one matrix's rows (SwiGLU reads a gate row's output at its up row's epilogue, a later chunk).
    if (held > 0 && (held + rows > kPartRows || m != held_m)) flush();
    held_m = m, lo = slice_lo;
    ring.wait_full(n);
    const bf16* stage = ring.stage(s, n) + warp * slice;
    float acc[R];
    if (whole)
      products.template operator()<true>(stage, acc);
    else
      products.template operator()<false>(stage, acc);
    ring.release(n, lane);
    const float total = rows_sum<R>(acc, lane);
    if (writes && my_row < rows) s.part[buf][held + my_row][warp] = total;
    if (warp == 0 && lane < rows) s.part_row[buf][held + lane] = r0 + lane;
    held += rows;
    ++n;
  });
  if (held > 0) flush();
}

// This CTA's items of a GEMM phase whose K is not a multiple of 2048 (the 190M's 768 and 3072): split by columns as
// gemv_rows splits them, a warp's slice of a row would leave lanes idle (at K = 768, 20 of 32 lanes, on 10 rows of
// an item held in 16 registers). Here a warp takes whole rows instead, its lanes over the row's vectors: the
// phase's rows are dealt to the warps in turn (the g-th row of this CTA's walk to warp g % 8), so an item of 10 rows
// gives two warps two rows and the next item starts where it left off. An item has at most 2 kWarps rows, so a warp
// has at most two rows of it; both are multiplied against one load of each input vector.
__device__ __noinline__ void gemv_whole_rows(const Args& a, Smem& s, const Ring ring, const Phase& p, int& n,
                                             int& buf) {
  static_assert(kMaxStageRows <= 2 * kWarps, "a warp has at most two rows of an item");
  static_assert((kWarps & (kWarps - 1)) == 0, "rows are dealt modulo kWarps by a mask");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = p.K;
  const Kind kind = p.kind;
  int held = 0, held_m = -1, lo = 0;  // rows in the chunk, their matrix and its slice's first row
  int dealt = 0;                      // rows of the walk before this item, modulo kWarps
  // This lane's part of an item's row (and of the row kWarps further, kTwo) against the input.
  const auto products = [&]<bool kTwo>(const bf16* row, float(&acc)[2]) {
    acc[0] = acc[1] = 0;
#pragma unroll 4
    for (int v = lane * 8; v < K; v += 32 * 8) {
      const V8 x = load_pack<8>(s.u.x + v);
      acc[0] += dot8(load_pack<8>(row + v), x);
      if constexpr (kTwo) acc[1] += dot8(load_pack<8>(row + kWarps * K + v), x);
    }
  };
  for_each_item(p, [&](int m, int slice_lo, int r0, int rows) {
    if (held > 0 && (held + rows > kPartRows || m != held_m)) flush_chunk<1>(a, s, kind, held_m, lo, held, buf);
    held_m = m, lo = slice_lo;
    const int first = (warp - dealt) & (kWarps - 1);  // this warp's first row of the item
    const int mine = first >= rows ? 0 : first + kWarps < rows ? 2 : 1;
    float acc[2];
    ring.wait_full(n);  // every warp, with rows or without: a release must follow the stage's fill
    if (mine == 2)
      products.template operator()<true>(ring.stage(s, n) + first * K, acc);
    else if (mine == 1)
      products.template operator()<false>(ring.stage(s, n) + first * K, acc);
    ring.release(n, lane);
    for (int i = 0; i < mine; ++i) {
      const float total = warp_sum(acc[i]);
      const int at = held + first + i * kWarps;
      if (lane == 0) s.part[buf][at][0] = total, s.part_row[buf][at] = r0 + first + i * kWarps;
    }
    held += rows;
    dealt = (dealt + rows) & (kWarps - 1);
    ++n;
  });
  if (held > 0) flush_chunk<1>(a, s, kind, held_m, lo, held, buf);
}

// gemv_whole_rows where K is not a multiple of 2048; else gemv_rows for the rows an item holds (16 KiB over a row's
// 2 K bytes: 4, 2 or 1) and the vectors a lane (K / 2048: 1 to 4).
__device__ void gemv(const Args& a, Smem& s, const Ring ring, const Phase& p, int& n, int& buf) {
  if (p.K % 2048 != 0) return gemv_whole_rows(a, s, ring, p, n, buf);
  const int rows = items_rows(p);
  if (rows == 4)
    gemv_rows<4, 1>(a, s, ring, p, n, buf);
  else if (rows == 2)
    gemv_rows<2, 2>(a, s, ring, p, n, buf);
  else
    gemv_rows<1, 4>(a, s, ring, p, n, buf);
}

// A norm's weight vector, the stream's next item: waits for it (every consumer) and returns it in its stage.
__device__ __forceinline__ const bf16* take_vector(const Smem& s, const Ring ring, int n) {
  ring.wait_full(n);
  return ring.stage(s, n);
}
__device__ __forceinline__ void release_vectors(const Ring ring, int& n, int count) {
  for (int i = 0; i < count; ++i) ring.release(n++, threadIdx.x % 32);
}

// Attention over the cache and the new token for this CTA's (KV head, split) items (one, unless the model has more
// KV heads than the grid has CTAs); see the file's comment. The stream gives each item the QK-norm weights (where
// the model has them), then the cache's keys and values a tile at a time. Trace marks `at` (q and the new key
// ready) and `at + 1` (the tiles done), of the CTA's last item.
template <int DH, int G>
__device__ __noinline__ void attention(const Args& a, Smem& s, const Ring ring, int& n, const LayerPtrs& y, int past,
                                       int at) {
  constexpr int kPer = DH / 32, kChunks = DH / 8;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const SplitPlan plan(a, past);
  if (int(blockIdx.x) >= plan.items) {
    mark(a, at), mark(a, at + 1);
    return;
  }
  const int len = plan.len;
  const bf16* q_raw = a.QKV;
  const bf16* k_raw = a.QKV + a.Hq * DH;
  const bf16* v_raw = k_raw + a.Hk * DH;
  AttentionSmem& t = s.u.attn;
  for (int item = blockIdx.x; item < plan.items; item += gridDim.x) {
    const int hk = plan.head(a, item), split = item / a.Hk, p0 = plan.p0(a, item), p1 = plan.p1(a, item);

    // Every load of the group's query heads, the new key and value and QK-norm's sums issued before any is used:
    // one round trip to L2.
    const bool qk_norm = y.q_norm != nullptr;
    const bf16* q_norm = qk_norm ? take_vector(s, ring, n) : nullptr;
    const bf16* k_norm = qk_norm ? take_vector(s, ring, n + 1) : nullptr;
    const bool rotates_q = tid < G * kChunks, rotates_k = !rotates_q && tid < (G + 1) * kChunks;
    const int c = rotates_q ? tid % kChunks : tid - G * kChunks;
    prologue::Rotation<bf16> rot;
    V8 v;
    if (rotates_q) {
      rot.load(q_raw, q_norm, a.angles, hk * G + tid / kChunks, DH, c);
    } else if (rotates_k) {
      rot.load(k_raw, k_norm, a.angles, hk, DH, c);
      v = load_pack<8>(v_raw + hk * DH + c * 8);
    }
    float rstd_q = 1, rstd_k = 1;
    if (qk_norm) {  // 1 / rms of the whole q and k rows, summed as the decode prologue sums them
      float2 part = prologue::part_sums<bf16, 8>(q_raw, k_raw, a.Hq * DH / 8, a.Hk * DH / 8, tid);
      part.x = warp_sum(part.x);
      part.y = warp_sum(part.y);
      if (lane == 0) s.sums[warp] = part;
      group_sync();
      const float2 ss = prologue::sum_parts(s.sums);
      rstd_q = prologue::rstd(true, ss.x, a.Hq * DH, a.eps);
      rstd_k = prologue::rstd(true, ss.y, a.Hk * DH, a.eps);
    }
    // The group's query heads and the new key, normalised and rotated as the prologue does; the new value.
    if (rotates_q) {
      const V8 q = rot.rotate(rstd_q);
#pragma unroll
      for (int e = 0; e < 8; ++e) t.q[tid / kChunks][c * 8 + e] = to_float(q.v[e]);
    } else if (rotates_k) {
      const V8 k = rot.rotate(rstd_k);
      store_pack<8>(t.k + c * 8, k);
      store_pack<8>(t.v + c * 8, v);
      if (p0 <= past && past < p1) {  // this split holds the new position: it writes the cache there
        const int64_t at_cache = (int64_t(hk) * a.capacity + past) * DH + c * 8;
        store_pack<8>(y.cache_k + at_cache, k);
        store_pack<8>(y.cache_v + at_cache, v);
      }
    }
    release_vectors(ring, n, qk_norm ? 2 : 0);  // each warp's rotations have used them
    group_sync();                               // also: every warp has read s.sums before a later phase writes them
    mark(a, at);

    float q[G][kPer], m[G], l[G], acc[G][kPer];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -INFINITY, l[g] = 0;
#pragma unroll
      for (int e = 0; e < kPer; ++e) q[g][e] = t.q[g][lane * kPer + e], acc[g][e] = 0;
    }
    using KV = Pack<bf16, kPer>;
    const int my_key = row_of_lane<8>(lane);  // the key whose score rows_sum<8> leaves in this lane
    for (int p = p0; p < p1; p += kTileKeys) {
      // Warp w's 8 keys of the tile: positions p + 8 w + j, from the ring (the cache's), shared memory (the new
      // one), or none (a weight of 0, which must not meet a NaN).
      ring.wait_full(n);
      const bf16* keys = ring.stage(s, n);
      const bf16* values = keys + kTileKeys * DH;
      if constexpr (DH != 64) {
        ring.wait_full(n + 1);
        values = ring.stage(s, n + 1);
      }
      KV kk[8], vv[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int row = warp * 8 + j, pos = p + row;
        if (pos < past) {
          kk[j] = load_pack<kPer>(keys + row * DH + lane * kPer);
          vv[j] = load_pack<kPer>(values + row * DH + lane * kPer);
        } else if (pos == past) {
          kk[j] = load_pack<kPer>(t.k + lane * kPer);
          vv[j] = load_pack<kPer>(t.v + lane * kPer);
        } else {
#pragma unroll
          for (int e = 0; e < kPer; ++e) kk[j].v[e] = vv[j].v[e] = from_float<bf16>(0.f);
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float part[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          part[j] = 0;
#pragma unroll
          for (int e = 0; e < kPer; ++e) part[j] += q[g][e] * to_float(kk[j].v[e]);
        }
        const float dot = rows_sum<8>(part, lane);  // each key's sum with warp_sum's bits
        const float score = p + warp * 8 + my_key < len ? dot * a.scale_log2 : -INFINITY;
        float top = fmaxf(m[g], score);
#pragma unroll
        for (int offset = 4; offset < 32; offset *= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
        if (top == -INFINITY) continue;  // none of this warp's keys in the cache yet
        const float keep = exp2f(m[g] - top), mine = exp2f(score - top);
        l[g] *= keep;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[g][e] *= keep;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float w = __shfl_sync(0xffffffffu, mine, 4 * j);
          l[g] += w;
#pragma unroll
          for (int e = 0; e < kPer; ++e) acc[g][e] += w * to_float(vv[j].v[e]);
        }
        m[g] = top;
      }
      ring.release(n, lane);  // after the keys and values have been used
      if constexpr (DH != 64) ring.release(n + 1, lane);
      n += items_per_tile(DH);
    }
    mark(a, at + 1);
    // The warps' softmaxes merged in warp order into this split's partial.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (lane == 0) t.ml[warp][g] = make_float2(m[g], l[g]);
#pragma unroll
      for (int e = 0; e < kPer; ++e) t.acc[warp][g][lane * kPer + e] = acc[g][e];
    }
    group_sync();
    for (int i = tid; i < G * DH; i += kConsumers) {
      const int g = i / DH, e = i % DH;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, t.ml[w][g].x);
      float den = 0, num = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = t.ml[w][g].x == -INFINITY ? 0.f : exp2f(t.ml[w][g].x - M);
        den += f * t.ml[w][g].y;
        num += f * t.acc[w][g][e];
      }
      if (plan.splits == 1) {  // the whole cache: the output itself, as the merge would make it
        a.A[(hk * G + g) * DH + e] = from_float<bf16>(num / den);
        continue;
      }
      const int64_t at_part = int64_t(hk * G + g) * gridDim.x + split;  // [Hq, G] partials
      a.part_acc[at_part * DH + e] = num;
      if (e == 0) a.part_ml[at_part] = make_float2(M, den);
      __threadfence();  // the partial, published before the split is counted
    }
    if (plan.splits == 1) {
      group_sync();  // the shared rows are the next item's or phase's
      continue;
    }
    group_sync();
    if (tid == 0) s.last = atomicAdd(&a.head_counters[hk], 1u) == unsigned(plan.splits - 1);
    group_sync();
    if (s.last) {
      // The last split of this KV head to arrive merges the group's partials.
      __threadfence();
      for (int i = tid; i < G * DH; i += kConsumers) {
        const int g = i / DH, e = i % DH, hq = hk * G + g;
        const int64_t base = int64_t(hq) * gridDim.x;
        float M = -INFINITY;
#pragma unroll 4
        for (int sp = 0; sp < plan.splits; ++sp) M = fmaxf(M, __ldcg(&a.part_ml[base + sp]).x);
        float den = 0, num = 0;
#pragma unroll 4
        for (int sp = 0; sp < plan.splits; ++sp) {
          const float2 ml = __ldcg(&a.part_ml[base + sp]);
          const float f = exp2f(ml.x - M);
          den += f * ml.y;
          num += f * __ldcg(&a.part_acc[(base + sp) * DH + e]);
        }
        a.A[hq * DH + e] = from_float<bf16>(num / den);
      }
      if (tid == 0) a.head_counters[hk] = 0;  // for the next layer, past its barriers
    }
    group_sync();  // the shared rows are the next item's or phase's
  }
}

// attention<DH, G> for the model's head dim and group.
__device__ void attend(const Args& a, Smem& s, const Ring ring, int& n, const LayerPtrs& y, int past, int at) {
  const int G = a.Hq / a.Hk;
  const auto by_group = [&]<int DH>() {
    if (G == 1)
      attention<DH, 1>(a, s, ring, n, y, past, at);
    else if (G == 2)
      attention<DH, 2>(a, s, ring, n, y, past, at);
    else if (G == 3)
      attention<DH, 3>(a, s, ring, n, y, past, at);
    else
      attention<DH, 4>(a, s, ring, n, y, past, at);
  };
  if (a.dh == 64)
    by_group.template operator()<64>();
  else
    by_group.template operator()<128>();
}

// The consumers: the phases in order, taking the stream's items as produce() issues them.
__device__ void consume(const Args& a, Smem& s, const Ring ring) {
  const int past = *a.past;
  int n = 0, buf = 0;
  unsigned long long arrivals = threadIdx.x == 0 ? arrivals_at_launch(a) : 0;  // grid_sync's count, thread 0's
  mark(a, 0);
  for (int l = 0; l < a.L; ++l) {
    const LayerPtrs& y = s.layers[l];
    const int at = 1 + l * kMarksPerLayer;
    // Post-norm: the previous layer's FFN norm on its output (none before layer 0); pre-norm: this layer's input
    // norm.
    const bool first_norm = a.pre_norm || l > 0;
    const bf16* norm = first_norm ? take_vector(s, ring, n) : nullptr;
    if (l == 0)
      residual_step(a, s, a.x0, nullptr, nullptr, norm, a.X);
    else
      residual_step(a, s, a.H, a.Dn, a.pre_norm ? nullptr : norm, a.pre_norm ? norm : nullptr, a.X);
    release_vectors(ring, n, first_norm ? 1 : 0);
    mark(a, at);
    gemv(a, s, ring, phase_of(a, s, l, Kind::qkv), n, buf);
    mark(a, at + 1);
    grid_sync(a, arrivals);
    mark(a, at + 2);
    attend(a, s, ring, n, y, past, at + 3);
    mark(a, at + 5);
    grid_sync(a, arrivals);
    mark(a, at + 6);
    load_input(s, a.A, a.Hq * a.dh);
    gemv(a, s, ring, phase_of(a, s, l, Kind::out), n, buf);
    mark(a, at + 7);
    grid_sync(a, arrivals);
    mark(a, at + 8);
    norm = take_vector(s, ring, n);  // post-norm: on attention's output; pre-norm: the FFN's input norm
    residual_step(a, s, a.X, a.O, a.pre_norm ? nullptr : norm, a.pre_norm ? norm : nullptr, a.H);
    release_vectors(ring, n, 1);
    gemv(a, s, ring, phase_of(a, s, l, Kind::gate_up), n, buf);
    mark(a, at + 9);
    grid_sync(a, arrivals);
    mark(a, at + 10);
    load_input(s, a.ACT, a.F);
    gemv(a, s, ring, phase_of(a, s, l, Kind::down), n, buf);
    mark(a, at + 11);
    grid_sync(a, arrivals);
    mark(a, at + 12);
  }
  const bf16* ffn_norm = a.pre_norm ? nullptr : take_vector(s, ring, n);
  const bf16* final_norm = take_vector(s, ring, a.pre_norm ? n : n + 1);
  residual_step(a, s, a.H, a.Dn, ffn_norm, final_norm, nullptr);
  release_vectors(ring, n, a.pre_norm ? 1 : 2);
  mark(a, 1 + kMarksPerLayer * a.L);
  gemv(a, s, ring, phase_of(a, s, 0, Kind::head), n, buf);
  mark(a, 2 + kMarksPerLayer * a.L);
}

// The producer: the stream's items in the order consume() takes them, each as soon as its stage is free.
__device__ void produce(const Args& a, const Smem& s, const Ring ring) {
  int n = 0;
  const auto copy = [&](const void* from, uint32_t bytes, uint32_t offset = 0) {
    if (bytes > 0) flash::bulk_load(ring.stage_address(n) + offset, from, bytes, ring.full(n));
  };
  const auto vector = [&](const bf16* w, int width) {
    ring.acquire(n, uint32_t(width) * 2u);
    copy(w, uint32_t(width) * 2u);
    ++n;
  };
  // The weights are read once a step: under evict-first they leave L2 before the code, the activations and the
  // cache, which a layer's once-run phases would otherwise fetch from memory again each layer (module comment).
  const uint64_t read_once = flash::l2_evict_first_policy();
  const auto gemm = [&](const Phase& p) {
    for_each_item(p, [&](int m, int, int r0, int rows) {
      const uint32_t bytes = uint32_t(rows) * uint32_t(p.K) * 2u;
      ring.acquire(n, bytes);
      flash::bulk_load(ring.stage_address(n), p.w[m] + int64_t(r0) * p.K, bytes, ring.full(n), read_once);
      ++n;
    });
  };
  const int past = *a.past, dh = a.dh;
  const SplitPlan plan(a, past);
  for (int l = 0; l < a.L; ++l) {
    const LayerPtrs& y = s.layers[l];
    if (a.pre_norm)
      vector(y.attn_norm, a.D);
    else if (l > 0)
      vector(s.layers[l - 1].ffn_norm, a.D);
    gemm(phase_of(a, s, l, Kind::qkv));
    // Each of this CTA's attention items: the QK-norm weights, then the cache's keys and values a tile at a time,
    // positions [p, p + 64) below `past` (the new position's come from the step itself).
    for (int item = blockIdx.x; item < plan.items; item += gridDim.x) {
      const int hk = plan.head(a, item);
      if (y.q_norm) vector(y.q_norm, a.Hq * dh), vector(y.k_norm, a.Hk * dh);
      for (int p = plan.p0(a, item); p < plan.p1(a, item); p += kTileKeys) {
        const int keys = max(0, min(p + kTileKeys, past) - p);
        const uint32_t bytes = uint32_t(keys) * uint32_t(dh) * 2u;
        const int64_t at = (int64_t(hk) * a.capacity + p) * dh;
        if (items_per_tile(dh) == 1) {
          ring.acquire(n, 2 * bytes);
          copy(y.cache_k + at, bytes);
          copy(y.cache_v + at, bytes, uint32_t(kTileKeys * dh * 2));
          ++n;
        } else {
          ring.acquire(n, bytes);
          copy(y.cache_k + at, bytes);
          ++n;
          ring.acquire(n, bytes);
          copy(y.cache_v + at, bytes);
          ++n;
        }
      }
    }
    gemm(phase_of(a, s, l, Kind::out));
    vector(a.pre_norm ? y.ffn_norm : y.attn_norm, a.D);
    gemm(phase_of(a, s, l, Kind::gate_up));
    gemm(phase_of(a, s, l, Kind::down));
  }
  if (!a.pre_norm) vector(s.layers[a.L - 1].ffn_norm, a.D);
  vector(a.final_norm, a.D);
  gemm(phase_of(a, s, 0, Kind::head));
}

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  Ring ring;
  ring.bars = uint32_t(__cvta_generic_to_shared(s.bars));
  ring.stage0 = uint32_t(__cvta_generic_to_shared(&s.ring[0][0]));
  if (threadIdx.x == 0) ring.init();
  for (int i = threadIdx.x; i < a.L; i += blockDim.x) s.layers[i] = a.layers[i];
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers) produce(a, s, ring);
    return;
  }
  consume(a, s, ring);
}

constexpr const char* kOp = "persistent decode";

const bf16* dev(const Tensor& t) { return t.defined() ? reinterpret_cast<const bf16*>(t.raw()) : nullptr; }
bf16* dev_mut(const Tensor& t) { return reinterpret_cast<bf16*>(const_cast<void*>(t.raw())); }

}  // namespace

std::string persistent_decode_device_unfit(Device device, int64_t F) {
  const cudaDeviceProp& p = device_properties(device.index);
  if (p.major < 9)
    return device.str() + " has compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
           " (the kernel's bulk copies need 9.0)";
  if (!p.cooperativeLaunch) return device.str() + " cannot launch cooperative kernels";
  if (size_t(p.sharedMemPerBlockOptin) < sizeof(Smem))
    return device.str() + " gives a CTA " + std::to_string(p.sharedMemPerBlockOptin) + " bytes of shared memory, not " +
           std::to_string(sizeof(Smem));
  if ((F + p.multiProcessorCount - 1) / p.multiProcessorCount > kMaxGateRows)
    return "ffn_hidden " + std::to_string(F) + " over " + std::to_string(p.multiProcessorCount) + " SMs exceeds " +
           std::to_string(kMaxGateRows) + " gate rows a CTA";
  return "";
}

}  // namespace fathom::cuda

namespace fathom {

struct PersistentDecode::Workspace {
  Tensor layers;  // the LayerPtrs table, on the device
  Tensor X, H, O, Dn, A, QKV, ACT, part_acc, part_ml, counters;
  int grid = 0;
  int one_split_tiles = 0;  // persistent_one_split_tiles() when the kernel is made
  std::string trace_path;   // FATHOM_PERSISTENT_TRACE: where the last step's marks go when the kernel is freed
  Tensor trace;
};

PersistentDecode::PersistentDecode(PersistentDecodeModel model) : model_(std::move(model)) {
  const std::string why = persistent_decode_unfit(model_);
  FATHOM_CHECK(why.empty(), cuda::kOp, ": ", why);
  using cuda::dev;
  const PersistentDecodeModel& m = model_;
  const Device device = m.head.device();
  const int64_t D = m.final_norm.dim(0), F = m.layers[0].gate.dim(0), qw = m.heads * m.head_dim,
                kw = m.kv_heads * m.head_dim;
  workspace_ = std::make_unique<Workspace>();
  Workspace& w = *workspace_;
  w.grid = cuda::device_properties(device.index).multiProcessorCount;
  std::vector<cuda::LayerPtrs> table;
  for (const PersistentDecodeLayer& y : m.layers)
    table.push_back({dev(y.q), dev(y.k), dev(y.v), dev(y.o), dev(y.gate), dev(y.up), dev(y.down), dev(y.q_norm),
                     dev(y.k_norm), dev(y.attn_norm), dev(y.ffn_norm), cuda::dev_mut(y.cache_k),
                     cuda::dev_mut(y.cache_v)});
  const size_t table_bytes = table.size() * sizeof(cuda::LayerPtrs);
  w.layers = Tensor::empty({int64_t(table_bytes)}, DType::u8, device);
  CUDA_CHECK(cudaMemcpy(w.layers.raw(), table.data(), table_bytes, cudaMemcpyHostToDevice));
  const auto scratch = [&](int64_t n) { return Tensor::empty({n}, DType::bf16, device); };
  w.X = scratch(D), w.H = scratch(D), w.O = scratch(D), w.Dn = scratch(D), w.A = scratch(qw);
  w.QKV = scratch(qw + 2 * kw), w.ACT = scratch(F);
  w.part_acc = Tensor::empty({m.heads * w.grid * m.head_dim}, DType::f32, device);
  w.part_ml = Tensor::empty({m.heads * w.grid * 2}, DType::f32, device);
  // The merge counters, then the barrier's count on a line of its own.
  const int64_t barrier_at = (m.kv_heads + cuda::kCounterLine - 1) / cuda::kCounterLine * cuda::kCounterLine;
  w.counters = Tensor::zeros({barrier_at + cuda::kCounterLine}, DType::i32, device);
  CUDA_CHECK(cudaFuncSetAttribute(cuda::persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(sizeof(cuda::Smem))));
  w.one_split_tiles = persistent_one_split_tiles();
  if (const char* path = std::getenv("FATHOM_PERSISTENT_TRACE")) {
    w.trace_path = path;
    w.trace = Tensor::zeros({int64_t(w.grid) * cuda::trace_slots(int(m.layers.size()))}, DType::i64, device);
  }
}

PersistentDecode::~PersistentDecode() {
  // The marks of the last step run (a CUDA graph's replays write them too): CTA, mark, SM clock; the clock rate
  // first. A measurement aid: a device that cannot give them back (a failed launch) is said, not thrown from here.
  if (!workspace_ || !workspace_->trace.defined()) return;
  std::vector<int64_t> clocks;
  try {
    clocks = workspace_->trace.to(Device::cpu()).to_vector<int64_t>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "persistent decode: no trace written to %s: %s\n", workspace_->trace_path.c_str(), e.what());
    return;
  }
  std::ofstream out(workspace_->trace_path);
  const int slots = cuda::trace_slots(int(model_.layers.size()));
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, model_.head.device().index);
  out << "# sm_clock_khz " << khz << " layers " << model_.layers.size() << " marks_per_layer " << cuda::kMarksPerLayer
      << "\ncta,mark,clock\n";
  for (size_t i = 0; i < clocks.size(); ++i)
    out << i / size_t(slots) << ',' << i % size_t(slots) << ',' << clocks[i] << '\n';
}

Tensor PersistentDecode::step(const Tensor& x, const Tensor& angles, const Tensor& past) {
  const PersistentDecodeModel& m = model_;
  const Device device = m.head.device();
  const int64_t D = m.final_norm.dim(0), vocab = m.head.dim(0);
  cuda::check_device_tensor(cuda::kOp, "x", x, DType::bf16, device, "the token's embedding");
  FATHOM_CHECK(x.numel() == D, cuda::kOp, ": x ", describe(x), " is not one row of ", D);
  cuda::check_device_tensor(cuda::kOp, "angles", angles, DType::f32, device, "rope_angles' CUDA table");
  FATHOM_CHECK(angles.numel() == m.head_dim, cuda::kOp, ": angles ", describe(angles), " are not one position's ",
               m.head_dim / 2, " (cos, sin) pairs");
  cuda::check_device_tensor(cuda::kOp, "past", past, DType::i32, device, "the positions held");
  FATHOM_CHECK(past.numel() == 1, cuda::kOp, ": past ", describe(past), " is not one count (batch 1)");
  Workspace& w = *workspace_;
  Tensor logits = Tensor::empty({1, vocab}, DType::bf16, device);
  cuda::Args a{};
  a.layers = reinterpret_cast<const cuda::LayerPtrs*>(w.layers.raw());
  a.L = int(m.layers.size()), a.D = int(D), a.Hq = int(m.heads), a.Hk = int(m.kv_heads), a.dh = int(m.head_dim);
  a.F = int(m.layers[0].gate.dim(0)), a.vocab = int(vocab), a.capacity = int(m.layers[0].cache_k.dim(2));
  a.one_split_tiles = w.one_split_tiles;
  a.pre_norm = m.pre_norm;
  a.eps = float(m.norm_eps);
  a.scale_log2 = float(m.scale * 1.4426950408889634);
  a.x0 = cuda::dev(x);
  a.angles = reinterpret_cast<const float2*>(angles.raw());
  a.past = past.data<int32_t>();
  a.final_norm = cuda::dev(m.final_norm);
  a.head = cuda::dev(m.head);
  a.logits = cuda::dev_mut(logits);
  a.X = cuda::dev_mut(w.X), a.H = cuda::dev_mut(w.H), a.O = cuda::dev_mut(w.O), a.Dn = cuda::dev_mut(w.Dn);
  a.A = cuda::dev_mut(w.A), a.QKV = cuda::dev_mut(w.QKV), a.ACT = cuda::dev_mut(w.ACT);
  a.part_acc = w.part_acc.data<float>();
  a.part_ml = reinterpret_cast<float2*>(w.part_ml.data<float>());
  a.head_counters = reinterpret_cast<unsigned*>(w.counters.data<int32_t>());
  a.arrivals = reinterpret_cast<unsigned long long*>(a.head_counters + (m.kv_heads + cuda::kCounterLine - 1) /
                                                                           cuda::kCounterLine * cuda::kCounterLine);
  a.trace = w.trace.defined() ? w.trace.data<int64_t>() : nullptr;

  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(w.grid));
  config.blockDim = dim3(cuda::kThreads);
  config.dynamicSmemBytes = sizeof(cuda::Smem);
  config.stream = cuda::stream_for(device);
  config.attrs = &cooperative;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, cuda::persistent_decode_kernel, a));
  CUDA_CHECK_LAUNCH();
  return logits;
}

}  // namespace fathom
