// CPU DSLA: the chunked form (the training kernels' algorithm) and the step recurrence (decoding), both in
// double whatever the storage dtype. Each (batch, query head) is one gated linear-attention problem per
// state; the two states share q, k, v and differ in their gates. The chunked backward:
//   with G_t = w_i do_t (w1 = gamma, w2 = 1 - gamma) and per-chunk cumulative gates b (restarting at 0):
//   dq_t  = scale [e^{b_t} (S_prev G_t^T) + sum_{j<=t} (G_t . v_j) k_j e^{b_t - b_j}]
//   dk_j  = scale sum_{t>=j} (G_t . v_j) q_t e^{b_t - b_j} + e^{b_L - b_j} (dH v_j^T)
//   dv_j  = scale sum_{t>=j} A_tj G_t + (k_j e^{b_L - b_j}) dH,   A_tj = sum_c q_tc k_jc e^{b_tc - b_jc}
//   dH   <- e^{b_L} dH + scale sum_t (q_t e^{b_t})^T G_t          (the state gradient, carried backwards)
//   dg_t  = sum_{t' >= t} (q_t' dq_t' - k_t' dk_t')                (per state; the pairwise ratios' identity)
//   dgamma = sum do . (o1 - o2).
#include <cmath>
#include <vector>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/dsla/dsla.h"

namespace fathom::cpu {

namespace {

using Matrix = std::vector<double>;  // row-major

struct Dims {
  int64_t B, T, H, Hk, d;
  int64_t group() const { return H / Hk; }
};
Dims dims_of(const Tensor& q, const Tensor& k) { return {q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)}; }

// The [T, d] sequence of head h of batch b of a [B, T, heads, d] tensor, in double.
template <typename T>
Matrix gather_head(const Tensor& x, int64_t b, int64_t h) {
  const int64_t len = x.dim(1), heads = x.dim(2), d = x.dim(3);
  const T* p = x.data<T>();
  Matrix out(size_t(len * d));
  for (int64_t t = 0; t < len; ++t)
    for (int64_t c = 0; c < d; ++c) out[t * d + c] = double(p[((b * len + t) * heads + h) * d + c]);
  return out;
}
template <typename T>
void scatter_head(Tensor& x, int64_t b, int64_t h, const Matrix& m) {
  const int64_t len = x.dim(1), heads = x.dim(2), d = x.dim(3);
  T* p = x.data<T>();
  for (int64_t t = 0; t < len; ++t)
    for (int64_t c = 0; c < d; ++c) p[((b * len + t) * heads + h) * d + c] = T(m[t * d + c]);
}
// The [d, d] state of (b, h) of a [B, H, d, d] tensor, in double; zeros where undefined.
template <typename T>
Matrix gather_state(const Tensor& s, int64_t b, int64_t h, int64_t d) {
  Matrix out(size_t(d * d), 0.0);
  if (!s.defined()) return out;
  const T* p = s.data<T>() + (b * s.dim(1) + h) * d * d;
  for (int64_t i = 0; i < d * d; ++i) out[i] = double(p[i]);
  return out;
}
template <typename T>
void scatter_state(Tensor& s, int64_t b, int64_t h, const Matrix& m) {
  const int64_t d = s.dim(3);
  T* p = s.data<T>() + (b * s.dim(1) + h) * d * d;
  for (int64_t i = 0; i < d * d; ++i) p[i] = T(m[i]);
}

// One chunk [t0, t0 + L) of one head: its gates' cumulative sums b (restarting at 0) and the exact
// ratios e^{b_t - b_j} per key dimension, each computed from the difference so nothing overflows. The
// table of all pairwise ratios (j <= t) is built only where the intra-chunk terms need it.
struct Chunk {
  int64_t t0, L, d;
  Matrix b;           // [L, d]
  Matrix start, end;  // e^{b_t} and e^{b_L - b_t}, [L, d]
  Matrix pairs;       // e^{b_t - b_j} at (t * L + j) * d + c for j <= t; empty unless asked for
  Chunk(const Matrix& g, int64_t t0_, int64_t L_, int64_t d_, bool with_pairs)
      : t0(t0_), L(L_), d(d_), b(size_t(L_ * d_)), start(b.size()), end(b.size()) {
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < d; ++c) b[t * d + c] = g[(t0 + t) * d + c] + (t > 0 ? b[(t - 1) * d + c] : 0.0);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < d; ++c) {
        start[t * d + c] = std::exp(b[t * d + c]);
        end[t * d + c] = std::exp(b[(L - 1) * d + c] - b[t * d + c]);
      }
    if (!with_pairs) return;
    pairs.assign(size_t(L * L * d), 0.0);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t c = 0; c < d; ++c) pairs[(t * L + j) * d + c] = std::exp(b[t * d + c] - b[j * d + c]);
  }
  double ratio(int64_t t, int64_t j, int64_t c) const { return pairs[(t * L + j) * d + c]; }  // j <= t
  double to_end(int64_t j, int64_t c) const { return end[j * d + c]; }                        // e^{b_L - b_j}
  double from_start(int64_t t, int64_t c) const { return start[t * d + c]; }                  // e^{b_t}
};

