// Tensor: a contiguous row-major array of up to 8 dims over a shared storage plus a byte offset,
// so reshapes and slices along the first dimension are free views. No general strides: kernels
// take the layouts they need.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace fathom {

class Tensor {
 public:
  Tensor() = default;  // undefined

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // Copies host values into a new CPU tensor of the matching dtype.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_cpu() const { return device().is_cpu(); }

  void* raw() { return static_cast<char*>(storage_->data()) + offset_; }
  const void* raw() const { return static_cast<const char*>(storage_->data()) + offset_; }
  // Typed pointer; checks that T matches the dtype.
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw());
  }

  // Views sharing this tensor's storage.
  Tensor view(const Shape& shape) const;
  Tensor narrow(int64_t start, int64_t length) const;  // along the first dimension
  Tensor select(int64_t index) const;                  // drops the first dimension
  Tensor flat() const { return view(Shape{numel()}); }

  // Copies.
  Tensor clone() const;
  Tensor to(DType dtype) const;       // converts on the tensor's device; returns *this if already that dtype
  Tensor to(Device device) const;     // returns *this if already there
  void copy_from(const Tensor& src);  // same shape and dtype, any devices
  void zero_();
  void fill_(double value);

  template <typename T>
  std::vector<T> to_vector() const;
  // The single element of a one-element tensor, as double.
  double item() const;

  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  // True when no other tensor (or view) refers to this storage: it may then be overwritten in place.
  bool sole_owner_of_storage() const { return storage_ && storage_.use_count() == 1; }
  size_t storage_offset() const { return offset_; }

 private:
  void check_type(DType requested) const;

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

std::string describe(const Tensor& t);  // "f32[2, 3] on cpu"

// ---- template definitions ----

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  FATHOM_CHECK(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(), " values do not fill shape ",
               shape.str());
  Tensor t = empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const Tensor host = to(Device::cpu());
  check_type(dtype_of<T>());
  const T* p = host.data<T>();
  return std::vector<T>(p, p + numel());
}

}  // namespace fathom
