#include "kernels/matmul/skinny_matmul.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/runtime/argument_checks.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

namespace {

// Unset: automatic, since its GPU tests passed and it paid in the decoding benchmark on an H100
// (bench/results/2026-12-05_decode_defaults_h100.md; docs/DESIGN.md, "Decoding's GEMMs").
constinit KernelChoice<SkinnyMatmulPolicy> policy_in_force("FATHOM_SKINNY_MATMUL", SkinnyMatmulPolicy::automatic,
                                                           parse_usage);
// Unset: separate. The fused launch took the 190M's batch-1 step from 0.467 to 0.449 ms but the 1B's from
// 1.438 to 1.488 on an H100 (bench/results/2026-12-06_decode_levers_h100.md), so it is asked for, not assumed. Those
// runs gave the residual step a launch of its own where SwiGLU was fused; with it in the fused launch
// (skinny_swiglu_after_residual_step) no cell moved clear of zero at 190M, 1B or the Llama shape, batch 1 to 32
// (bench/results/2026-12-07_gated_step_swiglu_and_gpt_fast_h100.md), so the default stays.
constinit KernelChoice<SwigluProjection> swiglu_in_force("FATHOM_SWIGLU_PROJECTION", SwigluProjection::separate,
                                                         parse_fusion);
// Unset: fused. Its GPU tests passed and it took the Llama shape's batch-1 step from 1.445 to 1.409 ms on an H100;
// on OLMo2 its effect was within the spread between runs, slower in no cell by more than that
// (bench/results/2026-12-06_prologue_and_residual_step_h100.md).
constinit KernelChoice<Fusion> residual_step_in_force("FATHOM_RESIDUAL_STEP_IN_GEMM", Fusion::fused, parse_fusion);

// Unset: auto. On an H100 it took the 190M's step (its down_proj split in 5) 4.2% below the unsplit launch's at batch 1
// and context 128, 1.2-4.0% in the other cells; the 1B's weights, split in 2 or 4 CTAs, cost 1.2-3.1% in every cell,
// and the 190M's o_proj, one chunk a warp in 3, 1.4 us a layer: auto's two limits
// (bench/results/2026-12-07_split_k_ctas_h100.md).
constinit KernelChoice<int> split_k_ctas_in_force("FATHOM_SKINNY_SPLIT_K_CTAS", kSkinnySplitKAuto,
                                                  parse_skinny_split_k_ctas);

// Unset: auto. On an H100, no launch asking L2 for its first step of W made the 1B's batch-1 step 3.8% faster at
// context 128 and 1.9% at 4096 (every 1B weight has K of 2048 or more), and the 190M's 1.8% and 4.4% slower (K of 768,
// and its down_proj of K 3072 split across 5 CTAs): auto keeps the prefetch exactly where the 190M's launches had it
// and drops it where the 1B's did (bench/results/2026-12-07_attention_trigger_h100.md, "nopf").
constinit KernelChoice<Usage> l2_prefetch_in_force("FATHOM_SKINNY_L2_PREFETCH", Usage::automatic, parse_usage);

// The kernel indexes rows and K with 32-bit integers, up to a tile (and a chunk) past the last.
constexpr int64_t kMaxExtent = std::numeric_limits<int32_t>::max() - 256;

}  // namespace

SkinnyMatmulPolicy skinny_matmul_policy() { return policy_in_force.get(); }

void set_skinny_matmul_policy(SkinnyMatmulPolicy policy) { policy_in_force.set(policy); }

SwigluProjection swiglu_projection_choice() { return swiglu_in_force.get(); }

void set_swiglu_projection_choice(SwigluProjection choice) { swiglu_in_force.set(choice); }

Fusion residual_step_in_gemm_choice() { return residual_step_in_force.get(); }

void set_residual_step_in_gemm_choice(Fusion choice) { residual_step_in_force.set(choice); }

