// CPU reference of MoDA attention, written as the formula reads: for each query row, one list of
// logits over the causal sequence keys followed by the row's own depth slots, one softmax, one
// weighted sum. Threads own (batch, KV head) pairs, so every gradient is summed in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/moda/moda_attention.h"

namespace fathom::cpu {

namespace {

// Index arithmetic for the four layouts involved.
struct ModaDims {
  int64_t B, T, Hq, Hk, G, d, S, begin, end;
  ModaDims(const Tensor& q, const Tensor& k, const DepthSlots& depth)
      : B(q.dim(0)),
        T(q.dim(1)),
        Hq(q.dim(2)),
        Hk(k.dim(2)),
        G(q.dim(2) / k.dim(2)),
        d(q.dim(3)),
        S(depth.k.dim(2)),
        begin(depth.begin),
        end(depth.end) {}
  int64_t slots() const { return end - begin; }
  int64_t q_row(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hq + h) * d; }
  int64_t kv_row(int64_t b, int64_t j, int64_t hk) const { return ((b * T + j) * Hk + hk) * d; }
  int64_t depth_row(int64_t b, int64_t t, int64_t s, int64_t hk) const { return (((b * T + t) * S + s) * Hk + hk) * d; }
  int64_t lse_index(int64_t b, int64_t h, int64_t t) const { return (b * Hq + h) * T + t; }
};

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <typename T>
void axpy(T* y, T alpha, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Scaled logits of query row `qrow` over keys j <= t, then over the row's depth slots; returns the count.
template <typename T>
int64_t joint_logits(const ModaDims& m, const T* qrow, const T* k, const T* dk, int64_t b, int64_t t, int64_t hk,
                     T scale, T* logits) {
  int64_t n = 0;
  for (int64_t j = 0; j <= t; ++j) logits[n++] = scale * dot(qrow, k + m.kv_row(b, j, hk), m.d);
  for (int64_t s = m.begin; s < m.end; ++s) logits[n++] = scale * dot(qrow, dk + m.depth_row(b, t, s, hk), m.d);
  return n;
}

// The value row that logit `n` of row (b, t) weights.
template <typename T>
const T* value_row(const ModaDims& m, const T* v, const T* dv, int64_t b, int64_t t, int64_t hk, int64_t n) {
  return n <= t ? v + m.kv_row(b, n, hk) : dv + m.depth_row(b, t, m.begin + (n - t - 1), hk);
}

// Byte offset of slot `slot` in row r = b * T + t of a depth buffer [B, T, S, Hk, d].
size_t slot_offset(const Tensor& buffer, int64_t row, int64_t slot) {
  return size_t((row * buffer.dim(2) + slot) * buffer.dim(3) * buffer.dim(4)) * dtype_size(buffer.dtype());
}

}  // namespace

// x has the buffer's dtype, or is F32 for a BF16 buffer: converted first.
void write_depth_slot(Tensor& buffer, int64_t slot, const Tensor& values) {
  const Tensor x = values.to(buffer.dtype());
  const size_t slot_bytes = x.nbytes() / size_t(x.dim(0) * x.dim(1));
  char* dst = static_cast<char*>(buffer.raw());
  const char* src = static_cast<const char*>(x.raw());
  for (int64_t row = 0; row < x.dim(0) * x.dim(1); ++row)
    std::memcpy(dst + slot_offset(buffer, row, slot), src + size_t(row) * slot_bytes, slot_bytes);
}

void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end) {
  char* p = static_cast<char*>(buffer.raw());
  const size_t bytes = slot_offset(buffer, 0, end) - slot_offset(buffer, 0, begin);
  for (int64_t row = 0; row < buffer.dim(0) * buffer.dim(1); ++row)
    std::memset(p + slot_offset(buffer, row, begin), 0, bytes);
}

