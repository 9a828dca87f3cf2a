// The CPU prologue is the six ops it fuses, in turn: the reference the CUDA kernel is tested against.
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_prologue.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"

namespace fathom::cpu {

Tensor decode_prologue(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm, const Tensor& angles,
                       Tensor& cache_k, Tensor& cache_v, const Tensor& past) {
  const auto normed = [&](const Tensor& x, const Tensor& weight, double eps) {
    if (!weight.defined()) return x;
    const int64_t B = x.dim(0), width = x.dim(2) * x.dim(3);
    return fathom::rms_norm_forward(x.view({B, width}), weight, eps).y.view(x.shape());
  };
  fathom::kv_cache_write(cache_k, fathom::rope_forward(normed(k, norm.k, norm.k_eps), angles), past);
  fathom::kv_cache_write(cache_v, v, past);
  return fathom::rope_forward(normed(q, norm.q, norm.q_eps), angles);
}

// The prologue's work is not fused on the CPU: the two ops, in turn.
Tensor decode_prologue_attention(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                 const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past,
                                 double scale) {
  return fathom::decode_attention(cpu::decode_prologue(q, k, v, norm, angles, cache_k, cache_v, past), cache_k, cache_v,
                                  past, DepthSlots{}, scale);
}

}  // namespace fathom::cpu
