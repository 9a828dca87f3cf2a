// Skinny GEMM for decoding: y [M, N] = x [M, K] W [N, K]^T with few rows M (a decoding step's tokens).
// At M <= 32 a linear is a stream over its weight: every byte of W is read once and each is used M
// times, so the time is the weight's bytes over the memory bandwidth. cuBLASLt's small tiles read it at
// a fraction of that; this kernel streams W at full width instead (skinny_matmul.cu says how).
//
// matmul (matmul.h) reaches it by itself on CUDA: x W^T with BF16 operands, a BF16 or F32 output,
// alpha 1, beta 0 and M <= the policy's row limit take this kernel, everything else cuBLASLt. The
// layers never name it; skinny_matmul below is for tests and benchmarks that want this path directly.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// The most rows the kernel takes: four 8-token tiles of the tensor-core product.
constexpr int64_t kSkinnyMatmulMaxRows = 32;
// The most weights one grouped launch multiplies (q, k and v; gate and up).
constexpr int kSkinnyMatmulMaxGroup = 4;
// The most rows matmul sends to it under the automatic policy: one 8-token tile. bench_cuda_kernels's
// decode table measured one token step's GEMMs at 1.19x cuBLASLt with 1 row and 1.21x with 8, but 0.84x
// with 32 (an H100, bench/results/2026-12-05_decode_levers_h100.md): past one tile cuBLASLt's are full
// enough to win.
constexpr int64_t kSkinnyMatmulAutoRows = 8;

// Which GEMM matmul runs where the skinny kernel could: `automatic` up to kSkinnyMatmulAutoRows rows,
// `always` up to kSkinnyMatmulMaxRows, `never` (cuBLASLt for every shape).
using SkinnyMatmulPolicy = Usage;

// The policy in force: FATHOM_SKINNY_MATMUL=auto|always|never, read at the first call (unset: auto),
// unless set_skinny_matmul_policy replaced it. A bad value is an error naming the variable.
SkinnyMatmulPolicy skinny_matmul_policy();
void set_skinny_matmul_policy(SkinnyMatmulPolicy policy);

// Whether matmul(a, transpose_a, b, transpose_b, c, alpha, beta), already checked, takes the skinny
// kernel on a GPU under the current policy.
bool use_skinny_matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
                       double alpha, double beta);
// The same for an output of c_dtype not yet allocated (a caller asks before it allocates).
bool use_skinny_matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, DType c_dtype,
                       double alpha, double beta);

// y = x w^T: x [M, K] and w [N, K] BF16, y [M, N] BF16 or F32 (f32 accumulation either way), M <=
// kSkinnyMatmulMaxRows, one device, y sharing no storage with x or w. On the CPU it is the CPU matmul
// of the f32 values (the reference the GPU kernel is tested against).
void skinny_matmul(const Tensor& x, const Tensor& w, Tensor& y);
Tensor skinny_matmul(const Tensor& x, const Tensor& w, DType out_dtype);

// ys[i] = x ws[i]^T for 1 to kSkinnyMatmulMaxGroup weights of one x (the projections of one input), each
// as skinny_matmul(x, ws[i], ys[i]) alone; the outputs share one dtype. On CUDA one launch runs them all,
// and each output equals its single call bit for bit where that call does not split K across CTAs
// (skinny_matmul.cu, "Groups"; FATHOM_SKINNY_SPLIT_K_CTAS below).
void skinny_matmul_grouped(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys);

// y = silu(x gate^T) * x up^T, SwiGLU of the two products as skinny_matmul would store them in y's dtype,
// bit for bit where those calls do not split K across CTAs: gate and up [F, K] BF16, y [M, F] BF16 or F32, M <=
// kSkinnyMatmulMaxRows. On CUDA one launch that writes neither product (skinny_matmul.cu, "SwiGLU"); on the CPU the
// products, then SwiGLU.
void skinny_swiglu(const Tensor& x, const Tensor& gate, const Tensor& up, Tensor& y);

