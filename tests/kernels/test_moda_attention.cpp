// MoDA attention: the joint sequence + depth softmax, its CPU reference kernel, and the depth
// stream's gradient routing.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/depth_stream.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/attention/attention.h"
#include "kernels/moda/moda_attention.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct Problem {
  Tensor q, k, v, dk, dv;  // dk/dv: depth buffers [B, T, S, Hk, d]
};

Problem random_problem(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t d, int64_t S, DType dtype, uint64_t seed) {
  return {random_tensor({B, T, Hq, d}, dtype, seed), random_tensor({B, T, Hk, d}, dtype, seed + 1),
          random_tensor({B, T, Hk, d}, dtype, seed + 2), random_tensor({B, T, S, Hk, d}, dtype, seed + 3),
          random_tensor({B, T, S, Hk, d}, dtype, seed + 4)};
}

// Depth-only softmax per row, written plainly: returns (o, lse) of attention over the slots alone.
std::pair<std::vector<double>, std::vector<double>> depth_only(const Problem& p, int64_t begin, int64_t end,
                                                               double scale) {
  const int64_t B = p.q.dim(0), T = p.q.dim(1), Hq = p.q.dim(2), d = p.q.dim(3), Hk = p.k.dim(2), S = p.dk.dim(2);
  const std::vector<double> q = values(p.q), dk = values(p.dk), dv = values(p.dv);
  std::vector<double> o(q.size(), 0.0), lse(size_t(B * Hq * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t hk = h / (Hq / Hk);
        std::vector<double> logit;
        for (int64_t s = begin; s < end; ++s) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i)
            dot += q[size_t(((b * T + t) * Hq + h) * d + i)] * dk[size_t((((b * T + t) * S + s) * Hk + hk) * d + i)];
          logit.push_back(dot * scale);
        }
        double m = -INFINITY, z = 0;
        for (double l : logit) m = std::max(m, l);
        for (double l : logit) z += std::exp(l - m);
        lse[size_t((b * Hq + h) * T + t)] = m + std::log(z);
        for (int64_t s = begin; s < end; ++s)
          for (int64_t i = 0; i < d; ++i)
            o[size_t(((b * T + t) * Hq + h) * d + i)] +=
                std::exp(logit[size_t(s - begin)] - m) / z * dv[size_t((((b * T + t) * S + s) * Hk + hk) * d + i)];
      }
  return {o, lse};
}

// Inputs of the depth-stream gradchecks: q [B, T, Hq, d], then four [B, T, Hk, d] tensors (the
// layer's k, v and two written k/v pairs' sources), seeds seed .. seed + 4.
std::vector<Tensor> stream_inputs(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t d, uint64_t seed) {
  std::vector<Tensor> in{random_tensor({B, T, Hq, d}, DType::f64, seed)};
  for (uint64_t i = 1; i <= 4; ++i) in.push_back(random_tensor({B, T, Hk, d}, DType::f64, seed + i));
  return in;
}

}  // namespace

// The joint softmax equals the two partial softmaxes merged by their log-sum-exps (an identity that
// uses the independent GEMM-based attention kernel for the sequence part).
TEST(ModaAttention, JointSoftmaxMatchesLseMergeOfSequenceAndDepth) {
  for (int64_t G : {1, 3}) {
    const Problem p = random_problem(2, 7, 2 * G, 2, 8, 5, DType::f64, 10 + G);
    const double scale = 0.4;
    const AttentionOutput joint = moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 1, 4}, scale);
    const AttentionOutput seq = attention_forward(p.q, p.k, p.v, scale);
    const auto [o_dep, lse_dep] = depth_only(p, 1, 4, scale);
    const std::vector<double> o_seq = values(seq.o), lse_seq = values(seq.lse);
    std::vector<double> want_o(o_seq.size()), want_lse(lse_seq.size());
    const int64_t T = 7, Hq = 2 * G, d = 8;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hq; ++h) {
          const size_t l = size_t((b * Hq + h) * T + t);
          const double m = std::max(lse_seq[l], lse_dep[l]);
          const double ws = std::exp(lse_seq[l] - m), wd = std::exp(lse_dep[l] - m);
          want_lse[l] = m + std::log(ws + wd);
          for (int64_t i = 0; i < d; ++i) {
            const size_t o = size_t(((b * T + t) * Hq + h) * d + i);
            want_o[o] = (ws * o_seq[o] + wd * o_dep[o]) / (ws + wd);
          }
        }
    expect_close(joint.o, want_o, 1e-12, 1e-10, "o");
    expect_close(joint.lse, want_lse, 1e-12, 1e-10, "lse");
  }
}

