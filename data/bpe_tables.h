// The two lookups byte-pair encoding does millions of times per second: token bytes -> id and
// (left id, right id) -> merge. Open addressing over flat arrays: no node allocations, a probe is
// one or two cache lines.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

// A fast non-cryptographic hash of a byte string (8 bytes per step).
inline uint64_t hash_bytes(std::string_view bytes) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0x243F6A8885A308D3ull ^ (bytes.size() * kMul);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  if (i < bytes.size()) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, bytes.size() - i);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  h *= kMul;
  return h ^ (h >> 32);
}

// Smallest power of two >= 2 * count (load factor at most one half).
inline size_t table_capacity_for(size_t count) {
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;
  return capacity;
}

// Maps the byte strings of a token list to their ids (it keeps its own copy of the bytes).
class TokenIndex {
 public:
  // tokens[id] are the keys; empty strings are skipped. Returns the first id whose bytes repeat an
  // earlier token's, if any (the caller reports it), else nullopt.
  std::optional<uint32_t> build(const std::vector<std::string>& tokens);
  std::optional<uint32_t> find(std::string_view bytes) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = hash_bytes(bytes);
    const uint32_t tag = uint32_t(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id_plus_one == 0) return std::nullopt;
      if (slot.tag == tag && slot.length == bytes.size() &&
          std::memcmp(arena_.data() + slot.offset, bytes.data(), bytes.size()) == 0)
        return slot.id_plus_one - 1;
    }
  }

 private:
  struct Slot {
    uint32_t id_plus_one = 0;  // 0: empty
    uint32_t tag = 0;          // high hash bits, to skip most byte compares
    uint32_t offset = 0;       // into arena_
    uint32_t length = 0;
  };
  std::string arena_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// (left, right) -> (priority, merged id). Lower priority merges first.
class PairTable {
 public:
  struct Entry {
    uint32_t priority;
    uint32_t merged;
  };
  static constexpr uint32_t kNone = UINT32_MAX;

  void reserve(size_t count);
  // Keeps the first entry for a pair that is inserted twice (returns false then).
  bool insert(uint32_t left, uint32_t right, Entry entry);
  // priority == kNone when the pair does not merge.
  Entry find(uint32_t left, uint32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return slot.entry;
      if (slot.key == kEmpty) return {kNone, 0};
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;
  struct Slot {
    uint64_t key = kEmpty;
    Entry entry{kNone, 0};
  };
  static uint64_t pack(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }
  static uint64_t hash(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;  // the left id lands in the high half: fold it into the low bits
    key ^= key >> 32;
    key *= 0xBF58476D1CE4E5B9ull;
    return key ^ (key >> 31);
  }
  void grow();

  std::vector<Slot> slots_ = std::vector<Slot>(16);
  size_t mask_ = 15;
  size_t count_ = 0;
};

}  // namespace fathom
