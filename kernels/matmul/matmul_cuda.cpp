// GEMMs through cuBLASLt (the few-row BF16 x W^T of decoding excepted: skinny_matmul.h). Row-major
// C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T, which reads the
// row-major buffers as they are, so transposes are only cuBLAS flags. BF16/F16 operands accumulate in
// f32, F32 in strict f32 (no TF32), F64 in f64; BF16 operands may write an F32 C (mixed precision's
// weight gradients, accumulated with beta = 1). Each (shape, transposes, dtype, pointer alignment,
// device) gets its descriptors and the heuristic's algorithm once; the workspace comes from the caching
// allocator, one per stream. The FP8 GEMM (fp8_matmul.h) shares the engine: FP8 operands with
// per-tensor scales read from device pointers, f32 compute, the TN layout its kernels require.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/elementwise/elementwise.h"
#include "kernels/fp8/fp8.h"
#include "kernels/matmul/fp8_matmul.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // what cuBLAS itself uses on Hopper

struct Types {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

Types types_for(DType t) {
  switch (t) {
    case DType::f32:
      return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::bf16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::e4m3:
      return {CUDA_R_8F_E4M3, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::e5m2:
      return {CUDA_R_8F_E5M2, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      FATHOM_FAIL("matmul: the CUDA GEMM takes F32, BF16, F16, F64 or FP8, got ", dtype_name(t));
  }
}

// Largest power of two up to 256 that divides the address.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

struct PlanKey {
  int device;
  int64_t m, n, k;  // of the column-major product
  bool transpose_a, transpose_b;
  DType dtype;      // of A
  DType b_dtype;    // of B: dtype, except FP8 GEMMs, which may mix E4M3 and E5M2
  DType out_dtype;  // of C: dtype, or F32 for BF16 operands; BF16 or F32 for FP8 ones
  int align_a, align_b, align_c;
  bool fast_accum;  // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM
  auto tie() const {
    return std::tie(device, m, n, k, transpose_a, transpose_b, dtype, b_dtype, out_dtype, align_a, align_b, align_c,
                    fast_accum);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// Lives for the whole process (CUDA handles must not be destroyed by static destructors).
class GemmEngine {
 public:
  static GemmEngine& get() {
    static GemmEngine* engine = new GemmEngine;
    return *engine;
  }

  // The column-major product C[m, n] = op(A) op(B) with A [.., lda], B [.., ldb] as cuBLASLt sees them;
  // FP8 operands also pass their scales (F32 device scalars).
  void run(const PlanKey& key, int64_t lda, int64_t ldb, const void* a, const void* b, void* c, double alpha,
           double beta, cudaStream_t stream, const void* a_scale = nullptr, const void* b_scale = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    cublasLtHandle_t h = handle(key.device);
    const Plan& plan = plan_for(h, key, lda, ldb);
    if (is_fp8(key.dtype)) {  // the scales' addresses change per call; the descriptor is read at the launch
      CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
      CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    }
    void* workspace = workspace_for(key.device, stream);
    const Types t = types_for(key.dtype);
    const float alpha_f = float(alpha), beta_f = float(beta);
    const void* alpha_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha) : &alpha_f;
    const void* beta_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta) : &beta_f;
    CUBLAS_CHECK(cublasLtMatmul(h, plan.desc, alpha_p, a, plan.a, b, plan.b, beta_p, c, plan.c, c, plan.c, &plan.algo,
                                workspace, kWorkspaceBytes, stream));
  }

 private:
  cublasLtHandle_t handle(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cublasLtHandle_t h;
    CUBLAS_CHECK(cublasLtCreate(&h));
    handles_[device] = h;
    return h;
  }

  void* workspace_for(int device, cudaStream_t stream) {
    auto it = workspaces_.find({device, stream});
    if (it == workspaces_.end())
      it = workspaces_
               .emplace(std::make_pair(device, stream),
                        Tensor::empty({int64_t(kWorkspaceBytes)}, DType::u8, Device::cuda(device)))
               .first;
    return it->second.raw();
  }

  const Plan& plan_for(cublasLtHandle_t h, const PlanKey& key, int64_t lda, int64_t ldb) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    const Types t = types_for(key.dtype);
    Plan p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, t.compute, t.scale));
    const cublasOperation_t op_a = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    if (is_fp8(key.dtype)) {
      const int8_t fast = key.fast_accum ? 1 : 0;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    }
    // Stored (column-major) shapes: op(A) is [m, k], op(B) is [k, n].
    const uint64_t a_rows = uint64_t(key.transpose_a ? key.k : key.m),
                   a_cols = uint64_t(key.transpose_a ? key.m : key.k);
    const uint64_t b_rows = uint64_t(key.transpose_b ? key.n : key.k),
                   b_cols = uint64_t(key.transpose_b ? key.k : key.n);
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, t.data, a_rows, a_cols, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, types_for(key.b_dtype).data, b_rows, b_cols, ldb));
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.c, types_for(key.out_dtype).data, uint64_t(key.m), uint64_t(key.n), key.m));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t aa = uint32_t(key.align_a), ab = uint32_t(key.align_b), ac = uint32_t(key.align_c);
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    FATHOM_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for ", dtype_name(key.dtype), " x ",
                 dtype_name(key.b_dtype), " -> ", dtype_name(key.out_dtype), " [", key.n, " x ", key.k, "] x [", key.k,
                 " x ", key.m, "] (row-major)");
    p.algo = result.algo;
    return plans_.emplace(key, p).first->second;
  }

  std::mutex mutex_;
  std::map<int, cublasLtHandle_t> handles_;
  std::map<std::pair<int, cudaStream_t>, Tensor> workspaces_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha,
            double beta) {
  const int64_t m = c.dim(0), n = c.dim(1), k = transpose_a ? a.dim(0) : a.dim(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = beta C
    if (beta == 0.0)
      c.zero_();
    else
      cuda::scale_inplace(c, beta);
    return;
  }
  // A decoding step's x W^T (a few rows, BF16): the weight-streaming kernel (skinny_matmul.h).
  if (use_skinny_matmul(a, transpose_a, b, transpose_b, c, alpha, beta)) return cuda::skinny_matmul(a, b, c);
  cudaStream_t stream = stream_for(c.device());
  // Column-major C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m]: cuBLASLt's A is our B and its B our A.
  const PlanKey key{c.device().index,
                    n,
                    m,
                    k,
                    transpose_b,
                    transpose_a,
                    a.dtype(),
                    a.dtype(),
                    c.dtype(),
                    alignment_of(b.raw()),
                    alignment_of(a.raw()),
                    alignment_of(c.raw()),
                    false};
  GemmEngine::get().run(key, b.dim(1), a.dim(1), b.raw(), a.raw(), c.raw(), alpha, beta, stream);
}