int parse_skinny_split_k_ctas(std::string_view text, std::string_view source) {
  if (text == "off") return 1;
  if (text == "auto") return kSkinnySplitKAuto;
  int ctas = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ctas);
  if (error != std::errc() || end != text.data() + text.size() || ctas < 2 || ctas > kSkinnySplitKMaxCtas)
    FATHOM_FAIL(source, " must be off, auto or a count of CTAs from 2 to ", kSkinnySplitKMaxCtas, ", got '", text, "'");
  return ctas;
}

int skinny_split_k_ctas() { return split_k_ctas_in_force.get(); }

void set_skinny_split_k_ctas(int ctas) {
  FATHOM_CHECK(ctas == 1 || ctas == kSkinnySplitKAuto || (ctas >= 2 && ctas <= kSkinnySplitKMaxCtas),
               "set_skinny_split_k_ctas: 1 (off), kSkinnySplitKAuto or a count from 2 to ", kSkinnySplitKMaxCtas,
               ", got ", ctas);
  split_k_ctas_in_force.set(ctas);
}

int skinny_split_k_ctas_for(int choice, int64_t n, int64_t k, int sm_count) {
  if (choice != kSkinnySplitKAuto) return choice;
  const int64_t tiles = (n + kSkinnyTileRows - 1) / kSkinnyTileRows, chunks = k / kSkinnyChunk;
  if (2 * tiles > sm_count) return 1;  // the SMs are mostly busy already: a cluster's merge costs more than it adds
  // Two chunks of K a warp at least: with one, a CTA's loads are a single round trip, and the cluster's barrier and
  // merge cost what the added SMs gain.
  int ctas = 1;
  while (ctas < kSkinnySplitKMaxCtas && tiles * (ctas + 1) <= int64_t(kSkinnyMinCtasPerSm) * sm_count &&
         int64_t(2 * kSkinnyCtaWarps) * (ctas + 1) <= chunks)
    ++ctas;
  return ctas;
}

Usage skinny_l2_prefetch() { return l2_prefetch_in_force.get(); }

void set_skinny_l2_prefetch(Usage usage) { l2_prefetch_in_force.set(usage); }

bool skinny_prefetches(Usage usage, int64_t k, int split_ctas) {
  if (usage != Usage::automatic) return usage == Usage::always;
  return k < kSkinnyPrefetchBelowK || split_ctas > 1;
}

bool use_skinny_matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
                       double alpha, double beta) {
  return use_skinny_matmul(a, transpose_a, b, transpose_b, c.dtype(), alpha, beta);
}

bool use_skinny_matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, DType c_dtype,
                       double alpha, double beta) {
  const SkinnyMatmulPolicy policy = skinny_matmul_policy();
  if (policy == SkinnyMatmulPolicy::never) return false;
  const int64_t row_limit = policy == SkinnyMatmulPolicy::always ? kSkinnyMatmulMaxRows : kSkinnyMatmulAutoRows;
  return !transpose_a && transpose_b && alpha == 1.0 && beta == 0.0 && a.dtype() == DType::bf16 &&
         b.dtype() == DType::bf16 && (c_dtype == DType::bf16 || c_dtype == DType::f32) && a.dim(0) <= row_limit &&
         a.dim(1) <= kMaxExtent && b.dim(0) <= kMaxExtent;
}

namespace {

// `op` names the entry point in the errors.
void check_product(const char* op, const Tensor& x, const Tensor& w, const Tensor& y) {
  FATHOM_CHECK(x.defined() && w.defined() && y.defined(), op, ": undefined operand");
  FATHOM_CHECK(x.rank() == 2 && w.rank() == 2 && y.rank() == 2, op, ": x, w and y must be 2-D, got x ", describe(x),
               ", w ", describe(w), ", y ", describe(y));
  FATHOM_CHECK(x.dtype() == DType::bf16 && w.dtype() == DType::bf16, op, ": x and w must be BF16, got x ", describe(x),
               ", w ", describe(w));
  FATHOM_CHECK(y.dtype() == DType::bf16 || y.dtype() == DType::f32, op, ": y must be BF16 or F32, got ", describe(y));
  FATHOM_CHECK(x.dim(1) == w.dim(1), op, ": x ", describe(x), " and w ", describe(w),
               " must have the same inner width K (x is [M, K], w is [N, K])");
  FATHOM_CHECK(y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0), op, ": y ", describe(y), " should be [", x.dim(0), ", ",
               w.dim(0), "]");
  FATHOM_CHECK(x.dim(0) <= kSkinnyMatmulMaxRows, op, ": x has ", x.dim(0), " rows, more than the ",
               kSkinnyMatmulMaxRows, " the kernel takes (use matmul)");
  FATHOM_CHECK(x.dim(1) <= kMaxExtent && w.dim(0) <= kMaxExtent, op, ": K = ", x.dim(1), " and N = ", w.dim(0),
               " must be below 2^31 - 256");
  FATHOM_CHECK(!y.shares_storage_with(x) && !y.shares_storage_with(w), op,
               ": the output must not share storage with an input");
}

