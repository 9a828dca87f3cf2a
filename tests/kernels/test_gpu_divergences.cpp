// CUDA divergences against the CPU reference (kernels/divergences/divergences.h): softmax KL over
// vocabularies of 100352, 50257 (rows at every alignment), 1003 and 1, a single row, mse, the row
// cosine of gate-like rows with a row of zeros; f32 and bf16 inputs (f32 loss and statistics); the
// autograd ops end to end; results that repeat bit for bit.
#include <cmath>
#include <string>

#include "autograd/divergences.h"
#include "autograd/engine.h"
#include "kernels/divergences/divergences.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct RowCase {
  int64_t rows, width;
};
// Vocabularies not a multiple of any block or pack, the 100352 of OLMo2's, one row, one element.
constexpr RowCase kKlCases[] = {{1, 100352}, {6, 100352}, {5, 50257}, {33, 1003}, {17, 1}, {3, 7}};

std::string what(const char* op, DType dt, const RowCase& c) {
  return std::string(op) + " " + dtype_name(dt) + " rows=" + std::to_string(c.rows) + " n=" + std::to_string(c.width);
}

void expect_scalar_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  EXPECT_EQ(got.dtype(), DType::f32) << what;
  EXPECT_EQ(got.numel(), 1) << what;
  const double g = got.to(Device::cpu()).item(), w = want.item();
  EXPECT_NEAR(g, w, atol + rtol * std::abs(w)) << what;
}

}  // namespace

TEST(GpuDivergences, SoftmaxKlMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const RowCase& c : kKlCases)
      for (double T : {1.0, 2.0}) {
        const std::string w = what("softmax_kl", dt, c) + " T=" + std::to_string(T);
        const GpuInput s = random_input({c.rows, c.width}, dt, seed++, -8, 8);
        const GpuInput t = random_input({c.rows, c.width}, dt, seed++, -8, 8);
        const SoftmaxKlOutput got = softmax_kl_forward(s.gpu, t.gpu, T);
        const SoftmaxKlOutput want = softmax_kl_forward(s.cpu, t.cpu, T);
        expect_scalar_close(got.loss, want.loss, 1e-5, 2e-5, w + " loss");
        EXPECT_GPU_CLOSE(got.lse_student, want.lse_student, DType::f32, w + " lse_student");
        EXPECT_GPU_CLOSE(got.lse_teacher, want.lse_teacher, DType::f32, w + " lse_teacher");
        const Tensor g_gpu = Tensor::full({}, 0.75, DType::f32, kGpu), g_cpu = Tensor::full({}, 0.75, DType::f32);
        const Tensor grad = softmax_kl_backward(g_gpu, s.gpu, t.gpu, got.lse_student, got.lse_teacher, T);
        const Tensor grad_want = softmax_kl_backward(g_cpu, s.cpu, t.cpu, want.lse_student, want.lse_teacher, T);
        EXPECT_EQ(grad.dtype(), dt) << w;
        EXPECT_GPU_CLOSE(grad, grad_want, dt, w + " gradient");
      }
}

// A student that starts one row into its storage: with an odd width its rows sit at another offset
// within 16 bytes than the teacher's, so the kernels take their one-element-at-a-time path.
TEST(GpuDivergences, RowsAtAnotherAlignmentThanTheirPartnersMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 400;
  for (DType dt : {DType::f32, DType::bf16})
    for (const RowCase& c : {RowCase{5, 50257}, RowCase{33, 1003}, RowCase{3, 7}}) {
      const std::string w = what("shifted rows", dt, c);
      const GpuInput padded = random_input({c.rows + 1, c.width}, dt, seed++, -8, 8);
      const Tensor s_gpu = padded.gpu.narrow(1, c.rows), s_cpu = padded.cpu.narrow(1, c.rows);
      ASSERT_NE(s_gpu.storage_offset() % 16, 0u) << w << ": the shift must break the 16-byte alignment";
      const GpuInput t = random_input({c.rows, c.width}, dt, seed++, -8, 8);
      const SoftmaxKlOutput got = softmax_kl_forward(s_gpu, t.gpu, 2.0);
      const SoftmaxKlOutput want = softmax_kl_forward(s_cpu, t.cpu, 2.0);
      expect_scalar_close(got.loss, want.loss, 1e-5, 2e-5, w + " kl loss");
      EXPECT_GPU_CLOSE(got.lse_student, want.lse_student, DType::f32, w + " lse_student");
      const Tensor grad = softmax_kl_backward(Tensor::full({}, 0.75, DType::f32, kGpu), s_gpu, t.gpu, got.lse_student,
                                              got.lse_teacher, 2.0);
      EXPECT_GPU_CLOSE(grad,
                       softmax_kl_backward(Tensor::full({}, 0.75, DType::f32), s_cpu, t.cpu, want.lse_student,
                                           want.lse_teacher, 2.0),
                       dt, w + " kl gradient");
      const RowCosineOutput cos = row_cosine_forward(s_gpu, t.gpu), cos_want = row_cosine_forward(s_cpu, t.cpu);
      expect_scalar_close(cos.loss, cos_want.loss, 1e-5, 1e-7, w + " cosine");
      const auto [ga, gb] = row_cosine_backward(Tensor::full({}, 2.0, DType::f32, kGpu), s_gpu, t.gpu, cos.sums);
      const auto [wa, wb] = row_cosine_backward(Tensor::full({}, 2.0, DType::f32), s_cpu, t.cpu, cos_want.sums);
      EXPECT_GPU_CLOSE(ga, wa, dt, w + " cosine d a");
      EXPECT_GPU_CLOSE(gb, wb, dt, w + " cosine d b");
    }
}

