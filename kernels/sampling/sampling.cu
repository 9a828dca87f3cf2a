// Sampling one token per row, one block per row, without sorting the row.
//
// Each logit gets an order-preserving 32-bit key (descending logit = descending key) and a weight
// exp((logit - max) / temperature) in 64-bit fixed point, so every mass below is an integer sum: exact,
// and the same whatever order the threads add in. A kept set is described by a cut: keys above
// cut.key, and the tokens of key cut.key up to index cut.last (ties go to the lower index, as on the
// CPU). The passes over the row:
//   1. max and argmax (greedy rows, top_k = 1, and rows with no finite maximum stop here);
//   2. top-k: a radix select over the keys (four 8-bit digits, histograms of counts) finds the k-th
//      key; a split tie group is resolved by counting ties in index order;
//   3. top-p: the kept mass, then the same radix select over masses finds the key where the mass from
//      the top first reaches top_p of it, and how many of its ties are needed;
//   4. the kept mass per thread, an exclusive scan over threads, and the thread whose span holds
//      ceil(u * mass) walks its own tokens to the chosen one (u: Philox's uniform, as the CPU's).
// The walk order (thread by thread) differs from the CPU's (most likely first), so the same uniform
// may pick another token; the distribution is the same.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/philox.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"
#include "kernels/sampling/sampling.h"

namespace fathom::cuda {

namespace {

using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 4;   // tiles of the row whose loads each thread has in flight together
constexpr int kBins = 256;  // radix digits of 8 bits: four passes over a 32-bit key
constexpr uint32_t kNoBin = kBins;
constexpr unsigned kFullMask = 0xffffffffu;

struct Params {
  float temperature;
  int64_t top_k;  // applied when 1 < top_k < vocab
  double top_p;   // applied when < 1
  uint64_t seed;
  int shift;  // weights are exp(...) * 2^shift: a row's total stays below 2^62
};

// Keys above `key`, and the tokens of key `key` with index <= last.
struct Cut {
  uint32_t key;
  int64_t last;
};

struct Shared {
  u64 hist[kBins];
  u64 scratch[kWarps];
  float best_value[kWarps];
  int best_index[kWarps];
  uint32_t warp_count[kWarps];
  uint32_t bin;
  u64 above;
  int64_t tie_index;
};

// A logit as the selection sees it: NaN counts as -inf, and -0 as +0 (equal logits get equal keys).
__device__ __forceinline__ float clean(float v) {
  if (v != v) return -INFINITY;
  return v == 0.0f ? 0.0f : v;
}

// Order-preserving: a > b <=> key_of(a) > key_of(b), for cleaned values.
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
__device__ __forceinline__ float value_of(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

__device__ __forceinline__ u64 weight_of(float v, float top, const Params& p) {
  if (v == -INFINITY) return 0;
  return __float2ull_rn(scalbnf(expf((v - top) / p.temperature), p.shift));
}

__device__ __forceinline__ bool kept(uint32_t key, int64_t i, const Cut& cut) {
  return key > cut.key || (key == cut.key && i <= cut.last);
}

// Calls f(value, index, valid) over the row's elements that belong to `thread`, in a fixed order: tiles
// of kThreads * kPer elements, each thread kPer adjacent ones, kBatch tiles' loads issued before any is
// used. The number of calls depends only on n, so every thread of a warp makes them together (f may
// use warp intrinsics); past the row's end valid is false and the value NaN.
template <typename T, typename F>
__device__ __forceinline__ void for_each_logit(const T* row, int64_t n, int thread, F&& f) {
  constexpr int kPer = 16 / sizeof(T);
  constexpr int64_t kTile = int64_t(kThreads) * kPer;
  for (int64_t base = 0; base < n; base += kTile * kBatch) {
    T raw[kBatch][kPer];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int64_t i = base + b * kTile + int64_t(thread) * kPer + j;
        raw[b][j] = i < n ? row[i] : from_float<T>(0.0f);
      }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int64_t i = base + b * kTile + int64_t(thread) * kPer + j;
        f(i < n ? to_float(raw[b][j]) : NAN, i, i < n);
      }
  }
}

// Adds `amount` to hist[bin] for each lane of the warp whose bin is not kNoBin; the lanes of one bin
// add their sum once. All 32 lanes call. Integer adds: the result is independent of their order.
template <bool kCounts>
__device__ __forceinline__ void add_to_bin(u64* hist, uint32_t bin, u64 amount) {
  const unsigned peers = __match_any_sync(kFullMask, bin);
  const bool leader = int(threadIdx.x % 32) == __ffs(peers) - 1;
  if constexpr (kCounts) {
    if (leader && bin != kNoBin) atomicAdd(&hist[bin], u64(__popc(peers)));
  } else {
    // amount < 2^63 as three 21-bit slices: each slice's sum over 32 lanes fits in 32 bits.
    const u64 lo = __reduce_add_sync(peers, unsigned(amount & 0x1fffffu));
    const u64 mid = __reduce_add_sync(peers, unsigned((amount >> 21) & 0x1fffffu));
    const u64 hi = __reduce_add_sync(peers, unsigned(amount >> 42));
    if (leader && bin != kNoBin) atomicAdd(&hist[bin], lo + (mid << 21) + (hi << 42));
  }
}

__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
  return i >= 0 && (best_i < 0 || v > best_v || (v == best_v && i < best_i));
}

