#include "kernels/embedding/embedding.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_table(const char* op, const Tensor& table) {
  FATHOM_CHECK(table.defined() && table.rank() == 2, op, ": table must be [vocab, dim], got ", describe(table));
  FATHOM_CHECK(is_floating(table.dtype()), op, ": table must be floating, got ", describe(table));
}
void check_ids(const char* op, const Tensor& ids) {
  FATHOM_CHECK(ids.defined(), op, ": ids are undefined");
  FATHOM_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, op, ": ids must be I32 or I64, got ",
               describe(ids));
  FATHOM_CHECK(ids.rank() < Shape::kMaxRank, op, ": ids ", describe(ids), " leave no room for the embedding dim");
}
}  // namespace

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  check_ids("embedding", ids);
  check_table("embedding", table);
  return on_device("embedding", common_device("embedding", {&ids, &table}), FATHOM_KERNEL(embedding_forward), ids,
                   table);
}

void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
  check_ids("embedding_backward", ids);
  check_table("embedding_backward", grad_table);
  std::vector<int64_t> expected = ids.shape().vec();
  expected.push_back(grad_table.dim(1));
  const bool mixed = grad_out.defined() && grad_out.dtype() == DType::bf16 && grad_table.dtype() == DType::f32 &&
                     grad_table.device().is_cuda();
  FATHOM_CHECK(
      grad_out.defined() && grad_out.shape() == Shape(expected) && (grad_out.dtype() == grad_table.dtype() || mixed),
      "embedding_backward: grad_out ", describe(grad_out), " should be ", dtype_name(grad_table.dtype()),
      Shape(expected).str(), " for ids ", describe(ids), " and table ", describe(grad_table));
  return on_device("embedding_backward", common_device("embedding_backward", {&ids, &grad_out, &grad_table}),
                   FATHOM_KERNEL(embedding_backward), ids, grad_out, grad_table);
}

}  // namespace fathom