// The checks of a grouped launch's products: 1 to kSkinnyMatmulMaxGroup weights with one output each, every
// product as check_product takes it, one output dtype, no two outputs sharing storage. Returns the operands
// (x, then each weight and output) for common_device.
std::vector<const Tensor*> check_group(const char* op, const Tensor& x, std::span<const Tensor> ws,
                                       std::span<Tensor> ys) {
  FATHOM_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= size_t(kSkinnyMatmulMaxGroup), op, ": 1 to ",
               kSkinnyMatmulMaxGroup, " weights with one output each, got ", ws.size(), " weights and ", ys.size(),
               " outputs");
  std::vector<const Tensor*> operands{&x};
  for (size_t i = 0; i < ws.size(); ++i) {
    check_product(op, x, ws[i], ys[i]);
    FATHOM_CHECK(ys[i].dtype() == ys[0].dtype(), op, ": the outputs must share one dtype, got ", describe(ys[0]),
                 " and ", describe(ys[i]));
    for (size_t j = 0; j < i; ++j)
      FATHOM_CHECK(!ys[i].shares_storage_with(ys[j]), op, ": outputs ", j, " and ", i, " share storage");
    operands.push_back(&ws[i]);
    operands.push_back(&ys[i]);
  }
  return operands;
}

}  // namespace

void skinny_matmul(const Tensor& x, const Tensor& w, Tensor& y) {
  check_product("skinny_matmul", x, w, y);
  const Device device = common_device("skinny_matmul", {&x, &w, &y});
  on_device("skinny_matmul", device, FATHOM_KERNEL(skinny_matmul), x, w, y);
}

void skinny_matmul_grouped(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) {
  const Device device = common_device("skinny_matmul_grouped", check_group("skinny_matmul_grouped", x, ws, ys));
  on_device("skinny_matmul_grouped", device, FATHOM_KERNEL(skinny_matmul_grouped), x, ws, ys);
}

void skinny_swiglu(const Tensor& x, const Tensor& gate, const Tensor& up, Tensor& y) {
  check_product("skinny_swiglu", x, gate, y);
  check_product("skinny_swiglu", x, up, y);
  const Device device = common_device("skinny_swiglu", {&x, &gate, &up, &y});
  on_device("skinny_swiglu", device, FATHOM_KERNEL(skinny_swiglu), x, gate, up, y);
}

