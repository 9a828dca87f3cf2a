// The four CUDA MoDA kernels (naive, flat, chunk, group) against the CPU reference
// (kernels/moda/moda_attention_cpu.cpp, in f32 on the same bf16-rounded inputs): O, the joint
// log-sum-exp, dq, dk, dv and the depth gradients within 1e-2 relative L2, over sequence lengths that
// hit every tile tail, group sizes including 3,
// slot counts from none to a full tile of columns, and head dims 64 and 128. Every case reads a slot
// range that starts past slot 0 and ends before the buffers' last slot, with depth-gradient buffers
// that already hold values: the range's gradients must be added to them (or, by the first reader,
// stored over NaN, into fp32 or bf16 buffers) and the other slots left bit-for-bit alone. The backward
// passes are bit-identical across runs. Argument errors are raised before any launch, so those tests
// run without a GPU too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/moda/moda_attention.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/op_test_util.h"

#if FATHOM_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/moda/moda_launch.h"
#endif

using namespace fathom;
using namespace fathom::test;

namespace {

#if FATHOM_WITH_CUDA

using cuda::ModaKernel;

constexpr ModaKernel kKernels[] = {ModaKernel::naive, ModaKernel::flat, ModaKernel::chunk, ModaKernel::group};

// One shape: Hq = G * Hk; the slot range is [1, 1 + L) of S = L + 2 slots.
struct Case {
  int64_t B, T, G, L, d, Hk = 2;
  int64_t slots() const { return L + 2; }
  int64_t begin() const { return 1; }
  int64_t end() const { return 1 + L; }
};

std::string describe_case(const Case& c, const char* separator) {
  char text[128];
  std::snprintf(text, sizeof(text), "T%lld%sG%lld%sL%lld%sd%lld%sB%lld%sHk%lld", (long long)c.T, separator,
                (long long)c.G, separator, (long long)c.L, separator, (long long)c.d, separator, (long long)c.B,
                separator, (long long)c.Hk);
  return text;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return describe_case(info.param, "_"); }
// gtest prints a parameter with this, not as its raw bytes.
[[maybe_unused]] void PrintTo(const Case& c, std::ostream* os) { *os << describe_case(c, " "); }

// ||got - want|| / ||want||, infinite if anything is not finite (unwritten outputs are NaN-poisoned).
// ||want|| is floored at an RMS of 1e-4 per element: with no depth slots and T = 1 the only key is the
// query's own, so dq and dk are exactly 0 and both sides are rounding noise.
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-8 * double(got.size())));
}

Tensor nan_filled(const Shape& shape, DType dtype) { return Tensor::full(shape, NAN, dtype).to(kGpu); }

std::vector<double> host_values(const Tensor& t) { return values(t.to(Device::cpu())); }

// Inputs of one case and the CPU reference's outputs on them.
struct Problem {
  Case c;
  Shape q_shape, kv_shape, depth_shape, lse_shape;
  double scale;
  GpuInput q, k, v, depth_k, depth_v, dout;
  GpuInput d_depth_k0, d_depth_v0;  // what the depth-gradient buffers hold before the backward pass
  AttentionOutput ref;
  AttentionGrads ref_grads;
  Tensor ref_ddk, ref_ddv;  // the reference's depth gradients alone (added to zeros)
  Tensor o_gpu, lse_gpu;    // the backward passes' O (bf16) and lse, from the reference

