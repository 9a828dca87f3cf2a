#include "autograd/depth_stream.h"

#include "autograd/depth_buffers.h"
#include "autograd/grad_mode.h"
#include "autograd/moda_attention.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/moda/moda_attention.h"

namespace fathom {

// A reader pays for weights (kernels/moda/moda_attention.h) where its G query heads per KV head are few:
// a (reader, slot) pair then costs 4 G d bytes of q and dO reads, shared by the slots formed together
// (a layer's writes), against 16 d of an fp32 read-add-write of both gradients.
bool depth_reader_leaves_weights(int64_t query_heads_per_kv_head, bool reader_keys) {
  return !reader_keys && query_heads_per_kv_head <= 4;
}

namespace {

// Inputs (previous version, k, v); output the next version. Backward passes the version gradient
// on and returns the slot's accumulated depth gradients to the writer, in the writer's dtypes.
class DepthWriteNode final : public Node {
 public:
  DepthWriteNode(std::shared_ptr<DepthBuffers> buffers, int64_t slot, DType k_dtype, DType v_dtype)
      : buffers_(std::move(buffers)), slot_(slot), k_dtype_(k_dtype), v_dtype_(v_dtype) {}
  std::vector<Tensor> backward(const Tensor& grad_version) override {
    Tensor dk, dv;  // undefined: no reader reached the slot
    if (buffers_->has_grad(slot_)) {
      dk = read_depth_slot(buffers_->grad_k, slot_, k_dtype_);
      dv = read_depth_slot(buffers_->grad_v, slot_, v_dtype_);
    }
    if (buffers_->has_weights(slot_)) {
      SlotGrads w = buffers_->take_weighted(slot_);
      if (w.v.dtype() != v_dtype_) w.v = w.v.to(v_dtype_);
      if (dk.defined()) {
        add_inplace(dk, w.k);
        add_inplace(dv, w.v);
      } else {
        dk = std::move(w.k);
        dv = std::move(w.v);
      }
    }
    return {grad_version, dk, dv};
  }
  void release_saved() override { buffers_.reset(); }
  const char* name() const override { return "depth_write"; }

 private:
  std::shared_ptr<DepthBuffers> buffers_;
  int64_t slot_;
  DType k_dtype_, v_dtype_;
};

// Reader keys: input (version); output the whole K buffer (an alias, so later writes show in it;
// only slots already written are ever read through it). Backward adds the gradient a reader's
// key norm produced into the side buffer, whence the write nodes hand it to the writers.
class DepthKeysNode final : public Node {
 public:
  explicit DepthKeysNode(std::shared_ptr<DepthBuffers> buffers) : buffers_(std::move(buffers)) {}
  std::vector<Tensor> backward(const Tensor& grad_keys) override {
    buffers_->prepare_grads(0, buffers_->k.dim(2), false);
    add_inplace(buffers_->grad_k, grad_keys.to(buffers_->grad_k.dtype()));
    return {version_token(grad_keys.device())};
  }
  void release_saved() override { buffers_.reset(); }
  const char* name() const override { return "depth_keys"; }

 private:
  std::shared_ptr<DepthBuffers> buffers_;
};

// y unchanged; its backward passes y's gradient on and a version gradient to the version it was tied
// to, which runs the write nodes of that chain.
class DepthTieNode final : public Node {
 public:
  std::vector<Tensor> backward(const Tensor& grad_y) override { return {grad_y, version_token(grad_y.device())}; }
  void release_saved() override {}
  const char* name() const override { return "depth_tie"; }
};

}  // namespace

void DepthStream::rewind(int64_t written) {
  FATHOM_CHECK(0 <= written && written <= written_, "depth stream: cannot rewind to ", written, " slots with ",
               written_, " written");
  written_ = written;
  version_ = Variable(version_token(version_.device()), true);
}

Variable DepthStream::tie(const Variable& y) const {
  if (!any_requires_grad({y, version_})) return y;
  return record(y.value(), std::make_shared<DepthTieNode>(), {y, version_});
}

DepthStream::DepthStream(int64_t batch, int64_t seq_len, int64_t slots, int64_t kv_heads, int64_t head_dim, DType dtype,
                         Device device)
    : buffers_(std::make_shared<DepthBuffers>()), version_(version_token(device), true) {
  FATHOM_CHECK(slots >= 1, "a depth stream needs at least one slot");
  FATHOM_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16,
               "a depth stream holds F32, F64 or BF16 values, got ", dtype_name(dtype));
  // Not zeroed: the kernels read only slots already written (attend's range), and every write fills
  // its whole slot. Reader keys zero the unwritten keys before their first norm (attend).
  buffers_->k = Tensor::empty({batch, seq_len, slots, kv_heads, head_dim}, dtype, device);
  buffers_->v = Tensor::empty({batch, seq_len, slots, kv_heads, head_dim}, dtype, device);
  buffers_->weights_recorded.assign(size_t(slots), 0);
  buffers_->weights_done.assign(size_t(slots), 0);
  buffers_->formed.assign(size_t(slots), false);
  buffers_->slot_dtype.assign(size_t(slots), dtype);
}

