#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace fathom {

namespace {

constexpr const char* kOp = "decode_attention";

// Unset: automatic, the rule decode_attention.h gives with its measurements.
constinit KernelChoice<Usage> merge_in_split_in_force("FATHOM_MERGE_IN_SPLIT", Usage::automatic, parse_usage);
// Unset: on, since its GPU tests passed and it paid in the decoding benchmark on an H100
// (bench/results/2026-12-07_cluster_merge_h100.md).
constinit KernelChoice<Toggle> merge_in_cluster_in_force("FATHOM_MERGE_IN_CLUSTER", Toggle::on, parse_toggle);

void check_depth(const Tensor& q, int64_t Hk, const DepthSlots& depth) {
  // An empty range reads nothing, so its buffers may be missing; given ones are still checked.
  if (depth.begin == depth.end && !depth.k.defined() && !depth.v.defined()) return;
  FATHOM_CHECK(depth.k.defined() && depth.v.defined(), kOp, ": depth slots [", depth.begin, ", ", depth.end,
               ") need both depth.k and depth.v");
  FATHOM_CHECK(depth.k.rank() == 5 && depth.k.shape() == depth.v.shape(), kOp,
               ": depth.k and depth.v must both be [B, Tq, S, Hk, d], got ", describe(depth.k), " and ",
               describe(depth.v));
  const Shape& s = depth.k.shape();
  FATHOM_CHECK(s[0] == q.dim(0) && s[1] == q.dim(1) && s[3] == Hk && s[4] == q.dim(3), kOp, ": depth buffer ",
               describe(depth.k), " does not match q ", describe(q), " and ", Hk, " KV heads (want [B, Tq, S, Hk, d])");
  FATHOM_CHECK(0 <= depth.begin && depth.begin <= depth.end && depth.end <= s[2], kOp, ": slot range [", depth.begin,
               ", ", depth.end, ") outside the depth buffer's ", s[2], " slots");
  FATHOM_CHECK(depth.k.dtype() == q.dtype() && depth.v.dtype() == q.dtype(), kOp, ": depth buffers ", describe(depth.k),
               ", ", describe(depth.v), " must have q's dtype ", dtype_name(q.dtype()));
}

void check_arguments(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                     const DepthSlots& depth, double scale) {
  FATHOM_CHECK(q.defined() && k_cache.defined() && v_cache.defined(), kOp, ": q, k_cache and v_cache must be defined");
  FATHOM_CHECK(q.rank() == 4, kOp, ": q must be [B, Tq, Hq, d], got ", describe(q));
  FATHOM_CHECK(k_cache.rank() == 4 && k_cache.shape() == v_cache.shape(), kOp,
               ": k_cache and v_cache must both be [B, Hk, capacity, d], got ", describe(k_cache), " and ",
               describe(v_cache));
  const int64_t B = q.dim(0), Tq = q.dim(1), Hq = q.dim(2), d = q.dim(3);
  const int64_t Hk = k_cache.dim(1), capacity = k_cache.dim(2);
  FATHOM_CHECK(B > 0 && Tq > 0 && d > 0, kOp, ": q ", describe(q), " must have a batch, new tokens and a head dim");
  FATHOM_CHECK(k_cache.dim(0) == B && k_cache.dim(3) == d, kOp, ": k_cache ", describe(k_cache), " and q ", describe(q),
               " disagree on batch or head dim");
  FATHOM_CHECK(Hk > 0 && Hq % Hk == 0, kOp, ": query heads Hq = ", Hq, " must be a multiple of KV heads Hk = ", Hk,
               " (q ", describe(q), ", k_cache ", describe(k_cache), ")");
  FATHOM_CHECK(Tq <= length && length <= capacity, kOp, ": length ", length, " must satisfy Tq = ", Tq,
               " <= length <= capacity = ", capacity, " (the cache holds the new tokens' keys)");
  FATHOM_CHECK(k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype(), kOp, ": dtypes differ: q ", describe(q),
               ", k_cache ", describe(k_cache), ", v_cache ", describe(v_cache));
  FATHOM_CHECK(std::isfinite(scale) && scale != 0, kOp, ": scale must be finite and non-zero, got ", scale);
  check_depth(q, Hk, depth);
}

// The launches that can merge their own splits: the few-rows kernel's, without depth slots.
bool merges_itself(int64_t rows_per_kv_head, bool has_depth) {
  return rows_per_kv_head <= kDecodeRowsKernelMaxRows && !has_depth;
}

}  // namespace

Usage merge_in_split_policy() { return merge_in_split_in_force.get(); }

void set_merge_in_split_policy(Usage policy) { merge_in_split_in_force.set(policy); }

bool merges_in_split(int64_t rows_per_kv_head, bool has_depth, int64_t grid_splits) {
  const Usage policy = merge_in_split_policy();
  return merges_itself(rows_per_kv_head, has_depth) &&
         (policy == Usage::always || (policy == Usage::automatic && grid_splits >= kMergeInSplitMinSplits));
}

Toggle merge_in_cluster_choice() { return merge_in_cluster_in_force.get(); }

void set_merge_in_cluster_choice(Toggle choice) { merge_in_cluster_in_force.set(choice); }

bool merges_in_cluster(int64_t rows_per_kv_head, bool has_depth, int64_t grid_splits, int64_t split_tiles,
                       int64_t split_blocks, int sm_count) {
  return merge_in_cluster_choice() == Toggle::on && merges_itself(rows_per_kv_head, has_depth) &&
         grid_splits <= kMergeInClusterMaxSplits && split_tiles <= kMergeInClusterMaxSplitTiles &&
         split_blocks <= sm_count;
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                        const DepthSlots& depth, double scale) {
  check_arguments(q, k_cache, v_cache, length, depth, scale);
  return on_device<DecodeAttentionKernel>(kOp, common_device(kOp, {&q, &k_cache, &v_cache, &depth.k, &depth.v}),
                                          FATHOM_KERNEL(run_decode_attention), q, k_cache, v_cache, length, depth,
                                          scale);
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                        const DepthSlots& depth, double scale) {
  FATHOM_CHECK(q.defined() && k_cache.defined() && k_cache.rank() == 4, kOp,
               ": q and a [B, Hk, capacity, d] k_cache are needed");
  const int64_t B = q.rank() >= 1 ? q.dim(0) : 0;
  check_position_counts(kOp, past, B);
  // Every check but the lengths', which only the device knows: for them, the longest the cache holds.
  check_arguments(q, k_cache, v_cache, k_cache.dim(2), depth, scale);
  const Device device = common_device(kOp, {&q, &k_cache, &v_cache, &depth.k, &depth.v, &past});
  return on_device<DecodeAttentionPastKernel>(kOp, device, FATHOM_KERNEL(run_decode_attention), q, k_cache, v_cache,
                                              past, depth, scale);
}

}  // namespace fathom
