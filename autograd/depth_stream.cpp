#include "autograd/depth_stream.h"

#include <algorithm>
#include <map>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/moda_attention.h"

namespace fathom {

// A reader pays for weights (kernels/moda_attention.h) where its G query heads per KV head are few:
// a (reader, slot) pair then costs 4 G d bytes of q and dO reads, shared by the slots formed together
// (a layer's writes), against 16 d of an fp32 read-add-write of both gradients.
bool depth_reader_leaves_weights(int64_t query_heads_per_kv_head, bool reader_keys) {
  return !reader_keys && query_heads_per_kv_head <= 4;
}

struct DepthStream::Buffers {
  Tensor k, v;
  bool unwritten_keys_zeroed = false;  // reader keys normalise every slot, written or not
  // stats_dtype(k), allocated by the first reader's backward and not zeroed: a slot's gradients are
  // defined once a reader has put its own there (grad_defined).
  Tensor grad_k, grad_v;
  std::vector<bool> grad_defined;

  // Readers that return weights: per slot, how many were recorded and how many have run backward;
  // their records until every slot of their range has its gradients formed; and gradients formed
  // for slots whose write node has not run yet.
  struct WeightsReader {
    DepthReader reader;
    int64_t unformed;  // slots of the range without gradients yet
  };
  std::vector<int64_t> weights_recorded, weights_done;
  std::vector<bool> formed;
  std::vector<DType> slot_dtype;
  std::vector<WeightsReader> readers;
  std::map<int64_t, SlotGrads> pending;

  bool has_grad(int64_t slot) const { return grad_k.defined() && grad_defined[size_t(slot)]; }
  bool has_weights(int64_t slot) const { return weights_recorded[size_t(slot)] > 0; }

  void record_weights_reader(int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) ++weights_recorded[size_t(s)];
  }
  void add_weights(DepthReader reader) {
    for (int64_t s = reader.begin; s < reader.end; ++s) ++weights_done[size_t(s)];
    const int64_t unformed = reader.end - reader.begin;
    readers.push_back({std::move(reader), unformed});
  }
  bool weights_complete(int64_t s) const {
    return has_weights(s) && weights_done[size_t(s)] == weights_recorded[size_t(s)] && !formed[size_t(s)];
  }

  // The gradients the weights readers give `slot`. The first write node to ask forms them for the
  // run of earlier slots whose readers have all run too (a layer's writes share their readers), so
  // each reader's q and dO are read once per run; the others are kept for their write nodes.
  SlotGrads take_weighted(int64_t slot) {
    if (auto it = pending.find(slot); it != pending.end()) {
      SlotGrads g = std::move(it->second);
      pending.erase(it);
      return g;
    }
    FATHOM_CHECK(weights_complete(slot), "depth stream: slot ", slot, "'s gradients were asked for before all ",
                 weights_recorded[size_t(slot)], " of its readers ran backward (", weights_done[size_t(slot)], " did)");
    int64_t first = slot;
    while (first > 0 && weights_complete(first - 1) && slot_dtype[size_t(first - 1)] == slot_dtype[size_t(slot)])
      --first;
    // Every reader still held: depth_slot_grads adds each one to the slots of its range only.
    std::vector<const DepthReader*> held;
    for (const WeightsReader& r : readers) held.push_back(&r.reader);
    std::vector<SlotGrads> grads = depth_slot_grads(held, first, slot + 1, k.dim(3), slot_dtype[size_t(slot)]);
    for (int64_t s = first; s <= slot; ++s) {
      formed[size_t(s)] = true;
      if (s < slot) pending[s] = std::move(grads[size_t(s - first)]);
    }
    for (WeightsReader& r : readers)
      r.unformed -= std::max<int64_t>(0, std::min(slot + 1, r.reader.end) - std::max(first, r.reader.begin));
    std::erase_if(readers, [](const WeightsReader& r) { return r.unformed == 0; });
    return std::move(grads.back());
  }

