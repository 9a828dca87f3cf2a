// CUDA DSLA kernels against the CPU reference (the chunked form): awkward sequence lengths (T = 1, 65,
// not a multiple of any chunk), GQA, d = 64 and 128, B = 3, one and two states, initial and final
// states, the decode step, strong gates, and bit-identical results across runs.
#include "kernels/dsla/dsla.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct DslaCase {
  int64_t B, T, H, Hk, d;
  bool two;
  DType dtype;
  double gate_low = -1.0;
  std::string str() const {
    // A std::string first: GCC 12 warns (-Wrestrict, a false positive) on a literal + a temporary string.
    return std::string("B").append(std::to_string(B)) + " T" + std::to_string(T) + " H" + std::to_string(H) + "/" +
           std::to_string(Hk) + " d" + std::to_string(d) + (two ? " two states " : " one state ") + dtype_name(dtype) +
           " gates >= " + std::to_string(gate_low);
  }
};

// q, k, v (and grad_o) in the case's dtype; gates, gamma F32. cpu: the same values as F32 host tensors.
struct DslaGpuInputs {
  GpuInput q, k, v, g1, g2, gamma, dout;
};
DslaGpuInputs make_inputs(const DslaCase& c, uint64_t seed) {
  DslaGpuInputs in;
  in.q = random_input({c.B, c.T, c.H, c.d}, c.dtype, seed);
  in.k = random_input({c.B, c.T, c.Hk, c.d}, c.dtype, seed + 1);
  in.v = random_input({c.B, c.T, c.Hk, c.d}, c.dtype, seed + 2);
  in.dout = random_input({c.B, c.T, c.H, c.d}, c.dtype, seed + 3);
  in.g1 = random_input({c.B, c.T, c.H, c.d}, DType::f32, seed + 4, c.gate_low, 0.0);
  if (c.two) in.g2 = random_input({c.B, c.T, c.H, c.d}, DType::f32, seed + 5, c.gate_low / 8, 0.0);
  in.gamma = random_input({c.H}, DType::f32, seed + 6, 0.1, 0.9);
  return in;
}

double tolerance(DType dt) { return dt == DType::bf16 ? 1e-2 : 2e-5; }

#define EXPECT_DSLA_CLOSE(got, want, dt, what)                  \
  do {                                                          \
    EXPECT_LE(relative_l2(got, want), tolerance(dt)) << (what); \
  } while (0)

// The gate gradient's error. dg_t = sum_{t' >= t} (q dq - k dk) cancels exactly at t = 0 (the first
// gate acts on the zero initial state), so with T = 1 it is zero and only rounding remains: the error
// is measured against the size of the cancelling terms, ||q dq||, as well as ||dg||.
double gate_grad_error(const Tensor& got, const Tensor& want, const Tensor& q, const Tensor& dq) {
  const std::vector<double> g = values(got.to(Device::cpu())), w = values(want), qv = values(q), dqv = values(dq);
  double diff = 0, norm = 0, terms = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
    terms += qv[i] * dqv[i] * qv[i] * dqv[i];
  }
  return std::sqrt(diff) / (std::sqrt(norm) + std::sqrt(terms));
}

const DslaCase kCases[] = {
    {3, 65, 4, 2, 64, true, DType::bf16},           // a 64-chunk and one row; GQA 2
    {3, 1, 4, 4, 128, true, DType::bf16},           // one token
    {2, 130, 4, 1, 128, true, DType::bf16},         // GQA 4, a ragged last GPU chunk
    {1, 100, 2, 2, 64, false, DType::f32},          // one state (plain GLA), f32
    {3, 77, 4, 2, 128, false, DType::bf16},         // one state, GQA
    {2, 64, 2, 1, 128, true, DType::f32},           // exactly one CPU chunk, f32
    {1, 40, 2, 2, 64, true, DType::bf16, -30.0},    // strong gates: the pairwise ratios must not overflow
    {2, 300, 4, 2, 128, true, DType::bf16, -8.0},   // several 64-chunks with strong gates, GQA 2
    {1, 200, 2, 1, 64, false, DType::bf16, -30.0},  // one state, GQA 2, strong gates over four chunks
    {1, 1000, 2, 2, 128, true, DType::bf16, -0.5},  // 16 chunks of weak gates: the states carry far
};

}  // namespace

