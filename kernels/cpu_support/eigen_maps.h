// Eigen views over fathom's row-major buffers, shared by the CPU kernels that hand work to Eigen
// (GEMMs, and vectorised exp/log/sums over rows).
#pragma once
#include <vector>

#include "kernels/cpu_support/eigen_core.h"

namespace fathom::cpu {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// A rows x cols block whose consecutive rows are `stride` elements apart (e.g. one head of [T, H, d]).
template <typename T>
using MatrixView = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using ConstMatrixView = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
// A contiguous run of elements, for coefficient-wise (SIMD) math.
template <typename T>
using ArrayView = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayView = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Scratch memory for data Eigen reduces over. Eigen's vectorised sums start at the first aligned
// element, so the rounding of a sum depends on the buffer's address; malloc's 16-byte alignment
// varies from run to run, which broke bit-exact resume. Aligned scratch keeps results reproducible.
template <typename T>
using ScratchVector = std::vector<T, Eigen::aligned_allocator<T>>;

template <typename T>
MatrixView<T> matrix_view(T* data, int64_t rows, int64_t cols, int64_t stride) {
  return MatrixView<T>(data, rows, cols, Eigen::OuterStride<>(stride));
}
template <typename T>
ConstMatrixView<T> matrix_view(const T* data, int64_t rows, int64_t cols, int64_t stride) {
  return ConstMatrixView<T>(data, rows, cols, Eigen::OuterStride<>(stride));
}

}  // namespace fathom::cpu
