#include "kernels/attention/decode_prologue.h"

#include <cmath>
#include <limits>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/runtime/argument_checks.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

namespace {

constinit KernelChoice<DecodePrologue> choice_in_force("FATHOM_DECODE_PROLOGUE", DecodePrologue::fused, parse_fusion);
// Unset: fused. Its GPU tests passed and it took the 1B's batch-1 step from 1.420 to 1.354 ms on an H100, no
// cell slower by more than a repeat's spread (bench/results/2026-12-06_prologue_and_residual_step_h100.md).
constinit KernelChoice<Fusion> in_attention_in_force("FATHOM_PROLOGUE_IN_ATTENTION", Fusion::fused, parse_fusion);

void check_rows(const char* what, const Tensor& x, const Tensor& q) {
  FATHOM_CHECK(x.defined() && x.rank() == 4 && x.dim(0) == q.dim(0) && x.dim(1) == 1 && x.dim(3) == q.dim(3),
               "decode_prologue: ", what, " must be [B, 1, H, d] = [", q.dim(0), ", 1, H, ", q.dim(3), "], got ",
               x.defined() ? describe(x) : std::string("undefined"));
  FATHOM_CHECK(x.dtype() == q.dtype(), "decode_prologue: ", what, " ", describe(x), " must have q's dtype ",
               dtype_name(q.dtype()));
}

// Every check of decode_prologue's arguments; returns their device.
Device check_prologue(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm, const Tensor& angles,
                      const Tensor& cache_k, const Tensor& cache_v, const Tensor& past) {
  const Tensor &q_norm = norm.q, &k_norm = norm.k;
  FATHOM_CHECK(q.defined() && q.rank() == 4 && q.dim(1) == 1 && q.dim(2) >= 1 && q.dim(3) >= 2 && q.dim(3) % 2 == 0,
               "decode_prologue: q must be [B, 1, Hq, d] with heads and d even (one new token per sequence), got ",
               q.defined() ? describe(q) : std::string("undefined"));
  check_rows("k", k, q);
  check_rows("v", v, q);
  FATHOM_CHECK(v.dim(2) == k.dim(2) && k.dim(2) >= 1, "decode_prologue: k ", describe(k), " and v ", describe(v),
               " must have the same heads, at least one");
  FATHOM_CHECK(q_norm.defined() == k_norm.defined(), "decode_prologue: q_norm and k_norm come together (QK-norm) or ",
               "not at all");
  if (q_norm.defined()) {
    FATHOM_CHECK(q_norm.rank() == 1 && q_norm.dim(0) == q.dim(2) * q.dim(3) && q_norm.dtype() == q.dtype(),
                 "decode_prologue: q_norm must be [Hq d] = [", q.dim(2) * q.dim(3), "] of q's dtype, got ",
                 describe(q_norm));
    FATHOM_CHECK(k_norm.rank() == 1 && k_norm.dim(0) == k.dim(2) * k.dim(3) && k_norm.dtype() == q.dtype(),
                 "decode_prologue: k_norm must be [Hk d] = [", k.dim(2) * k.dim(3), "] of q's dtype, got ",
                 describe(k_norm));
    FATHOM_CHECK(norm.q_eps > 0 && norm.k_eps > 0, "decode_prologue: the norms' eps must be positive, got ", norm.q_eps,
                 " and ", norm.k_eps);
  }
  const int64_t B = q.dim(0), half = q.dim(3) / 2;
  const bool shared = angles.defined() && angles.rank() == 3 && angles.dim(0) == 1;
  const bool per_row = angles.defined() && angles.rank() == 4 && angles.dim(0) == B && angles.dim(1) == 1;
  FATHOM_CHECK((shared || per_row) && angles.dim(-2) == half && angles.dim(-1) == 2,
               "decode_prologue: angles must be rope_angles' [1, d/2, 2] or [B, 1, d/2, 2] = [", B, ", 1, ", half,
               ", 2], got ", angles.defined() ? describe(angles) : std::string("undefined"));
  for (const Tensor* cache : {&cache_k, &cache_v})
    FATHOM_CHECK(cache->defined() && cache->rank() == 4 && cache->dim(0) == B && cache->dim(1) == k.dim(2) &&
                     cache->dim(3) == q.dim(3) && cache->dtype() == q.dtype(),
                 "decode_prologue: the caches must be [B, Hk, capacity, d] = [", B, ", ", k.dim(2), ", capacity, ",
                 q.dim(3), "] of q's dtype, got ", cache->defined() ? describe(*cache) : std::string("undefined"));
  FATHOM_CHECK(cache_k.dim(2) == cache_v.dim(2), "decode_prologue: the caches differ in capacity");
  FATHOM_CHECK(cache_k.dim(2) <= std::numeric_limits<int32_t>::max(),
               "decode_prologue: a capacity past 2^31 - 1 positions (I32 past)");
  check_position_counts("decode_prologue", past, B);
  const Device device =
      common_device("decode_prologue", {&q, &k, &v, &q_norm, &k_norm, &angles, &cache_k, &cache_v, &past});
  FATHOM_CHECK(angles.dtype() == (device.is_cpu() ? DType::f64 : DType::f32), "decode_prologue: angles ",
               describe(angles), " are not rope_angles' table for ", device.str());
  return device;
}

}  // namespace