// The slot in the buffer's dtype, then converted to `dtype`.
Tensor read_depth_slot(const Tensor& buffer, int64_t slot, DType dtype) {
  Tensor x = Tensor::empty({buffer.dim(0), buffer.dim(1), buffer.dim(3), buffer.dim(4)}, buffer.dtype());
  const size_t slot_bytes = x.nbytes() / size_t(x.dim(0) * x.dim(1));
  const char* src = static_cast<const char*>(buffer.raw());
  char* dst = static_cast<char*>(x.raw());
  for (int64_t row = 0; row < x.dim(0) * x.dim(1); ++row)
    std::memcpy(dst + size_t(row) * slot_bytes, src + slot_offset(buffer, row, slot), slot_bytes);
  return x.to(dtype);
}

// The CPU backward forms depth weights for any grouping.
bool moda_depth_weights_supported(const Tensor& q, const Tensor& k) { return true; }

AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale) {
  const ModaDims m(q, k, depth);
  AttentionOutput out{Tensor::empty(q.shape(), q.dtype()), Tensor::empty({m.B, m.Hq, m.T}, q.dtype())};
  dispatch_float("moda_attention", q.dtype(), [&]<typename T>() {
    const T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>();
    const T *dkp = depth.k.data<T>(), *dvp = depth.v.data<T>();
    T* op = out.o.data<T>();
    T* lp = out.lse.data<T>();
#pragma omp parallel
    {
      std::vector<T> logits(size_t(m.T + m.slots()));
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < m.B * m.Hq; ++bh) {
        const int64_t b = bh / m.Hq, h = bh % m.Hq, hk = h / m.G;
        for (int64_t t = 0; t < m.T; ++t) {
          const T* qrow = qp + m.q_row(b, t, h);
          const int64_t n = joint_logits(m, qrow, kp, dkp, b, t, hk, T(scale), logits.data());
          const T max = *std::max_element(logits.begin(), logits.begin() + n);
          T sum = 0;
          for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[size_t(i)] - max);
          const T lse = max + std::log(sum);
          T* orow = op + m.q_row(b, t, h);
          std::fill(orow, orow + m.d, T(0));
          for (int64_t i = 0; i < n; ++i)
            axpy(orow, std::exp(logits[size_t(i)] - lse), value_row(m, vp, dvp, b, t, hk, i), m.d);
          lp[m.lse_index(b, h, t)] = lse;
        }
      }
    }
  });
  return out;
}

namespace {

// Where a backward pass puts a depth slot's terms: added into the gradient buffers [B, T, S, Hk, d]
// (ddk, ddv), or as weights [B, T, Hq, L] (p, ds; set instead).
template <typename T>
struct DepthSink {
  T *ddk = nullptr, *ddv = nullptr;
  T *p = nullptr, *ds = nullptr;
};

// With p the joint probabilities and D = dO . O: ds = p (dO . value - D); dq = scale sum ds key;
// dkey += scale ds q; dvalue += p dO, for sequence keys and depth slots alike (the depth ones, or
// their weights, go to the sink).
AttentionGrads backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                        const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale, Tensor* d_depth_k,
                        Tensor* d_depth_v, DepthWeights* weights) {
  const ModaDims m(q, k, depth);
  AttentionGrads g{Tensor::zeros(q.shape(), q.dtype()), Tensor::zeros(k.shape(), k.dtype()),
                   Tensor::zeros(v.shape(), v.dtype())};
  dispatch_float("moda_attention_backward", q.dtype(), [&]<typename T>() {
    const T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>(), *dop = grad_o.data<T>(), *op = o.data<T>();
    const T *dkp = depth.k.data<T>(), *dvp = depth.v.data<T>(), *lp = lse.data<T>();
    T *dq = g.dq.data<T>(), *dk = g.dk.data<T>(), *dv = g.dv.data<T>();
    DepthSink<T> sink;
    if (weights != nullptr)
      sink.p = weights->p.data<T>(), sink.ds = weights->ds.data<T>();
    else
      sink.ddk = d_depth_k->data<T>(), sink.ddv = d_depth_v->data<T>();
    const T sc = T(scale);
#pragma omp parallel
    {
      std::vector<T> logits(size_t(m.T + m.slots()));
#pragma omp for schedule(static)
      for (int64_t bk = 0; bk < m.B * m.Hk; ++bk) {
        const int64_t b = bk / m.Hk, hk = bk % m.Hk;
        for (int64_t h = hk * m.G; h < (hk + 1) * m.G; ++h) {
          for (int64_t t = 0; t < m.T; ++t) {
            const T* qrow = qp + m.q_row(b, t, h);
            const T* dorow = dop + m.q_row(b, t, h);
            T* dqrow = dq + m.q_row(b, t, h);
            const int64_t n = joint_logits(m, qrow, kp, dkp, b, t, hk, sc, logits.data());
            const T row_lse = lp[m.lse_index(b, h, t)];
            const T D = dot(dorow, op + m.q_row(b, t, h), m.d);
            for (int64_t i = 0; i < n; ++i) {
              const T p = std::exp(logits[size_t(i)] - row_lse);
              const T ds = p * (dot(dorow, value_row(m, vp, dvp, b, t, hk, i), m.d) - D);
              const bool seq = i <= t;
              const int64_t key_row = seq ? m.kv_row(b, i, hk) : m.depth_row(b, t, m.begin + (i - t - 1), hk);
              axpy(dqrow, sc * ds, (seq ? kp : dkp) + key_row, m.d);
              if (seq) {
                axpy(dk + key_row, sc * ds, qrow, m.d);
                axpy(dv + key_row, p, dorow, m.d);
              } else if (sink.p != nullptr) {
                const int64_t w = ((b * m.T + t) * m.Hq + h) * m.slots() + (i - t - 1);
                sink.p[w] = p;
                sink.ds[w] = sc * ds;
              } else {
                axpy(sink.ddk + key_row, sc * ds, qrow, m.d);
                axpy(sink.ddv + key_row, p, dorow, m.d);
              }
            }
          }
        }
      }
    }
  });
  return g;
}

}  // namespace

