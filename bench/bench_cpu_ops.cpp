// CPU op micro-benchmark at the quickstart shapes (olmo2_14M-like: d 128, 4 layers, 8 heads of 16,
// FFN 512, T 256, batch 8, vocab 8192). Prints ms per op (forward + backward through the autograd
// ops), the step time those add up to, and a measured step of the composed 4-layer model.
// Usage: bench_cpu_ops [reps]   (threads from OMP_NUM_THREADS)
// On a machine shared with other busy processes, OpenMP's default spin-waiting makes every parallel
// region wait for descheduled threads; OMP_WAIT_POLICY=passive is then much faster.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "core/random.h"
#include "kernels/adamw/adamw.h"

using namespace fathom;

namespace {

constexpr int64_t kBatch = 8, kSeq = 256, kModel = 128, kHeads = 8, kHeadDim = 16, kFfn = 512, kVocab = 8192,
                  kLayers = 4;
constexpr int64_t kTokens = kBatch * kSeq;

uint64_t next_seed = 1;

Tensor random(const Shape& shape, double std = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator gen{next_seed++, 0};
  fill_normal(t, gen, 0.0, std);
  return t;
}

Tensor random_ids(const Shape& shape, int64_t bound) {
  std::vector<int64_t> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 2654435761u + next_seed) % uint64_t(bound));
  ++next_seed;
  return Tensor::from_vector(v, shape);
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median wall time of f over reps runs, after one warm-up run.
double median_ms(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_ms();
    f();
    times.push_back(now_ms() - t0);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Forward and backward of an op whose inputs are fresh leaves; the seed gradient is random.
double time_op(int reps, std::vector<Variable> leaves, const std::function<Variable(std::vector<Variable>&)>& op) {
  Variable probe = op(leaves);
  const Tensor seed = random(probe.shape());
  return median_ms(reps, [&] {
    for (Variable& v : leaves) v.set_grad(Tensor());
    Variable y = op(leaves);
    backward(y, y.value().numel() == 1 ? Tensor() : seed);
  });
}

struct Layer {
  Variable wq, wk, wv, wo, q_norm, k_norm, attn_norm, w_gate, w_up, w_down, ffn_norm;
};

struct Model {
  Variable embed, final_norm, lm_head;
  std::vector<Layer> layers;
  std::vector<Variable*> params;
  Model() {
    auto param = [&](Variable& v, Shape s, bool norm = false) {
      v = Variable(norm ? Tensor::full(s, 1.0, DType::f32) : random(s, 0.02), true);
      params.push_back(&v);
    };
    param(embed, {kVocab, kModel});
    layers.resize(kLayers);
    for (Layer& l : layers) {
      param(l.wq, {kModel, kModel});
      param(l.wk, {kModel, kModel});
      param(l.wv, {kModel, kModel});
      param(l.wo, {kModel, kModel});
      param(l.q_norm, {kModel}, true);
      param(l.k_norm, {kModel}, true);
      param(l.attn_norm, {kModel}, true);
      param(l.w_gate, {kFfn, kModel});
      param(l.w_up, {kFfn, kModel});
      param(l.w_down, {kModel, kFfn});
      param(l.ffn_norm, {kModel}, true);
    }
    param(final_norm, {kModel}, true);
    param(lm_head, {kVocab, kModel});
  }
  int64_t numel() const {
    int64_t n = 0;
    for (const Variable* p : params) n += p->value().numel();
    return n;
  }
};

// OLMo2 block: norms on the sublayer outputs, full-width QK-norm, RoPE, causal attention, SwiGLU.
Variable block(const Layer& l, const Variable& x, const Tensor& angles) {
  const Shape heads{kBatch, kSeq, kHeads, kHeadDim}, flat{kBatch, kSeq, kModel};
  Variable q = rope(reshape(rms_norm(linear(x, l.wq), l.q_norm, 1e-6), heads), angles);
  Variable k = rope(reshape(rms_norm(linear(x, l.wk), l.k_norm, 1e-6), heads), angles);
  Variable v = reshape(linear(x, l.wv), heads);
  Variable a = reshape(attention(q, k, v, 1.0 / std::sqrt(double(kHeadDim))), flat);
  Variable h = add(x, rms_norm(linear(a, l.wo), l.attn_norm, 1e-6));
  Variable f = linear(swiglu(linear(h, l.w_gate), linear(h, l.w_up)), l.w_down);
  return add(h, rms_norm(f, l.ffn_norm, 1e-6));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::printf("fathom CPU ops, f32, %d threads, median of %d runs\n", omp_get_max_threads(), reps);
  std::printf(
      "shapes: batch %lld x seq %lld (%lld tokens), d %lld, %lld heads x %lld, FFN %lld, vocab %lld, %lld layers\n\n",
      (long long)kBatch, (long long)kSeq, (long long)kTokens, (long long)kModel, (long long)kHeads, (long long)kHeadDim,
      (long long)kFfn, (long long)kVocab, (long long)kLayers);

  std::vector<int64_t> pos(kSeq);
  for (int64_t t = 0; t < kSeq; ++t) pos[t] = t;
  const Tensor seq_positions = Tensor::from_vector(pos, {kSeq});
  const Tensor angles = rope_angles(seq_positions, kHeadDim, 500000.0);
  const Tensor ids = random_ids({kBatch, kSeq}, kVocab);
  const Tensor targets = random_ids({kTokens}, kVocab);
  auto leaf = [](Shape s, double std = 1.0) { return Variable(random(s, std), true); };
  const Shape x_shape{kBatch, kSeq, kModel}, heads{kBatch, kSeq, kHeads, kHeadDim};

  struct Row {
    std::string name;
    int per_step;
    double ms;
  };
  std::vector<Row> rows;
  auto add_row = [&](std::string name, int per_step, double ms) { rows.push_back({std::move(name), per_step, ms}); };

  add_row("linear 128->128 (q,k,v,o)", 4 * kLayers,
          time_op(reps, {leaf(x_shape), leaf({kModel, kModel}, 0.02)}, [](auto& in) { return linear(in[0], in[1]); }));
  add_row("linear 128->512 (gate,up)", 2 * kLayers,
          time_op(reps, {leaf(x_shape), leaf({kFfn, kModel}, 0.02)}, [](auto& in) { return linear(in[0], in[1]); }));
  add_row("linear 512->128 (down)", kLayers,
          time_op(reps, {leaf({kBatch, kSeq, kFfn}), leaf({kModel, kFfn}, 0.02)},
                  [](auto& in) { return linear(in[0], in[1]); }));
  add_row("linear 128->8192 (lm_head)", 1,
          time_op(reps, {leaf(x_shape), leaf({kVocab, kModel}, 0.02)}, [](auto& in) { return linear(in[0], in[1]); }));
  add_row("embedding 8192x128", 1,
          time_op(reps, {leaf({kVocab, kModel}, 0.02)}, [&](auto& in) { return embedding(ids, in[0]); }));
  add_row("rms_norm [2048,128]", 4 * kLayers + 1,
          time_op(reps, {leaf(x_shape), leaf({kModel})}, [](auto& in) { return rms_norm(in[0], in[1], 1e-6); }));
  add_row("rope [8,256,8,16]", 2 * kLayers,
          time_op(reps, {leaf(heads)}, [&](auto& in) { return rope(in[0], angles); }));
  add_row("swiglu [2048,512]", kLayers,
          time_op(reps, {leaf({kBatch, kSeq, kFfn}), leaf({kBatch, kSeq, kFfn})},
                  [](auto& in) { return swiglu(in[0], in[1]); }));
  add_row("attention Hq=Hk=8, d=16", kLayers, time_op(reps, {leaf(heads), leaf(heads), leaf(heads)}, [](auto& in) {
            return attention(in[0], in[1], in[2], 0.25);
          }));
  add_row("attention Hq=8, Hk=2 (GQA)", 0,
          time_op(reps, {leaf(heads), leaf({kBatch, kSeq, 2, kHeadDim}), leaf({kBatch, kSeq, 2, kHeadDim})},
                  [](auto& in) { return attention(in[0], in[1], in[2], 0.25); }));
  add_row("add [2048,128] (residual)", 2 * kLayers,
          time_op(reps, {leaf(x_shape), leaf(x_shape)}, [](auto& in) { return add(in[0], in[1]); }));
  add_row("cross_entropy [2048,8192]", 1, time_op(reps, {leaf({kTokens, kVocab}, 3.0)}, [&](auto& in) {
            return cross_entropy(in[0], targets, 1e-5).loss;
          }));

  Model model;
  const int64_t n_params = model.numel();
  {
    Tensor p = random({n_params}, 0.02), g = random({n_params}, 1e-3);
    Tensor m = Tensor::zeros({n_params}, DType::f32), v = Tensor::zeros({n_params}, DType::f32);
    int64_t step = 0;
    add_row("adamw " + std::to_string(n_params) + " params", 1, median_ms(reps, [&] {
              adamw_update(p, g, m, v, {1e-3, 0.9, 0.95, 1e-8, 0.1, ++step});
            }));
  }

  std::printf("%-34s %10s %9s %12s\n", "op (forward + backward)", "ms", "per step", "ms per step");
  double estimate = 0;
  for (const Row& r : rows) {
    if (r.per_step == 0) {  // an alternative shape, not part of the quickstart step
      std::printf("%-34s %10.3f %9s %12s\n", r.name.c_str(), r.ms, "-", "-");
      continue;
    }
    std::printf("%-34s %10.3f %9d %12.2f\n", r.name.c_str(), r.ms, r.per_step, r.ms * r.per_step);
    estimate += r.ms * r.per_step;
  }
  std::printf("%-34s %10s %9s %12.2f  (%.0f tokens/s)\n\n", "sum over one train step", "", "", estimate,
              1000.0 * double(kTokens) / estimate);

  // The composed model: embedding, 4 blocks, final norm, lm_head, loss, backward, AdamW per tensor.
  int64_t step = 0;
  std::vector<Tensor> moment1, moment2;
  for (const Variable* p : model.params) {
    moment1.push_back(Tensor::zeros(p->shape(), DType::f32));
    moment2.push_back(Tensor::zeros(p->shape(), DType::f32));
  }
  const double step_ms = median_ms(reps, [&] {
    for (Variable* p : model.params) p->set_grad(Tensor());
    Variable x = embedding(ids, model.embed);
    for (const Layer& l : model.layers) x = block(l, x, angles);
    Variable logits = reshape(linear(rms_norm(x, model.final_norm, 1e-6), model.lm_head), {kTokens, kVocab});
    LossParts loss = cross_entropy(logits, targets, 1e-5);
    backward(loss.loss);
    ++step;
    for (size_t i = 0; i < model.params.size(); ++i)
      adamw_update(model.params[i]->value(), model.params[i]->grad(), moment1[i], moment2[i],
                   {1e-4, 0.9, 0.95, 1e-8, 0.1, step});
  });
  std::printf("measured train step (%lld params): %.1f ms = %.0f tokens/s\n", (long long)n_params, step_ms,
              1000.0 * double(kTokens) / step_ms);
  return 0;
}
