#include "core/shape.h"

#include "core/error.h"

namespace fathom {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  FATHOM_CHECK(dims.size() <= size_t(kMaxRank), "tensors have at most ", kMaxRank, " dimensions, got ", dims.size());
  rank_ = int(dims.size());
  for (int i = 0; i < rank_; ++i) {
    FATHOM_CHECK(dims[i] >= 0, "negative dimension ", dims[i], " in shape");
    dims_[i] = dims[i];
  }
}

int64_t Shape::dim(int i) const {
  const int j = i < 0 ? i + rank_ : i;
  FATHOM_CHECK(j >= 0 && j < rank_, "dimension ", i, " out of range for shape ", str());
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

}  // namespace fathom
