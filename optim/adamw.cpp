#include "optim/adamw.h"

#include <algorithm>
#include <map>

#include "kernels/adamw/adamw.h"

namespace fathom {

namespace {

OptimizerShard resolved(OptimizerShard shard, int64_t trainable) {
  if (shard.length < 0) return {0, trainable};
  FATHOM_CHECK(shard.begin >= 0 && shard.begin + shard.length <= trainable, "AdamW: shard [", shard.begin, ", ",
               shard.begin + shard.length, ") lies outside the ", trainable, " trainable elements");
  return shard;
}

}  // namespace

AdamW::AdamW(ParameterArena& arena, AdamWConfig config, OptimizerShard shard)
    : arena_(arena),
      config_(config),
      shard_(resolved(shard, arena.trainable_numel())),
      m_(Tensor::zeros({shard_.length}, DType::f32, arena.values().device())),
      v_(Tensor::zeros({shard_.length}, DType::f32, arena.values().device())) {}

void AdamW::step(double lr, double grad_scale) {
  update(lr, grad_scale, arena_.grads().narrow(shard_.begin, shard_.length), true);
}

void AdamW::step_shard(double lr, double grad_scale, const Tensor& shard_grads) {
  FATHOM_CHECK(shard_grads.numel() == shard_.length, "AdamW: the shard's gradients hold ", shard_grads.numel(),
               " elements, the shard ", shard_.length);
  update(lr, grad_scale, shard_grads, false);
}

void AdamW::update(double lr, double grad_scale, const Tensor& grads, bool write_compute_copy) {
  ++step_;
  // The decay ranges clipped to the shard, relative to its first element.
  const int64_t begin = shard_.begin, end = shard_.begin + shard_.length;
  std::vector<AdamWRange> ranges;
  for (const ParameterArena::Range& r : arena_.decay_ranges()) {
    const int64_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) ranges.push_back({b - begin, e - begin, r.weight_decay ? config_.weight_decay : 0.0});
  }
  if (shard_.length == 0) return;
  // One fused pass over the trainable prefix of the arena (frozen parameters follow it); under mixed
  // precision it also rewrites their bf16 compute copy.
  Tensor values = arena_.values().narrow(begin, shard_.length), compute;
  if (write_compute_copy && arena_.has_compute_copy()) compute = arena_.compute_values().narrow(begin, shard_.length);
  adamw_update_ranges(values, grads, m_, v_, ranges,
                      AdamWStep{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, step_, grad_scale},
                      compute.defined() ? &compute : nullptr);
}

TensorMap AdamW::state() const {
  FATHOM_CHECK(!sharded(), "AdamW: a sharded optimizer's state is saved from its gathered moments (state_of)");
  return state_of(m_, v_);
}

TensorMap AdamW::state_of(const Tensor& whole_m, const Tensor& whole_v) const {
  FATHOM_CHECK(whole_m.numel() == arena_.trainable_numel() && whole_v.numel() == arena_.trainable_numel(),
               "AdamW: whole moments hold ", arena_.trainable_numel(), " elements, got ", describe(whole_m), " and ",
               describe(whole_v));
  TensorMap out;
  for (const ArenaEntry& e : arena_.entries()) {
    if (!e.trainable) continue;  // frozen parameters have no optimizer state
    out.emplace_back("exp_avg." + e.name, whole_m.narrow(e.offset, e.numel()).view(e.shape));
    out.emplace_back("exp_avg_sq." + e.name, whole_v.narrow(e.offset, e.numel()).view(e.shape));
  }
  out.emplace_back("step", Tensor::from_vector<int64_t>({step_}, {1}));
  return out;
}

void AdamW::load_state(const TensorMap& state, const std::string& source) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name[name] = &t;
  auto take = [&](const std::string& name, const Shape& shape) -> const Tensor& {
    auto it = by_name.find(name);
    FATHOM_CHECK(it != by_name.end(), source, ": missing optimizer tensor '", name, "'");
    FATHOM_CHECK(it->second->shape() == shape, source, ": optimizer tensor '", name, "' has shape ",
                 it->second->shape().str(), ", expected ", shape.str());
    return *it->second;
  };
  // Whole moments first; a shard keeps its part.
  Tensor whole_m = sharded() ? Tensor::zeros({arena_.trainable_numel()}, DType::f32, m_.device()) : m_;
  Tensor whole_v = sharded() ? Tensor::zeros({arena_.trainable_numel()}, DType::f32, v_.device()) : v_;
  int64_t trainable = 0;
  for (const ArenaEntry& e : arena_.entries()) {
    if (!e.trainable) continue;
    ++trainable;
    whole_m.narrow(e.offset, e.numel()).view(e.shape).copy_from(take("exp_avg." + e.name, e.shape).to(DType::f32));
    whole_v.narrow(e.offset, e.numel()).view(e.shape).copy_from(take("exp_avg_sq." + e.name, e.shape).to(DType::f32));
  }
  if (sharded()) {
    m_.copy_from(whole_m.narrow(shard_.begin, shard_.length));
    v_.copy_from(whole_v.narrow(shard_.begin, shard_.length));
  }
  const Tensor& step = take("step", Shape{1});
  FATHOM_CHECK(step.dtype() == DType::i64, source, ": optimizer 'step' must be I64");
  step_ = int64_t(step.item());
  FATHOM_CHECK(by_name.size() == size_t(2 * trainable + 1), source,
               ": optimizer state holds tensors this model does not have, or of parameters this run freezes");
}

}  // namespace fathom