void matmul_each(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs) {
  // One grouped launch when the skinny kernel takes every product into outputs of one dtype.
  bool grouped = bs.size() > 1 && bs.size() <= size_t(kSkinnyMatmulMaxGroup);
  for (size_t i = 0; grouped && i < bs.size(); ++i)
    grouped = use_skinny_matmul(a, false, bs[i], true, cs[i], 1.0, 0.0) && cs[i].dtype() == cs[0].dtype();
  if (grouped) return cuda::skinny_matmul_grouped(a, bs, cs);
  for (size_t i = 0; i < bs.size(); ++i) cuda::matmul(a, false, bs[i], true, cs[i], 1.0, 0.0);
}

void fp8_matmul(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv, Tensor& c,
                Fp8GemmOptions options) {
  const int64_t m = a.dim(0), n = b.dim(0), k = a.dim(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!options.accumulate) c.zero_();
    return;
  }
  cuda::check_fp8_device(c.device());
  cudaStream_t stream = stream_for(c.device());
  // Row-major c [m, n] = a b^T is column-major c^T [n, m] = b a^T: cuBLASLt's A is b (stored [k, n]
  // column-major, op T) and its B is a (stored [k, m], op N), the "TN" layout its FP8 kernels take.
  const PlanKey key{c.device().index,
                    n,
                    m,
                    k,
                    true,
                    false,
                    b.dtype(),
                    a.dtype(),
                    c.dtype(),
                    alignment_of(b.raw()),
                    alignment_of(a.raw()),
                    alignment_of(c.raw()),
                    options.fast_accumulation};
  GemmEngine::get().run(key, b.dim(1), a.dim(1), b.raw(), a.raw(), c.raw(), 1.0, options.accumulate ? 1.0 : 0.0, stream,
                        b_scale_inv.raw(), a_scale_inv.raw());
}

}  // namespace fathom::cuda
