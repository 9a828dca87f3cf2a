#include "layers/kind_options.h"

namespace fathom {

KindOptions& KindOptions::operator=(const KindOptions& other) {
  if (this == &other) return *this;
  slots_.clear();
  for (const auto& [type, slot] : other.slots_) slots_[type] = {slot.copy(slot.value.get()), slot.copy, slot.equal};
  return *this;
}

bool KindOptions::operator==(const KindOptions& other) const {
  for (const auto& [type, slot] : slots_) {
    const auto it = other.slots_.find(type);
    if (!slot.equal(slot.value.get(), it == other.slots_.end() ? nullptr : it->second.value.get())) return false;
  }
  for (const auto& [type, slot] : other.slots_)
    if (!slots_.contains(type) && !slot.equal(nullptr, slot.value.get())) return false;
  return true;
}

}  // namespace fathom
