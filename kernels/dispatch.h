// How an op reaches its backends, and helpers for the per-family dispatch files (kernels/<family>/<op>.cpp).
//
// Every backend entry point has one function type, written once in the family's header, from which both
// backends are declared:
//
//   using RmsNormForwardKernel = RmsNormOutput(const Tensor& x, const Tensor& weight, double eps,
//                                              const Tensor& residual);
//   FATHOM_BACKENDS(RmsNormForwardKernel, rms_norm_forward)
//     // declares cpu::rms_norm_forward (<op>_cpu.cpp) and cuda::rms_norm_forward (*.cu, *_cuda.cpp)
//
// The public function checks its arguments once, then hands them to the backend of their device:
//
//   return on_device("rms_norm", device, FATHOM_KERNEL(rms_norm_forward), x, weight, eps, residual);
//
// This header is the one place that knows whether the build has CUDA: without it FATHOM_KERNEL's CUDA
// entry is null and on_device fails with no_cuda_kernel's message, so no dispatch file needs an #ifdef.
// Where one name carries entry points of two types (kv_cache_write with a start or with a device-side
// count), the call names the type: on_device<KvCacheWritePastKernel>(op, device, FATHOM_KERNEL(kv_cache_write), ...).
#pragma once
#include <initializer_list>
#include <span>
#include <type_traits>
#include <utility>

#include "core/tensor.h"

// Declares a backend entry point of function type `Kernel` in both backends, fathom::cpu and fathom::cuda
// (used inside namespace fathom).
#define FATHOM_BACKENDS(Kernel, name) \
  namespace cpu {                     \
  Kernel name;                        \
  }                                   \
  namespace cuda {                    \
  Kernel name;                        \
  }

// The two entry points of `name`, as on_device's pair of arguments: the CPU one and the CUDA one, null
// in a build without CUDA.
#ifdef FATHOM_WITH_CUDA
#define FATHOM_KERNEL(name) &::fathom::cpu::name, &::fathom::cuda::name
#else
#define FATHOM_KERNEL(name) &::fathom::cpu::name, nullptr
#endif

namespace fathom {

// For ops whose CUDA kernel is not in this build.
[[noreturn]] void no_cuda_kernel(const char* op);

// Calls the entry point of `device`'s backend with `args`: cpu on the CPU, else cuda (null without CUDA:
// no_cuda_kernel(op)). Kernel is deduced from the CPU entry unless given.
template <typename Kernel, typename... Args>
decltype(auto) on_device(const char* op, Device device, Kernel* cpu, std::type_identity_t<Kernel>* cuda,
                         Args&&... args) {
  if (device.is_cpu()) return cpu(std::forward<Args>(args)...);
  if (cuda == nullptr) no_cuda_kernel(op);
  return cuda(std::forward<Args>(args)...);
}

// All defined tensors on one device; returns it.
Device common_device(const char* op, std::span<const Tensor* const> tensors);
inline Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  return common_device(op, std::span<const Tensor* const>(tensors.begin(), tensors.size()));
}
// The dtype per-row statistics (RMSNorm's rstd, cross-entropy's lse) and losses are kept in for
// inputs of dtype t: F64 for F64, else F32 (BF16 activations keep F32 statistics).
inline DType stats_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// Runs f<T>() with T = float or double for a floating CPU tensor.
template <typename F>
void dispatch_float(const char* op, DType dtype, F&& f) {
  if (dtype == DType::f32) return f.template operator()<float>();
  if (dtype == DType::f64) return f.template operator()<double>();
  FATHOM_FAIL(op, ": the CPU reference computes in F32 or F64, got ", dtype_name(dtype));
}

// Runs f<I>() with I = int32_t or int64_t for an integer index tensor (token ids, targets, positions).
template <typename F>
void dispatch_index(const char* op, const char* what, DType dtype, F&& f) {
  if (dtype == DType::i32) return f.template operator()<int32_t>();
  if (dtype == DType::i64) return f.template operator()<int64_t>();
  FATHOM_FAIL(op, ": ", what, " must be I32 or I64, got ", dtype_name(dtype));
}

}  // namespace fathom