// Storing the depth gradients is adding them to a zeroed slot range.
AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode) {
  if (mode == DepthGradMode::store)
    for (Tensor* grad : {&d_depth_k, &d_depth_v}) cpu::zero_depth_slots(*grad, depth.begin, depth.end);
  return backward(grad_o, q, k, v, depth, o, lse, scale, &d_depth_k, &d_depth_v, nullptr);
}

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       DepthWeights& weights) {
  return backward(grad_o, q, k, v, depth, o, lse, scale, nullptr, nullptr, &weights);
}

// Each (batch, token, KV head) row sums its readers in order, and within a reader the G heads in
// order: a fixed order, as on the GPU.
std::vector<SlotGrads> depth_slot_grads(const std::vector<const DepthReader*>& readers, int64_t first, int64_t last,
                                        int64_t kv_heads, DType dtype) {
  const Tensor& q0 = readers.front()->q;
  const int64_t Hq = q0.dim(2), d = q0.dim(3), Hk = kv_heads, G = Hq / Hk, rows = q0.dim(0) * q0.dim(1) * Hk;
  const Shape shape{q0.dim(0), q0.dim(1), Hk, d};
  std::vector<SlotGrads> out;
  for (int64_t s = first; s < last; ++s)
    out.push_back({Tensor::zeros(shape, q0.dtype()), Tensor::zeros(shape, q0.dtype())});
  dispatch_float("depth_slot_grads", q0.dtype(), [&]<typename T>() {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t bt = row / Hk, hk = row % Hk;
      for (const DepthReader* r : readers)
        for (int64_t s = std::max(first, r->begin); s < std::min(last, r->end); ++s) {
          T* gk = out[size_t(s - first)].k.data<T>() + row * d;
          T* gv = out[size_t(s - first)].v.data<T>() + row * d;
          for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
            const int64_t w = (bt * Hq + h) * (r->end - r->begin) + (s - r->begin);
            axpy(gk, r->weights.ds.data<T>()[w], r->q.data<T>() + (bt * Hq + h) * d, d);
            axpy(gv, r->weights.p.data<T>()[w], r->grad_o.data<T>() + (bt * Hq + h) * d, d);
          }
        }
    }
  });
  for (SlotGrads& g : out) g = {g.k.to(dtype), g.v.to(dtype)};
  return out;
}

}  // namespace fathom::cpu