namespace {

// The residual step's operands and h checked for op; the step's tensors and h, for common_device.
std::vector<const Tensor*> check_step(const char* op, const ResidualStepInputs& step, const Tensor& h) {
  const Tensor &r = step.residual, &x = step.x, &w = step.weight;
  FATHOM_CHECK(r.defined() && x.defined() && w.defined() && h.defined(), op, ": undefined operand");
  FATHOM_CHECK(
      x.rank() == 2 && r.shape() == x.shape() && h.shape() == x.shape() && w.rank() == 1 && w.dim(0) == x.dim(1), op,
      ": residual, x and h must be [M, K] and the norm's weight [K], got residual ", describe(r), ", x ", describe(x),
      ", h ", describe(h), ", weight ", describe(w));
  for (const Tensor* t : {&r, &w, &h})
    FATHOM_CHECK(t->dtype() == DType::bf16, op, ": the step's tensors must be BF16, got ", describe(*t));
  FATHOM_CHECK(step.eps > 0 && std::isfinite(step.eps), op, ": eps must be positive and finite, got ", step.eps);
  FATHOM_CHECK(!h.shares_storage_with(r) && !h.shares_storage_with(x) && !h.shares_storage_with(w), op,
               ": h must not share storage with the step's inputs");
  return {&r, &w, &h};
}

// An output of the products that follow a step: BF16, sharing no storage with h or the step's inputs.
void check_step_output(const char* op, const ResidualStepInputs& step, const Tensor& h, const Tensor& y, size_t i) {
  FATHOM_CHECK(y.dtype() == DType::bf16, op, ": the outputs must be BF16, got ", describe(y));
  FATHOM_CHECK(!y.shares_storage_with(h) && !y.shares_storage_with(step.residual) && !y.shares_storage_with(step.weight),
               op, ": output ", i, " shares storage with h or the step's inputs");
}

void check_fits(const char* op, const Device& device, const ResidualStepInputs& step, std::span<const Tensor> ws) {
  FATHOM_CHECK(device.is_cpu() || residual_step_fits(step, ws), op, ": ", describe(step.x),
               " does not fit the CUDA launch (residual_step_fits); run the step and the products instead");
}

}  // namespace

void skinny_matmul_after_residual_step(const ResidualStepInputs& step, std::span<const Tensor> ws, std::span<Tensor> ys,
                                       Tensor& h) {
  constexpr const char* kOp = "skinny_matmul_after_residual_step";
  std::vector<const Tensor*> operands = check_step(kOp, step, h);
  const std::vector<const Tensor*> products = check_group(kOp, step.x, ws, ys);
  for (size_t i = 0; i < ys.size(); ++i) check_step_output(kOp, step, h, ys[i], i);
  operands.insert(operands.end(), products.begin(), products.end());
  const Device device = common_device(kOp, operands);
  check_fits(kOp, device, step, ws);
  on_device(kOp, device, FATHOM_KERNEL(skinny_matmul_after_residual_step), step, ws, ys, h);
}

void skinny_swiglu_after_residual_step(const ResidualStepInputs& step, const Tensor& gate, const Tensor& up, Tensor& y,
                                       Tensor& h) {
  constexpr const char* kOp = "skinny_swiglu_after_residual_step";
  std::vector<const Tensor*> operands = check_step(kOp, step, h);
  check_product(kOp, step.x, gate, y);
  check_product(kOp, step.x, up, y);
  check_step_output(kOp, step, h, y, 0);
  operands.insert(operands.end(), {&step.x, &gate, &up, &y});
  const Device device = common_device(kOp, operands);
  const Tensor ws[2] = {gate, up};
  check_fits(kOp, device, step, ws);
  on_device(kOp, device, FATHOM_KERNEL(skinny_swiglu_after_residual_step), step, gate, up, y, h);
}

bool residual_step_fits(const ResidualStepInputs& step, std::span<const Tensor> ws) {
  const Tensor &r = step.residual, &x = step.x, &w = step.weight;
  if (!r.defined() || !x.defined() || !w.defined() || x.rank() != 2) return false;
  const int64_t M = x.dim(0), K = x.dim(1);
  bool fits = M >= 1 && M <= kResidualStepMaxRows && K % 32 == 0 && K > 256 && K <= kResidualStepMaxWidth &&
              cuda::aligned_to(16, r) && cuda::aligned_to(16, x) && cuda::aligned_to(16, w);
  for (const Tensor& weight : ws) fits = fits && weight.defined() && weight.dim(0) >= 1 && cuda::aligned_to(16, weight);
  return fits;
}

Tensor skinny_matmul(const Tensor& x, const Tensor& w, DType out_dtype) {
  FATHOM_CHECK(x.defined() && w.defined() && x.rank() == 2 && w.rank() == 2,
               "skinny_matmul: x and w must be 2-D, got x ", describe(x), ", w ", describe(w));
  Tensor y = Tensor::empty({x.dim(0), w.dim(0)}, out_dtype, x.device());
  skinny_matmul(x, w, y);
  return y;
}

}  // namespace fathom
