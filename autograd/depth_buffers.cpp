#include "autograd/depth_buffers.h"

#include <algorithm>

#include "kernels/dispatch.h"

namespace fathom {

SlotGrads DepthBuffers::take_weighted(int64_t slot) {
  if (auto it = pending.find(slot); it != pending.end()) {
    SlotGrads g = std::move(it->second);
    pending.erase(it);
    return g;
  }
  FATHOM_CHECK(weights_complete(slot), "depth stream: slot ", slot, "'s gradients were asked for before all ",
               weights_recorded[size_t(slot)], " of its readers ran backward (", weights_done[size_t(slot)], " did)");
  int64_t first = slot;
  while (first > 0 && weights_complete(first - 1) && slot_dtype[size_t(first - 1)] == slot_dtype[size_t(slot)]) --first;
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

DepthGradMode DepthBuffers::prepare_grads(int64_t begin, int64_t end, bool may_store) {
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

Tensor version_token(Device device) { return Tensor::empty({0}, DType::f32, device); }

}  // namespace fathom
