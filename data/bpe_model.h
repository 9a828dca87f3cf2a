// Byte-pair encoding of one pre-tokenized piece: start from one token per byte and repeatedly merge
// the adjacent pair with the lowest priority (leftmost first among equals) until none merges.
// Two ways to say which pairs merge, one engine:
//   merges list (GPT-2 vocab.bpe, HF tokenizer.json): pair (a, b) -> token, priority = list order;
//   ranks (tiktoken): any pair whose concatenated bytes are a token merges, priority = that token's
//   rank (from_ranks enumerates those pairs once at load time).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tables.h"

namespace fathom {

class BpeModel {
 public:
  struct Merge {
    uint32_t left;
    uint32_t right;
    uint32_t merged;
    uint32_t priority;
  };
  enum class MergeStrategy {
    scan,  // rescan the pairs after each merge: fastest for short pieces
    heap,  // priority queue over a linked list: n log n for long pieces
  };

  // tokens[id]: the token's bytes, or empty for ids the model does not own (special tokens,
  // unassigned ids). Every single byte must be a token and no two tokens may share bytes; each
  // merge must join its two tokens' bytes into the merged token's. whole_piece_first: a piece that
  // is itself a token becomes that token without merging (tiktoken; HF's ignore_merges).
  // Violations are errors naming `source`.
  BpeModel(std::vector<std::string> tokens, const std::vector<Merge>& merges, bool whole_piece_first,
           const std::string& source);
  // tiktoken's rule: tokens[rank] are the token bytes by rank.
  static BpeModel from_ranks(std::vector<std::string> tokens, const std::string& source);

  // Appends the ids of one piece (non-empty). Recently seen pieces are answered from a
  // per-thread cache.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  // The merge loop itself, without the cache; both strategies give the same ids.
  void merge(std::string_view piece, MergeStrategy strategy, std::vector<uint32_t>& out) const;

  uint32_t size() const { return uint32_t(tokens_.size()); }
  // Empty for ids the model does not own.
  const std::string& bytes_of(uint32_t id) const { return tokens_[id]; }
  std::optional<uint32_t> find(std::string_view bytes) const { return index_.find(bytes); }
  size_t merge_count() const { return pairs_.size(); }

 private:
  void merge_scan(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_heap(std::string_view piece, std::vector<uint32_t>& out) const;

  std::vector<std::string> tokens_;
  uint32_t byte_ids_[256] = {};
  TokenIndex index_;
  PairTable pairs_;
  bool whole_piece_first_ = false;
  uint64_t instance_ = 0;  // tells this model's cache entries from another's
};

}  // namespace fathom
