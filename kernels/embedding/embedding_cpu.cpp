// CPU embedding: row gather forward; backward scatter-adds, with threads owning column ranges so that
// each gradient element is summed in id order whatever the thread count.
#include <algorithm>
#include <cstring>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/embedding/embedding.h"

namespace fathom::cpu {

namespace {
// Validates every id before any thread starts (an exception must not leave a parallel region).
template <typename I>
void check_range(const I* ids, int64_t n, int64_t vocab, const char* op) {
  for (int64_t i = 0; i < n; ++i)
    FATHOM_CHECK(ids[i] >= 0 && ids[i] < vocab, op, ": token id ", int64_t(ids[i]), " at position ", i,
                 " is outside the vocabulary [0, ", vocab, ")");
}
}  // namespace

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  const int64_t n = ids.numel(), vocab = table.dim(0), dim = table.dim(1);
  std::vector<int64_t> out_dims = ids.shape().vec();
  out_dims.push_back(dim);
  Tensor out = Tensor::empty(Shape(out_dims), table.dtype());
  const size_t row_bytes = size_t(dim) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.raw());
  char* dst = static_cast<char*>(out.raw());
  dispatch_index("embedding", "ids", ids.dtype(), [&]<typename I>() {
    const I* id = ids.data<I>();
    check_range(id, n, vocab, "embedding");
#pragma omp parallel for schedule(static) if (n * dim > kMinParallelElements)
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * row_bytes, src + int64_t(id[i]) * row_bytes, row_bytes);
  });
  return out;
}

void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
  const int64_t n = ids.numel(), vocab = grad_table.dim(0), dim = grad_table.dim(1);
  dispatch_float("embedding_backward", grad_table.dtype(), [&]<typename T>() {
    dispatch_index("embedding_backward", "ids", ids.dtype(), [&]<typename I>() {
      const I* id = ids.data<I>();
      check_range(id, n, vocab, "embedding_backward");
      const T* g = grad_out.data<T>();
      T* dt = grad_table.data<T>();
      constexpr int64_t kColumns = 32;  // columns per task: a cache-friendly slice of each row
      const int64_t tasks = (dim + kColumns - 1) / kColumns;
#pragma omp parallel for schedule(static) if (n * dim > kMinParallelElements)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t c0 = task * kColumns, c1 = std::min(dim, c0 + kColumns);
        for (int64_t i = 0; i < n; ++i) {
          T* dst = dt + int64_t(id[i]) * dim;
          const T* src = g + i * dim;
          for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
      }
    });
  });
}

}  // namespace fathom::cpu
