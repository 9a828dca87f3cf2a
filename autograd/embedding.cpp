// embedding: gathers table rows by token id; the gradient scatter-adds back into a table-sized tensor.
#include "kernels/embedding/embedding.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace fathom {

namespace {

class EmbeddingNode final : public Node {
 public:
  EmbeddingNode(Tensor ids, Shape table_shape, DType dtype, Tensor table_grad)
      : ids_(std::move(ids)), table_shape_(table_shape), dtype_(dtype), table_grad_(std::move(table_grad)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    if (table_grad_.defined()) {  // mixed precision: bf16 rows scatter-add straight into the fp32 arena
      embedding_backward(ids_, grad_output, table_grad_);
      return {Tensor()};
    }
    Tensor grad_table = Tensor::zeros(table_shape_, dtype_, grad_output.device());
    embedding_backward(ids_, grad_output, grad_table);
    return {grad_table};
  }
  void release_saved() override {
    ids_ = Tensor();
    table_grad_ = Tensor();
  }
  const char* name() const override { return "embedding"; }

 private:
  Tensor ids_;
  Shape table_shape_;
  DType dtype_;
  Tensor table_grad_;  // the table's F32 gradient when it is read through a compute copy
};

}  // namespace

Variable embedding(const Tensor& ids, const Variable& table) {
  FATHOM_CHECK(table.defined(), "embedding: undefined table");
  Tensor y = embedding_forward(ids, table.compute_value());
  if (!any_requires_grad({table})) return Variable(std::move(y));
  const bool into_arena =
      table.is_leaf() && table.has_compute_copy() && table.grad().defined() && table.grad().dtype() == DType::f32;
  // The ids are copied (they are small): a loader may refill its batch buffer before backward runs.
  return record(std::move(y),
                std::make_shared<EmbeddingNode>(ids.clone(), table.shape(), table.dtype(),
                                                into_arena ? table.grad().view(table.shape()) : Tensor()),
                {table});
}

}  // namespace fathom