TEST(ModaAttention, NoDepthSlotsIsPlainAttention) {
  const Problem p = random_problem(1, 9, 4, 4, 8, 3, DType::f64, 3);
  const AttentionOutput moda = moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 2, 2}, 0.3);
  const AttentionOutput plain = attention_forward(p.q, p.k, p.v, 0.3);
  expect_close(moda.o, plain.o, 1e-12, 1e-10, "o");
  expect_close(moda.lse, plain.lse, 1e-12, 1e-10, "lse");
}

// Two softmaxes added together are another operator; the reference must not compute that.
TEST(ModaAttention, DiffersFromSeparateSoftmaxesAdded) {
  const Problem p = random_problem(1, 6, 2, 2, 8, 3, DType::f64, 21);
  const std::vector<double> joint = values(moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 0, 3}, 0.5).o);
  const std::vector<double> seq = values(attention_forward(p.q, p.k, p.v, 0.5).o);
  const std::vector<double> dep = depth_only(p, 0, 3, 0.5).first;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < joint.size(); ++i) {
    diff += std::pow(joint[i] - (seq[i] + dep[i]), 2);
    norm += joint[i] * joint[i];
  }
  EXPECT_GT(std::sqrt(diff / norm), 0.2);
}

TEST(ModaAttention, Float32AgreesWithFloat64) {
  const Problem p = random_problem(2, 11, 6, 2, 16, 4, DType::f64, 5);
  const AttentionOutput want = moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 0, 4}, 0.25);
  const AttentionOutput got = moda_attention_forward(p.q.to(DType::f32), p.k.to(DType::f32), p.v.to(DType::f32),
                                                     DepthSlots{p.dk.to(DType::f32), p.dv.to(DType::f32), 0, 4}, 0.25);
  expect_close(got.o, want.o, 1e-5, 1e-4, "o");
  expect_close(got.lse, want.lse, 1e-5, 1e-4, "lse");
}

// Writers' gradients reach them through the depth stream: slot 0 and 1 are written from (k0, v0)
// and (k1, v1), then two readers attend over different slot ranges.
namespace {
void expect_two_readers_gradcheck(int64_t B, int64_t T, int64_t Hq, uint64_t seed) {
  const int64_t Hk = 1, d = 4;
  auto f = [&](const std::vector<Variable>& in) {
    DepthStream stream(B, T, 2, Hk, d, DType::f64, Device::cpu());
    stream.write(0, in[3], in[4]);
    Variable first = stream.attend(in[0], in[1], in[2], 0, 1, 0.5);
    stream.write(1, scale(in[3], -0.7), in[4]);
    Variable second = stream.attend(in[0], in[2], in[1], 0, 2, 0.5);
    return add(first, second);
  };
  const GradcheckResult r = gradcheck(f, stream_inputs(B, T, Hq, Hk, d, seed));
  EXPECT_TRUE(r.ok) << r.message;
}
}  // namespace

// G = 3: the readers leave weights (autograd/depth_stream.cpp).
TEST(ModaAttention, DepthStreamGradcheck) { expect_two_readers_gradcheck(2, 5, 3, 1); }

// G = 6: the readers put vector gradients in the side buffer instead; the writers' gradients are
// the same.
TEST(ModaAttention, DepthStreamGradcheckWithVectorGradients) { expect_two_readers_gradcheck(1, 4, 6, 3); }

