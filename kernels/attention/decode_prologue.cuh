// The decode prologue's arithmetic, shared by its own kernel (decode_prologue.cu) and by attention's split
// kernel that does the prologue's work itself (decode_attention.cu): the same sums in the same order and
// the same roundings, so both give the same bits.
#pragma once
#include <cstdint>

#include "kernels/runtime/device_math.cuh"

namespace fathom::cuda::prologue {

// The sums of squares of the q and k rows, in a fixed order: the rows are cut into 16-byte vectors (q's,
// then k's, numbered together); vector i belongs to part i % kParts, a part adds each of its vectors'
// squares (the vector's own sum first, in element order) in increasing i; then 32 consecutive parts are
// added by warp_sum and the kParts / 32 results in order (sum_parts). The prologue kernel is kParts
// threads, one part each.
constexpr int kParts = 256;
constexpr int kPartWarps = kParts / 32;

// A vector's sum of squares, in element order.
template <typename T, int N>
__device__ __forceinline__ float squares(const Pack<T, N>& p) {
  float ss = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) ss += to_float(p.v[j]) * to_float(p.v[j]);
  return ss;
}

// One part's sums (x: q's, y: k's) over rows of vq and vk vectors of N elements.
template <typename T, int N>
__device__ __forceinline__ float2 part_sums(const T* q, const T* k, int vq, int vk, int part) {
  float2 s = make_float2(0.f, 0.f);
  for (int i = part; i < vq + vk; i += kParts) {
    const Pack<T, N> p = load_pack<N>(i < vq ? q + int64_t(i) * N : k + int64_t(i - vq) * N);
    (i < vq ? s.x : s.y) += squares(p);
  }
  return s;
}

// The total of the kPartWarps warp sums, in order.
__device__ __forceinline__ float2 sum_parts(const float2 (&warp_sums)[kPartWarps]) {
  float2 s = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kPartWarps; ++w) s.x += warp_sums[w].x, s.y += warp_sums[w].y;
  return s;
}

// RMSNorm's 1 / rms of a row of n elements with sum of squares ss (1 without a norm).
__device__ __forceinline__ float rstd(bool normed, float ss, int n, float eps) {
  return normed ? 1.0f / sqrtf(ss / float(n) + eps) : 1.f;
}

// x normalised with weight w (rounded to T as rms_norm's output is), or x itself without a norm.
template <typename T>
__device__ __forceinline__ float normed_value(T x, T w, bool has_norm, float rstd) {
  return has_norm ? to_float(from_float<T>(to_float(x) * rstd * to_float(w))) : to_float(x);
}
template <typename T>
__device__ __forceinline__ float normed(const T* x, const T* w, int c, float rstd) {
  return w ? normed_value(x[c], w[c], true, rstd) : to_float(x[c]);
}

// Element j of a head of d elements rotated as rope does, from the normalised values at j and at its
// partner j +- d/2 and the angle of pair j % (d/2): (a, b) = (first, second) of the pair. The multiply-adds
// are spelled out so that no kernel's compilation contracts them differently.
template <typename T>
__device__ __forceinline__ T rotated(float at_j, float at_partner, bool first_half, float2 cos_sin) {
  const float a = first_half ? at_j : at_partner, b = first_half ? at_partner : at_j;
  return from_float<T>(first_half ? __fmaf_rn(a, cos_sin.x, __fmul_rn(-b, cos_sin.y))
                                  : __fmaf_rn(b, cos_sin.x, __fmul_rn(a, cos_sin.y)));
}

// One lane's 8 elements (chunk) of head h of a q or k row, normalised and rotated: load() issues every load
// (the elements, their RoPE partners d/2 away, both norm weights and the pairs' angles) and rotate() uses them
// once the row's 1 / rms is known, so a kernel can issue them before its sums' barrier.
template <typename T>
struct Rotation {
  Pack<T, 8> x, partner, w, w_partner;
  float2 cos_sin[8];
  bool first_half, normed;

  __device__ __forceinline__ void load(const T* row, const T* weight, const float2* angles, int64_t h, int d,
                                       int chunk) {
    const int j = chunk * 8, half = d / 2;
    first_half = j < half;
    normed = weight != nullptr;
    const int other = first_half ? j + half : j - half, pair = first_half ? j : other;
    x = load_pack<8>(row + h * d + j);
    partner = load_pack<8>(row + h * d + other);
    if (normed) w = load_pack<8>(weight + h * d + j), w_partner = load_pack<8>(weight + h * d + other);
#pragma unroll
    for (int e = 0; e < 8; ++e) cos_sin[e] = angles[pair + e];
  }
  __device__ __forceinline__ Pack<T, 8> rotate(float rstd) const {
    Pack<T, 8> out;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      out.v[e] = rotated<T>(normed_value(x.v[e], w.v[e], normed, rstd),
                            normed_value(partner.v[e], w_partner.v[e], normed, rstd), first_half, cos_sin[e]);
    return out;
  }
};

}  // namespace fathom::cuda::prologue
