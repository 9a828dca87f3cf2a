#include "autograd/moda_attention.h"

#include "autograd/depth_stream.h"
#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "kernels/moda/moda_attention.h"

namespace fathom {

namespace {

// Inputs (q, k, v, version) and, with reader keys, the normalised key buffer; output o. With
// `weights`, the node hands its depth weights, q and dO to the buffers, whence the write nodes form
// the slots' gradients. Otherwise the depth value gradients go to the shared side buffer; the depth
// key gradients too, except with reader keys, where they are this node's gradient for its key input
// (they flow through the reader's norm first).
class ModaAttentionNode final : public Node {
 public:
  ModaAttentionNode(std::shared_ptr<DepthBuffers> buffers, Tensor depth_keys, int64_t begin, int64_t end, SavedTensor q,
                    SavedTensor k, Tensor v, Tensor o, Tensor lse, double scale, bool weights)
      : buffers_(std::move(buffers)),
        depth_keys_(std::move(depth_keys)),
        begin_(begin),
        end_(end),
        q_(std::move(q)),
        k_(std::move(k)),
        v_(std::move(v)),
        o_(std::move(o)),
        lse_(std::move(lse)),
        scale_(scale),
        weights_(weights) {
    if (weights_) buffers_->record_weights_reader(begin_, end_);
  }
  std::vector<Tensor> backward(const Tensor& grad_o) override {
    if (weights_) {
      DepthReader reader{q_.get(), grad_o, {}, begin_, end_};
      AttentionGrads g =
          moda_attention_backward(grad_o, reader.q, k_.get(), v_, DepthSlots{buffers_->k, buffers_->v, begin_, end_},
                                  o_, lse_, scale_, reader.weights);
      buffers_->add_weights(std::move(reader));
      return {g.dq, g.dk, g.dv, version_token(grad_o.device())};
    }
    const bool own_keys = depth_keys_.defined();
    // With reader keys the key gradients go to a zeroed buffer of this reader's, where storing the
    // range is adding it; the shared key buffer is prepared (zeroed) for its later sum.
    const DepthGradMode mode = buffers_->prepare_grads(begin_, end_, !own_keys);
    Tensor grad_keys = own_keys ? Tensor::zeros(depth_keys_.shape(), buffers_->grad_k.dtype(), depth_keys_.device())
                                : buffers_->grad_k;
    AttentionGrads g = moda_attention_backward(
        grad_o, q_.get(), k_.get(), v_, DepthSlots{own_keys ? depth_keys_ : buffers_->k, buffers_->v, begin_, end_}, o_,
        lse_, scale_, grad_keys, buffers_->grad_v, mode);
    // A defined version gradient makes the engine run the write nodes of the slots read here.
    std::vector<Tensor> grads{g.dq, g.dk, g.dv, version_token(grad_o.device())};
    if (own_keys) grads.push_back(grad_keys.to(depth_keys_.dtype()));
    return grads;
  }
  void release_saved() override {
    buffers_.reset();
    q_.release();
    k_.release();
    depth_keys_ = v_ = o_ = lse_ = Tensor();
  }
  const char* name() const override { return "moda_attention"; }

 private:
  std::shared_ptr<DepthBuffers> buffers_;
  Tensor depth_keys_;  // reader keys only
  int64_t begin_, end_;
  SavedTensor q_, k_;  // RoPE's outputs: rebuilt under selective recompute
  Tensor v_, o_, lse_;
  double scale_;
  bool weights_;
};

}  // namespace

Variable moda_attention(const std::shared_ptr<DepthBuffers>& buffers, const Variable& version, const Variable& q,
                        const Variable& k, const Variable& v, int64_t begin, int64_t end, double scale,
                        const Variable& keys) {
  const bool own_keys = keys.defined();
  AttentionOutput out = moda_attention_forward(
      q.value(), k.value(), v.value(), DepthSlots{own_keys ? keys.value() : buffers->k, buffers->v, begin, end}, scale);
  if (!any_requires_grad({q, k, v}) && !(own_keys && any_requires_grad({keys}))) return Variable(std::move(out.o));
  const bool weights = !own_keys && end > begin && depth_reader_leaves_weights(q.dim(2) / k.dim(2), false) &&
                       moda_depth_weights_supported(q.value(), k.value());
  auto node =
      std::make_shared<ModaAttentionNode>(buffers, own_keys ? keys.value() : Tensor(), begin, end, SavedTensor::of(q),
                                          SavedTensor::of(k), v.value(), out.o, std::move(out.lse), scale, weights);
  if (own_keys) return record(std::move(out.o), std::move(node), {q, k, v, version, keys});
  return record(std::move(out.o), std::move(node), {q, k, v, version});
}

}  // namespace fathom