// Three readers over overlapping slot ranges: the slot gradients formed from their weights, for any
// run of slots, equal the gradients the readers add into a shared buffer.
TEST(ModaAttention, SlotGradientsFromWeightsEqualAddedGradients) {
  const int64_t B = 2, T = 7, Hq = 6, Hk = 2, d = 8, S = 5;
  const Problem p = random_problem(B, T, Hq, Hk, d, S, DType::f64, 61);
  const std::vector<std::pair<int64_t, int64_t>> ranges{{0, 3}, {1, 5}, {2, 4}};
  Tensor ddk = Tensor::zeros(p.dk.shape(), DType::f64), ddv = Tensor::zeros(p.dv.shape(), DType::f64);
  std::vector<DepthReader> readers;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto [begin, end] = ranges[i];
    const Tensor q = random_tensor(p.q.shape(), DType::f64, 70 + i),
                 grad_o = random_tensor(p.q.shape(), DType::f64, 80 + i);
    const DepthSlots depth{p.dk, p.dv, begin, end};
    const AttentionOutput out = moda_attention_forward(q, p.k, p.v, depth, 0.4);
    const AttentionGrads added = moda_attention_backward(grad_o, q, p.k, p.v, depth, out.o, out.lse, 0.4, ddk, ddv);
    DepthReader r{q, grad_o, {}, begin, end};
    const AttentionGrads weighted = moda_attention_backward(grad_o, q, p.k, p.v, depth, out.o, out.lse, 0.4, r.weights);
    EXPECT_EQ(weighted.dq.to_vector<double>(), added.dq.to_vector<double>());
    EXPECT_EQ(weighted.dk.to_vector<double>(), added.dk.to_vector<double>());
    EXPECT_EQ(r.weights.p.shape(), Shape({B, T, Hq, end - begin}));
    readers.push_back(r);
  }
  const std::vector<const DepthReader*> all{&readers[0], &readers[1], &readers[2]};
  for (const auto& [first, last] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {2, 4}, {4, 5}}) {
    const std::vector<SlotGrads> g = depth_slot_grads(all, first, last, Hk, DType::f32);
    ASSERT_EQ(g.size(), size_t(last - first));
    for (int64_t s = first; s < last; ++s) {
      EXPECT_EQ(g[size_t(s - first)].k.dtype(), DType::f32);
      expect_close(g[size_t(s - first)].k, read_depth_slot(ddk, s), 1e-6, 1e-5, "dk of slot " + std::to_string(s));
      expect_close(g[size_t(s - first)].v, read_depth_slot(ddv, s), 1e-6, 1e-5, "dv of slot " + std::to_string(s));
    }
  }
  // A reader adds only to the slots of its own range.
  const std::vector<SlotGrads> only_last = depth_slot_grads({&readers[2]}, 0, 2, Hk, DType::f64);
  for (const SlotGrads& g : only_last)
    for (double x : g.k.to_vector<double>()) EXPECT_EQ(x, 0.0);
  expect_error([&] { depth_slot_grads({}, 0, 1, Hk, DType::f64); }, {"depth_slot_grads", "no readers"});
  expect_error([&] { depth_slot_grads(all, 0, 1, 4, DType::f64); }, {"depth_slot_grads", "multiple of 4 KV heads"});
  DepthReader bad = readers[0];
  bad.weights.p = Tensor::zeros({B, T, Hq, 2}, DType::f64);
  expect_error([&] { depth_slot_grads({&bad}, 0, 1, Hk, DType::f64); },
               {"depth_slot_grads", "weights", "slots [0, 3)"});
}

// Readers over sliding slot ranges, as with moda.max_slots: in backward the later reader stores
// the gradients of slots 2 and 3, the earlier one finds slot 2 done and slot 1 untouched (zeroed,
// then both added). Slot 0 lies on the stream's version chain but no reader reads it, so its writer
// gets no gradient from it (its buffer was never written: the tests' poisoned allocations would turn
// it into NaN); slot 4, written after the last reader, is not on the loss's graph at all.
TEST(ModaAttention, DepthStreamGradcheckOverSlidingSlotRanges) {
  const int64_t B = 1, T = 4, Hq = 2, Hk = 1, d = 4;
  auto f = [&](const std::vector<Variable>& in) {
    DepthStream stream(B, T, 5, Hk, d, DType::f64, Device::cpu());
    stream.write(0, scale(in[4], -1.3), in[3]);
    stream.write(1, in[3], in[4]);
    stream.write(2, scale(in[4], 0.8), in[3]);
    Variable first = stream.attend(in[0], in[1], in[2], 1, 3, 0.5);
    stream.write(3, scale(in[3], -0.6), in[4]);
    Variable second = stream.attend(in[0], in[2], in[1], 2, 4, 0.5);
    stream.write(4, in[4], scale(in[3], 1.7));
    return add(first, second);
  };
  const GradcheckResult r = gradcheck(f, stream_inputs(B, T, Hq, Hk, d, 11));
  EXPECT_TRUE(r.ok) << r.message;
}

