// The persistent decoding kernel (persistent_decode.h): one CTA per SM, 8 consumer warps and one producer warp.
//
// Weight stream. Every GEMM of the step gives each CTA a fixed slice of its weight: rows [c N / G, (c+1) N / G)
// of each matrix (G CTAs), which is contiguous in memory. The slices are cut into items of whole rows, at most
// one 16 KiB stage each, and the producer warp's one thread copies item after item, layer after layer, into a
// ring of kStages stages with bulk copies (kernels/hopper/tma.cuh StageRing). It waits only for a stage to be
// released, never for a phase, so while the consumers wait at a barrier the ring fills with the next phase's
// weights.
//
// Phases, each ended by a grid-wide barrier (grid_sync: a sense-reversing counter pair in the workspace):
//   1. q/k/v: every CTA first makes the GEMM input itself (the residual step of the previous layer, from the
//      residual and the sublayer's output, and the pre-norm's norm), CTA 0 also stores the new residual;
//   2. attention: a (KV head, split of the cache) per CTA; QK-norm's sums in the decode prologue's order,
//      RoPE, the new key and value written to the cache by the split that holds the position; each split's
//      partial softmax goes to the workspace and the last split of a KV head to arrive (a counter) merges them;
//   3. o_proj; 4. the residual step, then gate and up, with SwiGLU as the up rows complete; 5. down_proj.
// After the last layer: the residual step, the final norm and the LM head.
//
// GEMM. Warp w reads columns [w K / 8, (w + 1) K / 8) of every row of an item from the stage, against the same
// columns of the input held in registers; each row's warp sum goes to shared memory and, after the item,
// thread r adds row r's eight warp sums in order and runs the phase's epilogue. Every output is rounded to
// BF16 where the layer-by-layer step rounds it.
//
// Memory order. Phases read what other CTAs wrote in earlier phases of this launch: grid_sync releases every
// write of a CTA (a fence before its arrival) and acquires the others' (a load with acquire semantics by the
// waiting thread, then a CTA barrier), and such reads go through L2 (__ldcg) where this file loads them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
constexpr int kStages = 11;
constexpr int kMaxVectorsPerLane = int(kMaxWidth / 64 / 32);  // a warp's slice of a row, over 32 lanes
constexpr int kMaxHeadDim = 128;
constexpr int kTileKeys = 8 * kWarps;  // 8 keys a warp
static_assert(kConsumers == prologue::kParts, "QK-norm's sums are the decode prologue's parts");

struct LayerPtrs {
  const bf16 *q, *k, *v, *o, *gate, *up, *down;
  const bf16 *q_norm, *k_norm, *attn_norm, *ffn_norm;
  bf16 *cache_k, *cache_v;
};

struct Args {
  const LayerPtrs* layers;
  int L, D, Hq, Hk, dh, F, vocab, capacity;
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
  // splits), a merge counter per KV head and the barrier's two counters.
  bf16 *X, *H, *O, *Dn, *A, *QKV, *ACT;
  float* part_acc;
  float2* part_ml;
  unsigned* head_counters;
  unsigned* barrier;
};

enum class Kind { qkv, out, gate_up, down, head };

// The matrices of one GEMM phase (sharing K).
struct Phase {
  const bf16* w[3];
  int rows[3];
  int count, K;
  Kind kind;
};

