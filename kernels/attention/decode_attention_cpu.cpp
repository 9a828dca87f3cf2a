// CPU reference of decode attention, written as the formula reads: for each new query, one list of
// logits over the cache positions it may see (up to its own sequence's length) followed by its token's
// depth slots, one softmax, one weighted sum of the matching value rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/dispatch.h"

namespace fathom::cpu {

namespace {

// Index arithmetic of the three layouts.
struct DecodeDims {
  int64_t B, Tq, Hq, Hk, G, d, capacity, S;
  DecodeDims(const Tensor& q, const Tensor& k_cache, const DepthSlots& depth)
      : B(q.dim(0)),
        Tq(q.dim(1)),
        Hq(q.dim(2)),
        Hk(k_cache.dim(1)),
        G(q.dim(2) / k_cache.dim(1)),
        d(q.dim(3)),
        capacity(k_cache.dim(2)),
        S(depth.k.defined() ? depth.k.dim(2) : 0) {}
  int64_t q_row(int64_t b, int64_t i, int64_t h) const { return ((b * Tq + i) * Hq + h) * d; }
  int64_t cache_row(int64_t b, int64_t hk, int64_t j) const { return ((b * Hk + hk) * capacity + j) * d; }
  int64_t depth_row(int64_t b, int64_t i, int64_t s, int64_t hk) const {
    return (((b * Tq + i) * S + s) * Hk + hk) * d;
  }
};

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// lengths[b]: the cache entries sequence b attends over, its new tokens' keys included.
Tensor decode_rows(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const std::vector<int64_t>& lengths,
                   const DepthSlots& depth, double scale) {
  const DecodeDims m(q, k_cache, depth);
  const int64_t slots = depth.end - depth.begin;
  const int64_t length = *std::max_element(lengths.begin(), lengths.end());
  Tensor o = Tensor::empty(q.shape(), q.dtype());
  dispatch_float("decode_attention", q.dtype(), [&]<typename T>() {
    const T *qp = q.data<T>(), *kp = k_cache.data<T>(), *vp = v_cache.data<T>();
    const T* dkp = slots > 0 ? depth.k.data<T>() : nullptr;
    const T* dvp = slots > 0 ? depth.v.data<T>() : nullptr;
    T* op = o.data<T>();
#pragma omp parallel
    {
      std::vector<T> logits(size_t(length + slots));
      std::vector<const T*> values(size_t(length + slots));
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < m.B * m.Hq; ++bh) {
        const int64_t b = bh / m.Hq, h = bh % m.Hq, hk = h / m.G;
        for (int64_t i = 0; i < m.Tq; ++i) {
          const T* qrow = qp + m.q_row(b, i, h);
          const int64_t position = lengths[size_t(b)] - m.Tq + i;
          int64_t n = 0;
          for (int64_t j = 0; j <= position; ++j, ++n) {
            logits[size_t(n)] = T(scale) * dot(qrow, kp + m.cache_row(b, hk, j), m.d);
            values[size_t(n)] = vp + m.cache_row(b, hk, j);
          }
          for (int64_t s = depth.begin; s < depth.end; ++s, ++n) {
            logits[size_t(n)] = T(scale) * dot(qrow, dkp + m.depth_row(b, i, s, hk), m.d);
            values[size_t(n)] = dvp + m.depth_row(b, i, s, hk);
          }
          const T max = *std::max_element(logits.begin(), logits.begin() + n);
          T sum = 0;
          for (int64_t k = 0; k < n; ++k) sum += std::exp(logits[size_t(k)] - max);
          T* orow = op + m.q_row(b, i, h);
          std::fill(orow, orow + m.d, T(0));
          for (int64_t k = 0; k < n; ++k) {
            const T p = std::exp(logits[size_t(k)] - max) / sum;
            for (int64_t c = 0; c < m.d; ++c) orow[c] += p * values[size_t(k)][c];
          }
        }
      }
    }
  });
  return o;
}

}  // namespace

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                        const DepthSlots& depth, double scale) {
  return decode_rows(q, k_cache, v_cache, std::vector<int64_t>(size_t(q.dim(0)), length), depth, scale);
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                        const DepthSlots& depth, double scale) {
  const int64_t B = q.dim(0), Tq = q.dim(1), capacity = k_cache.dim(2);
  const int32_t* counts = past.data<int32_t>();
  std::vector<int64_t> lengths(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    lengths[size_t(b)] = int64_t(counts[past.numel() > 1 ? b : 0]) + Tq;
    FATHOM_CHECK(counts[past.numel() > 1 ? b : 0] >= 0 && lengths[size_t(b)] <= capacity, "decode_attention: sequence ",
                 b, " held ", lengths[size_t(b)] - Tq, " positions before ", Tq,
                 " new ones: more than the cache's capacity of ", capacity);
  }
  return decode_rows(q, k_cache, v_cache, lengths, depth, scale);
}

Tensor run_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                            const DepthSlots& depth, double scale) {
  return cpu::decode_attention(q, k_cache, v_cache, length, depth, scale);
}

// The counts are host memory on the CPU: read where they are.
Tensor run_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                            const DepthSlots& depth, double scale) {
  return cpu::decode_attention(q, k_cache, v_cache, past, depth, scale);
}

}  // namespace fathom::cpu