// A reader that stores its depth gradients overwrites its slot range, whatever it held, and leaves
// the other slots alone; adding onto zeros gives the same gradients.
TEST(ModaAttention, StoredDepthGradientsEqualGradientsAddedToZeros) {
  const Problem p = random_problem(1, 6, 4, 2, 8, 4, DType::f64, 41);
  const Tensor grad_o = random_tensor(p.q.shape(), DType::f64, 42);
  const AttentionOutput out = moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 1, 3}, 0.3);
  Tensor added_k = Tensor::zeros(p.dk.shape(), DType::f64), added_v = Tensor::zeros(p.dv.shape(), DType::f64);
  moda_attention_backward(grad_o, p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 1, 3}, out.o, out.lse, 0.3, added_k, added_v);
  Tensor stored_k = Tensor::full(p.dk.shape(), NAN, DType::f64), stored_v = Tensor::full(p.dv.shape(), 5.0, DType::f64);
  for (Tensor* t : {&stored_k, &stored_v}) {  // slots outside the range keep what they held
    zero_depth_slots(*t, 1, 3);
    for (int64_t s : {1, 2}) write_depth_slot(*t, s, Tensor::full({1, 6, 2, 8}, 9.0, DType::f64));
  }
  moda_attention_backward(grad_o, p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 1, 3}, out.o, out.lse, 0.3, stored_k, stored_v,
                          DepthGradMode::store);
  for (int64_t s : {1, 2}) {
    EXPECT_EQ(read_depth_slot(stored_k, s).to_vector<double>(), read_depth_slot(added_k, s).to_vector<double>());
    EXPECT_EQ(read_depth_slot(stored_v, s).to_vector<double>(), read_depth_slot(added_v, s).to_vector<double>());
  }
  for (int64_t s : {0, 3}) {
    for (double x : read_depth_slot(stored_k, s).to_vector<double>()) EXPECT_TRUE(std::isnan(x));
    for (double x : read_depth_slot(stored_v, s).to_vector<double>()) EXPECT_EQ(x, 5.0);
  }
}

