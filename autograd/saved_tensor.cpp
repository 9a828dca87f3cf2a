#include "autograd/saved_tensor.h"

#include "core/error.h"

namespace fathom {

namespace {
thread_local bool selective_recompute = false;
}  // namespace

bool SelectiveRecompute::enabled() { return selective_recompute; }
void SelectiveRecompute::set_enabled(bool enabled) { selective_recompute = enabled; }

const Tensor& Rebuild::get() {
  if (!built_.defined()) {
    built_ = build_();
    FATHOM_CHECK(built_.defined(), "selective recompute: a rebuild returned no tensor");
  }
  return built_;
}

Tensor Rebuild::get_transient() const { return built_.defined() ? built_ : build_(); }

SavedTensor SavedTensor::of(const Variable& v) {
  SavedTensor saved;
  if (v.impl()->rebuild)
    saved.rebuild_ = v.impl()->rebuild;
  else
    saved.value_ = v.value();
  return saved;
}

Tensor SavedTensor::get() const { return rebuild_ ? rebuild_->get() : value_; }

void SavedTensor::release() {
  value_ = Tensor();
  rebuild_ = nullptr;
}

void set_rebuild(const Variable& out, std::function<Tensor()> build) {
  if (!SelectiveRecompute::enabled() || out.is_leaf()) return;
  out.impl()->rebuild = std::make_shared<Rebuild>(std::move(build));
}

void chain_rebuild(const Variable& in, const Variable& out, std::function<Tensor(const Tensor&)> f) {
  const std::shared_ptr<Rebuild> source = in.impl()->rebuild;
  if (!source) return;
  set_rebuild(out, [source, f = std::move(f)] { return f(source->get_transient()); });
}

}  // namespace fathom