  // Readies slots [begin, end) of the gradient buffers for a reader and says how it puts its own
  // there: it stores them if no reader has reached any of these slots yet (and may_store); otherwise
  // it adds them, after the slots no reader has reached yet are zeroed.
  DepthGradMode prepare_grads(int64_t begin, int64_t end, bool may_store) {
    if (!grad_k.defined()) {
      grad_k = Tensor::empty(k.shape(), stats_dtype(k.dtype()), k.device());
      grad_v = Tensor::empty(v.shape(), stats_dtype(v.dtype()), v.device());
      grad_defined.assign(size_t(k.dim(2)), false);
    }
    bool any_defined = false;
    for (int64_t s = begin; s < end; ++s) any_defined = any_defined || grad_defined[size_t(s)];
    const DepthGradMode mode = may_store && !any_defined ? DepthGradMode::store : DepthGradMode::add;
    for (int64_t s = begin; s < end;) {
      if (grad_defined[size_t(s)]) {
        ++s;
        continue;
      }
      int64_t run_end = s;
      while (run_end < end && !grad_defined[size_t(run_end)]) grad_defined[size_t(run_end++)] = true;
      if (mode == DepthGradMode::add) {
        zero_depth_slots(grad_k, s, run_end);
        zero_depth_slots(grad_v, s, run_end);
      }
      s = run_end;
    }
    return mode;
  }
};

namespace {

// The version chain orders nodes only; its values are never read, so a token holds no elements
// (nothing to fill, and the engine's sums of its gradients touch no memory).
Tensor version_token(Device device) { return Tensor::empty({0}, DType::f32, device); }

// Inputs (previous version, k, v); output the next version. Backward passes the version gradient
// on and returns the slot's accumulated depth gradients to the writer, in the writer's dtypes.
class DepthWriteNode final : public Node {
 public:
  DepthWriteNode(std::shared_ptr<DepthStream::Buffers> buffers, int64_t slot, DType k_dtype, DType v_dtype)
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
  std::shared_ptr<DepthStream::Buffers> buffers_;
  int64_t slot_;
  DType k_dtype_, v_dtype_;
};

// Reader keys: input (version); output the whole K buffer (an alias, so later writes show in it;
// only slots already written are ever read through it). Backward adds the gradient a reader's
// key norm produced into the side buffer, whence the write nodes hand it to the writers.
class DepthKeysNode final : public Node {
 public:
  explicit DepthKeysNode(std::shared_ptr<DepthStream::Buffers> buffers) : buffers_(std::move(buffers)) {}
  std::vector<Tensor> backward(const Tensor& grad_keys) override {
    buffers_->prepare_grads(0, buffers_->k.dim(2), false);
    add_inplace(buffers_->grad_k, grad_keys.to(buffers_->grad_k.dtype()));
    return {version_token(grad_keys.device())};
  }
  void release_saved() override { buffers_.reset(); }
  const char* name() const override { return "depth_keys"; }

