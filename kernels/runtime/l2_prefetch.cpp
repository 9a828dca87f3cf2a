#include "kernels/runtime/l2_prefetch.h"

#include <algorithm>
#include <cstdint>

namespace fathom {

namespace {
constinit KernelChoice<Toggle> choice_in_force("FATHOM_DECODE_L2_PREFETCH", Toggle::off, parse_toggle);

bool prefetchable(const Tensor& t) { return t.defined() && reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; }
}  // namespace

Toggle decode_l2_prefetch() { return choice_in_force.get(); }

void set_decode_l2_prefetch(Toggle choice) { choice_in_force.set(choice); }

L2Prefetch plan_l2_prefetch(const WeightGroups& groups, uint64_t room) {
  L2Prefetch plan;
  plan.room = room;
  uint64_t left = room;
  for (const std::vector<Tensor>& group : groups) {
    if (group.empty()) continue;
    if (plan.count + int(group.size()) > kL2PrefetchMaxRanges) break;
    if (!std::all_of(group.begin(), group.end(), prefetchable)) break;
    uint64_t whole = 0;
    for (const Tensor& t : group) whole += uint64_t(t.nbytes()) / 16 * 16;
    // The group whole, or each tensor's equal share of what is left (every tensor of a group is read at the same
    // pace), which ends the plan.
    const uint64_t share = whole <= left ? UINT64_MAX : left / group.size() / 16 * 16;
    for (const Tensor& t : group) {
      const uint64_t bytes = std::min(uint64_t(t.nbytes()) / 16 * 16, share);
      if (bytes == 0) continue;
      plan.data[plan.count] = t.raw();
      plan.bytes[plan.count] = bytes;
      ++plan.count;
      plan.total += bytes;
      left -= bytes;
    }
    if (share != UINT64_MAX) break;
  }
  return plan;
}

}  // namespace fathom
