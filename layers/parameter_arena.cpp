#include "layers/parameter_arena.h"

#include <algorithm>
#include <map>

#include "core/random.h"

namespace fathom {

namespace {

// An entry's elements with the gap after it.
int64_t padded(int64_t numel) { return (numel + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

}  // namespace

ParameterArena::ParameterArena(const Module& model, Device device, const std::set<std::string>& frozen) {
  std::set<std::string> unmatched = frozen;
  int64_t init_offset = 0;
  for (const Parameter& p : model.parameters()) {
    const bool trainable = unmatched.erase(p.name) == 0;
    entries_.push_back({p.name, 0, init_offset, p.var.shape(), p.init, p.var, trainable});
    init_offset += p.var.shape().numel();
  }
  FATHOM_CHECK(unmatched.empty(), "cannot freeze '", unmatched.empty() ? "" : *unmatched.begin(),
               "': the model has no parameter of that name");
  // Trainable entries first, in model order, so their gradients and moments are one prefix.
  std::stable_partition(entries_.begin(), entries_.end(), [](const ArenaEntry& e) { return e.trainable; });
  int64_t offset = 0, trainable = 0;
  for (ArenaEntry& e : entries_) {
    e.offset = offset;
    offset += padded(e.numel());
    if (e.trainable) trainable = offset;
  }
  values_ = Tensor::zeros({offset}, DType::f32, device);
  grads_ = Tensor::zeros({trainable}, DType::f32, device);
  for (ArenaEntry& e : entries_) {
    e.var.value() = values_.narrow(e.offset, e.numel()).view(e.shape);
    if (e.trainable)
      e.var.set_grad(grads_.narrow(e.offset, e.numel()).view(e.shape));
    else
      e.var.impl()->requires_grad = false;
  }
}

void ParameterArena::initialise(uint64_t seed) {
  Tensor host = Tensor::zeros({numel()}, DType::f32);
  for (const ArenaEntry& e : entries_) {
    Tensor slice = host.narrow(e.offset, e.numel());
    if (e.init.kind == ParameterInit::Kind::constant) {
      slice.fill_(e.init.value);
    } else if (e.init.kind == ParameterInit::Kind::identity) {
      FATHOM_CHECK(e.shape.rank() == 2, "parameter '", e.name, "': an identity init needs a matrix, got ",
                   e.shape.str());
      slice.zero_();
      float* w = slice.data<float>();
      for (int64_t i = 0; i < std::min(e.shape.dim(0), e.shape.dim(1)); ++i) w[i * e.shape.dim(1) + i] = 1.0f;
    } else {
      Generator gen{seed, uint64_t(e.init_offset)};
      fill_truncated_normal(slice, gen, e.init.std, e.init.cutoff);
    }
  }
  values_.copy_from(host);
  refresh_compute_copy();
}

void ParameterArena::zero_grad() { grads_.zero_(); }

int64_t ParameterArena::parameter_count() const {
  int64_t n = 0;
  for (const ArenaEntry& e : entries_) n += e.numel();
  return n;
}

int64_t ParameterArena::trainable_parameter_count() const {
  int64_t n = 0;
  for (const ArenaEntry& e : entries_) n += e.trainable ? e.numel() : 0;
  return n;
}

void ParameterArena::enable_compute_copy(DType dtype) {
  FATHOM_CHECK(!compute_.defined(), "the parameter arena already has a compute copy (", dtype_name(compute_.dtype()),
               ")");
  FATHOM_CHECK(dtype == DType::bf16 || dtype == DType::f16, "a compute copy is BF16 or F16 (mixed precision), got ",
               dtype_name(dtype));
  compute_ = Tensor::empty({numel()}, dtype, values_.device());
  for (ArenaEntry& e : entries_) e.var.impl()->compute = compute_.narrow(e.offset, e.numel()).view(e.shape);
  refresh_compute_copy();
}

void ParameterArena::refresh_compute_copy() {
  if (compute_.defined()) compute_.copy_from(values_.to(compute_.dtype()));
}

std::vector<ParameterArena::Range> ParameterArena::decay_ranges() const {
  std::vector<Range> ranges;
  for (const ArenaEntry& e : entries_) {
    if (!e.trainable) break;  // the frozen entries follow the trainable ones
    const int64_t end = e.offset + padded(e.numel());
    if (!ranges.empty() && ranges.back().weight_decay == e.init.weight_decay && ranges.back().end == e.offset)
      ranges.back().end = end;
    else
      ranges.push_back({e.offset, end, e.init.weight_decay});
  }
  return ranges;
}

TensorMap ParameterArena::named_values() const {
  TensorMap out;
  for (const ArenaEntry& e : entries_) out.emplace_back(e.name, e.var.value());
  return out;
}

void ParameterArena::load(const TensorMap& tensors, const std::string& source) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = &t;
  for (const ArenaEntry& e : entries_) {
    auto it = by_name.find(e.name);
    FATHOM_CHECK(it != by_name.end(), source, ": missing tensor '", e.name, "'");
    const Tensor& t = *it->second;
    FATHOM_CHECK(t.shape() == e.shape, source, ": tensor '", e.name, "' has shape ", t.shape().str(),
                 " but the model expects ", e.shape.str());
    Tensor dst = e.var.value();
    dst.copy_from(t.to(DType::f32).to(dst.device()));
    by_name.erase(it);
  }
  FATHOM_CHECK(by_name.empty(), source, ": unexpected tensor '", by_name.begin()->first,
               "' that this model does not have (", by_name.size(), " unexpected in all)");
  refresh_compute_copy();
}

}  // namespace fathom