__device__ Phase phase_of(const Args& a, int l, Kind kind) {
  const LayerPtrs& y = a.layers[l];
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

// The items of this CTA's slice of a phase, in stream order: f(matrix, slice's first row, item's first row, rows).
template <class F>
__device__ __forceinline__ void for_each_item(const Phase& p, F&& f) {
  const int per_item = min(int(kMaxStageRows), int(kStageBytes / (2 * p.K)));
  for (int m = 0; m < p.count; ++m) {
    const int lo = int(int64_t(blockIdx.x) * p.rows[m] / gridDim.x);
    const int hi = int(int64_t(blockIdx.x + 1) * p.rows[m] / gridDim.x);
    for (int r0 = lo; r0 < hi; r0 += per_item) f(m, lo, r0, min(per_item, hi - r0));
  }
}

template <class F>
__device__ __forceinline__ void for_each_phase(const Args& a, F&& f) {
  for (int l = 0; l < a.L; ++l)
    for (Kind k : {Kind::qkv, Kind::out, Kind::gate_up, Kind::down}) f(phase_of(a, l, k));
  f(phase_of(a, 0, Kind::head));
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
  float part[2][kWarps][kMaxStageRows];  // each row's warp sums, for two items in turn
  bf16 gate[kMaxGateRows];
  float2 sums[kWarps];
  int last;
  alignas(8) uint64_t bars[2 * kStages];
};

using Ring = flash::StageRing<kStages, kWarps>;

__device__ __forceinline__ void group_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory"); }

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every consumer of every CTA has arrived; what each wrote before is visible to all after.
__device__ void grid_sync(const Args& a) {
  group_sync();
  if (threadIdx.x == 0) {
    unsigned* arrived = a.barrier;
    unsigned* generation = a.barrier + 1;
    const unsigned gen = load_acquire(generation);
    __threadfence();
    if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
      atomicExch(arrived, 0u);
      __threadfence();
      atomicAdd(generation, 1u);
    } else {
      // A CTA that never arrives (a fault elsewhere) ends the kernel with an error instead of a hang.
      for (long long spins = 0; load_acquire(generation) == gen; ++spins) {
        if (spins > (1ll << 26)) __trap();
        __nanosleep(32);
      }
    }
    __threadfence();
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

__device__ __forceinline__ float squares(const V8& p) { return prologue::squares(p); }

// The GEMM input after a residual step: v = R (S null), R + norm(S) s_norm (post-norm), or R + S (pre-norm);
// then the input is v, or v normalised by `after` (pre-norm's sublayer norm, the final norm). CTA 0 stores v in
// `out` (where given): the residual the next step adds to. Each pass reloads its rows (from L2) rather than
// holding them, which keeps the kernel's registers for the GEMM.
__device__ void residual_step(const Args& a, Smem& s, const bf16* R, const bf16* S, const bf16* s_norm,
                              const bf16* after, bf16* out) {
  const int tid = threadIdx.x, vectors = a.D / 8;
  float rstd = 1;
  if (S && s_norm) {
    float ss = 0;
    for (int j = tid; j < vectors; j += kConsumers) ss += squares(load_l2(S + j * 8));
    rstd = rms::rstd(group_sum(ss, s), a.D, a.eps);
  }
  float ss = 0;
  for (int j = tid; j < vectors; j += kConsumers) {
    const V8 r = load_l2(R + j * 8);
    V8 v = r;
    if (S) {
      const V8 sub = load_l2(S + j * 8);
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
    ss += squares(v);
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

__device__ __forceinline__ float dot8(const V8& w, const float (&x)[8]) {
  float acc = 0;
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    const float2 wf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.v[e]));
    acc = fmaf(wf.x, x[e], acc);
    acc = fmaf(wf.y, x[e + 1], acc);
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
        s.gate[local] = out;  // read back by this same thread at the up row's item (same slice, same items)
      } else {
        const float g = to_float(s.gate[local]);
        a.ACT[row] = from_float<bf16>(g * sigmoid(g) * to_float(out));  // SwiGLU as the swiglu kernel rounds it
      }
      break;
    case Kind::down:
      a.Dn[row] = out;
      break;
    default:
      a.logits[row] = out;
  }
}

// This CTA's items of a GEMM phase, from the ring (n: the stream's next item; buf: the warp sums' buffer).
__device__ void gemv(const Args& a, Smem& s, const Ring& ring, const Phase& p, int& n, int& buf) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int K = p.K, slice = K / kWarps, vectors = slice / 8;
  float x[kMaxVectorsPerLane][8];
#pragma unroll
  for (int i = 0; i < kMaxVectorsPerLane; ++i) {
    const int v = lane + 32 * i;
    if (v >= vectors) continue;
    const V8 xv = load_pack<8>(s.u.x + warp * slice + v * 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[i][e] = to_float(xv.v[e]);
  }
  for_each_item(p, [&](int m, int lo, int r0, int rows) {
    ring.wait_full(n);
    const bf16* stage = s.ring[n % kStages] + warp * slice;
    for (int r = 0; r < rows; ++r) {
      float acc = 0;
#pragma unroll
      for (int i = 0; i < kMaxVectorsPerLane; ++i) {
        const int v = lane + 32 * i;
        if (v < vectors) acc += dot8(load_pack<8>(stage + r * K + v * 8), x[i]);
      }
      acc = warp_sum(acc);
      if (lane == 0) s.part[buf][warp][r] = acc;
    }
    ring.release(n, lane);
    group_sync();
    if (tid < rows) {
      float y = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) y += s.part[buf][w][tid];
      epilogue(a, s, p.kind, m, r0 - lo + tid, r0 + tid, y);
    }
    buf ^= 1;
    ++n;
  });
}

