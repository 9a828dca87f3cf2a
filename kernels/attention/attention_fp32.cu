// fp32 attention entry points: argument checks, launches and the Tensor wrappers. The kernels are in
// attention_fp32_kernels.cuh.
#include "kernels/attention/attention_fp32.h"

#include <initializer_list>
#include <utility>

#include "kernels/attention/attention_fp32_kernels.cuh"
#include "kernels/attention/attention_host.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

namespace fp = fp32_attention;
static_assert(fp::kMaxHeadDim == kFp32AttentionMaxHeadDim);

constexpr int64_t kMaxGridDim = 65535;  // heads ride on gridDim.y, the batch on gridDim.z
constexpr const char* kComputes = "the fp32 attention kernels read and write F32";

void check_shape(const char* op, const FlashShape& s) {
  check_sequence_shape(op, s);
  FATHOM_CHECK(s.d <= kFp32AttentionMaxHeadDim, op, ": head dim d = ", s.d, " exceeds the fp32 kernels' ",
               kFp32AttentionMaxHeadDim);
  FATHOM_CHECK(s.Hq <= kMaxGridDim && s.B <= kMaxGridDim, op, ": B = ", s.B, " and Hq = ", s.Hq,
               " must each be at most ", kMaxGridDim);
}

// Scalar fp32 loads and stores: 4-byte alignment is all the kernels need.
void check_floats(const char* op, std::initializer_list<std::pair<const char*, const void*>> pointers) {
  for (const auto& [name, p] : pointers) check_pointer(op, name, p, alignof(float));
}

// Runs body<kColumns>() with kColumns = the columns each of a row's threads owns, rounded up to
// 8, 16 or 32 (head dims up to 64, 128 and 256).
template <class Body>
void dispatch_columns(int64_t d, Body&& body) {
  if (d <= 64)
    body.template operator()<8>();
  else if (d <= 128)
    body.template operator()<16>();
  else
    body.template operator()<32>();
}

template <class Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, const auto& args) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, fp::kThreads, smem, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

unsigned tiles(int64_t rows) { return unsigned((rows + fp::kTile - 1) / fp::kTile); }

// The forward over a key buffer of `key_capacity` rows laid out as `kv`; `keys` or `past` (of past_rows
// entries) as in ForwardArgs.
void run_forward(const FlashShape& s, const float* q, const float* k, const float* v, float* o, float* lse,
                 fp::KeyLayout kv, int64_t keys, const int32_t* past, int64_t past_rows, int64_t key_capacity,
                 cudaStream_t stream) {
  const fp::ForwardArgs a{q,
                          k,
                          v,
                          o,
                          lse,
                          kv,
                          int(s.T),
                          int(s.Hq),
                          int(s.Hq / s.Hk),
                          int(s.d),
                          int(keys),
                          past,
                          int(key_capacity),
                          float(s.scale),
                          int(past_rows)};
  const dim3 grid(tiles(s.T), unsigned(s.Hq), unsigned(s.B));
  dispatch_columns(s.d, [&]<int C>() { launch(fp::forward_kernel<C>, grid, fp::forward_smem_bytes(a.d), stream, a); });
}

fp::KeyLayout sequence_layout(const FlashShape& s) { return {s.T * s.Hk * s.d, s.d, s.Hk * s.d}; }

}  // namespace

void fp32_attention_forward(const Fp32AttentionParams& p, cudaStream_t stream) {
  const char* op = "fp32_attention_forward";
  const FlashShape& s = p.shape;
  check_shape(op, s);
  check_floats(op, {{"q", p.q}, {"k", p.k}, {"v", p.v}, {"o", p.o}, {"lse", p.lse}});
  run_forward(s, p.q, p.k, p.v, p.o, p.lse, sequence_layout(s), s.T, nullptr, 1, s.T, stream);
}