// A_tj = sum_c q_tc k_jc e^{b_tc - b_jc} for j <= t within the chunk ([L, L], zero above the diagonal).
Matrix intra_scores(const Chunk& ch, const Matrix& q, const Matrix& k) {
  const int64_t L = ch.L, d = ch.d;
  Matrix A(size_t(L * L), 0.0);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t j = 0; j <= t; ++j) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += q[(ch.t0 + t) * d + c] * k[(ch.t0 + j) * d + c] * ch.ratio(t, j, c);
      A[t * L + j] = s;
    }
  return A;
}

// S <- e^{b_L} S + sum_j (k_j e^{b_L - b_j})^T v_j: the state carried past the chunk.
void advance_state(const Chunk& ch, const Matrix& k, const Matrix& v, Matrix& S) {
  const int64_t d = ch.d, t0 = ch.t0;
  for (int64_t c = 0; c < d; ++c) {
    const double decay = ch.from_start(ch.L - 1, c);
    for (int64_t e = 0; e < d; ++e) {
      double s = decay * S[c * d + e];
      for (int64_t j = 0; j < ch.L; ++j) s += k[(t0 + j) * d + c] * ch.to_end(j, c) * v[(t0 + j) * d + e];
      S[c * d + e] = s;
    }
  }
}

// One state's output o = scale q_t S_t over the sequence, chunk by chunk; S holds the initial state on
// entry and the final state on return.
void gla_forward(const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& g, int64_t len, int64_t d,
                 double scale, Matrix& S, Matrix& o) {
  o.assign(size_t(len * d), 0.0);
  for (int64_t t0 = 0; t0 < len; t0 += kDslaChunk) {
    const Chunk ch(g, t0, std::min(kDslaChunk, len - t0), d, true);
    const Matrix A = intra_scores(ch, q, k);
    for (int64_t t = 0; t < ch.L; ++t)
      for (int64_t e = 0; e < d; ++e) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += q[(t0 + t) * d + c] * ch.from_start(t, c) * S[c * d + e];
        for (int64_t j = 0; j <= t; ++j) s += A[t * ch.L + j] * v[(t0 + j) * d + e];
        o[(t0 + t) * d + e] = scale * s;
      }
    advance_state(ch, k, v, S);
  }
}