// The block's largest non-NaN value and its lowest index (-1 when there is none), to every thread.
__device__ void block_argmax(float& v, int& i, Shared& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, offset);
    const int oi = __shfl_xor_sync(kFullMask, i, offset);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
  if (lane == 0) s.best_value[warp] = v, s.best_index[warp] = i;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? s.best_value[lane] : -INFINITY;
    i = lane < kWarps ? s.best_index[lane] : -1;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(kFullMask, v, offset);
      const int oi = __shfl_xor_sync(kFullMask, i, offset);
      if (better(ov, oi, v, i)) v = ov, i = oi;
    }
    if (lane == 0) s.best_value[0] = v, s.best_index[0] = i;
  }
  __syncthreads();
  v = s.best_value[0];
  i = s.best_index[0];
  __syncthreads();
}

// The sum of the values of the threads before this one; `total` gets the block's sum.
__device__ u64 block_exclusive_sum(u64 v, u64& total, Shared& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  u64 inclusive = v;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const u64 other = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) s.scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    u64 w = lane < kWarps ? s.scratch[lane] : 0;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const u64 other = __shfl_up_sync(kFullMask, w, offset);
      if (lane >= offset) w += other;
    }
    if (lane < kWarps) s.scratch[lane] = w;
  }
  __syncthreads();
  const u64 before = (warp == 0 ? 0 : s.scratch[warp - 1]) + inclusive - v;
  total = s.scratch[kWarps - 1];
  __syncthreads();
  return before;
}

// Run by warp 0 after a histogram pass: walking the bins from the top one down, the bin where the
// running sum first reaches `need` (1 <= need <= the histogram's sum), and the sum of the bins above.
__device__ void select_bin(Shared& s, u64 need) {
  constexpr int kPerLane = kBins / 32;
  const int lane = threadIdx.x % 32;
  const int top = kBins - 1 - kPerLane * lane;  // lane 0 holds the top bins
  u64 own = 0;
  for (int j = 0; j < kPerLane; ++j) own += s.hist[top - j];
  u64 inclusive = own;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const u64 other = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  u64 acc = inclusive - own;
  if (acc < need && need <= inclusive) {
    for (int j = 0; j < kPerLane; ++j) {
      const u64 here = s.hist[top - j];
      if (acc + here >= need) {
        s.bin = uint32_t(top - j);
        s.above = acc;
        break;
      }
      acc += here;
    }
  }
}

struct Selection {
  uint32_t key;  // the key where the running sum (from the largest key down) reaches the need
  u64 need;      // what is still needed from the tokens of that key (>= 1)
  u64 at_key;    // what the tokens of that key hold together
};

// Radix select over the members of `within`: the key at which the sum of amount(value) over members,
// taken from the largest key down, first reaches `need` (counts of tokens when kCounts).
template <bool kCounts, typename T, typename Amount>
__device__ Selection radix_select(const T* row, int64_t n, const Cut& within, u64 need, Amount&& amount, Shared& s) {
  uint32_t prefix = 0, mask = 0;
  u64 at_key = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
    __syncthreads();
    for_each_logit(row, n, threadIdx.x, [&](float raw, int64_t i, bool valid) {
      const float v = clean(raw);
      const uint32_t key = key_of(v);
      const bool member = valid && (key & mask) == prefix && kept(key, i, within);
      const uint32_t bin = member ? (key >> shift) & 0xffu : kNoBin;
      if constexpr (kCounts) {
        add_to_bin<true>(s.hist, bin, 1);
      } else {
        add_to_bin<false>(s.hist, bin, member ? amount(v) : 0);
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) select_bin(s, need);
    __syncthreads();
    need -= s.above;
    at_key = s.hist[s.bin];
    prefix |= s.bin << shift;
    mask |= 0xffu << shift;
    __syncthreads();  // every thread has read hist before the next pass clears it
  }
  return {prefix, need, at_key};
}

// The index of the nth (1-based) token of key `key` with index <= last, counting in index order.
template <typename T>
__device__ int64_t nth_tie(const T* row, int64_t n, uint32_t key, int64_t last, u64 nth, Shared& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  u64 seen = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const bool tie = i < n && i <= last && key_of(clean(to_float(row[i]))) == key;
    const unsigned ballot = __ballot_sync(kFullMask, tie);
    if (lane == 0) s.warp_count[warp] = __popc(ballot);
    __syncthreads();
    u64 before = seen + __popc(ballot & ((1u << lane) - 1u)), chunk = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += s.warp_count[w];
      chunk += s.warp_count[w];
    }
    if (tie && before + 1 == nth) s.tie_index = i;
    __syncthreads();
    seen += chunk;
    if (seen >= nth) break;
  }
  __syncthreads();
  return s.tie_index;
}