 private:
  std::shared_ptr<DepthStream::Buffers> buffers_;
};

// Inputs (q, k, v, version) and, with reader keys, the normalised key buffer; output o. With
// `weights`, the node hands its depth weights, q and dO to the buffers, whence the write nodes form
// the slots' gradients. Otherwise the depth value gradients go to the shared side buffer; the depth
// key gradients too, except with reader keys, where they are this node's gradient for its key input
// (they flow through the reader's norm first).
class ModaAttentionNode final : public Node {
 public:
  ModaAttentionNode(std::shared_ptr<DepthStream::Buffers> buffers, Tensor depth_keys, int64_t begin, int64_t end,
                    SavedTensor q, SavedTensor k, Tensor v, Tensor o, Tensor lse, double scale, bool weights)
      : buffers_(std::move(buffers)), depth_keys_(std::move(depth_keys)), begin_(begin), end_(end), q_(std::move(q)),
        k_(std::move(k)), v_(std::move(v)), o_(std::move(o)), lse_(std::move(lse)), scale_(scale), weights_(weights) {
    if (weights_) buffers_->record_weights_reader(begin_, end_);
  }
  std::vector<Tensor> backward(const Tensor& grad_o) override {
    if (weights_) {
      DepthReader reader{q_.get(), grad_o, {}, begin_, end_};
      AttentionGrads g = moda_attention_backward(grad_o, reader.q, k_.get(), v_,
                                                 DepthSlots{buffers_->k, buffers_->v, begin_, end_}, o_, lse_, scale_,
                                                 reader.weights);
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
        grad_o, q_.get(), k_.get(), v_, DepthSlots{own_keys ? depth_keys_ : buffers_->k, buffers_->v, begin_, end_},
        o_, lse_, scale_, grad_keys, buffers_->grad_v, mode);
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
  std::shared_ptr<DepthStream::Buffers> buffers_;
  Tensor depth_keys_;  // reader keys only
  int64_t begin_, end_;
  SavedTensor q_, k_;  // RoPE's outputs: rebuilt under selective recompute
  Tensor v_, o_, lse_;
  double scale_;
  bool weights_;
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

DepthStream::DepthStream(int64_t batch, int64_t seq_len, int64_t slots, int64_t kv_heads, int64_t head_dim,
                         DType dtype, Device device)
    : buffers_(std::make_shared<Buffers>()), version_(version_token(device), true) {
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
    version_ = record(version_token(k.device()),
                      std::make_shared<DepthWriteNode>(buffers_, slot, k.dtype(), v.dtype()), {version_, k, v});
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
  if (!key_norm.weight.defined()) {
    AttentionOutput out = moda_attention_forward(q.value(), k.value(), v.value(),
                                                 DepthSlots{buffers_->k, buffers_->v, begin, end}, scale);
    if (!any_requires_grad({q, k, v})) return Variable(std::move(out.o));
    const bool weights = end > begin && depth_reader_leaves_weights(q.dim(2) / k.dim(2), false) &&
                         moda_depth_weights_supported(q.value(), k.value());
    auto node = std::make_shared<ModaAttentionNode>(buffers_, Tensor(), begin, end, SavedTensor::of(q),
                                                    SavedTensor::of(k), v.value(), out.o, std::move(out.lse), scale,
                                                    weights);
    return record(std::move(out.o), std::move(node), {q, k, v, version_});
  }
  // Reader keys: normalise every slot of every token with the reader's weight (slots outside
  // [begin, end) get no gradient from the softmax, so none flows back to them), then attend. Slots
  // not yet written hold zeros for it (garbage there would turn the weight's gradient into NaN).
  const bool grad = any_requires_grad({q, k, v, key_norm.weight});
  const Variable raw = grad ? record(buffers_->k, std::make_shared<DepthKeysNode>(buffers_), {version_})
                            : Variable(buffers_->k);
  const Variable keys = normalised_keys(raw, key_norm);
  AttentionOutput out = moda_attention_forward(q.value(), k.value(), v.value(),
                                               DepthSlots{keys.value(), buffers_->v, begin, end}, scale);
  if (!grad) return Variable(std::move(out.o));
  auto node = std::make_shared<ModaAttentionNode>(buffers_, keys.value(), begin, end, SavedTensor::of(q),
                                                  SavedTensor::of(k), v.value(), out.o, std::move(out.lse), scale,
                                                  false);
  return record(std::move(out.o), std::move(node), {q, k, v, version_, keys});
}

Variable DepthStream::normalised_keys(const Variable& raw, const DepthKeyNorm& key_norm) {
  if (!buffers_->unwritten_keys_zeroed) {
    zero_depth_slots(buffers_->k, written_, slots());
    buffers_->unwritten_keys_zeroed = true;
  }
  const Shape& s = buffers_->k.shape();
  return reshape(rms_norm(reshape(raw, {s[0] * s[1] * s[2], s[3] * s[4]}), cast(key_norm.weight, dtype()), key_norm.eps),
                 s);
}

DepthSlots DepthStream::read(int64_t begin, int64_t end, const DepthKeyNorm& key_norm) {
  FATHOM_CHECK(0 <= begin && begin <= end && end <= written_, "MoDA depth reads may read only written slots: asked [",
               begin, ", ", end, ") with ", written_, " written");
  if (!key_norm.weight.defined()) return DepthSlots{buffers_->k, buffers_->v, begin, end};
  NoGrad no_grad;
  return DepthSlots{normalised_keys(Variable(buffers_->k), key_norm).value(), buffers_->v, begin, end};
}

}  // namespace fathom
