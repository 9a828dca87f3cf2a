// Where the loader's tokens come from: one stream of token ids with a known vocab size, either
// memory-mapped shards (concatenated in the given order) or an in-memory vector (tests, small data).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/shard.h"

namespace fathom {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual size_t size() const = 0;
  virtual uint32_t vocab_size() const = 0;
  // Copies tokens [start, start + out.size()) into out; the range must lie inside the source.
  virtual void read(size_t start, std::span<uint32_t> out) const = 0;
  // For error messages: "3 shards (a.bin, b.bin, c.bin)" or "in-memory tokens".
  virtual std::string describe() const = 0;
};

class VectorTokenSource final : public TokenSource {
 public:
  // Every token must be < vocab_size (checked here, as open_shard does for files).
  VectorTokenSource(std::vector<uint32_t> tokens, uint32_t vocab_size);
  size_t size() const override { return tokens_.size(); }
  uint32_t vocab_size() const override { return vocab_size_; }
  void read(size_t start, std::span<uint32_t> out) const override;
  std::string describe() const override;

 private:
  std::vector<uint32_t> tokens_;
  uint32_t vocab_size_;
};

// Shards read as one stream: a read may span the end of one shard and the start of the next.
class ShardTokenSource final : public TokenSource {
 public:
  // Opens (and validates) every path; all shards must share one vocab size.
  explicit ShardTokenSource(const std::vector<std::string>& paths);
  size_t size() const override { return starts_.back(); }
  uint32_t vocab_size() const override { return vocab_size_; }
  void read(size_t start, std::span<uint32_t> out) const override;
  std::string describe() const override;

 private:
  std::vector<TokenShard> shards_;
  std::vector<size_t> starts_;  // starts_[i] = first global index of shard i; back() = total size
  uint32_t vocab_size_ = 0;
};

}  // namespace fathom
