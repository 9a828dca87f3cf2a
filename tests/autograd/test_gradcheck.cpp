#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
// y = x^2 with a wrong backward (3x instead of 2x), to prove gradcheck catches bad gradients.
class WrongSquareNode final : public Node {
 public:
  explicit WrongSquareNode(Tensor x) : x_(std::move(x)) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor d = g.clone();
    const double* x = x_.data<double>();
    double* p = d.data<double>();
    for (int64_t i = 0; i < d.numel(); ++i) p[i] *= 3 * x[i];
    return {d};
  }
  void release_saved() override { x_ = Tensor(); }
  const char* name() const override { return "wrong_square"; }

 private:
  Tensor x_;
};

Variable wrong_square(const Variable& x) {
  Tensor y = x.value().clone();
  double* p = y.data<double>();
  for (int64_t i = 0; i < y.numel(); ++i) p[i] *= p[i];
  if (!any_requires_grad({x})) return Variable(y);
  return record(y, std::make_shared<WrongSquareNode>(x.value()), {x});
}
}  // namespace

TEST(Gradcheck, CatchesAWrongGradientAndNamesWhere) {
  Tensor good = random_tensor({3}, DType::f64, 1, 0.5, 1.0);
  Tensor bad = random_tensor({3}, DType::f64, 2, 0.5, 1.0);
  GradcheckResult r = gradcheck(
      [](const std::vector<Variable>& in) { return add(scale(in[0], 2.0), wrong_square(in[1])); }, {good, bad});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.failed_input, 1);
  EXPECT_EQ(r.failed_element, 0);
  EXPECT_GT(r.max_abs_error, 0.1);
  EXPECT_NE(r.message.find("input 1"), std::string::npos) << r.message;
  EXPECT_EQ(values(bad), values(random_tensor({3}, DType::f64, 2, 0.5, 1.0))) << "inputs must be left untouched";
}

TEST(Gradcheck, PassesIntegerInputsThroughAndChecksEveryFloatingElement) {
  Tensor table = random_tensor({6, 3}, DType::f64, 3);
  Tensor ids = Tensor::from_vector<int64_t>({0, 2, 2, 5}, {4});
  GradcheckResult r =
      gradcheck([](const std::vector<Variable>& in) { return embedding(in[1].value(), in[0]); }, {table, ids});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.checked, 18);
}

TEST(Gradcheck, RejectsF32InputsAndResultsWithoutGradient) {
  expect_error(
      [] { gradcheck([](const std::vector<Variable>& in) { return in[0]; }, {random_tensor({2}, DType::f32, 1)}); },
      {"input 0", "F64"});
  expect_error(
      [] {
        gradcheck([](const std::vector<Variable>&) { return Variable(Tensor::zeros({1}, DType::f64)); },
                  {random_tensor({2}, DType::f64, 1)});
      },
      {"does not depend"});
}