  Problem(const Case& cs, uint64_t seed) : c(cs) {
    const int64_t Hq = c.G * c.Hk;
    q_shape = Shape{c.B, c.T, Hq, c.d};
    kv_shape = Shape{c.B, c.T, c.Hk, c.d};
    depth_shape = Shape{c.B, c.T, c.slots(), c.Hk, c.d};
    lse_shape = Shape{c.B, Hq, c.T};
    scale = 1.0 / std::sqrt(double(c.d));
    // Scores of standard deviation about 1.3: softmax rows far from uniform.
    q = random_input(q_shape, DType::bf16, seed, -2, 2);
    k = random_input(kv_shape, DType::bf16, seed + 1, -2, 2);
    v = random_input(kv_shape, DType::bf16, seed + 2);
    depth_k = random_input(depth_shape, DType::bf16, seed + 3, -2, 2);
    depth_v = random_input(depth_shape, DType::bf16, seed + 4);
    dout = random_input(q_shape, DType::bf16, seed + 5);
    d_depth_k0 = random_input(depth_shape, DType::f32, seed + 6);
    d_depth_v0 = random_input(depth_shape, DType::f32, seed + 7);

    const DepthSlots depth{depth_k.cpu, depth_v.cpu, c.begin(), c.end()};
    ref = cpu::moda_attention_forward(q.cpu, k.cpu, v.cpu, depth, scale);
    ref_ddk = Tensor::zeros(depth_shape, DType::f32);
    ref_ddv = Tensor::zeros(depth_shape, DType::f32);
    // Both backward passes read the reference's O rounded to bf16 and its lse, so that they see identical
    // inputs: the gradients depend on O through rowsum(dO * O), and with few keys (T = 1, one slot) the
    // bf16 rounding of O alone moves them by over 1e-2 relative (d_depth_k by 1.18e-2 at T = 1, L = 1,
    // d = 128). The GPU's own O is checked by the forward comparison.
    const Tensor o_bf16 = ref.o.to(DType::bf16);
    o_gpu = o_bf16.to(kGpu);
    lse_gpu = ref.lse.to(kGpu);
    ref_grads = cpu::moda_attention_backward(dout.cpu, q.cpu, k.cpu, v.cpu, depth, o_bf16.to(DType::f32), ref.lse,
                                             scale, ref_ddk, ref_ddv, DepthGradMode::add);
  }

  // What a depth-gradient buffer of `dtype` holds before a backward pass: `initial`, and for a pass that
  // stores its gradients NaN over the slot range, which it must overwrite.
  Tensor depth_grads_before(const Tensor& initial, DepthGradMode mode, DType dtype = DType::f32) const {
    Tensor t = initial.clone();
    if (mode == DepthGradMode::store)
      for (int64_t s = c.begin(); s < c.end(); ++s)
        write_depth_slot(t, s, Tensor::full({c.B, c.T, c.Hk, c.d}, NAN, DType::f32));
    return t.to(dtype).to(kGpu);
  }

  cuda::ModaShape shape() const {
    cuda::ModaShape s;
    s.seq = cuda::FlashShape{c.B, c.T, c.G * c.Hk, c.Hk, c.d, scale};
    s.slots = c.slots();
    s.slot_begin = c.begin();
    s.slot_end = c.end();
    return s;
  }
};

// Device outputs of one kernel on one problem, and its launches.
struct KernelRun {
  const Problem& pb;
  ModaKernel kernel;
  Tensor o, lse, dq, dk, dv, ddk, ddv, workspace;

  KernelRun(const Problem& problem, ModaKernel k) : pb(problem), kernel(k) {}

  void* scratch(size_t bytes) {
    if (bytes == 0) return nullptr;
    workspace = Tensor::full({int64_t(bytes)}, 255, DType::u8).to(kGpu);  // NaN-poisoned
    return workspace.raw();
  }

  void forward() {
    o = nan_filled(pb.q_shape, DType::bf16);
    lse = nan_filled(pb.lse_shape, DType::f32);
    cuda::ModaParams p;
    p.shape = pb.shape();
    p.q = pb.q.gpu.data<bf16>();
    p.k = pb.k.gpu.data<bf16>();
    p.v = pb.v.gpu.data<bf16>();
    p.depth_k = pb.depth_k.gpu.data<bf16>();
    p.depth_v = pb.depth_v.gpu.data<bf16>();
    p.o = o.data<bf16>();
    p.lse = lse.data<float>();
    p.workspace_bytes = cuda::moda_forward_workspace_bytes(kernel, p.shape);
    p.workspace = scratch(p.workspace_bytes);
    cuda::moda_attention_forward(kernel, p, tensor_stream());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cuda::moda_kernel_name(kernel) << " forward";
  }

