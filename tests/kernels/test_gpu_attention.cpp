// CUDA flash attention against the CPU reference (kernels/attention/attention_cpu.cpp, in f32 on the same bf16-rounded
// inputs): O, the log-sum-exp and all three gradients within 1e-2 relative L2, over sequence lengths
// that hit every tile tail, group sizes including 3, batch 1 and 2, head dims 64 and 128 and the
// padded widths; the backward pass bit-identical across runs. Buffers are plain cudaMalloc through the
// raw launchers, so these tests need nothing of the CUDA runtime but the device. Without a GPU (or in
// a build without CUDA) the device tests skip themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/decode_attention.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/op_test_util.h"

#if FATHOM_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/attention/attention_fp32.h"
#include "kernels/attention/flash_attention.h"
#endif

using namespace fathom;
using namespace fathom::test;

namespace {

#if FATHOM_WITH_CUDA

struct Case {
  int64_t B, T, G, d;
  int64_t Hk = 2;
};

std::string describe_case(const Case& c, const char* separator) {
  char text[96];
  std::snprintf(text, sizeof(text), "T%lld%sG%lld%sd%lld%sB%lld", (long long)c.T, separator, (long long)c.G, separator,
                (long long)c.d, separator, (long long)c.B);
  std::string name = text;
  if (c.Hk != 2) name += separator + std::string("Hk") + std::to_string(c.Hk);
  return name;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return describe_case(info.param, "_"); }
// gtest prints a parameter with this, not as its raw bytes.
[[maybe_unused]] void PrintTo(const Case& c, std::ostream* os) { *os << describe_case(c, " "); }

// ||got - want|| / ||want||, infinite if anything is not finite (unwritten outputs are NaN-poisoned).
// ||want|| is floored at an RMS of 1e-4 per element: at T = 1 the only key is the query's own, so
// dS = P (dP - rowsum(dO * O)) vanishes and dq, dk are exactly 0; both sides are then rounding noise
// (the GPU's up to about 2e-7 per element at d = 128, G = 8) and a plain ratio would be meaningless.
// Every gradient that does not vanish here has an RMS far above the floor (at least 4e-2 in this suite).
double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-8 * double(got.size())));
}

bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device"