// Attention over the cache and the new token for this CTA's (KV head, split) items; see the file's comment.
template <int DH, int G>
__device__ __noinline__ void attention(const Args& a, Smem& s, const LayerPtrs& y, int past) {
  constexpr int kPer = DH / 32, kChunks = DH / 8;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int len = past + 1, tiles = (len + kTileKeys - 1) / kTileKeys;
  const int per_head = max(1, int(gridDim.x) / a.Hk);
  const int tiles_per_split = (tiles + per_head - 1) / per_head;
  const int splits = (tiles + tiles_per_split - 1) / tiles_per_split;
  const int items = a.Hk * splits;
  if (int(blockIdx.x) >= items) return;
  const bf16* q_raw = a.QKV;
  const bf16* k_raw = a.QKV + a.Hq * DH;
  const bf16* v_raw = k_raw + a.Hk * DH;
  AttentionSmem& t = s.u.attn;

  // QK-norm's 1 / rms of the whole q and k rows, summed as the decode prologue sums them.
  float rstd_q = 1, rstd_k = 1;
  if (y.q_norm) {
    float2 part = prologue::part_sums<bf16, 8>(q_raw, k_raw, a.Hq * DH / 8, a.Hk * DH / 8, tid);
    part.x = warp_sum(part.x);
    part.y = warp_sum(part.y);
    if (lane == 0) s.sums[warp] = part;
    group_sync();
    const float2 ss = prologue::sum_parts(s.sums);
    group_sync();
    rstd_q = prologue::rstd(true, ss.x, a.Hq * DH, a.eps);
    rstd_k = prologue::rstd(true, ss.y, a.Hk * DH, a.eps);
  }

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int hk = item % a.Hk, split = item / a.Hk;
    const int p0 = split * tiles_per_split * kTileKeys, p1 = min(len, p0 + tiles_per_split * kTileKeys);
    // The group's query heads and the new key, normalised and rotated as the prologue does; the new value.
    if (tid < G * kChunks) {
      const int g = tid / kChunks, c = tid % kChunks;
      prologue::Rotation<bf16> rot;
      rot.load(q_raw, y.q_norm, a.angles, hk * G + g, DH, c);
      const V8 q = rot.rotate(rstd_q);
#pragma unroll
      for (int e = 0; e < 8; ++e) t.q[g][c * 8 + e] = to_float(q.v[e]);
    } else if (tid < (G + 1) * kChunks) {
      const int c = tid - G * kChunks;
      prologue::Rotation<bf16> rot;
      rot.load(k_raw, y.k_norm, a.angles, hk, DH, c);
      const V8 k = rot.rotate(rstd_k), v = load_pack<8>(v_raw + hk * DH + c * 8);
      store_pack<8>(t.k + c * 8, k);
      store_pack<8>(t.v + c * 8, v);
      if (p0 <= past && past < p1) {  // this split holds the new position: it writes the cache there
        const int64_t at = (int64_t(hk) * a.capacity + past) * DH + c * 8;
        store_pack<8>(y.cache_k + at, k);
        store_pack<8>(y.cache_v + at, v);
      }
    }
    group_sync();

    float q[G][kPer], m[G], l[G], acc[G][kPer];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -INFINITY, l[g] = 0;
#pragma unroll
      for (int e = 0; e < kPer; ++e) q[g][e] = t.q[g][lane * kPer + e], acc[g][e] = 0;
    }
    // Warp w's 8 keys of a tile: positions p + 8 w + j; the new key from shared memory.
    using KV = Pack<bf16, kPer>;
    const auto load_keys = [&](int p, KV(&kk)[8], KV(&vv)[8]) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int pos = p + warp * 8 + j;
        if (pos < past) {
          const int64_t at = (int64_t(hk) * a.capacity + pos) * DH + lane * kPer;
          kk[j] = load_pack<kPer>(y.cache_k + at);
          vv[j] = load_pack<kPer>(y.cache_v + at);
        } else if (pos == past) {
          kk[j] = load_pack<kPer>(t.k + lane * kPer);
          vv[j] = load_pack<kPer>(t.v + lane * kPer);
        } else {  // past the new token: a weight of 0, which must not meet a NaN
#pragma unroll
          for (int e = 0; e < kPer; ++e) kk[j].v[e] = vv[j].v[e] = from_float<bf16>(0.f);
        }
      }
    };
    // Head dim 64 loads the next tile while it scores this one; 128's registers hold one tile.
    constexpr int kAhead = DH == 64 ? 2 : 1;
    KV kk[kAhead][8], vv[kAhead][8];
    if constexpr (kAhead == 2) load_keys(p0, kk[1], vv[1]);
    for (int p = p0; p < p1; p += kTileKeys) {
      if constexpr (kAhead == 2) {
#pragma unroll
        for (int j = 0; j < 8; ++j) kk[0][j] = kk[1][j], vv[0][j] = vv[1][j];
        if (p + kTileKeys < p1) load_keys(p + kTileKeys, kk[1], vv[1]);
      } else {
        load_keys(p, kk[0], vv[0]);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float sc[8], top = m[g];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float part = 0;
#pragma unroll
          for (int e = 0; e < kPer; ++e) part += q[g][e] * to_float(kk[0][j].v[e]);
          part = warp_sum(part);
          sc[j] = p + warp * 8 + j < len ? part * a.scale_log2 : -INFINITY;
          top = fmaxf(top, sc[j]);
        }
        if (top == -INFINITY) continue;  // none of this warp's keys in the cache yet
        const float keep = exp2f(m[g] - top);
        l[g] *= keep;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[g][e] *= keep;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float w = exp2f(sc[j] - top);
          l[g] += w;
#pragma unroll
          for (int e = 0; e < kPer; ++e) acc[g][e] += w * to_float(vv[0][j].v[e]);
        }
        m[g] = top;
      }
    }
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
      const int64_t at = int64_t(hk * G + g) * gridDim.x + split;
      a.part_acc[at * DH + e] = num;
      if (e == 0) a.part_ml[at] = make_float2(M, den);
      __threadfence();  // the partial, published before the split is counted
    }
    group_sync();
    if (tid == 0) s.last = atomicAdd(&a.head_counters[hk], 1u) == unsigned(splits - 1);
    group_sync();
    if (s.last) {
      // The last split of this KV head to arrive merges the group's partials.
      __threadfence();
      for (int i = tid; i < G * DH; i += kConsumers) {
        const int g = i / DH, e = i % DH, hq = hk * G + g;
        const int64_t base = int64_t(hq) * gridDim.x;
        float M = -INFINITY;
#pragma unroll 4
        for (int sp = 0; sp < splits; ++sp) M = fmaxf(M, __ldcg(&a.part_ml[base + sp]).x);
        float den = 0, num = 0;
#pragma unroll 4
        for (int sp = 0; sp < splits; ++sp) {
          const float2 ml = __ldcg(&a.part_ml[base + sp]);
          const float f = exp2f(ml.x - M);
          den += f * ml.y;
          num += f * __ldcg(&a.part_acc[(base + sp) * DH + e]);
        }
        a.A[hq * DH + e] = from_float<bf16>(num / den);
      }
      if (tid == 0) a.head_counters[hk] = 0;  // for the next layer, past its barriers
    }
    group_sync();  // the shared rows are the next item's
  }
}