// One state's gradients from zero initial state, for the output gradient Gr (already weighted by the
// state's mixing weight): adds to dq, dk, dv; writes dg, and the state's own output o (for dgamma).
void gla_backward(const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& g, const Matrix& Gr, int64_t len,
                  int64_t d, double scale, Matrix& dq, Matrix& dk, Matrix& dv, Matrix& dg, Matrix& o) {
  // The forward pass again, keeping each chunk's starting state.
  std::vector<Matrix> starts;
  Matrix S(size_t(d * d), 0.0);
  for (int64_t t0 = 0; t0 < len; t0 += kDslaChunk) {
    starts.push_back(S);
    const Chunk ch(g, t0, std::min(kDslaChunk, len - t0), d, false);
    advance_state(ch, k, v, S);
  }
  Matrix dqi(size_t(len * d), 0.0), dki(size_t(len * d), 0.0);
  Matrix dH(size_t(d * d), 0.0);
  o.assign(size_t(len * d), 0.0);
  for (int64_t ci = int64_t(starts.size()) - 1; ci >= 0; --ci) {
    const int64_t t0 = ci * kDslaChunk;
    const Chunk ch(g, t0, std::min(kDslaChunk, len - t0), d, true);
    const int64_t L = ch.L;
    const Matrix& Sp = starts[size_t(ci)];
    const Matrix A = intra_scores(ch, q, k);
    Matrix D(size_t(L * L), 0.0);  // D_tj = G_t . v_j
    for (int64_t t = 0; t < L; ++t)
      for (int64_t j = 0; j <= t; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += Gr[(t0 + t) * d + e] * v[(t0 + j) * d + e];
        D[t * L + j] = s;
      }
    for (int64_t t = 0; t < L; ++t)
      for (int64_t e = 0; e < d; ++e) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += q[(t0 + t) * d + c] * ch.from_start(t, c) * Sp[c * d + e];
        for (int64_t j = 0; j <= t; ++j) s += A[t * L + j] * v[(t0 + j) * d + e];
        o[(t0 + t) * d + e] = scale * s;
      }
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < d; ++c) {
        double inter = 0, intra = 0;
        for (int64_t e = 0; e < d; ++e) inter += Sp[c * d + e] * Gr[(t0 + t) * d + e];
        for (int64_t j = 0; j <= t; ++j) intra += D[t * L + j] * k[(t0 + j) * d + c] * ch.ratio(t, j, c);
        dqi[(t0 + t) * d + c] = scale * (ch.from_start(t, c) * inter + intra);
      }
    for (int64_t j = 0; j < L; ++j) {
      for (int64_t c = 0; c < d; ++c) {
        double inter = 0, intra = 0;
        for (int64_t e = 0; e < d; ++e) inter += dH[c * d + e] * v[(t0 + j) * d + e];
        for (int64_t t = j; t < L; ++t) intra += D[t * L + j] * q[(t0 + t) * d + c] * ch.ratio(t, j, c);
        dki[(t0 + j) * d + c] = scale * intra + ch.to_end(j, c) * inter;
      }
      for (int64_t e = 0; e < d; ++e) {
        double inter = 0, intra = 0;
        for (int64_t c = 0; c < d; ++c) inter += k[(t0 + j) * d + c] * ch.to_end(j, c) * dH[c * d + e];
        for (int64_t t = j; t < L; ++t) intra += A[t * L + j] * Gr[(t0 + t) * d + e];
        dv[(t0 + j) * d + e] += scale * intra + inter;
      }
    }
    for (int64_t c = 0; c < d; ++c) {
      const double decay = ch.from_start(L - 1, c);
      for (int64_t e = 0; e < d; ++e) {
        double s = decay * dH[c * d + e];
        for (int64_t t = 0; t < L; ++t) s += scale * q[(t0 + t) * d + c] * ch.from_start(t, c) * Gr[(t0 + t) * d + e];
        dH[c * d + e] = s;
      }
    }
  }
  dg.assign(size_t(len * d), 0.0);
  for (int64_t c = 0; c < d; ++c) {
    double suffix = 0;
    for (int64_t t = len - 1; t >= 0; --t) {
      suffix += q[t * d + c] * dqi[t * d + c] - k[t * d + c] * dki[t * d + c];
      dg[t * d + c] = suffix;
    }
  }
  for (size_t i = 0; i < dq.size(); ++i) {
    dq[i] += dqi[i];
    dk[i] += dki[i];
  }
}

// The mixing weights (w1, w2) of query head h: (gamma_h, 1 - gamma_h) with two states, (1, 0) with one.
template <typename T>
std::pair<double, double> mix_weights(const Tensor& gamma, bool two, int64_t h) {
  if (!two) return {1.0, 0.0};
  const double w = double(gamma.data<T>()[h]);
  return {w, 1.0 - w};
}

}  // namespace