void cuda_ok(cudaError_t err, const char* what) {
  ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

// A device copy of a host tensor's bytes, or an output buffer poisoned with 0xff bytes (NaN in bf16
// and f32), so that any element a kernel fails to write shows up.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda_ok(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)), "cudaMalloc");
    poison();
  }
  explicit DeviceBuffer(const Tensor& host) : DeviceBuffer(host.nbytes()) {
    cuda_ok(cudaMemcpy(ptr_, host.raw(), bytes_, cudaMemcpyHostToDevice), "upload");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  void poison() { cuda_ok(cudaMemset(ptr_, 0xff, bytes_), "poison"); }
  // The bytes as a host tensor of the given shape and dtype.
  Tensor download(const Shape& shape, DType dtype) const {
    Tensor t = Tensor::empty(shape, dtype);
    EXPECT_EQ(t.nbytes(), bytes_);
    cuda_ok(cudaMemcpy(t.raw(), ptr_, bytes_, cudaMemcpyDeviceToHost), "download");
    return t;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Inputs of one case: bf16 tensors (what the GPU sees) and their exact f32 copies (the reference's).
struct Inputs {
  Shape q_shape, kv_shape;
  double scale;
  Tensor q, k, v, dout;  // bf16
  Tensor qf, kf, vf, doutf;

  Inputs(const Case& c, uint64_t seed) {
    const int64_t Hk = c.Hk, Hq = c.G * Hk;
    q_shape = Shape{c.B, c.T, Hq, c.d};
    kv_shape = Shape{c.B, c.T, Hk, c.d};
    scale = 1.0 / std::sqrt(double(c.d));
    // Scores of standard deviation about 1.3: softmax rows far from uniform.
    q = random_tensor(q_shape, DType::bf16, seed, -2, 2);
    k = random_tensor(kv_shape, DType::bf16, seed + 1, -2, 2);
    v = random_tensor(kv_shape, DType::bf16, seed + 2);
    dout = random_tensor(q_shape, DType::bf16, seed + 3);
    qf = q.to(DType::f32);
    kf = k.to(DType::f32);
    vf = v.to(DType::f32);
    doutf = dout.to(DType::f32);
  }
  cuda::FlashShape shape() const {
    return cuda::FlashShape{q_shape.dim(0), q_shape.dim(1), q_shape.dim(2), kv_shape.dim(2), q_shape.dim(3), scale};
  }
};

// Device buffers of one case and the launches over them.
struct DeviceAttention {
  const Inputs& in;
  DeviceBuffer q, k, v, dout, o, lse, dq, dk, dv, workspace;

  explicit DeviceAttention(const Inputs& inputs)
      : in(inputs),
        q(inputs.q),
        k(inputs.k),
        v(inputs.v),
        dout(inputs.dout),
        o(inputs.q.nbytes()),
        lse(size_t(inputs.q_shape.dim(0) * inputs.q_shape.dim(2) * inputs.q_shape.dim(1)) * sizeof(float)),
        dq(inputs.q.nbytes()),
        dk(inputs.k.nbytes()),
        dv(inputs.v.nbytes()),
        workspace(cuda::flash_backward_workspace_bytes(inputs.shape())) {}

  void forward() {
    cuda::FlashParams p;
    p.shape = in.shape();
    p.q = q.as<bf16>();
    p.k = k.as<bf16>();
    p.v = v.as<bf16>();
    p.o = o.as<bf16>();
    p.lse = lse.as<float>();
    cuda::flash_attention_forward(p, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "forward");
  }
  void backward() {
    dq.poison();
    dk.poison();
    dv.poison();
    workspace.poison();
    cuda::FlashBackwardParams p;
    p.shape = in.shape();
    p.q = q.as<bf16>();
    p.k = k.as<bf16>();
    p.v = v.as<bf16>();
    p.o = o.as<bf16>();
    p.grad_o = dout.as<bf16>();
    p.lse = lse.as<float>();
    p.dq = dq.as<bf16>();
    p.dk = dk.as<bf16>();
    p.dv = dv.as<bf16>();
    p.workspace = workspace.as<void>();
    p.workspace_bytes = workspace.bytes();
    cuda::flash_attention_backward(p, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "backward");
  }
  Shape lse_shape() const { return Shape{in.q_shape.dim(0), in.q_shape.dim(2), in.q_shape.dim(1)}; }
};

class GpuAttentionMatchesCpu : public ::testing::TestWithParam<Case> {};

TEST_P(GpuAttentionMatchesCpu, OutputLseAndGradients) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const Inputs in(c, 1000 + uint64_t(c.T * 131 + c.G * 17 + c.d + c.B));
  const AttentionOutput ref = cpu::attention_forward(in.qf, in.kf, in.vf, in.scale);
  const AttentionGrads ref_grads = cpu::attention_backward(in.doutf, in.qf, in.kf, in.vf, ref.o, ref.lse, in.scale);

  DeviceAttention gpu(in);
  gpu.forward();
  gpu.backward();
  const double tol = 1e-2;  // bf16 operands and outputs
  const struct {
    const char* name;
    Tensor got;
    const Tensor& want;
  } checks[] = {
      {"o", gpu.o.download(in.q_shape, DType::bf16), ref.o},
      {"lse", gpu.lse.download(gpu.lse_shape(), DType::f32), ref.lse},
      {"dq", gpu.dq.download(in.q_shape, DType::bf16), ref_grads.dq},
      {"dk", gpu.dk.download(in.kv_shape, DType::bf16), ref_grads.dk},
      {"dv", gpu.dv.download(in.kv_shape, DType::bf16), ref_grads.dv},
  };
  for (const auto& check : checks) {
    const double err = relative_l2(values(check.got), values(check.want));
    EXPECT_LE(err, tol) << check.name << " relative L2 error " << err;
    char text[32];
    std::snprintf(text, sizeof(text), "%.3e", err);
    RecordProperty(std::string("rel_l2_") + check.name, text);
  }
}

std::vector<Case> main_cases() {
  std::vector<Case> cases;
  for (int64_t T : {1, 7, 63, 65, 300, 1000})
    for (int64_t G : {1, 2, 3, 4, 8})
      for (int64_t d : {64, 128})
        for (int64_t B : {1, 2}) cases.push_back({B, T, G, d});
  return cases;
}

// Head dims below 64 and other multiples of 8 run on zero-padded 32/64/128-wide kernels.
std::vector<Case> padded_width_cases() {
  std::vector<Case> cases;
  for (int64_t d : {16, 32})
    for (int64_t T : {1, 65, 300, 1000})
      for (int64_t G : {1, 3}) cases.push_back({2, T, G, d});
  for (int64_t d : {8, 40, 96}) cases.push_back({2, 129, 2, d});
  return cases;
}

// Grids of at least 192 dK/dV CTAs (backward_plan.h): at d <= 64 on sm_90a the dK/dV pass then also
// forms dQ, its key blocks adding into each 64-row slab in turn, often after CTAs that started waves
// earlier (the small cases above take the split two passes). d = 48 runs it zero-padded to 64 columns;
// the last case has exactly 192 CTAs.
std::vector<Case> dq_in_dkdv_cases() {
  return {{4, 260, 3, 64, 86}, {2, 200, 2, 64, 256}, {1, 129, 8, 64, 512}, {1, 129, 3, 48, 256}, {1, 129, 2, 64, 96}};
}

INSTANTIATE_TEST_SUITE_P(Main, GpuAttentionMatchesCpu, ::testing::ValuesIn(main_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(PaddedWidths, GpuAttentionMatchesCpu, ::testing::ValuesIn(padded_width_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(DqInDkDv, GpuAttentionMatchesCpu, ::testing::ValuesIn(dq_in_dkdv_cases()), case_name);

TEST(GpuAttention, BackwardIsBitIdenticalAcrossRuns) {
  SKIP_WITHOUT_GPU();
  for (const Case c : {Case{2, 1000, 3, 64}, Case{1, 777, 8, 128}, Case{2, 300, 4, 32}, Case{4, 260, 3, 64, 86}}) {
    const Inputs in(c, 77);
    DeviceAttention gpu(in);
    gpu.forward();
    gpu.backward();
    const Tensor dq = gpu.dq.download(in.q_shape, DType::bf16), dk = gpu.dk.download(in.kv_shape, DType::bf16),
                 dv = gpu.dv.download(in.kv_shape, DType::bf16);
    gpu.backward();
    const std::string what = describe_case(c, " ");
    EXPECT_EQ(0, std::memcmp(dq.raw(), gpu.dq.download(in.q_shape, DType::bf16).raw(), dq.nbytes())) << what << " dq";
    EXPECT_EQ(0, std::memcmp(dk.raw(), gpu.dk.download(in.kv_shape, DType::bf16).raw(), dk.nbytes())) << what << " dk";
    EXPECT_EQ(0, std::memcmp(dv.raw(), gpu.dv.download(in.kv_shape, DType::bf16).raw(), dv.nbytes())) << what << " dv";
  }
}

// Argument errors are raised before anything touches the device, so these run without a GPU.
TEST(GpuAttention, BadArgumentsAreErrors) {
  alignas(16) static bf16 buffer[64];
  alignas(16) static float stats[64];
  auto params = [&](cuda::FlashShape s) {
    cuda::FlashParams p;
    p.shape = s;
    p.q = p.k = p.v = buffer;
    p.o = buffer;
    p.lse = stats;
    return p;
  };
  auto forward = [&](cuda::FlashParams p) { cuda::flash_attention_forward(p, nullptr); };
  expect_error([&] { forward(params({1, 4, 6, 4, 64, 0.125})); }, {"Hq = 6", "multiple of KV heads Hk = 4"});
  expect_error([&] { forward(params({1, 4, 2, 2, 20, 0.125})); }, {"head dim d = 20", "multiple of 8, at most 128"});
  expect_error([&] { forward(params({1, 4, 2, 2, 256, 0.125})); }, {"head dim d = 256"});
  expect_error([&] { forward(params({1, 0, 2, 2, 64, 0.125})); }, {"T = 0"});
  expect_error([&] { forward(params({1, 4, 2, 2, 64, 0.0})); }, {"scale"});
  expect_error([&] { forward(params({1, 4, 2, 2, 64, NAN})); }, {"scale"});
  expect_error([&] { forward(params({1, 4, 2, 2, 64, -0.125})); }, {"scale must be finite and positive"});
  expect_error([&] { forward(params({1000, 4, 128, 2, 64, 0.125})); }, {"B * Hq = 128000"});
  cuda::FlashParams no_o = params({1, 4, 2, 2, 64, 0.125});
  no_o.o = nullptr;
  expect_error([&] { forward(no_o); }, {"o is null"});
  cuda::FlashParams misaligned = params({1, 4, 2, 2, 64, 0.125});
  misaligned.k = buffer + 1;
  expect_error([&] { forward(misaligned); }, {"k must be 16-byte aligned"});

  const cuda::FlashShape shape{2, 100, 4, 2, 64, 0.125};
  cuda::FlashBackwardParams b;
  b.shape = shape;
  b.q = b.k = b.v = b.o = b.grad_o = buffer;
  b.dq = b.dk = b.dv = buffer;
  b.lse = stats;
  b.workspace = stats;
  b.workspace_bytes = cuda::flash_backward_workspace_bytes(shape) - 4;
  expect_error([&] { cuda::flash_attention_backward(b, nullptr); }, {"workspace of", "too small"});
  b.grad_o = nullptr;
  expect_error([&] { cuda::flash_attention_backward(b, nullptr); }, {"grad_o is null"});
  // f32: lse2 and delta for B x Hq rows padded to 128, plus (4 dK/dV CTAs being far too few to fill
  // the GPU) dK and dV partials for the G = 2 query heads split over 2 CTAs, [2, B, T, Hk, d] each.
  EXPECT_EQ(cuda::flash_backward_workspace_bytes(shape), size_t(2 * 2 * 4 * 128 + 2 * 2 * 2 * 100 * 2 * 64) * 4);
  // Long sequences need no split: the statistics, and, where the dK/dV pass also forms dQ (sm_90a
  // builds), fp32 dQ sums [B, Hq, Tpad, 64] with a counter per 64 of their rows and a ticket.
  const cuda::FlashShape long_shape{1, 16384, 64, 8, 64, 0.125};
  const size_t long_stats = size_t(2 * 64 * 16384) * 4;
  const size_t long_sums = size_t(64 * 16384) * 64 * 4 + size_t(64 * 16384 / 64 + 1) * 4;
  const size_t long_bytes = cuda::flash_backward_workspace_bytes(long_shape);
  EXPECT_TRUE(long_bytes == long_stats || long_bytes == long_stats + long_sums) << long_bytes;
}

// ---- fp32 kernels (attention_fp32.h): train.precision: fp32 and fp32 decoding ----

// Inputs of one case in f32 (what the GPU sees), and the f64 reference of the CPU on the same values.
struct Fp32Inputs {
  Shape q_shape, kv_shape;
  double scale;
  Tensor q, k, v, dout;  // f32
  AttentionOutput ref;
  AttentionGrads ref_grads;

  Fp32Inputs(const Case& c, uint64_t seed) {
    q_shape = Shape{c.B, c.T, c.G * c.Hk, c.d};
    kv_shape = Shape{c.B, c.T, c.Hk, c.d};
    scale = 1.0 / std::sqrt(double(c.d));
    q = random_tensor(q_shape, DType::f32, seed, -2, 2);
    k = random_tensor(kv_shape, DType::f32, seed + 1, -2, 2);
    v = random_tensor(kv_shape, DType::f32, seed + 2);
    dout = random_tensor(q_shape, DType::f32, seed + 3);
    auto f64 = [](const Tensor& t) { return t.to(DType::f64); };
    ref = cpu::attention_forward(f64(q), f64(k), f64(v), scale);
    ref_grads = cpu::attention_backward(f64(dout), f64(q), f64(k), f64(v), ref.o, ref.lse, scale);
  }
  cuda::FlashShape shape() const {
    return cuda::FlashShape{q_shape.dim(0), q_shape.dim(1), q_shape.dim(2), kv_shape.dim(2), q_shape.dim(3), scale};
  }
};

// Device buffers of one case (outputs NaN-poisoned) and the raw launches over them.
struct Fp32DeviceAttention {
  const Fp32Inputs& in;
  DeviceBuffer q, k, v, dout, o, lse, dq, dk, dv, delta;

  explicit Fp32DeviceAttention(const Fp32Inputs& inputs)
      : in(inputs),
        q(inputs.q),
        k(inputs.k),
        v(inputs.v),
        dout(inputs.dout),
        o(inputs.q.nbytes()),
        lse(size_t(inputs.ref.lse.numel()) * sizeof(float)),
        dq(inputs.q.nbytes()),
        dk(inputs.k.nbytes()),
        dv(inputs.v.nbytes()),
        delta(size_t(inputs.ref.lse.numel()) * sizeof(float)) {}

  void forward() {
    cuda::Fp32AttentionParams p;
    p.shape = in.shape();
    p.q = q.as<float>();
    p.k = k.as<float>();
    p.v = v.as<float>();
    p.o = o.as<float>();
    p.lse = lse.as<float>();
    cuda::fp32_attention_forward(p, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "fp32 forward");
  }
  void backward() {
    cuda::Fp32AttentionBackwardParams p;
    p.shape = in.shape();
    p.q = q.as<float>();
    p.k = k.as<float>();
    p.v = v.as<float>();
    p.o = o.as<float>();
    p.grad_o = dout.as<float>();
    p.lse = lse.as<float>();
    p.dq = dq.as<float>();
    p.dk = dk.as<float>();
    p.dv = dv.as<float>();
    p.delta = delta.as<float>();
    cuda::fp32_attention_backward(p, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "fp32 backward");
  }
};

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (const double e : x) m = std::isfinite(e) ? std::max(m, std::abs(e)) : INFINITY;
  return m;
}

// Against the f64 reference: O, lse and the gradients within 1e-5 relative L2 (fp32 rounding is
// about 1e-7; a bf16 rounding anywhere would show as 1e-3). At T = 1 dq and dk vanish exactly (the
// only key is the query's own, so dS = P (dO.v - dO.o) = 0); there the GPU's rounding noise must stay
// below 1e-5 in absolute value.
class GpuFp32AttentionMatchesCpu : public ::testing::TestWithParam<Case> {};

TEST_P(GpuFp32AttentionMatchesCpu, OutputLseAndGradients) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const Fp32Inputs in(c, 2000 + uint64_t(c.T * 131 + c.G * 17 + c.d + c.B));
  Fp32DeviceAttention gpu(in);
  gpu.forward();
  gpu.backward();
  const Shape lse_shape = in.ref.lse.shape();
  const struct {
    const char* name;
    Tensor got;
    const Tensor& want;
    bool vanishes;
  } checks[] = {
      {"o", gpu.o.download(in.q_shape, DType::f32), in.ref.o, false},
      {"lse", gpu.lse.download(lse_shape, DType::f32), in.ref.lse, false},
      {"dq", gpu.dq.download(in.q_shape, DType::f32), in.ref_grads.dq, c.T == 1},
      {"dk", gpu.dk.download(in.kv_shape, DType::f32), in.ref_grads.dk, c.T == 1},
      {"dv", gpu.dv.download(in.kv_shape, DType::f32), in.ref_grads.dv, false},
  };
  for (const auto& check : checks) {
    const std::vector<double> got = values(check.got);
    const double err = check.vanishes ? max_abs(got) : relative_l2(got, values(check.want));
    EXPECT_LE(err, 1e-5) << check.name << (check.vanishes ? " largest magnitude " : " relative L2 error ") << err;
    char text[32];
    std::snprintf(text, sizeof(text), "%.3e", err);
    RecordProperty(std::string("rel_l2_") + check.name, text);
  }
}

// Every tail of the 16-row tiles (T = 1, 17, 65, 130), groups of 1 and 3, head dims in every column
// width (8, 16 and 32 columns per thread; 80 leaves a partial one) up to the largest, 256.
std::vector<Case> fp32_cases() {
  std::vector<Case> cases;
  for (int64_t T : {1, 17, 65, 130})
    for (int64_t G : {1, 3})
      for (int64_t d : {32, 64, 80, 128}) cases.push_back({2, T, G, d});
  for (int64_t d : {1, 5, 200, 256}) cases.push_back({2, 33, 3, d, 1});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fp32, GpuFp32AttentionMatchesCpu, ::testing::ValuesIn(fp32_cases()), case_name);

TEST(GpuFp32Attention, BackwardIsBitIdenticalAcrossRuns) {
  SKIP_WITHOUT_GPU();
  const Case c{2, 130, 3, 80};
  const Fp32Inputs in(c, 91);
  Fp32DeviceAttention gpu(in);
  gpu.forward();
  gpu.backward();
  const Tensor dq = gpu.dq.download(in.q_shape, DType::f32), dk = gpu.dk.download(in.kv_shape, DType::f32);
  gpu.dq.poison();
  gpu.dk.poison();
  gpu.backward();
  EXPECT_EQ(0, std::memcmp(dq.raw(), gpu.dq.download(in.q_shape, DType::f32).raw(), dq.nbytes())) << "dq";
  EXPECT_EQ(0, std::memcmp(dk.raw(), gpu.dk.download(in.kv_shape, DType::f32).raw(), dk.nbytes())) << "dk";
}

// The dispatch (kernels/attention/attention.h) sends F32 CUDA tensors to the fp32 kernels: F32 outputs within
// fp32 tolerance of the CPU, where a bf16 detour would be 1e-3 off.
TEST(GpuFp32Attention, DispatchKeepsF32) {
  FATHOM_REQUIRE_GPU();
  const Case c{2, 65, 3, 64};
  const Fp32Inputs in(c, 5);
  const Device gpu = Device::cuda(0);
  const AttentionOutput out = attention_forward(in.q.to(gpu), in.k.to(gpu), in.v.to(gpu), in.scale);
  ASSERT_EQ(out.o.dtype(), DType::f32);
  EXPECT_LE(relative_l2(values(out.o.to(Device::cpu())), values(in.ref.o)), 1e-5) << "o";
  const AttentionGrads g =
      attention_backward(in.dout.to(gpu), in.q.to(gpu), in.k.to(gpu), in.v.to(gpu), out.o, out.lse, in.scale);
  ASSERT_EQ(g.dq.dtype(), DType::f32);
  EXPECT_LE(relative_l2(values(g.dq.to(Device::cpu())), values(in.ref_grads.dq)), 1e-5) << "dq";
  EXPECT_LE(relative_l2(values(g.dk.to(Device::cpu())), values(in.ref_grads.dk)), 1e-5) << "dk";
  EXPECT_LE(relative_l2(values(g.dv.to(Device::cpu())), values(in.ref_grads.dv)), 1e-5) << "dv";
}

// fp32 decoding (kernels/attention/decode_attention.h) on CUDA: the new tokens' rows against the CPU reference
// in f64, with the length given on the host and read on the device; cache positions at and past the
// length hold NaN, which must not be read.
TEST(GpuFp32Attention, DecodeMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const int64_t B = 2, Hk = 2, capacity = 150;
  for (const int64_t d : {32, 80, 128, 256})
    for (const int64_t G : {1, 3})
      for (const int64_t Tq : {1, 3})
        for (const int64_t length : {Tq, int64_t(37), capacity}) {
          const std::string what = "d " + std::to_string(d) + " G " + std::to_string(G) + " Tq " + std::to_string(Tq) +
                                   " length " + std::to_string(length);
          const uint64_t seed = uint64_t(d * 7 + G * 3 + Tq + length);
          const Tensor q = random_tensor({B, Tq, G * Hk, d}, DType::f32, seed, -2, 2);
          auto cache = [&](uint64_t s) {
            std::vector<float> x = random_tensor({B, Hk, capacity, d}, DType::f32, s, -2, 2).to_vector<float>();
            for (size_t i = 0; i < x.size(); ++i)
              if (int64_t(i / size_t(d)) % capacity >= length) x[i] = NAN;
            return Tensor::from_vector(x, {B, Hk, capacity, d});
          };
          const Tensor k = cache(seed + 1), v = cache(seed + 2);
          const double scale = 1.0 / std::sqrt(double(d));
          const Tensor want =
              cpu::decode_attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), length, DepthSlots{}, scale);
          const Tensor got = decode_attention(q.to(gpu), k.to(gpu), v.to(gpu), length, scale);
          ASSERT_EQ(got.dtype(), DType::f32) << what;
          EXPECT_LE(relative_l2(values(got.to(Device::cpu())), values(want)), 1e-5) << what << ", host length";
          const Tensor past = Tensor::from_vector(std::vector<int32_t>{int32_t(length - Tq)}, {1}).to(gpu);
          const Tensor replayed = decode_attention(q.to(gpu), k.to(gpu), v.to(gpu), past, DepthSlots{}, scale);
          EXPECT_LE(relative_l2(values(replayed.to(Device::cpu())), values(want)), 1e-5) << what << ", device length";
        }
}

// Argument errors are raised before anything touches the device, so these run without a GPU.
TEST(GpuFp32Attention, BadArgumentsAreErrors) {
  alignas(16) static float buffer[64];
  auto params = [&](cuda::FlashShape s) {
    cuda::Fp32AttentionParams p;
    p.shape = s;
    p.q = p.k = p.v = buffer;
    p.o = p.lse = buffer;
    return p;
  };
  auto forward = [&](cuda::Fp32AttentionParams p) { cuda::fp32_attention_forward(p, nullptr); };
  expect_error([&] { forward(params({1, 4, 6, 4, 64, 0.125})); }, {"Hq = 6", "multiple of KV heads Hk = 4"});
  expect_error(
      [&] {
        forward(params({1, 4, 2, 2, 257, 0.125}));
      },
      {"head dim d = 257", "exceeds the fp32 kernels' 256"});
  expect_error([&] { forward(params({1, 0, 2, 2, 64, 0.125})); }, {"T = 0"});
  expect_error([&] { forward(params({1, 4, 2, 2, 64, NAN})); }, {"scale"});
  expect_error([&] { forward(params({70000, 4, 2, 2, 64, 0.125})); }, {"B = 70000", "at most 65535"});
  expect_error([&] { forward(params({1, 4, 70000, 70000, 64, 0.125})); }, {"Hq = 70000", "at most 65535"});
  cuda::Fp32AttentionParams no_lse = params({1, 4, 2, 2, 64, 0.125});
  no_lse.lse = nullptr;
  expect_error([&] { forward(no_lse); }, {"lse is null"});
  cuda::Fp32AttentionParams misaligned = params({1, 4, 2, 2, 64, 0.125});
  misaligned.v = reinterpret_cast<const float*>(reinterpret_cast<const char*>(buffer) + 2);
  expect_error([&] { forward(misaligned); }, {"v must be 4-byte aligned"});

  cuda::Fp32AttentionBackwardParams b;
  b.shape = {2, 100, 4, 2, 64, 0.125};
  b.q = b.k = b.v = b.o = b.grad_o = b.lse = buffer;
  b.dq = b.dk = b.dv = buffer;
  expect_error([&] { cuda::fp32_attention_backward(b, nullptr); }, {"delta is null"});
  b.delta = buffer;
  b.shape.d = 300;
  expect_error([&] { cuda::fp32_attention_backward(b, nullptr); }, {"head dim d = 300"});
}

#else  // built without CUDA

TEST(GpuAttention, NeedsCudaBuild) { GTEST_SKIP() << "fathom was built without CUDA"; }

#endif

}  // namespace
