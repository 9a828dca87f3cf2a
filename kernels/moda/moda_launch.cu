// MoDA attention entry points: the argument checks (once, before anything is launched), workspace
// sizes and the switch over the four kernels (moda_naive.cu, moda_flash.cu).
#include "kernels/moda/moda_launch.h"

#include <cstdint>

#include "core/error.h"
#include "kernels/attention/attention_host.h"
#include "kernels/moda/moda_kernels.cuh"

namespace fathom::cuda {

const char* moda_kernel_name(ModaKernel kernel) {
  switch (kernel) {
    case ModaKernel::naive:
      return "naive";
    case ModaKernel::flat:
      return "flat";
    case ModaKernel::chunk:
      return "chunk";
    case ModaKernel::group:
      return "group";
  }
  return "unknown";
}

namespace {

constexpr int64_t kMaxGridRows = 65535;  // CTA rows ride on gridDim.y

void check_kernel(const char* op, ModaKernel kernel) {
  const int k = int(kernel);
  FATHOM_CHECK(k >= int(ModaKernel::naive) && k <= int(ModaKernel::group), op, ": unknown MoDA kernel ", k);
}

void check_shape(const char* op, ModaKernel kernel, const ModaShape& m) {
  check_kernel(op, kernel);
  const FlashShape& s = m.seq;
  const char* name = moda_kernel_name(kernel);
  check_sequence_shape(op, s);
  FATHOM_CHECK(s.d == 64 || s.d == 128, op, ": head dim d = ", s.d,
               " is not supported by the MoDA kernels (64 or 128)");
  FATHOM_CHECK(m.slots >= 0, op, ": depth slot count S = ", m.slots, " is negative");
  FATHOM_CHECK(0 <= m.slot_begin && m.slot_begin <= m.slot_end && m.slot_end <= m.slots, op, ": slot range [",
               m.slot_begin, ", ", m.slot_end, ") outside the depth buffers' S = ", m.slots, " slots");
  const int64_t L = m.slot_end - m.slot_begin;
  FATHOM_CHECK(m.slots <= 4096, op, ": S = ", m.slots, " depth slots exceed 4096");
  FATHOM_CHECK(s.T * L <= (int64_t(1) << 30), op, ": T * (slot_end - slot_begin) = ", s.T * L,
               " depth columns exceed 2^30");
  const int64_t G = s.Hq / s.Hk;
  if (kernel == ModaKernel::group) {
    const int max_heads = moda::group_max_heads(s.d);
    FATHOM_CHECK(G <= max_heads, op, ": the group kernel folds the G = ", G,
                 " query heads of a KV head into one tile of at most ", max_heads, " rows");
    FATHOM_CHECK(s.B * s.Hk <= kMaxGridRows, op, ": B * Hk = ", s.B * s.Hk, " exceeds ", kMaxGridRows);
  } else {
    FATHOM_CHECK(s.B * s.Hq <= kMaxGridRows, op, " (", name, "): B * Hq = ", s.B * s.Hq, " exceeds ", kMaxGridRows);
  }
}

void check_workspace(const char* op, const void* workspace, size_t bytes, size_t need) {
  if (need == 0) return;
  check_pointer(op, "workspace", workspace, 16);
  FATHOM_CHECK(bytes >= need, op, ": workspace of ", bytes, " bytes is too small, need ", need);
}

bool reads_depth(const ModaShape& m) { return m.slot_end > m.slot_begin; }

}  // namespace

bool moda_depth_weights_supported(int64_t G, int64_t d) {
  return (d == 64 || d == 128) && G >= 1 && G <= 16 && G <= moda::group_max_heads(d);
}

size_t moda_forward_workspace_bytes(ModaKernel kernel, const ModaShape& shape) {
  check_shape("moda_forward_workspace_bytes", kernel, shape);
  return kernel == ModaKernel::naive ? moda::naive_forward_workspace_bytes(shape) : 0;
}

size_t moda_backward_workspace_bytes(ModaKernel kernel, const ModaShape& shape) {
  check_shape("moda_backward_workspace_bytes", kernel, shape);
  return kernel == ModaKernel::naive ? moda::naive_backward_workspace_bytes(shape)
                                     : moda::flash_backward_workspace_bytes(kernel, shape);
}

void moda_attention_forward(ModaKernel kernel, const ModaParams& p, cudaStream_t stream) {
  const char* op = "moda_attention_forward";
  check_shape(op, kernel, p.shape);
  check_forward_pointers(op, p);
  if (reads_depth(p.shape)) {
    check_pointer(op, "depth_k", p.depth_k, 16);
    check_pointer(op, "depth_v", p.depth_v, 16);
  }
  check_workspace(op, p.workspace, p.workspace_bytes, moda_forward_workspace_bytes(kernel, p.shape));
  if (kernel == ModaKernel::naive) return moda::naive_forward(p, stream);
  moda::flash_forward(kernel, p, stream);
}

void moda_attention_backward(ModaKernel kernel, const ModaBackwardParams& p, cudaStream_t stream) {
  const char* op = "moda_attention_backward";
  check_shape(op, kernel, p.shape);
  check_backward_pointers(op, p);
  if (reads_depth(p.shape)) {
    check_pointer(op, "depth_k", p.depth_k, 16);
    check_pointer(op, "depth_v", p.depth_v, 16);
    if (p.depth_weights_p != nullptr || p.depth_weights_ds != nullptr) {
      FATHOM_CHECK(p.d_depth_k == nullptr && p.d_depth_v == nullptr && p.d_depth_k_bf16 == nullptr &&
                       p.d_depth_v_bf16 == nullptr,
                   op, ": set either depth weights or depth-gradient buffers, not both");
      FATHOM_CHECK(
          kernel == ModaKernel::group && moda_depth_weights_supported(p.shape.seq.Hq / p.shape.seq.Hk, p.shape.seq.d),
          op, ": depth weights come from the group kernel with G <= 16 only (", moda_kernel_name(kernel),
          ", G = ", p.shape.seq.Hq / p.shape.seq.Hk, ")");
      check_pointer(op, "depth_weights_p", p.depth_weights_p, 4);
      check_pointer(op, "depth_weights_ds", p.depth_weights_ds, 4);
    } else if (p.d_depth_k_bf16 != nullptr || p.d_depth_v_bf16 != nullptr) {
      FATHOM_CHECK(p.d_depth_k == nullptr && p.d_depth_v == nullptr, op,
                   ": set either the fp32 depth-gradient buffers (d_depth_k, d_depth_v) or the bf16 ones, not both");
      FATHOM_CHECK(p.store_depth_grads, op,
                   ": bf16 depth gradients are stored, never added (set store_depth_grads); adding needs fp32 buffers");
      check_pointer(op, "d_depth_k_bf16", p.d_depth_k_bf16, 16);
      check_pointer(op, "d_depth_v_bf16", p.d_depth_v_bf16, 16);
    } else {
      check_pointer(op, "d_depth_k", p.d_depth_k, 16);
      check_pointer(op, "d_depth_v", p.d_depth_v, 16);
    }
  }
  check_workspace(op, p.workspace, p.workspace_bytes, moda_backward_workspace_bytes(kernel, p.shape));
  if (kernel == ModaKernel::naive) return moda::naive_backward(p, stream);
  moda::flash_backward(kernel, p, stream);
}

}  // namespace fathom::cuda