  // Runs on the given O and lse, with the depth-gradient buffers (of grad_dtype: f32, or bf16 to store
  // into) reset to their initial values.
  void backward(const Tensor& o_in, const Tensor& lse_in, DepthGradMode mode = DepthGradMode::add,
                DType grad_dtype = DType::f32) {
    dq = nan_filled(pb.q_shape, DType::bf16);
    dk = nan_filled(pb.kv_shape, DType::bf16);
    dv = nan_filled(pb.kv_shape, DType::bf16);
    ddk = pb.depth_grads_before(pb.d_depth_k0.cpu, mode, grad_dtype);
    ddv = pb.depth_grads_before(pb.d_depth_v0.cpu, mode, grad_dtype);
    cuda::ModaBackwardParams p;
    p.shape = pb.shape();
    p.q = pb.q.gpu.data<bf16>();
    p.k = pb.k.gpu.data<bf16>();
    p.v = pb.v.gpu.data<bf16>();
    p.depth_k = pb.depth_k.gpu.data<bf16>();
    p.depth_v = pb.depth_v.gpu.data<bf16>();
    p.o = o_in.data<bf16>();
    p.grad_o = pb.dout.gpu.data<bf16>();
    p.lse = lse_in.data<float>();
    p.dq = dq.data<bf16>();
    p.dk = dk.data<bf16>();
    p.dv = dv.data<bf16>();
    if (grad_dtype == DType::bf16) {
      p.d_depth_k_bf16 = ddk.data<bf16>();
      p.d_depth_v_bf16 = ddv.data<bf16>();
    } else {
      p.d_depth_k = ddk.data<float>();
      p.d_depth_v = ddv.data<float>();
    }
    p.store_depth_grads = mode == DepthGradMode::store;
    p.workspace_bytes = cuda::moda_backward_workspace_bytes(kernel, p.shape);
    p.workspace = scratch(p.workspace_bytes);
    cuda::moda_attention_backward(kernel, p, tensor_stream());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cuda::moda_kernel_name(kernel) << " backward";
  }
};

// Splits a depth-gradient buffer (f32 or bf16) into what the pass put in the slot range (got - initial
// there when it added, got when it stored; 0 elsewhere) and whether every slot outside the range kept
// its initial bits (`initial` as the buffer's dtype holds it, in f32).
struct DepthGradient {
  std::vector<double> added;
  bool others_untouched = true;
};
DepthGradient depth_gradient(const Tensor& got_gpu, const Tensor& initial, const Case& c,
                             DepthGradMode mode = DepthGradMode::add) {
  const Tensor got = got_gpu.to(Device::cpu()).to(DType::f32);
  const float* g = got.data<float>();
  const float* i0 = initial.data<float>();
  DepthGradient out;
  out.added.resize(size_t(got.numel()));
  const int64_t slot_size = c.Hk * c.d;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t slot = i / slot_size % c.slots();
    if (slot >= c.begin() && slot < c.end()) {
      out.added[size_t(i)] = double(g[i]) - (mode == DepthGradMode::add ? double(i0[i]) : 0.0);
    } else {
      out.added[size_t(i)] = 0;
      if (std::memcmp(&g[i], &i0[i], sizeof(float)) != 0) out.others_untouched = false;
    }
  }
  return out;
}

class GpuModaMatchesCpu : public ::testing::TestWithParam<Case> {};