TEST(GpuDsla, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const DslaCase& c : kCases) {
    const std::string what = c.str();
    const DslaGpuInputs in = make_inputs(c, seed += 10);
    const Tensor g2g = c.two ? in.g2.gpu : Tensor(), g2c = c.two ? in.g2.cpu : Tensor();
    const DslaForward got = dsla_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2g, in.gamma.gpu, {}, true);
    const DslaForward want = dsla_forward(in.q.cpu, in.k.cpu, in.v.cpu, in.g1.cpu, g2c, in.gamma.cpu, {}, true);
    EXPECT_EQ(got.o.dtype(), c.dtype) << what;
    EXPECT_DSLA_CLOSE(got.o, want.o, c.dtype, what + " o");
    EXPECT_DSLA_CLOSE(got.final_state.s1, want.final_state.s1, DType::f32, what + " s1");
    if (c.two) EXPECT_DSLA_CLOSE(got.final_state.s2, want.final_state.s2, DType::f32, what + " s2");
    const DslaGrads gg = dsla_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2g, in.gamma.gpu);
    const DslaGrads gw = dsla_backward(in.dout.cpu, in.q.cpu, in.k.cpu, in.v.cpu, in.g1.cpu, g2c, in.gamma.cpu);
    EXPECT_DSLA_CLOSE(gg.dq, gw.dq, c.dtype, what + " dq");
    EXPECT_DSLA_CLOSE(gg.dk, gw.dk, c.dtype, what + " dk");
    EXPECT_DSLA_CLOSE(gg.dv, gw.dv, c.dtype, what + " dv");
    EXPECT_LE(gate_grad_error(gg.dg1, gw.dg1, in.q.cpu, gw.dq), tolerance(c.dtype)) << what << " dg1";
    if (c.two) {
      EXPECT_LE(gate_grad_error(gg.dg2, gw.dg2, in.q.cpu, gw.dq), tolerance(c.dtype)) << what << " dg2";
      EXPECT_DSLA_CLOSE(gg.dgamma, gw.dgamma, c.dtype, what + " dgamma");
    }
  }
}

TEST(GpuDsla, InitialAndFinalStatesMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (const DslaCase& c :
       {DslaCase{3, 33, 4, 2, 64, true, DType::bf16}, DslaCase{2, 17, 2, 1, 128, false, DType::f32}}) {
    const DslaGpuInputs in = make_inputs(c, 200);
    const GpuInput s1 = random_input({c.B, c.H, c.d, c.d}, DType::f32, 210),
                   s2 = random_input({c.B, c.H, c.d, c.d}, DType::f32, 211);
    const Tensor g2g = c.two ? in.g2.gpu : Tensor(), g2c = c.two ? in.g2.cpu : Tensor();
    const DslaState sg{s1.gpu, c.two ? s2.gpu : Tensor()}, sc{s1.cpu, c.two ? s2.cpu : Tensor()};
    const DslaForward got = dsla_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2g, in.gamma.gpu, sg, true);
    const DslaForward want = dsla_forward(in.q.cpu, in.k.cpu, in.v.cpu, in.g1.cpu, g2c, in.gamma.cpu, sc, true);
    EXPECT_DSLA_CLOSE(got.o, want.o, c.dtype, c.str() + " o");
    EXPECT_DSLA_CLOSE(got.final_state.s1, want.final_state.s1, DType::f32, c.str() + " s1");
    if (c.two) EXPECT_DSLA_CLOSE(got.final_state.s2, want.final_state.s2, DType::f32, c.str() + " s2");
  }
}

TEST(GpuDsla, DecodeStepMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (const DslaCase& c : {DslaCase{3, 1, 4, 2, 128, true, DType::bf16}, DslaCase{3, 5, 4, 1, 64, true, DType::f32},
                            DslaCase{2, 1, 2, 2, 64, false, DType::bf16}}) {
    const DslaGpuInputs in = make_inputs(c, 300);
    const GpuInput s1 = random_input({c.B, c.H, c.d, c.d}, DType::f32, 310),
                   s2 = random_input({c.B, c.H, c.d, c.d}, DType::f32, 311);
    DslaState sg{s1.gpu.clone(), c.two ? s2.gpu.clone() : Tensor()},
        sc{s1.cpu.clone(), c.two ? s2.cpu.clone() : Tensor()};
    const Tensor g2g = c.two ? in.g2.gpu : Tensor(), g2c = c.two ? in.g2.cpu : Tensor();
    for (int step = 0; step < 3; ++step) {
      const Tensor got = dsla_step(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2g, in.gamma.gpu, sg);
      const Tensor want = dsla_step(in.q.cpu, in.k.cpu, in.v.cpu, in.g1.cpu, g2c, in.gamma.cpu, sc);
      const std::string what = c.str() + " step " + std::to_string(step);
      EXPECT_DSLA_CLOSE(got, want, c.dtype, what + " o");
      EXPECT_DSLA_CLOSE(sg.s1, sc.s1, DType::f32, what + " s1");
      if (c.two) EXPECT_DSLA_CLOSE(sg.s2, sc.s2, DType::f32, what + " s2");
    }
  }
}