TEST(GpuDivergences, SoftmaxKlOfNearbyRowsIsSmallAndAccurate) {
  FATHOM_REQUIRE_GPU();
  // A student close to its teacher (the case training reaches): the KL is small, and the kernel's
  // E_p[t - s] - (lse_t - lse_s) must not lose it to cancellation.
  const Tensor t = random_tensor({4, 100352}, DType::f32, 7, -8, 8);
  const Tensor noise = random_tensor({4, 100352}, DType::f32, 8, -0.1, 0.1);
  const std::vector<double> tv = values(t), nv = values(noise);
  std::vector<float> sv(tv.size());
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = float(tv[i] + nv[i]);
  const Tensor s = Tensor::from_vector(sv, t.shape());
  const double want = softmax_kl_forward(s, t, 1.0).loss.item();
  const double got = softmax_kl_forward(s.to(kGpu), t.to(kGpu), 1.0).loss.to(Device::cpu()).item();
  EXPECT_GT(want, 0.0);
  EXPECT_LT(want, 1e-2);
  EXPECT_NEAR(got, want, 2e-2 * want);
  // Identical rows: no divergence.
  EXPECT_NEAR(softmax_kl_forward(t.to(kGpu), t.to(kGpu), 2.0).loss.to(Device::cpu()).item(), 0.0, 1e-5);
}

TEST(GpuDivergences, MseMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 100;
  // A layer output [B, T, d], one token, a size no grid divides, and more elements than the grid's threads.
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape& shape : {Shape{2, 64, 768}, Shape{1, 1, 768}, Shape{1, 5, 37}, Shape{4, 512, 768}}) {
      const std::string w = std::string("mse ") + dtype_name(dt) + " " + shape.str();
      const GpuInput x = random_input(shape, dt, seed++, -3, 3), y = random_input(shape, dt, seed++, -3, 3);
      expect_scalar_close(mse_forward(x.gpu, y.gpu), mse_forward(x.cpu, y.cpu), 1e-5, 0, w);
      const Tensor g = mse_backward(Tensor::full({}, -1.25, DType::f32, kGpu), x.gpu, y.gpu);
      EXPECT_EQ(g.dtype(), dt) << w;
      EXPECT_GPU_CLOSE(g, mse_backward(Tensor::full({}, -1.25, DType::f32), x.cpu, y.cpu), dt, w + " gradient");
    }
}