TEST_P(GpuModaMatchesCpu, EveryKernel) {
  FATHOM_REQUIRE_GPU();
  const Case c = GetParam();
  const Problem pb(c, 5000 + uint64_t(c.T * 131 + c.G * 17 + c.L * 7 + c.d + c.B));
  for (ModaKernel kernel : kKernels) {
    const std::string name = cuda::moda_kernel_name(kernel);
    KernelRun run(pb, kernel);
    run.forward();
    run.backward(pb.o_gpu, pb.lse_gpu);
    const DepthGradient gk = depth_gradient(run.ddk, pb.d_depth_k0.cpu, c);
    const DepthGradient gv = depth_gradient(run.ddv, pb.d_depth_v0.cpu, c);
    EXPECT_TRUE(gk.others_untouched) << name << ": d_depth_k changed outside the slot range";
    EXPECT_TRUE(gv.others_untouched) << name << ": d_depth_v changed outside the slot range";
    const struct {
      const char* what;
      std::vector<double> got, want;
    } checks[] = {
        {"o", host_values(run.o), values(pb.ref.o)},          {"lse", host_values(run.lse), values(pb.ref.lse)},
        {"dq", host_values(run.dq), values(pb.ref_grads.dq)}, {"dk", host_values(run.dk), values(pb.ref_grads.dk)},
        {"dv", host_values(run.dv), values(pb.ref_grads.dv)}, {"d_depth_k", gk.added, values(pb.ref_ddk)},
        {"d_depth_v", gv.added, values(pb.ref_ddv)},
    };
    for (const auto& check : checks) {
      const double err = relative_error(check.got, check.want);
      EXPECT_LE(err, 1e-2) << name << " " << check.what << " relative L2 error " << err;
      char text[32];
      std::snprintf(text, sizeof(text), "%.3e", err);
      RecordProperty(name + "_rel_l2_" + check.what, text);
    }
    // The first reader of the slots stores its depth gradients over whatever the range held.
    run.backward(pb.o_gpu, pb.lse_gpu, DepthGradMode::store);
    const DepthGradient sk = depth_gradient(run.ddk, pb.d_depth_k0.cpu, c, DepthGradMode::store);
    const DepthGradient sv = depth_gradient(run.ddv, pb.d_depth_v0.cpu, c, DepthGradMode::store);
    EXPECT_TRUE(sk.others_untouched && sv.others_untouched) << name << ": storing changed slots outside the range";
    EXPECT_LE(relative_error(sk.added, values(pb.ref_ddk)), 1e-2) << name << " stored d_depth_k";
    EXPECT_LE(relative_error(sv.added, values(pb.ref_ddv)), 1e-2) << name << " stored d_depth_v";
    // A reader with no other reader can store them into bf16 buffers instead.
    run.backward(pb.o_gpu, pb.lse_gpu, DepthGradMode::store, DType::bf16);
    const Tensor k0 = pb.d_depth_k0.cpu.to(DType::bf16).to(DType::f32);
    const Tensor v0 = pb.d_depth_v0.cpu.to(DType::bf16).to(DType::f32);
    const DepthGradient hk = depth_gradient(run.ddk, k0, c, DepthGradMode::store);
    const DepthGradient hv = depth_gradient(run.ddv, v0, c, DepthGradMode::store);
    EXPECT_TRUE(hk.others_untouched && hv.others_untouched) << name << ": bf16 store changed slots outside the range";
    EXPECT_LE(relative_error(hk.added, values(pb.ref_ddk)), 1e-2) << name << " stored bf16 d_depth_k";
    EXPECT_LE(relative_error(hv.added, values(pb.ref_ddv)), 1e-2) << name << " stored bf16 d_depth_v";
  }
}

// Every combination of T, G, L and d (batch 1, two KV heads), plus batch 2 and other KV-head counts,
// and G that leave padding rows in the group kernel's m-tiles (5: one per m-tile; 24: a token padded
// to 32 rows).
std::vector<Case> main_cases() {
  std::vector<Case> cases;
  for (int64_t T : {1, 7, 63, 65, 300})
    for (int64_t G : {1, 2, 3, 4, 8})
      for (int64_t L : {0, 1, 5, 64})
        for (int64_t d : {64, 128}) cases.push_back({1, T, G, L, d});
  return cases;
}
std::vector<Case> batch_cases() {
  return {{2, 65, 3, 5, 64, 3},   {2, 129, 4, 3, 128, 1}, {3, 40, 16, 2, 64, 1}, {1, 70, 32, 4, 128, 2},
          {2, 257, 2, 9, 128, 2}, {2, 77, 5, 7, 128, 1},  {1, 50, 24, 3, 64, 1}};
}

// Grids of at least 192 dK/dV CTAs: at d = 64 on sm_90a flash attention's dK/dV pass then also forms
// the sequence dQ, and the group kernel's dQ pass walks only the depth columns.
std::vector<Case> dq_in_dkdv_cases() { return {{1, 129, 8, 3, 64, 128}, {2, 129, 3, 3, 64, 64}}; }

