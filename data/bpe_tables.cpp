#include "data/bpe_tables.h"

namespace fathom {

std::optional<uint32_t> TokenIndex::build(const std::vector<std::string>& tokens) {
  slots_.assign(table_capacity_for(tokens.size()), Slot{});
  mask_ = slots_.size() - 1;
  arena_.clear();
  for (uint32_t id = 0; id < tokens.size(); ++id) {
    const std::string& bytes = tokens[id];
    if (bytes.empty()) continue;
    if (find(bytes)) return id;
    const uint64_t h = hash_bytes(bytes);
    size_t i = h & mask_;
    while (slots_[i].id_plus_one != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{id + 1, uint32_t(h >> 32), uint32_t(arena_.size()), uint32_t(bytes.size())};
    arena_ += bytes;
  }
  return std::nullopt;
}

void PairTable::reserve(size_t count) {
  while (slots_.size() < table_capacity_for(count)) grow();
}

bool PairTable::insert(uint32_t left, uint32_t right, Entry entry) {
  if (2 * (count_ + 1) > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  size_t i = hash(key) & mask_;
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == key) return false;
    i = (i + 1) & mask_;
  }
  slots_[i] = Slot{key, entry};
  ++count_;
  return true;
}

void PairTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.key == kEmpty) continue;
    size_t i = hash(slot.key) & mask_;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
}

}  // namespace fathom
