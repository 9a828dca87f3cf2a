#include "data/bpe_model.h"

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "data/byte_level.h"

namespace fathom {

namespace {

// Pieces longer than this merge with the heap (the scan is quadratic in the piece length).
constexpr size_t kLongPiece = 64;
// Pieces up to this length are cached; longer ones are rare and would crowd the cache.
constexpr size_t kMaxCachedPiece = 64;

constexpr uint32_t kDead = UINT32_MAX;

// The ids of recently encoded pieces, per thread (encode is const and may run on many threads at
// once). Real text repeats its words so much that most pieces are answered here. Entries live in
// two flat arenas; when the table is half full everything is dropped at once, so a lookup or an
// insert never allocates per piece.
class PieceCache {
 public:
  static constexpr size_t kSlots = size_t(1) << 15;

  // Empties the cache when it holds another model's pieces.
  void claim(uint64_t owner) {
    if (owner_ != owner) {
      clear();
      owner_ = owner;
    }
  }

  // The cached ids of `piece`, or nullptr.
  const uint32_t* find(std::string_view piece, uint64_t hash, size_t& count) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& slot = slots_[i];
      if (slot.hash == 0) return nullptr;
      if (slot.hash == hash && slot.key_length == piece.size() &&
          std::memcmp(keys_.data() + slot.key_offset, piece.data(), piece.size()) == 0) {
        count = slot.id_count;
        return ids_.data() + slot.ids_offset;
      }
    }
  }

  void insert(std::string_view piece, uint64_t hash, const uint32_t* ids, size_t count) {
    if (slots_.empty()) slots_.assign(kSlots, Slot{});
    if (2 * (used_ + 1) > kSlots) clear();
    size_t i = hash & (kSlots - 1);
    while (slots_[i].hash != 0) i = (i + 1) & (kSlots - 1);
    slots_[i] = Slot{hash, uint32_t(keys_.size()), uint32_t(ids_.size()), uint16_t(piece.size()), uint16_t(count)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + count);
    ++used_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (real hashes have the low bit set)
    uint32_t key_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t key_length = 0;
    uint16_t id_count = 0;
  };
  void clear() {
    if (!slots_.empty()) std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }

  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<uint32_t> ids_;
  size_t used_ = 0;
};

// Buffers the merge loops reuse, per thread, so encoding a piece allocates nothing.
struct MergeScratch {
  std::vector<uint32_t> ids, priority, merged, next, prev;
  struct Candidate {
    uint32_t priority, position, left, right;
    // Lowest priority first, then leftmost: std heaps put the greatest on top.
    bool operator<(const Candidate& other) const {
      return priority != other.priority ? priority > other.priority : position > other.position;
    }
  };
  std::vector<Candidate> heap;
};

thread_local PieceCache t_cache;
thread_local MergeScratch t_scratch;

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

BpeModel::BpeModel(std::vector<std::string> tokens, const std::vector<Merge>& merges, bool whole_piece_first,
                   const std::string& source)
    : tokens_(std::move(tokens)), whole_piece_first_(whole_piece_first), instance_(g_next_instance++) {
  FATHOM_CHECK(!tokens_.empty(), source, ": the vocabulary is empty");
  if (const std::optional<uint32_t> repeat = index_.build(tokens_)) {
    FATHOM_FAIL(source, ": token id ", *repeat, " repeats the bytes ", quote_bytes(tokens_[*repeat]), " of token id ",
                *index_.find(tokens_[*repeat]), "; every token must be unique");
  }
  for (int b = 0; b < 256; ++b) {
    const std::optional<uint32_t> id = index_.find(std::string(1, char(b)));
    FATHOM_CHECK(id.has_value(), source, ": no token for the single byte 0x", std::hex, b, std::dec,
                 "; a byte-level BPE vocabulary must hold all 256 bytes");
    byte_ids_[b] = *id;
  }
  pairs_.reserve(merges.size());
  for (const Merge& m : merges) {
    const uint32_t n = size();
    FATHOM_CHECK(m.left < n && m.right < n && m.merged < n, source, ": merge of ids ", m.left, " and ", m.right,
                 " into ", m.merged, " names an id outside the vocabulary of ", n);
    const std::string_view left = tokens_[m.left], right = tokens_[m.right], merged = tokens_[m.merged];
    FATHOM_CHECK(!left.empty() && !right.empty() && merged.size() == left.size() + right.size() &&
                     merged.starts_with(left) && merged.ends_with(right),
                 source, ": merge ", quote_bytes(tokens_[m.left]), " + ", quote_bytes(tokens_[m.right]), " gives ",
                 quote_bytes(tokens_[m.left] + tokens_[m.right]), ", not token ", m.merged, " ",
                 quote_bytes(tokens_[m.merged]));
    FATHOM_CHECK(m.priority != PairTable::kNone, source, ": merge priority out of range");
    pairs_.insert(m.left, m.right, {m.priority, m.merged});  // a repeated pair keeps its first (lowest) priority
  }
}

