#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/embedding/embedding.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(Embedding, ForwardGathersRows) {
  for (DType id_type : {DType::i32, DType::i64}) {
    const int64_t vocab = 11, dim = 6;
    Tensor table = random_tensor({vocab, dim}, DType::f32, 1);
    Tensor ids = random_ints({3, 4}, vocab, 2, id_type);
    Tensor y = embedding_forward(ids, table);
    ASSERT_EQ(y.shape(), Shape({3, 4, dim}));
    const std::vector<double> tv = values(table);
    const std::vector<int64_t> iv = ids.to(DType::i64).to_vector<int64_t>();
    std::vector<double> want;
    for (int64_t id : iv)
      for (int64_t c = 0; c < dim; ++c) want.push_back(tv[id * dim + c]);
    expect_close(y, want, 0, 0);
  }
}

TEST(Embedding, BackwardScatterAddsRepeatedIds) {
  // Large enough that the backward runs on several threads; many repeats of few ids.
  const int64_t vocab = 7, dim = 160, n = 6600;
  Tensor ids = random_ints({n}, vocab, 3);
  Tensor g = random_tensor({n, dim}, DType::f64, 4);
  Tensor dtable = random_tensor({vocab, dim}, DType::f64, 5);  // accumulates on top of existing values
  std::vector<double> want = values(dtable);
  const std::vector<int64_t> iv = ids.to_vector<int64_t>();
  const std::vector<double> gv = values(g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) want[iv[i] * dim + c] += gv[i * dim + c];
  embedding_backward(ids, g, dtable);
  expect_close(dtable, want, 1e-12, 1e-12);
}

TEST(Embedding, Gradcheck) {
  GradcheckResult r = gradcheck([](const std::vector<Variable>& in) { return embedding(in[1].value(), in[0]); },
                                {random_tensor({9, 5}, DType::f64, 6), random_ints({2, 7}, 9, 7, DType::i32)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Embedding, F32AgreesWithF64) {
  Tensor table = random_tensor({13, 8}, DType::f64, 8);
  Tensor ids = random_ints({40}, 13, 9);
  Tensor g = random_tensor({40, 8}, DType::f64, 10);
  Variable t64(table, true), t32(table.to(DType::f32), true);
  backward(embedding(ids, t64), g);
  backward(embedding(ids, t32), g.to(DType::f32));
  expect_close(t32.grad(), t64.grad(), 1e-5, 1e-5);
}

TEST(Embedding, OutOfRangeIdsAreErrorsNamingIdAndVocab) {
  Tensor table = random_tensor({10, 4}, DType::f32, 1);
  Tensor ids = Tensor::from_vector<int64_t>({1, 2, 10, 3}, {4});
  expect_error([&] { embedding(ids, Variable(table)); }, {"token id 10", "position 2", "[0, 10)"});
  Tensor negative = Tensor::from_vector<int32_t>({-1}, {1});
  expect_error([&] { embedding(negative, Variable(table)); }, {"token id -1"});
  Tensor dtable = Tensor::zeros({10, 4}, DType::f32);
  expect_error([&] { embedding_backward(ids, random_tensor({4, 4}, DType::f32, 2), dtable); }, {"token id 10"});
}

TEST(Embedding, BadShapesAndTypesAreErrors) {
  Tensor table = random_tensor({10, 4}, DType::f32, 1);
  expect_error([&] { embedding(random_tensor({3}, DType::f32, 2), Variable(table)); }, {"I32 or I64"});
  expect_error([&] { embedding(random_ints({3}, 10, 3), Variable(random_tensor({10}, DType::f32, 4))); },
               {"[vocab, dim]"});
  Tensor dtable = Tensor::zeros({10, 4}, DType::f32);
  expect_error(
      [&] {
        embedding_backward(random_ints({3}, 10, 3), random_tensor({3, 5}, DType::f32, 5), dtable);
      },
      {"grad_out"});
}

TEST(Embedding, BackwardUsesTheIdsOfTheForwardEvenIfTheBufferIsRefilled) {
  Variable table(random_tensor({5, 2}, DType::f64, 1), true);
  Tensor ids = Tensor::from_vector<int64_t>({1, 3}, {2});
  Variable y = embedding(ids, table);
  ids.data<int64_t>()[0] = 4;  // a loader writing the next batch into the same buffer
  backward(y, Tensor::full({2, 2}, 1.0, DType::f64));
  expect_close(table.grad(), {0, 0, 1, 1, 0, 0, 1, 1, 0, 0}, 0, 0);
}
