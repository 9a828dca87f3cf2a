// CPU causal GQA attention. Each (batch, head) is independent: its scores are materialised one block
// of query rows at a time, against only the keys that block can see (j < r1), so the causal half is
// mostly skipped. GEMMs go through Eigen, single-threaded inside the per-head parallel loop.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/cpu_support/eigen_maps.h"
#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"

namespace fathom::cpu {

namespace {

constexpr int64_t kRowBlock = 64;

// Turns scaled scores s[0, valid) into probabilities in place, zeroes s[valid, n); returns the lse.
template <typename T>
T causal_softmax_row(T* s, int64_t valid, int64_t n) {
  ArrayView<T> row(s, valid);
  const T max = row.maxCoeff();
  row = (row - max).exp();
  const T sum = row.sum();
  row *= T(1) / sum;
  std::fill(s + valid, s + n, T(0));
  return max + std::log(sum);
}

// Geometry of one attention call; a head is a [T, d] matrix with row stride H * d.
struct Dims {
  int64_t B, T, Hq, Hk, G, d;
  explicit Dims(const Tensor& q, const Tensor& k)
      : B(q.dim(0)), T(q.dim(1)), Hq(q.dim(2)), Hk(k.dim(2)), G(q.dim(2) / k.dim(2)), d(q.dim(3)) {}
  int64_t q_head(int64_t b, int64_t h) const { return (b * T * Hq + h) * d; }
  int64_t kv_head(int64_t b, int64_t h) const { return (b * T * Hk + h) * d; }
  int64_t score_work() const { return B * Hq * T * T * d; }  // multiply-adds of all q.k products
};

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const Dims dm(q, k);
  AttentionOutput out{Tensor::empty(q.shape(), q.dtype()), Tensor::empty({dm.B, dm.Hq, dm.T}, q.dtype())};
  dispatch_float("attention", q.dtype(), [&]<typename T>() {
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    T* op = out.o.data<T>();
    T* lp = out.lse.data<T>();
    const T sc = T(scale);
#pragma omp parallel if (dm.score_work() > kMinParallelWork)
    {
      ScratchVector<T> scores(size_t(kRowBlock * dm.T));
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < dm.B * dm.Hq; ++bh) {
        const int64_t b = bh / dm.Hq, h = bh % dm.Hq;
        const auto Q = matrix_view(qp + dm.q_head(b, h), dm.T, dm.d, dm.Hq * dm.d);
        const auto K = matrix_view(kp + dm.kv_head(b, h / dm.G), dm.T, dm.d, dm.Hk * dm.d);
        const auto V = matrix_view(vp + dm.kv_head(b, h / dm.G), dm.T, dm.d, dm.Hk * dm.d);
        auto O = matrix_view(op + dm.q_head(b, h), dm.T, dm.d, dm.Hq * dm.d);
        T* lse = lp + (b * dm.Hq + h) * dm.T;
        for (int64_t r0 = 0; r0 < dm.T; r0 += kRowBlock) {
          const int64_t rows = std::min(kRowBlock, dm.T - r0), keys = r0 + rows;
          auto S = matrix_view(scores.data(), rows, keys, keys);
          S.noalias() = sc * Q.middleRows(r0, rows) * K.topRows(keys).transpose();
          for (int64_t i = 0; i < rows; ++i) lse[r0 + i] = causal_softmax_row(&S(i, 0), r0 + i + 1, keys);
          O.middleRows(r0, rows).noalias() = S * V.topRows(keys);
        }
      }
    }
  });
  return out;
}

// With P the probabilities and dP = dO V^T: dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
// dK = scale dS^T Q, dV = P^T dO. One task per (batch, KV head) owns dK/dV and loops over its G
// query heads, so the group sum needs no atomics and is deterministic.
AttentionGrads attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& o, const Tensor& lse, double scale) {
  const Dims dm(q, k);
  AttentionGrads grads{Tensor::empty(q.shape(), q.dtype()), Tensor::empty(k.shape(), k.dtype()),
                       Tensor::empty(v.shape(), v.dtype())};
  dispatch_float("attention_backward", q.dtype(), [&]<typename T>() {
    const T* dop = grad_o.data<T>();
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    const T* op = o.data<T>();
    const T* lp = lse.data<T>();
    T* dqp = grads.dq.data<T>();
    T* dkp = grads.dk.data<T>();
    T* dvp = grads.dv.data<T>();
    const T sc = T(scale);
    const int64_t qs = dm.Hq * dm.d, ks = dm.Hk * dm.d;
#pragma omp parallel if (dm.score_work() > kMinParallelWork)
    {
      ScratchVector<T> probs(size_t(kRowBlock * dm.T)), dprobs(size_t(kRowBlock * dm.T));
#pragma omp for schedule(static)
      for (int64_t bk = 0; bk < dm.B * dm.Hk; ++bk) {
        const int64_t b = bk / dm.Hk, hk = bk % dm.Hk;
        const auto K = matrix_view(kp + dm.kv_head(b, hk), dm.T, dm.d, ks);
        const auto V = matrix_view(vp + dm.kv_head(b, hk), dm.T, dm.d, ks);
        auto dK = matrix_view(dkp + dm.kv_head(b, hk), dm.T, dm.d, ks);
        auto dV = matrix_view(dvp + dm.kv_head(b, hk), dm.T, dm.d, ks);
        dK.setZero();
        dV.setZero();
        for (int64_t h = hk * dm.G; h < (hk + 1) * dm.G; ++h) {
          const auto Q = matrix_view(qp + dm.q_head(b, h), dm.T, dm.d, qs);
          const auto O = matrix_view(op + dm.q_head(b, h), dm.T, dm.d, qs);
          const auto dO = matrix_view(dop + dm.q_head(b, h), dm.T, dm.d, qs);
          auto dQ = matrix_view(dqp + dm.q_head(b, h), dm.T, dm.d, qs);
          const T* lse_h = lp + (b * dm.Hq + h) * dm.T;
          for (int64_t r0 = 0; r0 < dm.T; r0 += kRowBlock) {
            const int64_t rows = std::min(kRowBlock, dm.T - r0), keys = r0 + rows;
            auto P = matrix_view(probs.data(), rows, keys, keys);
            auto dS = matrix_view(dprobs.data(), rows, keys, keys);
            P.noalias() = sc * Q.middleRows(r0, rows) * K.topRows(keys).transpose();
            dS.noalias() = dO.middleRows(r0, rows) * V.topRows(keys).transpose();
            for (int64_t i = 0; i < rows; ++i) {
              const int64_t valid = r0 + i + 1;
              ArrayView<T> p(&P(i, 0), valid), ds(&dS(i, 0), valid);
              p = (p - lse_h[r0 + i]).exp();
              const T row_term = dO.row(r0 + i).dot(O.row(r0 + i));
              ds = p * (ds - row_term);
              std::fill(&P(i, 0) + valid, &P(i, 0) + keys, T(0));
              std::fill(&dS(i, 0) + valid, &dS(i, 0) + keys, T(0));
            }
            dQ.middleRows(r0, rows).noalias() = sc * dS * K.topRows(keys);
            dK.topRows(keys).noalias() += sc * dS.transpose() * Q.middleRows(r0, rows);
            dV.topRows(keys).noalias() += P.transpose() * dO.middleRows(r0, rows);
          }
        }
      }
    }
  });
  return grads;
}

}  // namespace fathom::cpu