BpeModel BpeModel::from_ranks(std::vector<std::string> tokens, const std::string& source) {
  TokenIndex index;
  if (const std::optional<uint32_t> repeat = index.build(tokens)) {
    FATHOM_FAIL(source, ": token of rank ", *repeat, " repeats the bytes ", quote_bytes(tokens[*repeat]), " of rank ",
                *index.find(tokens[*repeat]), "; every token must be unique");
  }
  // Every split of a token into two tokens is a pair that merges into it, at its rank.
  std::vector<Merge> merges;
  merges.reserve(tokens.size() * 4);
  for (uint32_t rank = 0; rank < tokens.size(); ++rank) {
    const std::string_view bytes = tokens[rank];
    for (size_t k = 1; k < bytes.size(); ++k) {
      const std::optional<uint32_t> left = index.find(bytes.substr(0, k));
      if (!left) continue;
      const std::optional<uint32_t> right = index.find(bytes.substr(k));
      if (right) merges.push_back({*left, *right, rank, rank});
    }
  }
  return BpeModel(std::move(tokens), merges, /*whole_piece_first=*/true, source);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (whole_piece_first_) {
    if (const std::optional<uint32_t> id = index_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  if (piece.size() > kMaxCachedPiece) {
    merge(piece, piece.size() > kLongPiece ? MergeStrategy::heap : MergeStrategy::scan, out);
    return;
  }
  PieceCache& cache = t_cache;
  cache.claim(instance_);
  const uint64_t hash = hash_bytes(piece) | 1;
  size_t count = 0;
  if (const uint32_t* ids = cache.find(piece, hash, count)) {
    out.insert(out.end(), ids, ids + count);
    return;
  }
  const size_t start = out.size();
  merge(piece, MergeStrategy::scan, out);
  cache.insert(piece, hash, out.data() + start, out.size() - start);
}

void BpeModel::merge(std::string_view piece, MergeStrategy strategy, std::vector<uint32_t>& out) const {
  if (piece.empty()) return;
  if (strategy == MergeStrategy::scan) {
    merge_scan(piece, out);
  } else {
    merge_heap(piece, out);
  }
}

void BpeModel::merge_scan(std::string_view piece, std::vector<uint32_t>& out) const {
  MergeScratch& s = t_scratch;
  size_t n = piece.size();
  s.ids.resize(n);
  s.priority.resize(n);
  s.merged.resize(n);
  uint32_t* ids = s.ids.data();
  uint32_t* priority = s.priority.data();  // priority[i]: of the pair (ids[i], ids[i + 1])
  uint32_t* merged = s.merged.data();
  for (size_t i = 0; i < n; ++i) ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  const auto look_up = [&](size_t i) {
    const PairTable::Entry e = pairs_.find(ids[i], ids[i + 1]);
    priority[i] = e.priority;
    merged[i] = e.merged;
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  while (n > 1) {
    uint32_t best = PairTable::kNone;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (priority[i] < best) {
        best = priority[i];
        at = i;
      }
    }
    if (best == PairTable::kNone) break;
    ids[at] = merged[at];
    // Drop element at + 1; the pair slots shift with it.
    std::copy(ids + at + 2, ids + n, ids + at + 1);
    std::copy(priority + at + 2, priority + n, priority + at + 1);
    std::copy(merged + at + 2, merged + n, merged + at + 1);
    --n;
    if (at + 1 < n) {
      look_up(at);
    } else {
      priority[at] = PairTable::kNone;
    }
    if (at > 0) look_up(at - 1);
  }
  out.insert(out.end(), ids, ids + n);
}

void BpeModel::merge_heap(std::string_view piece, std::vector<uint32_t>& out) const {
  MergeScratch& s = t_scratch;
  const size_t n = piece.size();
  s.ids.resize(n);
  s.next.resize(n);
  s.prev.resize(n);
  s.heap.clear();
  uint32_t* ids = s.ids.data();  // kDead once merged into the element on its left
  uint32_t* next = s.next.data();
  uint32_t* prev = s.prev.data();
  const uint32_t end = uint32_t(n);
  for (size_t i = 0; i < n; ++i) {
    ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = uint32_t(i + 1);
    prev[i] = i == 0 ? end : uint32_t(i - 1);
  }
  const auto offer = [&](uint32_t position) {
    if (position == end || next[position] == end) return;
    const uint32_t left = ids[position], right = ids[next[position]];
    const PairTable::Entry e = pairs_.find(left, right);
    if (e.priority == PairTable::kNone) return;
    s.heap.push_back({e.priority, position, left, right});
    std::push_heap(s.heap.begin(), s.heap.end());
  };
  for (uint32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end());
    const MergeScratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    const uint32_t right = next[c.position];
    // Entries go stale when a neighbour merged first; the ids tell.
    if (ids[c.position] != c.left || right == end || ids[right] != c.right) continue;
    ids[c.position] = pairs_.find(c.left, c.right).merged;
    ids[right] = kDead;
    next[c.position] = next[right];
    if (next[right] != end) prev[next[right]] = c.position;
    offer(prev[c.position]);
    offer(c.position);
  }
  for (uint32_t i = 0; i != end; i = next[i]) out.push_back(ids[i]);
}

}  // namespace fathom