// The cut at `key` that keeps the first `needed` of its `ties` tokens with index <= last.
template <typename T>
__device__ Cut cut_at(const T* row, int64_t n, uint32_t key, u64 needed, u64 ties, int64_t last, Shared& s) {
  return Cut{key, needed < ties ? nth_tie(row, n, key, last, needed, s) : last};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const T* logits, int64_t n, const int64_t* draw_indices, Params p, int32_t* out) {
  __shared__ Shared s;
  const T* row = logits + int64_t(blockIdx.x) * n;

  // 1. The largest logit and its lowest index, NaNs skipped (argmax_rows' answer).
  float top = -INFINITY;
  int argmax = -1;
  for_each_logit(row, n, threadIdx.x, [&](float raw, int64_t i, bool valid) {
    if (valid && raw == raw && (argmax < 0 || raw > top)) top = raw, argmax = int(i);
  });
  block_argmax(top, argmax, s);
  top = clean(top);
  if (argmax < 0 || !isfinite(top) || p.top_k == 1) {
    if (threadIdx.x == 0) out[blockIdx.x] = argmax < 0 ? 0 : argmax;
    return;
  }
  const auto weight = [&](float v) { return weight_of(v, top, p); };

  // 2. Top-k by count.
  Cut cut{0, n};  // every token: all keys are above 0
  if (p.top_k > 1 && p.top_k < n) {
    const Selection sel = radix_select<true>(row, n, cut, u64(p.top_k), weight, s);
    cut = cut_at(row, n, sel.key, sel.need, sel.at_key, n, s);
  }

  // 3. Top-p by mass, within what top-k kept.
  if (p.top_p < 1) {
    u64 own = 0;
    for_each_logit(row, n, threadIdx.x, [&](float raw, int64_t i, bool valid) {
      const float v = clean(raw);
      if (valid && kept(key_of(v), i, cut)) own += weight(v);
    });
    const u64 total = block_sum(own, s.scratch);
    const u64 target = min(total, max(u64(1), u64(ceil(p.top_p * double(total)))));
    const Selection sel = radix_select<false>(row, n, cut, target, weight, s);
    const u64 w = weight(value_of(sel.key));  // > 0: the selected key holds mass
    cut = cut_at(row, n, sel.key, (sel.need + w - 1) / w, sel.at_key / w, sel.key == cut.key ? cut.last : n, s);
  }

  // 4. The draw: the kept mass per thread, then the thread whose span holds the target walks its tokens.
  u64 own = 0;
  for_each_logit(row, n, threadIdx.x, [&](float raw, int64_t i, bool valid) {
    const float v = clean(raw);
    if (valid && kept(key_of(v), i, cut)) own += weight(v);
  });
  u64 total = 0;
  const u64 before = block_exclusive_sum(own, total, s);
  // u = a / 2^24 exactly (philox::to_unit); the target is ceil(u * total), computed without rounding.
  const u64 a = (philox::draw(p.seed, uint64_t(draw_indices[blockIdx.x]), 0).v[0] >> 8) + 1;
  const u64 low = a * total, high = __umul64hi(a, total);
  const u64 target = ((high << 40) | (low >> 24)) + ((low & 0xffffffu) != 0 ? 1 : 0);
  if (before < target && target <= before + own) {
    u64 acc = before;
    int64_t chosen = -1;
    for_each_logit(row, n, threadIdx.x, [&](float raw, int64_t i, bool valid) {
      const float v = clean(raw);
      if (chosen >= 0 || !valid || !kept(key_of(v), i, cut)) return;
      acc += weight(v);
      if (acc >= target) chosen = i;
    });
    out[blockIdx.x] = int32_t(chosen);
  }
}

template <typename T>
void launch(const Tensor& logits, const Params& p, const Tensor& draw_indices, Tensor& out) {
  sample_rows_kernel<T><<<unsigned(logits.dim(0)), kThreads, 0, stream_for(logits.device())>>>(
      static_cast<const T*>(logits.raw()), logits.dim(1), static_cast<const int64_t*>(draw_indices.raw()), p,
      static_cast<int32_t*>(out.raw()));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

Tensor sample_rows(const Tensor& logits, const SamplingOptions& options, const Tensor& draw_indices) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  Tensor out = Tensor::empty({rows}, DType::i32, logits.device());
  if (rows == 0) return out;
  FATHOM_CHECK(rows <= 2147483647, "sample_rows: ", rows, " rows exceed the grid");
  // A temperature below float's range would divide by zero: the smallest normal float acts the same.
  const Params p{float(std::clamp(options.temperature, double(FLT_MIN), double(FLT_MAX))), options.top_k, options.top_p,
                 options.seed, 62 - int(std::bit_width(uint64_t(vocab)))};
  switch (logits.dtype()) {
    case DType::f32:
      launch<float>(logits, p, draw_indices, out);
      break;
    case DType::bf16:
      launch<__nv_bfloat16>(logits, p, draw_indices, out);
      break;
    case DType::f16:
      launch<__half>(logits, p, draw_indices, out);
      break;
    default:
      FATHOM_FAIL("sample_rows: the CUDA kernel takes F32, BF16 or F16 logits, got ", dtype_name(logits.dtype()));
  }
  return out;
}

}  // namespace fathom::cuda
