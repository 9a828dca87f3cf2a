#include "autograd/depth_stream.h"

#include "autograd/node.h"
#include "kernels/moda_attention.h"

namespace fathom {

struct DepthStream::Buffers {
  Tensor k, v;
  Tensor grad_k, grad_v;  // allocated (zeroed) by the first reader's backward

  void ensure_grads() {
    if (grad_k.defined()) return;
    grad_k = Tensor::zeros(k.shape(), k.dtype(), k.device());
    grad_v = Tensor::zeros(v.shape(), v.dtype(), v.device());
  }
};

namespace {

Tensor version_token(Device device) { return Tensor::zeros({1}, DType::f32, device); }

// Inputs (previous version, k, v); output the next version. Backward passes the version gradient
// on and returns the slot's accumulated depth gradients to the writer.
class DepthWriteNode final : public Node {
 public:
  DepthWriteNode(std::shared_ptr<DepthStream::Buffers> buffers, int64_t slot)
      : buffers_(std::move(buffers)), slot_(slot) {}
  std::vector<Tensor> backward(const Tensor& grad_version) override {
    if (!buffers_->grad_k.defined()) return {grad_version, Tensor(), Tensor()};
    return {grad_version, read_depth_slot(buffers_->grad_k, slot_), read_depth_slot(buffers_->grad_v, slot_)};
  }
  void release_saved() override { buffers_.reset(); }
  const char* name() const override { return "depth_write"; }

 private:
  std::shared_ptr<DepthStream::Buffers> buffers_;
  int64_t slot_;
};

// Inputs (q, k, v, version); output o.
class ModaAttentionNode final : public Node {
 public:
  ModaAttentionNode(std::shared_ptr<DepthStream::Buffers> buffers, int64_t begin, int64_t end, Tensor q, Tensor k,
                    Tensor v, Tensor o, Tensor lse, double scale)
      : buffers_(std::move(buffers)), begin_(begin), end_(end), q_(std::move(q)), k_(std::move(k)), v_(std::move(v)),
        o_(std::move(o)), lse_(std::move(lse)), scale_(scale) {}
  std::vector<Tensor> backward(const Tensor& grad_o) override {
    buffers_->ensure_grads();
    AttentionGrads g = moda_attention_backward(grad_o, q_, k_, v_, DepthSlots{buffers_->k, buffers_->v, begin_, end_},
                                               o_, lse_, scale_, buffers_->grad_k, buffers_->grad_v);
    // A defined version gradient makes the engine run the write nodes of the slots read here.
    return {g.dq, g.dk, g.dv, version_token(q_.device())};
  }
  void release_saved() override {
    buffers_.reset();
    q_ = k_ = v_ = o_ = lse_ = Tensor();
  }
  const char* name() const override { return "moda_attention"; }

 private:
  std::shared_ptr<DepthStream::Buffers> buffers_;
  int64_t begin_, end_;
  Tensor q_, k_, v_, o_, lse_;
  double scale_;
};

}  // namespace

DepthStream::DepthStream(int64_t batch, int64_t seq_len, int64_t slots, int64_t kv_heads, int64_t head_dim,
                         DType dtype, Device device)
    : buffers_(std::make_shared<Buffers>()), version_(version_token(device), true) {
  FATHOM_CHECK(slots >= 1, "a depth stream needs at least one slot");
  // Zeroed so a slot read before it is written (a bug) shows as zeros, never as garbage.
  buffers_->k = Tensor::zeros({batch, seq_len, slots, kv_heads, head_dim}, dtype, device);
  buffers_->v = Tensor::zeros({batch, seq_len, slots, kv_heads, head_dim}, dtype, device);
}

int64_t DepthStream::slots() const { return buffers_->k.dim(2); }

size_t DepthStream::bytes() const { return buffers_->k.nbytes() + buffers_->v.nbytes(); }

void DepthStream::write(int64_t slot, const Variable& k, const Variable& v) {
  FATHOM_CHECK(slot == written_, "depth slots are written in order: expected slot ", written_, ", got ", slot);
  write_depth_slot(buffers_->k, slot, k.value());
  write_depth_slot(buffers_->v, slot, v.value());
  ++written_;
  if (any_requires_grad({k, v}))
    version_ = record(version_token(k.device()), std::make_shared<DepthWriteNode>(buffers_, slot), {version_, k, v});
}

Variable DepthStream::attend(const Variable& q, const Variable& k, const Variable& v, int64_t begin, int64_t end,
                             double scale) {
  FATHOM_CHECK(0 <= begin && begin <= end && end <= written_, "MoDA attention may read only written slots: asked [",
               begin, ", ", end, ") with ", written_, " written");
  AttentionOutput out = moda_attention_forward(q.value(), k.value(), v.value(),
                                               DepthSlots{buffers_->k, buffers_->v, begin, end}, scale);
  if (!any_requires_grad({q, k, v})) return Variable(std::move(out.o));
  auto node = std::make_shared<ModaAttentionNode>(buffers_, begin, end, q.value(), k.value(), v.value(), out.o,
                                                  std::move(out.lse), scale);
  return record(std::move(out.o), std::move(node), {q, k, v, version_});
}

}  // namespace fathom
