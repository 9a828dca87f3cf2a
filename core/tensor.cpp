#include "core/tensor.h"

#include <cstring>

#include "core/backend.h"
#include "core/fp8.h"

namespace fathom {

namespace {

// Reads element i of a host buffer of any dtype as double.
double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::f64:
      return static_cast<const double*>(p)[i];
    case DType::bf16:
      return bf16_to_float(static_cast<const bf16*>(p)[i]);
    case DType::f16:
      return f16_to_float(static_cast<const f16*>(p)[i]);
    case DType::i32:
      return static_cast<const int32_t*>(p)[i];
    case DType::i64:
      return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::e4m3:
    case DType::e5m2:
      return fp8_to_float(static_cast<const uint8_t*>(p)[i], t);
  }
  return 0;
}

void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = float(v);
      break;
    case DType::f64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::bf16:
      static_cast<bf16*>(p)[i] = float_to_bf16(float(v));
      break;
    case DType::f16:
      static_cast<f16*>(p)[i] = float_to_f16(float(v));
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = int64_t(v);
      break;
    case DType::u8:
      static_cast<uint8_t*>(p)[i] = uint8_t(v);
      break;
    case DType::e4m3:
    case DType::e5m2:  // unscaled and saturating: the scaled casts of kernels/fp8 are how FP8 data is made
      static_cast<uint8_t*>(p)[i] = float_to_fp8(float(v), t);
      break;
  }
}

// Allocator able to move bytes between the two devices (the CUDA one when either side is a GPU).
Allocator& copier(Device a, Device b) { return allocator_for(a.is_cpu() ? b : a); }

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(size_t(shape.numel()) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  FATHOM_CHECK(defined(), "view of an undefined tensor");
  FATHOM_CHECK(shape.numel() == numel(), "cannot view ", describe(*this), " as shape ", shape.str(),
               ": element counts differ");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  FATHOM_CHECK(rank() >= 1, "narrow needs at least one dimension, got ", describe(*this));
  FATHOM_CHECK(start >= 0 && length >= 0 && start + length <= shape_[0], "narrow [", start, ", ", start + length,
               ") is out of range for first dimension ", shape_[0]);
  Tensor t = *this;
  t.offset_ += size_t(start) * size_t(numel() / std::max<int64_t>(shape_[0], 1)) * dtype_size(dtype_);
  t.shape_[0] = length;
  return t;
}

Tensor Tensor::select(int64_t index) const {
  Tensor t = narrow(index, 1);
  std::vector<int64_t> dims = shape_.vec();
  dims.erase(dims.begin());
  t.shape_ = Shape(dims);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (!is_cpu()) {
    Tensor t = empty(shape_, dtype, device());
    cuda_backend().cast(*this, t);
    return t;
  }
  Tensor t = empty(shape_, dtype);
  const void* src = raw();
  void* dst = t.raw();
  const int64_t n = numel();
  if (dtype_ == DType::f32 && dtype == DType::f64) {
    for (int64_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = static_cast<const float*>(src)[i];
  } else {
    for (int64_t i = 0; i < n; ++i) store(dst, dtype, i, load(src, dtype_, i));
  }
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  FATHOM_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: ", describe(src), " into ", describe(*this));
  copier(device(), src.device()).copy(raw(), device(), src.raw(), src.device(), nbytes());
}

void Tensor::zero_() { allocator_for(device()).fill_zero(raw(), nbytes(), device()); }

void Tensor::fill_(double value) {
  if (value == 0.0) return zero_();
  if (!is_cpu()) return cuda_backend().fill(*this, value);
  for (int64_t i = 0, n = numel(); i < n; ++i) store(raw(), dtype_, i, value);
}

double Tensor::item() const {
  FATHOM_CHECK(numel() == 1, "item() of ", describe(*this), ": needs exactly one element");
  const Tensor host = to(Device::cpu());
  return load(host.raw(), dtype_, 0);
}

void Tensor::check_type(DType requested) const {
  FATHOM_CHECK(defined(), "access to an undefined tensor");
  FATHOM_CHECK(requested == dtype_, "tensor is ", dtype_name(dtype_), " but was read as ", dtype_name(requested));
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return std::string(dtype_name(t.dtype())) + t.shape().str() + " on " + t.device().str();
}

}  // namespace fathom
