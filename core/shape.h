// A tensor shape of up to 8 dimensions, stored inline.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace fathom {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  // Dimension i, where negative i counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const;
  // Product of all dimensions but the last (rows of a row-major matrix view).
  int64_t rows() const { return rank_ == 0 ? 1 : numel() / dims_[rank_ - 1]; }
  int64_t last() const { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  std::vector<int64_t> vec() const { return {dims_.begin(), dims_.begin() + rank_}; }
  std::string str() const;
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace fathom