int64_t DepthStream::slots() const { return buffers_->k.dim(2); }

DType DepthStream::dtype() const { return buffers_->k.dtype(); }

size_t DepthStream::bytes() const { return buffers_->k.nbytes() + buffers_->v.nbytes(); }

void DepthStream::write(int64_t slot, const Variable& k, const Variable& v) {
  FATHOM_CHECK(slot == written_, "depth slots are written in order: expected slot ", written_, ", got ", slot);
  write_depth_slot(buffers_->k, slot, k.value());
  write_depth_slot(buffers_->v, slot, v.value());
  buffers_->slot_dtype[size_t(slot)] = k.dtype();
  ++written_;
  if (any_requires_grad({k, v}))
    version_ = record(version_token(k.device()), std::make_shared<DepthWriteNode>(buffers_, slot, k.dtype(), v.dtype()),
                      {version_, k, v});
}

Variable DepthStream::attend(const Variable& q, const Variable& k, const Variable& v, int64_t begin, int64_t end,
                             double scale, const DepthKeyNorm& key_norm) {
  FATHOM_CHECK(0 <= begin && begin <= end && end <= written_, "MoDA attention may read only written slots: asked [",
               begin, ", ", end, ") with ", written_, " written");
  // F32 activations on the GPU (train.precision: fp32) meet a BF16 stream: the kernels compute in
  // bf16 with fp32 accumulation, so q, k, v are cast for them and o cast back.
  if (q.dtype() != dtype()) {
    FATHOM_CHECK(q.dtype() == DType::f32 && dtype() == DType::bf16, "MoDA attention: q ", describe(q.value()),
                 " must have the depth stream's dtype ", dtype_name(dtype()), " (or be F32 for a BF16 stream)");
    return cast(attend(cast(q, dtype()), cast(k, dtype()), cast(v, dtype()), begin, end, scale, key_norm), q.dtype());
  }
  if (!key_norm.weight.defined()) return moda_attention(buffers_, version_, q, k, v, begin, end, scale);
  // Reader keys: normalise every slot of every token with the reader's weight (slots outside
  // [begin, end) get no gradient from the softmax, so none flows back to them), then attend. Slots
  // not yet written hold zeros for it (garbage there would turn the weight's gradient into NaN).
  const bool grad = any_requires_grad({q, k, v, key_norm.weight});
  const Variable raw =
      grad ? record(buffers_->k, std::make_shared<DepthKeysNode>(buffers_), {version_}) : Variable(buffers_->k);
  return moda_attention(buffers_, version_, q, k, v, begin, end, scale, normalised_keys(raw, key_norm));
}

Variable DepthStream::normalised_keys(const Variable& raw, const DepthKeyNorm& key_norm) {
  if (!buffers_->unwritten_keys_zeroed) {
    zero_depth_slots(buffers_->k, written_, slots());
    buffers_->unwritten_keys_zeroed = true;
  }
  const Shape& s = buffers_->k.shape();
  return reshape(
      rms_norm(reshape(raw, {s[0] * s[1] * s[2], s[3] * s[4]}), cast(key_norm.weight, dtype()), key_norm.eps), s);
}

DepthSlots DepthStream::read(int64_t begin, int64_t end, const DepthKeyNorm& key_norm) {
  FATHOM_CHECK(0 <= begin && begin <= end && end <= written_, "MoDA depth reads may read only written slots: asked [",
               begin, ", ", end, ") with ", written_, " written");
  if (!key_norm.weight.defined()) return DepthSlots{buffers_->k, buffers_->v, begin, end};
  NoGrad no_grad;
  return DepthSlots{normalised_keys(Variable(buffers_->k), key_norm).value(), buffers_->v, begin, end};
}

}  // namespace fathom