// keep_scores asks for the CUDA bf16 kernels' scores, which the CPU does not keep (out.scores stays undefined).
DslaForward dsla_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                         const Tensor& gamma, const DslaState& initial, bool return_final_state, bool keep_scores) {
  const Dims n = dims_of(q, k);
  const bool two = g2.defined();
  DslaForward out{Tensor::empty(q.shape(), q.dtype()), {}, {}};
  if (return_final_state) {
    out.final_state.s1 = Tensor::empty({n.B, n.H, n.d, n.d}, q.dtype());
    if (two) out.final_state.s2 = Tensor::empty({n.B, n.H, n.d, n.d}, q.dtype());
  }
  const double scale = 1.0 / std::sqrt(double(n.d));
  dispatch_float("dsla_forward", q.dtype(), [&]<typename T>() {
#pragma omp parallel for schedule(static) if (n.B * n.T * n.H * n.d * n.d > kMinParallelWork)
    for (int64_t bh = 0; bh < n.B * n.H; ++bh) {
      const int64_t b = bh / n.H, h = bh % n.H, hk = h / n.group();
      const Matrix qh = gather_head<T>(q, b, h), kh = gather_head<T>(k, b, hk), vh = gather_head<T>(v, b, hk);
      const auto [w1, w2] = mix_weights<T>(gamma, two, h);
      Matrix S1 = gather_state<T>(initial.s1, b, h, n.d), o1, o2;
      gla_forward(qh, kh, vh, gather_head<T>(g1, b, h), n.T, n.d, scale, S1, o1);
      if (two) {
        Matrix S2 = gather_state<T>(initial.s2, b, h, n.d);
        gla_forward(qh, kh, vh, gather_head<T>(g2, b, h), n.T, n.d, scale, S2, o2);
        for (size_t i = 0; i < o1.size(); ++i) o1[i] = w1 * o1[i] + w2 * o2[i];
        if (return_final_state) scatter_state<T>(out.final_state.s2, b, h, S2);
      }
      scatter_head<T>(out.o, b, h, o1);
      if (return_final_state) scatter_state<T>(out.final_state.s1, b, h, S1);
    }
  });
  return out;
}

// Kept scores come only from the CUDA kernels; the CPU recomputes its own (`scores` is unused).
DslaGrads dsla_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                        const Tensor& g2, const Tensor& gamma, const Tensor& scores) {
  const Dims n = dims_of(q, k);
  const bool two = g2.defined();
  DslaGrads grads{Tensor::empty(q.shape(), q.dtype()),
                  Tensor::empty(k.shape(), k.dtype()),
                  Tensor::empty(v.shape(), v.dtype()),
                  Tensor::empty(q.shape(), q.dtype()),
                  two ? Tensor::empty(q.shape(), q.dtype()) : Tensor(),
                  gamma.defined() ? Tensor::zeros(gamma.shape(), gamma.dtype()) : Tensor()};
  const double scale = 1.0 / std::sqrt(double(n.d));
  dispatch_float("dsla_backward", q.dtype(), [&]<typename T>() {
    // dgamma per (b, h), summed over b in order afterwards so the result does not depend on threads.
    std::vector<double> dgamma(size_t(n.B * n.H), 0.0);
    // One task per KV head: it owns dk and dv of that head and loops over its query heads.
#pragma omp parallel for schedule(static) if (n.B * n.T * n.H * n.d * n.d > kMinParallelWork)
    for (int64_t bk = 0; bk < n.B * n.Hk; ++bk) {
      const int64_t b = bk / n.Hk, hk = bk % n.Hk;
      const Matrix kh = gather_head<T>(k, b, hk), vh = gather_head<T>(v, b, hk);
      Matrix dk(kh.size(), 0.0), dv(vh.size(), 0.0);
      for (int64_t h = hk * n.group(); h < (hk + 1) * n.group(); ++h) {
        const Matrix qh = gather_head<T>(q, b, h), doh = gather_head<T>(grad_o, b, h);
        const auto [w1, w2] = mix_weights<T>(gamma, two, h);
        Matrix dq(qh.size(), 0.0), dg, Gr(doh.size()), o1, o2;
        for (size_t i = 0; i < Gr.size(); ++i) Gr[i] = w1 * doh[i];
        gla_backward(qh, kh, vh, gather_head<T>(g1, b, h), Gr, n.T, n.d, scale, dq, dk, dv, dg, o1);
        scatter_head<T>(grads.dg1, b, h, dg);
        if (two) {
          for (size_t i = 0; i < Gr.size(); ++i) Gr[i] = w2 * doh[i];
          gla_backward(qh, kh, vh, gather_head<T>(g2, b, h), Gr, n.T, n.d, scale, dq, dk, dv, dg, o2);
          scatter_head<T>(grads.dg2, b, h, dg);
          double s = 0;  // dgamma = sum do . (o1 - o2)
          for (size_t i = 0; i < o1.size(); ++i) s += doh[i] * (o1[i] - o2[i]);
          dgamma[size_t(b * n.H + h)] = s;
        }
        scatter_head<T>(grads.dq, b, h, dq);
      }
      scatter_head<T>(grads.dk, b, hk, dk);
      scatter_head<T>(grads.dv, b, hk, dv);
    }
    if (two) {
      T* dgm = grads.dgamma.data<T>();
      for (int64_t h = 0; h < n.H; ++h) {
        double s = 0;
        for (int64_t b = 0; b < n.B; ++b) s += dgamma[size_t(b * n.H + h)];
        dgm[h] = T(s);
      }
    }
  });
  return grads;
}