TEST(GpuDivergences, RowCosineMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 200;
  for (DType dt : {DType::f32, DType::bf16})
    for (const RowCase& c : {RowCase{9, 64}, RowCase{1, 768}, RowCase{300, 129}, RowCase{2, 5000}}) {
      const std::string w = what("row_cosine", dt, c);
      Tensor a_host = random_tensor({c.rows, c.width}, dt, seed++, -2, 0);  // log gates are negative
      const Tensor b_host = random_tensor({c.rows, c.width}, dt, seed++, -2, 0);
      if (c.rows > 1) {  // a row of zeros: no direction, no similarity, no gradient
        a_host = a_host.to(DType::f32);
        float* p = a_host.data<float>();
        for (int64_t j = 0; j < c.width; ++j) p[j] = 0;
        a_host = a_host.to(dt);
      }
      const Tensor a = a_host.to(kGpu), b = b_host.to(kGpu);
      const Tensor a_cpu = a_host.to(DType::f32), b_cpu = b_host.to(DType::f32);
      const RowCosineOutput got = row_cosine_forward(a, b), want = row_cosine_forward(a_cpu, b_cpu);
      expect_scalar_close(got.loss, want.loss, 1e-5, 1e-7, w);
      EXPECT_GPU_CLOSE(got.sums, want.sums, DType::f32, w + " sums");
      const auto [ga, gb] = row_cosine_backward(Tensor::full({}, 2.0, DType::f32, kGpu), a, b, got.sums);
      const auto [wa, wb] = row_cosine_backward(Tensor::full({}, 2.0, DType::f32), a_cpu, b_cpu, want.sums);
      EXPECT_GPU_CLOSE(ga, wa, dt, w + " d a");
      EXPECT_GPU_CLOSE(gb, wb, dt, w + " d b");
      if (c.rows > 1) {
        const std::vector<double> first_row = values(ga.to(Device::cpu()));
        for (int64_t j = 0; j < c.width; ++j) ASSERT_EQ(first_row[size_t(j)], 0.0) << w << " zero row";
      }
    }
}

TEST(GpuDivergences, AutogradOpsMatchTheCpuAndRepeat) {
  FATHOM_REQUIRE_GPU();
  // The student's logits bf16 on the GPU, the teacher's f32 (cast to the student's dtype by the op).
  const GpuInput s = random_input({2, 3, 50257}, DType::bf16, 300, -6, 6);
  const Tensor t = random_tensor({2, 3, 50257}, DType::bf16, 301, -6, 6).to(DType::f32);
  auto run = [&](const Tensor& student, const Tensor& teacher) {
    Variable x(student.clone(), true);
    const Variable loss = softmax_kl_to_target(x, teacher, 2.0);
    backward(loss);
    return std::pair{loss.value().to(Device::cpu()), x.grad().to(Device::cpu())};
  };
  const auto [loss, grad] = run(s.gpu, t.to(kGpu));
  const auto [loss_cpu, grad_cpu] = run(s.cpu, t);
  expect_scalar_close(loss, loss_cpu, 1e-5, 0, "softmax_kl_to_target");
  EXPECT_EQ(grad.dtype(), DType::bf16);
  EXPECT_GPU_CLOSE(grad, grad_cpu, DType::bf16, "softmax_kl_to_target gradient");
  const auto [loss2, grad2] = run(s.gpu, t.to(kGpu));
  EXPECT_TRUE(bitwise_equal(loss, loss2) && bitwise_equal(grad, grad2)) << "softmax_kl_to_target repeats";

  const GpuInput h = random_input({2, 8, 96}, DType::bf16, 302), target = random_input({2, 8, 96}, DType::bf16, 303);
  Variable xg(h.gpu.clone(), true), xc(h.cpu.clone(), true);
  const Variable mse_gpu = mse_to_target(xg, target.gpu), mse_cpu = mse_to_target(xc, target.cpu);
  backward(mse_gpu);
  backward(mse_cpu);
  expect_scalar_close(mse_gpu.value(), mse_cpu.value(), 1e-5, 0, "mse_to_target");
  EXPECT_GPU_CLOSE(xg.grad(), xc.grad(), DType::bf16, "mse_to_target gradient");

  const GpuInput u = random_input({16, 64}, DType::f32, 304, -2, 0), v = random_input({16, 64}, DType::f32, 305, -2, 0);
  Variable ug(u.gpu.clone(), true), vg(v.gpu.clone(), true), uc(u.cpu.clone(), true), vc(v.cpu.clone(), true);
  const Variable cos_gpu = mean_row_cosine(ug, vg), cos_cpu = mean_row_cosine(uc, vc);
  backward(cos_gpu);
  backward(cos_cpu);
  expect_scalar_close(cos_gpu.value(), cos_cpu.value(), 1e-5, 0, "mean_row_cosine");
  EXPECT_GPU_CLOSE(ug.grad(), uc.grad(), DType::f32, "mean_row_cosine d a");
  EXPECT_GPU_CLOSE(vg.grad(), vc.grad(), DType::f32, "mean_row_cosine d b");
}
