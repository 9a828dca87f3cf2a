// The host side the causal attention launchers share (flash attention, kernels/attention/, and MoDA
// attention, kernels/moda/): the checks of the sequence geometry and of the q/k/v/o/lse pointers,
// and, at the Tensor level, the input checks, the outputs and the pointer plumbing of a launch. Both
// parameter structs name their sequence fields alike (q, k, v, o, lse; grad_o, dq, dk, dv), so one
// template fills either.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels/attention/attention.h"
#include "kernels/attention/flash_attention.h"
#include "kernels/runtime/argument_checks.h"

namespace fathom::cuda {

// Positive sizes, Hq a multiple of Hk, a finite positive scale (the kernels keep each row's running max
// over raw scores), T at most 2^30. Head dims are each kernel family's own check.
void check_sequence_shape(const char* op, const FlashShape& shape);

// The forward's and the backward's sequence pointers: non-null, 16-byte aligned (lse 4).
template <class Params>
void check_forward_pointers(const char* op, const Params& p) {
  check_pointer(op, "q", p.q, 16);
  check_pointer(op, "k", p.k, 16);
  check_pointer(op, "v", p.v, 16);
  check_pointer(op, "o", p.o, 16);
  check_pointer(op, "lse", p.lse, 4);
}
template <class Params>
void check_backward_pointers(const char* op, const Params& p) {
  check_forward_pointers(op, p);
  check_pointer(op, "grad_o", p.grad_o, 16);
  check_pointer(op, "dq", p.dq, 16);
  check_pointer(op, "dk", p.dk, 16);
  check_pointer(op, "dv", p.dv, 16);
}

// ---- Tensor level ----

// Each named tensor defined, of `dtype`, on `device` (the CUDA device current on this thread); `why`
// ends a dtype error with what the kernels compute in.
void check_attention_tensors(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors,
                             DType dtype, Device device, const char* why);
void check_current_device(const char* op, Device device);

// q [B, T, Hq, d], k [B, T, Hk, d] as a FlashShape.
FlashShape sequence_shape_of(const Tensor& q, const Tensor& k, double scale);

// Outputs from the device's allocator: o like q with lse F32 [B, Hq, T]; dq, dk, dv like q, k, v.
AttentionOutput empty_attention_output(const Tensor& q);
AttentionGrads empty_attention_grads(const Tensor& q, const Tensor& k, const Tensor& v);

// Device scratch of `bytes` (undefined for 0). It returns to the allocator when the caller's Tensor
// dies, before the kernels ran: safe, since the caching allocator hands a block out again only in
// this stream's order.
Tensor device_scratch(size_t bytes, Device device);

// The element type of a parameter struct's sequence pointers: bf16 (flash, MoDA) or float (fp32).
template <class Params>
using ElementOf = std::remove_const_t<std::remove_pointer_t<decltype(Params::q)>>;

template <class Params>
void set_forward_pointers(Params& p, const Tensor& q, const Tensor& k, const Tensor& v, AttentionOutput& out) {
  using E = ElementOf<Params>;
  p.q = q.data<E>();
  p.k = k.data<E>();
  p.v = v.data<E>();
  p.o = out.o.data<E>();
  p.lse = out.lse.data<float>();
}
template <class Params>
void set_backward_pointers(Params& p, const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& o, const Tensor& lse, AttentionGrads& grads) {
  using E = ElementOf<Params>;
  p.q = q.data<E>();
  p.k = k.data<E>();
  p.v = v.data<E>();
  p.o = o.data<E>();
  p.grad_o = grad_o.data<E>();
  p.lse = lse.data<float>();
  p.dq = grads.dq.data<E>();
  p.dk = grads.dk.data<E>();
  p.dv = grads.dv.data<E>();
}

}  // namespace fathom::cuda
