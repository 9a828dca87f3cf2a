#include "data/token_source.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fathom {

VectorTokenSource::VectorTokenSource(std::vector<uint32_t> tokens, uint32_t vocab_size)
    : tokens_(std::move(tokens)), vocab_size_(vocab_size) {
  FATHOM_CHECK(vocab_size_ > 0, "in-memory token source: vocab size must be positive");
  for (size_t i = 0; i < tokens_.size(); ++i) {
    FATHOM_CHECK(tokens_[i] < vocab_size_, "in-memory token source: token ", tokens_[i], " at position ", i,
                 " is not below the vocab size ", vocab_size_);
  }
}

void VectorTokenSource::read(size_t start, std::span<uint32_t> out) const {
  FATHOM_CHECK(start <= tokens_.size() && out.size() <= tokens_.size() - start, "token range [", start, ", ",
               start + out.size(), ") is out of range for ", describe(), " with ", size(), " tokens");
  std::memcpy(out.data(), tokens_.data() + start, out.size_bytes());
}

std::string VectorTokenSource::describe() const { return "in-memory tokens"; }

ShardTokenSource::ShardTokenSource(const std::vector<std::string>& paths) {
  FATHOM_CHECK(!paths.empty(), "a shard token source needs at least one shard file");
  starts_.push_back(0);
  for (const std::string& path : paths) {
    TokenShard shard = open_shard(path);
    if (shards_.empty()) vocab_size_ = shard.vocab_size();
    FATHOM_CHECK(shard.vocab_size() == vocab_size_, "token shard ", path, " has vocab size ", shard.vocab_size(),
                 " but ", shards_.front().path(), " has ", vocab_size_,
                 "; all shards of one source must share a tokenizer");
    starts_.push_back(starts_.back() + shard.size());
    shards_.push_back(std::move(shard));
  }
}

void ShardTokenSource::read(size_t start, std::span<uint32_t> out) const {
  FATHOM_CHECK(start <= size() && out.size() <= size() - start, "token range [", start, ", ", start + out.size(),
               ") is out of range for ", describe(), " with ", size(), " tokens");
  // The shard holding `start`: the last one whose first index is <= start.
  size_t s = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
  size_t done = 0;
  while (done < out.size()) {
    const size_t local = start + done - starts_[s];
    const size_t n = std::min(out.size() - done, shards_[s].size() - local);
    shards_[s].read(local, out.subspan(done, n));
    done += n;
    ++s;
  }
}

std::string ShardTokenSource::describe() const {
  std::string text = std::to_string(shards_.size()) + (shards_.size() == 1 ? " shard (" : " shards (");
  for (size_t i = 0; i < shards_.size(); ++i) text += (i ? ", " : "") + shards_[i].path();
  return text + ")";
}

}  // namespace fathom