Tensor dsla_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                 const Tensor& gamma, DslaState& state) {
  const Dims n = dims_of(q, k);
  const bool two = g2.defined();
  Tensor o = Tensor::empty(q.shape(), q.dtype());
  const double scale = 1.0 / std::sqrt(double(n.d));
  dispatch_float("dsla_step", q.dtype(), [&]<typename T>() {
#pragma omp parallel for schedule(static) if (n.B * n.T * n.H * n.d * n.d > kMinParallelWork)
    for (int64_t bh = 0; bh < n.B * n.H; ++bh) {
      const int64_t b = bh / n.H, h = bh % n.H, hk = h / n.group(), d = n.d;
      const Matrix qh = gather_head<T>(q, b, h), kh = gather_head<T>(k, b, hk), vh = gather_head<T>(v, b, hk);
      const Matrix g1h = gather_head<T>(g1, b, h), g2h = two ? gather_head<T>(g2, b, h) : Matrix();
      const auto [w1, w2] = mix_weights<T>(gamma, two, h);
      Matrix S1 = gather_state<T>(state.s1, b, h, d), S2 = two ? gather_state<T>(state.s2, b, h, d) : Matrix();
      Matrix oh(qh.size(), 0.0);
      for (int64_t t = 0; t < n.T; ++t) {
        // S <- diag(e^{g_t}) S + k_t^T v_t, then o_t = scale q_t (w1 S1 + w2 S2).
        for (int64_t c = 0; c < d; ++c)
          for (int64_t e = 0; e < d; ++e) {
            const double kv = kh[t * d + c] * vh[t * d + e];
            S1[c * d + e] = std::exp(g1h[t * d + c]) * S1[c * d + e] + kv;
            if (two) S2[c * d + e] = std::exp(g2h[t * d + c]) * S2[c * d + e] + kv;
          }
        for (int64_t e = 0; e < d; ++e) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c)
            s += qh[t * d + c] * (two ? w1 * S1[c * d + e] + w2 * S2[c * d + e] : S1[c * d + e]);
          oh[t * d + e] = scale * s;
        }
      }
      scatter_head<T>(o, b, h, oh);
      scatter_state<T>(state.s1, b, h, S1);
      if (two) scatter_state<T>(state.s2, b, h, S2);
    }
  });
  return o;
}

}  // namespace fathom::cpu