// A block's residual step, the norm that joins a sublayer's output x to the stream: post-norm (OLMo2)
// h = residual + rms_norm(x) w, which the next sublayer reads; pre-norm (Llama) h = residual + x, whose
// rms_norm(h) w the next sublayer reads. Rounded as residual_rms_norm and add_rms_norm round them.
enum class ResidualStep { post_norm, pre_norm };
struct ResidualStepInputs {
  ResidualStep kind = ResidualStep::post_norm;
  Tensor residual, x, weight;  // [M, K], [M, K], [K], BF16
  double eps = 0;
};

// The most rows and the widest K skinny_matmul_after_residual_step takes on CUDA: one row (a batch-1 decoding
// step) and a row a thread holds in registers within the plain kernel's 64. Every CTA repeats the step's
// reads, (2 M + 1) K 2 bytes from L2: at 8 rows that cost more than the launch it saves (decoding steps 10-23%
// slower at batch 8 on an H100, bench/results/2026-12-06_prologue_and_residual_step_h100.md).
constexpr int64_t kResidualStepMaxRows = 1;
constexpr int64_t kResidualStepMaxWidth = 2048;

// The residual step, then the projections of what the next sublayer reads (`in`: h post-norm, rms_norm(h) w
// pre-norm), ys[i] = in ws[i]^T, with h written to `h` [M, K]. On CUDA one launch: every CTA of the grouped
// product computes the step's rows itself into shared memory, in the norm kernels' order of sums, and CTA 0
// writes h, so the outputs and h equal the step's kernel and skinny_matmul_grouped's, bit for bit, one launch
// a layer fewer (skinny_matmul.cu, "Residual step"). On the CPU the step, then the products. BF16 operands
// and outputs; the CUDA launch takes what residual_step_fits says it takes.
void skinny_matmul_after_residual_step(const ResidualStepInputs& step, std::span<const Tensor> ws, std::span<Tensor> ys,
                                       Tensor& h);
// The residual step, then skinny_swiglu of what the next sublayer reads into y [M, F], with h written: on CUDA one
// launch, the gated CTAs of skinny_swiglu beginning with the step (skinny_matmul.cu, "SwiGLU"), so y and h equal the
// step's kernel's and skinny_swiglu's, bit for bit, and a decoding step's MLP takes one launch fewer than the step's
// launch and skinny_swiglu. On the CPU the step, then skinny_swiglu. BF16 operands and output; the CUDA launch takes
// what residual_step_fits says of {gate, up}.
void skinny_swiglu_after_residual_step(const ResidualStepInputs& step, const Tensor& gate, const Tensor& up, Tensor& y,
                                       Tensor& h);
// Whether CUDA's single launch takes these operands: M <= kResidualStepMaxRows, K over 256 (where the norm kernel
// takes its 16-byte layout), a multiple of 32 (the staged products have no partial chunk) and at most
// kResidualStepMaxWidth, 16-byte aligned rows, no
// empty weight.
bool residual_step_fits(const ResidualStepInputs& step, std::span<const Tensor> ws);

// Whether a decoding step's residual step runs inside the next projections' launch (fused) or as its own
// (separate): FATHOM_RESIDUAL_STEP_IN_GEMM=fused|separate, read at the first call; unset, fused (its GPU tests
// passed and it paid in the decoding benchmark, skinny_matmul.cpp).
Fusion residual_step_in_gemm_choice();
void set_residual_step_in_gemm_choice(Fusion choice);

// Whether a decoding step's MLP takes skinny_swiglu (fused) or the grouped products and the SwiGLU kernel
// (separate) where the skinny GEMM would run: FATHOM_SWIGLU_PROJECTION=fused|separate, read at the first
// call; unset, separate (the fused launch paid at 190M and cost at 1B; skinny_matmul.cpp gives the numbers).
using SwigluProjection = Fusion;
SwigluProjection swiglu_projection_choice();
void set_swiglu_projection_choice(SwigluProjection choice);

// The kernel's work split, which the host's rules below share: rows of W a tile (the MMA's M), K a warp step
// (4 lanes x 8 elements), warps a CTA, and the CTAs an SM that a launch's row tiles aim to leave at least and its
// split across cluster CTAs at most (skinny_matmul.cu).
constexpr int kSkinnyTileRows = 16;
constexpr int kSkinnyChunk = 32;
constexpr int kSkinnyCtaWarps = 8;
constexpr int kSkinnyMinCtasPerSm = 2;

