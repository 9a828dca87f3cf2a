#include "optim/adamw.h"

#include <map>

#include "kernels/adamw.h"

namespace fathom {

AdamW::AdamW(ParameterArena& arena, AdamWConfig config)
    : arena_(arena),
      config_(config),
      m_(Tensor::zeros({arena.trainable_numel()}, DType::f32, arena.values().device())),
      v_(Tensor::zeros({arena.trainable_numel()}, DType::f32, arena.values().device())) {}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  std::vector<AdamWRange> ranges;
  for (const ParameterArena::Range& r : arena_.decay_ranges())
    ranges.push_back({r.begin, r.end, r.weight_decay ? config_.weight_decay : 0.0});
  // One fused pass over the trainable prefix of the arena (frozen parameters follow it); under mixed
  // precision it also rewrites their bf16 compute copy.
  const int64_t n = arena_.trainable_numel();
  Tensor values = arena_.values().narrow(0, n), compute;
  if (arena_.has_compute_copy()) compute = arena_.compute_values().narrow(0, n);
  adamw_update_ranges(values, arena_.grads(), m_, v_, ranges,
                      AdamWStep{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, step_, grad_scale},
                      compute.defined() ? &compute : nullptr);
}

TensorMap AdamW::state() const {
  TensorMap out;
  for (const ArenaEntry& e : arena_.entries()) {
    if (!e.trainable) continue;  // frozen parameters have no optimizer state
    out.emplace_back("exp_avg." + e.name, m_.narrow(e.offset, e.numel()).view(e.shape));
    out.emplace_back("exp_avg_sq." + e.name, v_.narrow(e.offset, e.numel()).view(e.shape));
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
  int64_t trainable = 0;
  for (const ArenaEntry& e : arena_.entries()) {
    if (!e.trainable) continue;
    ++trainable;
    m_.narrow(e.offset, e.numel()).view(e.shape).copy_from(take("exp_avg." + e.name, e.shape).to(DType::f32));
    v_.narrow(e.offset, e.numel()).view(e.shape).copy_from(take("exp_avg_sq." + e.name, e.shape).to(DType::f32));
  }
  const Tensor& step = take("step", Shape{1});
  FATHOM_CHECK(step.dtype() == DType::i64, source, ": optimizer 'step' must be I64");
  step_ = int64_t(step.item());
  FATHOM_CHECK(by_name.size() == size_t(2 * trainable + 1), source,
               ": optimizer state holds tensors this model does not have, or of parameters this run freezes");
}

}  // namespace fathom