INSTANTIATE_TEST_SUITE_P(Main, GpuModaMatchesCpu, ::testing::ValuesIn(main_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Batches, GpuModaMatchesCpu, ::testing::ValuesIn(batch_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(DqInDkDv, GpuModaMatchesCpu, ::testing::ValuesIn(dq_in_dkdv_cases()), case_name);

TEST(GpuModa, BackwardIsBitIdenticalAcrossRuns) {
  FATHOM_REQUIRE_GPU();
  for (const Case c : {Case{2, 300, 3, 5, 128}, Case{1, 200, 8, 64, 64}, Case{4, 260, 3, 5, 64, 86}}) {
    const Problem pb(c, 91);
    for (ModaKernel kernel : kKernels) {
      KernelRun run(pb, kernel);
      run.forward();  // the whole pipeline: the backward passes read this forward's O and lse
      run.backward(run.o, run.lse);
      const Tensor dq = run.dq, dk = run.dk, dv = run.dv, ddk = run.ddk, ddv = run.ddv;
      run.backward(run.o, run.lse);
      const std::string what = std::string(cuda::moda_kernel_name(kernel)) + " " + describe_case(c, " ");
      EXPECT_TRUE(bitwise_equal(dq, run.dq)) << what << " dq";
      EXPECT_TRUE(bitwise_equal(dk, run.dk)) << what << " dk";
      EXPECT_TRUE(bitwise_equal(dv, run.dv)) << what << " dv";
      EXPECT_TRUE(bitwise_equal(ddk, run.ddk)) << what << " d_depth_k";
      EXPECT_TRUE(bitwise_equal(ddv, run.ddv)) << what << " d_depth_v";
    }
  }
}

// With an empty slot range MoDA is causal attention: the group kernel's outputs match flash attention's.
// The two run different tile shapes (flash attention may run on warpgroup MMAs), so their fp32 sums
// differ in order: o agrees to bf16 rounding, lse to fp32 rounding.
TEST(GpuModa, EmptySlotRangeIsFlashAttention) {
  FATHOM_REQUIRE_GPU();
  const Case c{2, 130, 4, 0, 64};
  const Problem pb(c, 17);
  KernelRun run(pb, ModaKernel::group);
  run.forward();
  Tensor o = nan_filled(pb.q_shape, DType::bf16), lse = nan_filled(pb.lse_shape, DType::f32);
  cuda::FlashParams p;
  p.shape = pb.shape().seq;
  p.q = pb.q.gpu.data<bf16>();
  p.k = pb.k.gpu.data<bf16>();
  p.v = pb.v.gpu.data<bf16>();
  p.o = o.data<bf16>();
  p.lse = lse.data<float>();
  cuda::flash_attention_forward(p, tensor_stream());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(relative_error(host_values(run.o), host_values(o)), 4e-3);
  EXPECT_LE(relative_error(host_values(run.lse), host_values(lse)), 1e-5);
}

// Forward and backward times of the four kernels at the paper's Table 7 shape (B = 1, T = 1024, Hq = 64,
// Hk = 8, d = 64, L = 64), printed; the group kernel must beat the naive one. Run on demand with
// --gtest_also_run_disabled_tests (the benchmark program is the place for real measurements).
TEST(GpuModa, DISABLED_TimesOfTheFourKernels) {
  FATHOM_REQUIRE_GPU();
  const int64_t B = 1, T = 1024, Hq = 64, Hk = 8, d = 64, S = 64;
  cuda::ModaShape shape;
  shape.seq = cuda::FlashShape{B, T, Hq, Hk, d, 0.125};
  shape.slots = S;
  shape.slot_begin = 0;
  shape.slot_end = S;
  const Tensor q = random_input({B, T, Hq, d}, DType::bf16, 1).gpu, k = random_input({B, T, Hk, d}, DType::bf16, 2).gpu,
               v = random_input({B, T, Hk, d}, DType::bf16, 3).gpu,
               dout = random_input({B, T, Hq, d}, DType::bf16, 4).gpu;
  const Tensor kd = random_input({B, T, S, Hk, d}, DType::bf16, 5).gpu,
               vd = random_input({B, T, S, Hk, d}, DType::bf16, 6).gpu;
  Tensor o = Tensor::empty({B, T, Hq, d}, DType::bf16, kGpu), lse = Tensor::empty({B, Hq, T}, DType::f32, kGpu);
  Tensor dq = Tensor::empty({B, T, Hq, d}, DType::bf16, kGpu), dk = Tensor::empty({B, T, Hk, d}, DType::bf16, kGpu),
         dv = Tensor::empty({B, T, Hk, d}, DType::bf16, kGpu);
  Tensor ddk = Tensor::zeros({B, T, S, Hk, d}, DType::f32, kGpu),
         ddv = Tensor::zeros({B, T, S, Hk, d}, DType::f32, kGpu);
  double total_ms[4] = {};
  for (int i = 0; i < 4; ++i) {
    const ModaKernel kernel = kKernels[i];
    cuda::ModaParams f;
    f.shape = shape;
    f.q = q.data<bf16>(), f.k = k.data<bf16>(), f.v = v.data<bf16>();
    f.depth_k = kd.data<bf16>(), f.depth_v = vd.data<bf16>();
    f.o = o.data<bf16>(), f.lse = lse.data<float>();
    cuda::ModaBackwardParams b;
    b.shape = shape;
    b.q = f.q, b.k = f.k, b.v = f.v, b.depth_k = f.depth_k, b.depth_v = f.depth_v, b.o = f.o, b.lse = f.lse;
    b.grad_o = dout.data<bf16>(), b.dq = dq.data<bf16>(), b.dk = dk.data<bf16>(), b.dv = dv.data<bf16>();
    b.d_depth_k = ddk.data<float>(), b.d_depth_v = ddv.data<float>();
    const size_t bytes =
        std::max(cuda::moda_forward_workspace_bytes(kernel, shape), cuda::moda_backward_workspace_bytes(kernel, shape));
    const Tensor workspace = Tensor::empty({int64_t(bytes)}, DType::u8, kGpu);
    f.workspace = b.workspace = const_cast<void*>(workspace.raw());
    f.workspace_bytes = b.workspace_bytes = bytes;
    cudaEvent_t start, mid, stop;
    cudaEventCreate(&start), cudaEventCreate(&mid), cudaEventCreate(&stop);
    float fwd = 0, bwd = 0;
    constexpr int kReps = 3;
    for (int rep = 0; rep <= kReps; ++rep) {  // rep 0 warms up
      cudaEventRecord(start, tensor_stream());
      cuda::moda_attention_forward(kernel, f, tensor_stream());
      cudaEventRecord(mid, tensor_stream());
      cuda::moda_attention_backward(kernel, b, tensor_stream());
      cudaEventRecord(stop, tensor_stream());
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float a = 0, c = 0;
      cudaEventElapsedTime(&a, start, mid);
      cudaEventElapsedTime(&c, mid, stop);
      if (rep > 0) fwd += a / kReps, bwd += c / kReps;
    }
    cudaEventDestroy(start), cudaEventDestroy(mid), cudaEventDestroy(stop);
    total_ms[i] = fwd + bwd;
    std::printf("moda %-5s T=%lld Hq=%lld Hk=%lld d=%lld L=%lld: forward %.3f ms, backward %.3f ms\n",
                cuda::moda_kernel_name(kernel), (long long)T, (long long)Hq, (long long)Hk, (long long)d, (long long)S,
                fwd, bwd);
  }
  EXPECT_LT(total_ms[3], total_ms[0]) << "group slower than naive";
}

// Argument errors are raised before anything touches the device, so these run without a GPU.
TEST(GpuModa, BadArgumentsAreErrors) {
  alignas(16) static bf16 buffer[64];
  alignas(16) static float stats[64];
  auto shape = [](int64_t Hq, int64_t Hk, int64_t d, int64_t S, int64_t begin, int64_t end) {
    cuda::ModaShape s;
    s.seq = cuda::FlashShape{1, 4, Hq, Hk, d, 0.125};
    s.slots = S;
    s.slot_begin = begin;
    s.slot_end = end;
    return s;
  };
  auto params = [&](cuda::ModaShape s) {
    cuda::ModaParams p;
    p.shape = s;
    p.q = p.k = p.v = p.depth_k = p.depth_v = buffer;
    p.o = buffer;
    p.lse = stats;
    return p;
  };
  for (ModaKernel kernel : kKernels) {
    auto forward = [&](cuda::ModaParams p) { cuda::moda_attention_forward(kernel, p, nullptr); };
    expect_error([&] { forward(params(shape(6, 4, 64, 2, 0, 1))); }, {"Hq = 6", "multiple of KV heads Hk = 4"});
    expect_error([&] { forward(params(shape(2, 2, 4, 2, 0, 1))); }, {"head dim d = 4", "64 or 128"});
    expect_error([&] { forward(params(shape(2, 2, 96, 2, 0, 1))); }, {"head dim d = 96"});
    expect_error([&] { forward(params(shape(2, 2, 64, 4, 2, 5))); }, {"slot range [2, 5)", "S = 4 slots"});
    expect_error([&] { forward(params(shape(2, 2, 64, 4, 3, 2))); }, {"slot range [3, 2)"});
    expect_error([&] { forward(params(shape(2, 2, 64, 4, -1, 2))); }, {"slot range [-1, 2)"});
    cuda::ModaParams negative_scale = params(shape(2, 2, 64, 4, 0, 2));
    negative_scale.shape.seq.scale = -0.125;
    expect_error([&] { forward(negative_scale); }, {"scale must be finite and positive"});
    cuda::ModaParams no_q = params(shape(2, 2, 64, 4, 0, 2));
    no_q.q = nullptr;
    expect_error([&] { forward(no_q); }, {"moda_attention_forward", "q is null"});
    cuda::ModaParams no_depth = params(shape(2, 2, 64, 4, 0, 2));
    no_depth.depth_v = nullptr;
    expect_error([&] { forward(no_depth); }, {"depth_v is null"});
    cuda::ModaParams misaligned = params(shape(2, 2, 64, 4, 0, 2));
    misaligned.depth_k = buffer + 1;
    expect_error([&] { forward(misaligned); }, {"depth_k must be 16-byte aligned"});

    cuda::ModaBackwardParams b;
    b.shape = shape(4, 2, 64, 3, 1, 2);
    b.q = b.k = b.v = b.o = b.grad_o = b.depth_k = b.depth_v = buffer;
    b.dq = b.dk = b.dv = buffer;
    b.lse = stats;
    b.d_depth_k = b.d_depth_v = stats;
    b.workspace = stats;
    b.workspace_bytes = cuda::moda_backward_workspace_bytes(kernel, b.shape) - 4;
    expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); }, {"workspace of", "too small"});
    b.d_depth_v = nullptr;
    expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); },
                 {"moda_attention_backward", "d_depth_v is null"});
    // bf16 depth gradients: instead of the fp32 ones, and only stored.
    b.d_depth_k_bf16 = b.d_depth_v_bf16 = buffer;
    b.store_depth_grads = true;
    expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); }, {"either the fp32", "not both"});
    b.d_depth_k = nullptr;
    b.store_depth_grads = false;
    expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); }, {"stored, never added"});
    b.store_depth_grads = true;
    b.d_depth_v_bf16 = buffer + 1;
    expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); },
                 {"d_depth_v_bf16 must be 16-byte aligned"});
    // Depth weights: instead of any gradient buffer, and from the group kernel only.
    b.depth_weights_p = b.depth_weights_ds = stats;
    expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); },
                 {"depth weights or depth-gradient buffers"});
    b.d_depth_k_bf16 = b.d_depth_v_bf16 = nullptr;
    if (kernel != cuda::ModaKernel::group)
      expect_error([&] { cuda::moda_attention_backward(kernel, b, nullptr); }, {"group kernel with G <= 16 only"});
  }
  // An empty slot range reads no depth buffers: they may be null.
  // (The launch itself is not reached here: q is null.)
  cuda::ModaParams empty = params(shape(2, 2, 64, 0, 0, 0));
  empty.depth_k = empty.depth_v = nullptr;
  empty.q = nullptr;
  expect_error([&] { cuda::moda_attention_forward(ModaKernel::group, empty, nullptr); }, {"q is null"});
  // The group kernel folds a KV head's G query heads into one 128-row tile.
  expect_error([&] { cuda::moda_attention_forward(ModaKernel::group, params(shape(256, 1, 64, 2, 0, 1)), nullptr); },
               {"G = 256", "128 rows"});
  expect_error([&] { cuda::moda_attention_forward(ModaKernel(9), params(shape(2, 2, 64, 2, 0, 1)), nullptr); },
               {"unknown MoDA kernel 9"});
  // The naive kernel's scratch: the gathered depth slots plus one chunk of scores.
  cuda::ModaParams naive = params(shape(2, 2, 64, 2, 0, 1));
  naive.workspace_bytes = cuda::moda_forward_workspace_bytes(ModaKernel::naive, naive.shape) - 1;
  naive.workspace = stats;
  expect_error([&] { cuda::moda_attention_forward(ModaKernel::naive, naive, nullptr); }, {"workspace of", "too small"});
  EXPECT_EQ(cuda::moda_forward_workspace_bytes(ModaKernel::group, naive.shape), 0u);
  EXPECT_STREQ(cuda::moda_kernel_name(ModaKernel::chunk), "chunk");
}

#else  // built without CUDA

TEST(GpuModa, NeedsCudaBuild) { GTEST_SKIP() << "fathom was built without CUDA"; }

#endif

}  // namespace