TEST(GpuDsla, ResultsAreBitIdenticalAcrossRuns) {
  FATHOM_REQUIRE_GPU();
  const DslaCase c{2, 150, 8, 2, 128, true, DType::bf16};
  const DslaGpuInputs in = make_inputs(c, 400);
  auto run = [&] {
    const DslaForward f = dsla_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, in.g2.gpu, in.gamma.gpu, {}, true);
    return std::pair{f, dsla_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, in.g2.gpu, in.gamma.gpu)};
  };
  const auto [f1, b1] = run();
  const auto [f2, b2] = run();
  EXPECT_TRUE(bitwise_equal(f1.o, f2.o));
  EXPECT_TRUE(bitwise_equal(f1.final_state.s2, f2.final_state.s2));
  for (auto [x, y] : {std::pair{&b1.dq, &b2.dq},
                      {&b1.dk, &b2.dk},
                      {&b1.dv, &b2.dv},
                      {&b1.dg1, &b2.dg1},
                      {&b1.dg2, &b2.dg2},
                      {&b1.dgamma, &b2.dgamma}})
    EXPECT_TRUE(bitwise_equal(*x, *y));
}

// The forward's kept scores are what the dv kernel would compute: the backward is bit-identical with
// them and without, and scores of another shape are refused.
TEST(GpuDsla, KeptScoresGiveTheSameBackward) {
  FATHOM_REQUIRE_GPU();
  for (const DslaCase& c :
       {DslaCase{2, 150, 4, 2, 128, true, DType::bf16}, DslaCase{1, 70, 2, 1, 64, false, DType::bf16}}) {
    const DslaGpuInputs in = make_inputs(c, 450);
    const Tensor g2 = c.two ? in.g2.gpu : Tensor();
    const DslaForward kept = dsla_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2, in.gamma.gpu, {}, false, true);
    const DslaForward plain = dsla_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2, in.gamma.gpu);
    ASSERT_TRUE(kept.scores.defined()) << c.str();
    EXPECT_FALSE(plain.scores.defined());
    EXPECT_EQ(kept.scores.shape(), dsla_scores_shape(in.q.gpu, c.two));
    EXPECT_TRUE(bitwise_equal(kept.o, plain.o)) << c.str();
    const DslaGrads a =
        dsla_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2, in.gamma.gpu, kept.scores);
    const DslaGrads b = dsla_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, g2, in.gamma.gpu);
    for (auto [x, y] : {std::pair{&a.dq, &b.dq}, {&a.dk, &b.dk}, {&a.dv, &b.dv}, {&a.dg1, &b.dg1}})
      EXPECT_TRUE(bitwise_equal(*x, *y)) << c.str();
    if (c.two) {
      EXPECT_TRUE(bitwise_equal(a.dgamma, b.dgamma)) << c.str();
    }
  }
  const DslaGpuInputs in = make_inputs({1, 130, 2, 2, 64, true, DType::bf16}, 460);
  const DslaGpuInputs shorter = make_inputs({1, 64, 2, 2, 64, true, DType::bf16}, 461);
  const DslaForward other = dsla_forward(shorter.q.gpu, shorter.k.gpu, shorter.v.gpu, shorter.g1.gpu, shorter.g2.gpu,
                                         shorter.gamma.gpu, {}, false, true);
  expect_error(
      [&] {
        dsla_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, in.g2.gpu, in.gamma.gpu, other.scores);
      },
      {"scores", "kept scores", "bf16[1, 2, 2, 3, 64, 64]"});
}

TEST(GpuDsla, UnsupportedShapesAreErrors) {
  FATHOM_REQUIRE_GPU();
  const DslaGpuInputs in = make_inputs({1, 4, 2, 2, 32, true, DType::bf16}, 500);
  expect_error([&] { dsla_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.g1.gpu, in.g2.gpu, in.gamma.gpu); },
               {"head dimension 64 or 128", "32"});
  const DslaGpuInputs ok = make_inputs({1, 4, 2, 2, 64, true, DType::bf16}, 501);
  expect_error([&] { dsla_forward(ok.q.gpu, ok.k.gpu, ok.v.gpu, ok.g1.gpu.to(DType::bf16), ok.g2.gpu, ok.gamma.gpu); },
               {"gate", "F32"});
}
