// How the flash-attention backward is planned from its shape, and where its device scratch lives: the
// split of the dK/dV pass, whether that pass also forms dQ, and the scratch's layout. Host code only
// (no CUDA), so that the rules are unit-tested without a GPU (tests/kernels/test_backward_plan.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace fathom::cuda::flash {

// Scratch rows are padded to a multiple of this, which every query-tile size divides.
constexpr int kRowPad = 128;

// The ints of a dK/dV pass with dQ: a turn counter per slab of 64 rows of the sums [B, Hq, Tpad, W],
// then the ticket its CTAs draw their key blocks from (attention_backward.cuh, key_block).
inline size_t dq_slabs(int64_t B, int64_t Hq, int64_t Tpad) { return size_t(B * Hq * Tpad / 64); }
inline size_t dq_counters(int64_t B, int64_t Hq, int64_t Tpad) { return dq_slabs(B, Hq, Tpad) + 1; }

// How many CTAs share the G query heads of a KV head in a dK/dV pass without dQ: doubled while the
// grid has fewer CTAs than about four waves of two per SM on an H200 and there are heads left to
// split. At T = 4096 with 8 KV heads this halves the longest CTA, whose G * T / BQ work items
// otherwise set the pass's time (measured 1.36 ms for 0.95 ms of average work per SM).
inline int dkdv_splits(int64_t B, int64_t T, int64_t Hk, int64_t G, int BK) {
  constexpr int64_t kFillCtas = 1024;
  const int64_t ctas = (T + BK - 1) / BK * B * Hk;
  int splits = 1;
  while (2 * splits <= G && ctas * splits < kFillCtas) splits *= 2;
  return splits;
}

// Where the backward pass's device scratch lives inside one workspace: per-row statistics (lse2, delta)
// of [B, Hq, Tpad] each; when the dK/dV pass splits the G heads over `splits` CTAs, fp32 dK and dV
// partials of [splits, B, T, Hk, d] each; when it also forms dQ (dq_width > 0, its rows' width), fp32
// dQ sums [B, Hq, Tpad, dq_width] and its counters (dq_counters). `dkdv_block` is the dK/dV
// configuration's key block.
struct BackwardScratch {
  int64_t B, T, Tpad, Hq, Hk, d;
  int splits, dq_width;
  size_t stats_floats() const { return size_t(2) * size_t(B) * size_t(Hq) * size_t(Tpad); }
  size_t part_floats() const { return splits > 1 ? size_t(splits) * size_t(B * T * Hk * d) : 0; }
  size_t dq_floats() const { return size_t(B * Hq * Tpad) * size_t(dq_width); }
  size_t counters() const { return dq_width > 0 ? dq_counters(B, Hq, Tpad) : 0; }
  size_t bytes() const {
    return (stats_floats() + 2 * part_floats() + dq_floats()) * sizeof(float) + counters() * sizeof(int);
  }
  // Points a's lse2, delta, dk_part, dv_part, dq_acc, dq_turn and dq_ticket (BackwardArgs) into
  // `workspace` and sets its Tpad.
  template <class Args>
  void place(Args& a, void* workspace) const {
    a.Tpad = int(Tpad);
    a.lse2 = static_cast<float*>(workspace);
    a.delta = a.lse2 + B * Hq * Tpad;
    a.dk_part = a.lse2 + stats_floats();
    a.dv_part = a.dk_part + part_floats();
    a.dq_acc = dq_width > 0 ? a.dv_part + part_floats() : nullptr;
    a.dq_turn = dq_width > 0 ? reinterpret_cast<int*>(a.dv_part + part_floats() + dq_floats()) : nullptr;
    a.dq_ticket = dq_width > 0 ? a.dq_turn + dq_slabs(B, Hq, Tpad) : nullptr;
  }
};

// dq_width: the width of the dQ sums where the dK/dV pass at this width can form dQ, else 0. It does so
// when its grid has at least kMinDqInDkDvCtas CTAs, and never splits the heads: split, its CTAs are short
// and their waits for the dQ turns cost more than a dQ pass (1.45 vs 1.07 ms at T = 4096). Unsplit, with
// 8 KV heads on the H200's 132 SMs, it beat the split two passes at 192 CTAs (T = 3072: 0.580 vs 0.634 ms)
// and 256 (T = 4096: 0.86 vs 1.24 ms), and lost at 128 (T = 2048: 0.396 vs 0.328 ms) and 64 (T = 1024),
// where SMs idle. Smaller grids take the split two passes.
constexpr int64_t kMinDqInDkDvCtas = 192;
inline BackwardScratch backward_scratch(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t d, int dkdv_block,
                                        int dq_width) {
  const int64_t Tpad = (T + kRowPad - 1) / kRowPad * kRowPad;
  const int64_t ctas = (T + dkdv_block - 1) / dkdv_block * B * Hk;
  if (dq_width > 0 && ctas >= kMinDqInDkDvCtas) return BackwardScratch{B, T, Tpad, Hq, Hk, d, 1, dq_width};
  return BackwardScratch{B, T, Tpad, Hq, Hk, d, dkdv_splits(B, T, Hk, Hq / Hk, dkdv_block), 0};
}

}  // namespace fathom::cuda::flash