// Reader depth keys: the slots hold raw keys and each reader normalises them with its own weight;
// the gradients reach the writers through the side buffer and the reader's weight as a normal input.
TEST(ModaAttention, DepthStreamReaderKeysGradcheck) {
  const int64_t B = 2, T = 4, Hq = 4, Hk = 2, d = 4;
  auto f = [&](const std::vector<Variable>& in) {
    DepthStream stream(B, T, 3, Hk, d, DType::f64, Device::cpu());
    stream.write(0, in[3], in[4]);
    Variable first = stream.attend(in[0], in[1], in[2], 0, 1, 0.5, DepthKeyNorm{in[5], 1e-6});
    stream.write(1, scale(in[4], 0.6), in[3]);
    // A reader that normalises with another weight, and one that reads the raw keys as stored.
    Variable second = stream.attend(in[0], in[2], in[1], 0, 2, 0.5, DepthKeyNorm{scale(in[5], -1.3), 1e-6});
    Variable third = stream.attend(in[0], in[1], in[2], 1, 2, 0.5);
    return add(add(first, second), third);
  };
  std::vector<Tensor> inputs = stream_inputs(B, T, Hq, Hk, d, 1);
  inputs.push_back(random_tensor({Hk * d}, DType::f64, 6, 0.5, 1.5));  // the reader's norm weight
  const GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

// The reader's norm is an RMSNorm over each token's full KV width of every slot.
TEST(ModaAttention, ReaderKeysAreTheNormalisedRawKeys) {
  const int64_t B = 1, T = 5, Hq = 2, Hk = 2, d = 4;
  const Tensor q = random_tensor({B, T, Hq, d}, DType::f64, 1), k = random_tensor({B, T, Hk, d}, DType::f64, 2),
               v = random_tensor({B, T, Hk, d}, DType::f64, 3), raw = random_tensor({B, T, Hk, d}, DType::f64, 4),
               dv = random_tensor({B, T, Hk, d}, DType::f64, 5),
               weight = random_tensor({Hk * d}, DType::f64, 6, 0.5, 1.5);
  DepthStream reader(B, T, 1, Hk, d, DType::f64, Device::cpu());
  reader.write(0, Variable(raw), Variable(dv));
  const Tensor got =
      reader.attend(Variable(q), Variable(k), Variable(v), 0, 1, 0.5, DepthKeyNorm{Variable(weight), 1e-6}).value();
  // The same keys normalised by hand and written as writer keys.
  const std::vector<double> r = values(raw), w = values(weight);
  std::vector<double> normed(r.size());
  for (int64_t t = 0; t < T; ++t) {
    double ms = 0;
    for (int64_t i = 0; i < Hk * d; ++i) ms += r[size_t(t * Hk * d + i)] * r[size_t(t * Hk * d + i)];
    const double rstd = 1 / std::sqrt(ms / double(Hk * d) + 1e-6);
    for (int64_t i = 0; i < Hk * d; ++i)
      normed[size_t(t * Hk * d + i)] = r[size_t(t * Hk * d + i)] * rstd * w[size_t(i)];
  }
  DepthStream writer(B, T, 1, Hk, d, DType::f64, Device::cpu());
  writer.write(0, Variable(Tensor::from_vector(normed, {B, T, Hk, d})), Variable(dv));
  const Tensor want = writer.attend(Variable(q), Variable(k), Variable(v), 0, 1, 0.5).value();
  expect_close(got, want, 1e-12, 1e-10, "o");
}

TEST(ModaAttention, BackwardIsDeterministic) {
  const Problem p = random_problem(2, 13, 8, 2, 8, 6, DType::f32, 8);
  const AttentionOutput out = moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 1, 6}, 0.3);
  const Tensor grad_o = random_tensor(p.q.shape(), DType::f32, 99);
  std::vector<std::vector<float>> runs;
  for (int i = 0; i < 2; ++i) {
    Tensor ddk = Tensor::zeros(p.dk.shape(), DType::f32), ddv = Tensor::zeros(p.dv.shape(), DType::f32);
    const AttentionGrads g =
        moda_attention_backward(grad_o, p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 1, 6}, out.o, out.lse, 0.3, ddk, ddv);
    std::vector<float> all = g.dq.to_vector<float>();
    for (const Tensor* t : std::initializer_list<const Tensor*>{&g.dk, &g.dv, &ddk, &ddv}) {
      const std::vector<float> x = t->to_vector<float>();
      all.insert(all.end(), x.begin(), x.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(ModaAttention, BadInputsAreClearErrors) {
  const Problem p = random_problem(1, 4, 4, 2, 8, 3, DType::f32, 1);
  expect_error([&] { moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 2, 4}, 1.0); }, {"slot range"});
  expect_error(
      [&] {
        moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk.narrow(0, 0), p.dv, 0, 1}, 1.0);
      },
      {"depth"});
  Tensor buffer = Tensor::zeros({1, 4, 3, 2, 8}, DType::f32);
  expect_error([&] { write_depth_slot(buffer, 3, p.k); }, {"slot 3"});
  expect_error([&] { write_depth_slot(buffer, 0, p.q); }, {"does not match"});
  expect_error([&] { write_depth_slot(buffer, 0, p.k.to(DType::f64)); },
               {"write_depth_slot", "into a F32 depth buffer", "F32 into BF16"});
  expect_error([&] { zero_depth_slots(buffer, 2, 4); }, {"zero_depth_slots", "[2, 4)", "3 slots"});
  expect_error([&] { zero_depth_slots(buffer, 2, 1); }, {"zero_depth_slots", "slot range"});
  Tensor not_a_buffer = p.k.clone();
  expect_error([&] { zero_depth_slots(not_a_buffer, 0, 1); }, {"zero_depth_slots", "[B, T, S, Hk, d]"});
  // F32 into a BF16 buffer converts; the slot reads back rounded to bf16.
  Tensor bf16_buffer = Tensor::zeros({1, 4, 3, 2, 8}, DType::bf16);
  write_depth_slot(bf16_buffer, 1, p.k);
  EXPECT_EQ(read_depth_slot(bf16_buffer, 1).to(DType::f32).to_vector<float>(),
            p.k.to(DType::bf16).to(DType::f32).to_vector<float>());
  // Depth gradients accumulate in the statistics dtype: F64 buffers for F64 inputs.
  const AttentionOutput out = moda_attention_forward(p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 0, 2}, 1.0);
  Tensor ddk = Tensor::zeros(p.dk.shape(), DType::f64), ddv = Tensor::zeros(p.dv.shape(), DType::f64);
  expect_error(
      [&] {
        moda_attention_backward(p.q, p.q, p.k, p.v, DepthSlots{p.dk, p.dv, 0, 2}, out.o, out.lse, 1.0, ddk, ddv);
      },
      {"depth gradient buffers", "must be F32"});
  expect_error([&] { DepthStream(1, 4, 2, 2, 8, DType::i32, Device::cpu()); }, {"depth stream", "I32"});
  DepthStream stream(1, 4, 2, 2, 8, DType::f32, Device::cpu());
  expect_error([&] { stream.attend(Variable(p.q), Variable(p.k), Variable(p.v), 0, 1, 1.0); }, {"only written slots"});
  expect_error([&] { stream.write(1, Variable(p.k), Variable(p.v)); }, {"in order"});
}