void fp32_attention_backward(const Fp32AttentionBackwardParams& p, cudaStream_t stream) {
  const char* op = "fp32_attention_backward";
  const FlashShape& s = p.shape;
  check_shape(op, s);
  check_floats(op, {{"q", p.q},
                    {"k", p.k},
                    {"v", p.v},
                    {"o", p.o},
                    {"grad_o", p.grad_o},
                    {"lse", p.lse},
                    {"dq", p.dq},
                    {"dk", p.dk},
                    {"dv", p.dv},
                    {"delta", p.delta}});
  const fp::BackwardArgs a{p.q,  p.k,      p.v,       p.o,       p.grad_o,         p.lse,    p.delta,       p.dq, p.dk,
                           p.dv, int(s.T), int(s.Hq), int(s.Hk), int(s.Hq / s.Hk), int(s.d), float(s.scale)};
  const int64_t rows = s.B * s.T * s.Hq;
  constexpr int kRowsPerBlock = fp::kThreads / 32;
  fp::delta_kernel<<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), fp::kThreads, 0, stream>>>(a, rows);
  CUDA_CHECK_LAUNCH();
  const size_t smem = fp::backward_smem_bytes(a.d);
  dispatch_columns(s.d, [&]<int C>() {
    launch(fp::query_grad_kernel<C>, dim3(tiles(s.T), unsigned(s.Hq), unsigned(s.B)), smem, stream, a);
    launch(fp::key_value_grad_kernel<C>, dim3(tiles(s.T), unsigned(s.Hk), unsigned(s.B)), smem, stream, a);
  });
}

// ---- Tensor wrappers ----

AttentionOutput attention_forward_fp32(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const char* op = "attention (cuda, fp32)";
  const Device device = q.device();
  check_attention_tensors(op, {{"q", &q}, {"k", &k}, {"v", &v}}, DType::f32, device, kComputes);
  check_current_device(op, device);
  AttentionOutput out = empty_attention_output(q);
  Fp32AttentionParams p;
  p.shape = sequence_shape_of(q, k, scale);
  set_forward_pointers(p, q, k, v, out);
  fp32_attention_forward(p, stream_for(device));
  return out;
}

AttentionGrads attention_backward_fp32(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& o, const Tensor& lse, double scale) {
  const char* op = "attention_backward (cuda, fp32)";
  const Device device = q.device();
  check_attention_tensors(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}, {"grad_o", &grad_o}, {"lse", &lse}},
                          DType::f32, device, kComputes);
  check_current_device(op, device);
  AttentionGrads grads = empty_attention_grads(q, k, v);
  Fp32AttentionBackwardParams p;
  p.shape = sequence_shape_of(q, k, scale);
  set_backward_pointers(p, grad_o, q, k, v, o, lse, grads);
  Tensor delta = Tensor::empty({q.dim(0), q.dim(2), q.dim(1)}, DType::f32, device);
  p.delta = delta.data<float>();
  fp32_attention_backward(p, stream_for(device));
  // delta returns to the allocator before the kernels ran: safe, as the caching allocator hands a
  // block out again only in this stream's order.
  return grads;
}

namespace {

// past: null, or the device-held count of positions before the step.
Tensor run_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length, const Tensor* past,
                  double scale) {
  const char* op = "decode_attention (cuda, fp32)";
  const Device device = q.device();
  check_attention_tensors(op, {{"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache}}, DType::f32, device, kComputes);
  if (past) {
    check_device_tensor(op, "past", *past, DType::i32, device, "the position counts are I32 [1] or [B] on q's device");
    FATHOM_CHECK(past->numel() == 1 || past->numel() == q.dim(0), op, ": past holds ", past->numel(),
                 " counts for a batch of ", q.dim(0), "; give one, or one per sequence");
  }
  check_current_device(op, device);
  const int64_t Hk = k_cache.dim(1), capacity = k_cache.dim(2), d = q.dim(3);
  const FlashShape s{q.dim(0), q.dim(1), q.dim(2), Hk, d, scale};
  check_shape(op, s);
  FATHOM_CHECK(capacity <= (int64_t(1) << 30), op, ": a KV cache of ", capacity, " positions exceeds 2^30");
  Tensor o = Tensor::empty(q.shape(), DType::f32, device);
  const fp::KeyLayout cache_layout{Hk * capacity * d, capacity * d, d};
  run_forward(s, q.data<float>(), k_cache.data<float>(), v_cache.data<float>(), o.data<float>(), nullptr, cache_layout,
              length, past ? past->data<int32_t>() : nullptr, past ? past->numel() : 1, capacity, stream_for(device));
  return o;
}

}  // namespace

Tensor decode_attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                             double scale) {
  return run_decode(q, k_cache, v_cache, length, nullptr, scale);
}

Tensor decode_attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                             double scale) {
  return run_decode(q, k_cache, v_cache, k_cache.dim(2), &past, scale);
}

}  // namespace fathom::cuda