// Whether a launch of one weight too narrow for two CTAs of its own rows an SM (o_proj and down_proj while decoding)
// splits K across the CTAs of a thread-block cluster as well (sm_90; skinny_matmul.cu, "K across CTAs"):
// FATHOM_SKINNY_SPLIT_K_CTAS=off|auto|2..8, read at the first launch; set() takes 1 (off), kSkinnySplitKAuto or a
// count. Its sums run in another order than the one-CTA launch's (close, not bitwise equal), deterministically, and
// the same for every M. Unset: auto (skinny_matmul.cpp gives the measurements).
constexpr int kSkinnySplitKAuto = 0;
constexpr int kSkinnySplitKMaxCtas = 8;
int skinny_split_k_ctas();
void set_skinny_split_k_ctas(int ctas);
// The variable's text as set() takes it; fails naming `source` and the choices.
int parse_skinny_split_k_ctas(std::string_view text, std::string_view source);
// CTAs a tile's K is split across for a weight of n rows and k columns that takes one tile a CTA, on sm_count SMs,
// under `choice` (1, a count, or kSkinnySplitKAuto). auto splits only a weight whose tiles leave at least half the SMs
// idle, and then into the most CTAs, up to 8, that leave no more than kSkinnyMinCtasPerSm CTAs an SM and two chunks
// of K for every warp; else 1.
int skinny_split_k_ctas_for(int choice, int64_t n, int64_t k, int sm_count);

// Whether a launch's CTAs ask L2 for their first step of W before their grid wait (skinny_matmul.cu, "Dependent
// launch"): FATHOM_SKINNY_L2_PREFETCH=auto|always|never, read at the first launch; unset, auto. auto asks where W's
// rows are shorter than kSkinnyPrefetchBelowK elements or K is split across a cluster's CTAs: a CTA's first step is
// then a few kilobytes a row. Where rows are longer it is, at batch 1 (one 8-token tile, one tile a CTA), the CTA's
// whole 16 rows of 2048 (64 KB; 25-33 MB for a 1B layer's q/k/v and gate/up), asked for while the launch ahead
// still streams or attends. The rule keys on K alone and reproduces the setting each of OLMo2 190M and 1B decoded
// faster with at batch 1 on an H100 (skinny_matmul.cpp gives the measurements); against `always` it made the 1B's and
// the Llama-3.2-1B shape's steps 2.9-5.5% faster at batch 1 and 8, context 128 and 4096
// (bench/results/2026-12-07_prefetch_rule_h100.md).
constexpr int64_t kSkinnyPrefetchBelowK = 2048;
Usage skinny_l2_prefetch();
void set_skinny_l2_prefetch(Usage usage);
// Whether a launch of W with k columns, K split across split_ctas CTAs of a cluster (1: none), prefetches under usage.
bool skinny_prefetches(Usage usage, int64_t k, int split_ctas);

// The backends' entry points (arguments checked).
using SkinnySwigluKernel = void(const Tensor& x, const Tensor& gate, const Tensor& up, Tensor& y);
FATHOM_BACKENDS(SkinnySwigluKernel, skinny_swiglu)
using SkinnyMatmulKernel = void(const Tensor& x, const Tensor& w, Tensor& y);
using SkinnyMatmulGroupedKernel = void(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys);
FATHOM_BACKENDS(SkinnyMatmulKernel, skinny_matmul)
FATHOM_BACKENDS(SkinnyMatmulGroupedKernel, skinny_matmul_grouped)
using SkinnyMatmulAfterResidualStepKernel = void(const ResidualStepInputs& step, std::span<const Tensor> ws,
                                                 std::span<Tensor> ys, Tensor& h);
FATHOM_BACKENDS(SkinnyMatmulAfterResidualStepKernel, skinny_matmul_after_residual_step)
using SkinnySwigluAfterResidualStepKernel = void(const ResidualStepInputs& step, const Tensor& gate, const Tensor& up,
                                                 Tensor& y, Tensor& h);
FATHOM_BACKENDS(SkinnySwigluAfterResidualStepKernel, skinny_swiglu_after_residual_step)

}  // namespace fathom