// attention<DH, G> for the model's head dim and group.
__device__ void attend(const Args& a, Smem& s, const LayerPtrs& y, int past) {
  const int G = a.Hq / a.Hk;
  const auto by_group = [&]<int DH>() {
    if (G == 1)
      attention<DH, 1>(a, s, y, past);
    else if (G == 2)
      attention<DH, 2>(a, s, y, past);
    else if (G == 3)
      attention<DH, 3>(a, s, y, past);
    else
      attention<DH, 4>(a, s, y, past);
  };
  if (a.dh == 64)
    by_group.template operator()<64>();
  else
    by_group.template operator()<128>();
}

__device__ void consume(const Args& a, Smem& s, const Ring& ring) {
  const int past = *a.past;
  int n = 0, buf = 0;
  for (int l = 0; l < a.L; ++l) {
    const LayerPtrs& y = a.layers[l];
    if (l == 0)
      residual_step(a, s, a.x0, nullptr, nullptr, a.pre_norm ? y.attn_norm : nullptr, a.X);
    else
      residual_step(a, s, a.H, a.Dn, a.pre_norm ? nullptr : a.layers[l - 1].ffn_norm,
                    a.pre_norm ? y.attn_norm : nullptr, a.X);
    gemv(a, s, ring, phase_of(a, l, Kind::qkv), n, buf);
    grid_sync(a);
    attend(a, s, y, past);
    grid_sync(a);
    load_input(s, a.A, a.Hq * a.dh);
    gemv(a, s, ring, phase_of(a, l, Kind::out), n, buf);
    grid_sync(a);
    residual_step(a, s, a.X, a.O, a.pre_norm ? nullptr : y.attn_norm, a.pre_norm ? y.ffn_norm : nullptr, a.H);
    gemv(a, s, ring, phase_of(a, l, Kind::gate_up), n, buf);
    grid_sync(a);
    load_input(s, a.ACT, a.F);
    gemv(a, s, ring, phase_of(a, l, Kind::down), n, buf);
    grid_sync(a);
  }
  residual_step(a, s, a.H, a.Dn, a.pre_norm ? nullptr : a.layers[a.L - 1].ffn_norm, a.final_norm, nullptr);
  gemv(a, s, ring, phase_of(a, 0, Kind::head), n, buf);
}

// The producer: every item of every phase, in the consumers' order, as soon as its stage is free.
__device__ void produce(const Args& a, Smem& s, const Ring& ring) {
  const uint32_t base = uint32_t(__cvta_generic_to_shared(&s.ring[0][0]));
  int n = 0;
  for_each_phase(a, [&](const Phase& p) {
    for_each_item(p, [&](int m, int, int r0, int rows) {
      const uint32_t bytes = uint32_t(rows) * uint32_t(p.K) * 2u;
      ring.acquire(n, bytes);
      flash::bulk_load(base + uint32_t(n % kStages) * uint32_t(kStageBytes), p.w[m] + int64_t(r0) * p.K, bytes,
                       ring.full(n));
      ++n;
    });
  });
}

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const Ring ring{uint32_t(__cvta_generic_to_shared(s.bars))};
  if (threadIdx.x == 0) ring.init();
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
  w.counters = Tensor::zeros({m.kv_heads + 2}, DType::i32, device);  // the merge counters, then the barrier's
  CUDA_CHECK(cudaFuncSetAttribute(cuda::persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(sizeof(cuda::Smem))));
}

PersistentDecode::~PersistentDecode() = default;

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
  a.barrier = a.head_counters + m.kv_heads;

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