DecodePrologue decode_prologue_choice() { return choice_in_force.get(); }

void set_decode_prologue_choice(DecodePrologue choice) { choice_in_force.set(choice); }

Fusion prologue_in_attention_choice() { return in_attention_in_force.get(); }

void set_prologue_in_attention_choice(Fusion choice) { in_attention_in_force.set(choice); }

Tensor decode_prologue(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm, const Tensor& angles,
                       Tensor& cache_k, Tensor& cache_v, const Tensor& past) {
  const Device device = check_prologue(q, k, v, norm, angles, cache_k, cache_v, past);
  return on_device("decode_prologue", device, FATHOM_KERNEL(decode_prologue), q, k, v, norm, angles, cache_k, cache_v,
                   past);
}

bool prologue_fits_attention(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                             const Tensor& cache_k, const Tensor& cache_v) {
  const int64_t d = q.dim(3), G = q.dim(2) / k.dim(2);
  bool rows_aligned = true;
  for (const Tensor* t : {&q, &k, &v, &cache_k, &cache_v, &norm.q, &norm.k})
    rows_aligned = rows_aligned && (!t->defined() || cuda::aligned_to(16, *t));
  return q.dtype() == DType::bf16 && (d == 64 || d == 128) && G <= kDecodeRowsKernelMaxRows && rows_aligned;
}

Tensor decode_prologue_attention(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                 const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past,
                                 double scale) {
  const Device device = check_prologue(q, k, v, norm, angles, cache_k, cache_v, past);
  FATHOM_CHECK(q.dim(0) >= 1 && cache_k.dim(2) >= 1, "decode_prologue_attention: q ", describe(q), " and the cache ",
               describe(cache_k), " must hold a batch and at least one position");
  FATHOM_CHECK(q.dim(2) % k.dim(2) == 0, "decode_prologue_attention: query heads Hq = ", q.dim(2),
               " must be a multiple of KV heads Hk = ", k.dim(2));
  FATHOM_CHECK(std::isfinite(scale) && scale != 0, "decode_prologue_attention: scale must be finite and non-zero, got ",
               scale);
  if (prologue_in_attention_choice() == Fusion::separate)
    return decode_attention(decode_prologue(q, k, v, norm, angles, cache_k, cache_v, past), cache_k, cache_v, past,
                            DepthSlots{}, scale);
  return on_device("decode_prologue_attention", device, FATHOM_KERNEL(decode_prologue_attention), q, k, v, norm, angles,
                   cache_k, cache_v, past, scale);
}

}  // namespace fathom
